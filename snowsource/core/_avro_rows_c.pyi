from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

STRING: Final[int]
REFERENCE: Final[int]
TIMESTAMP: Final[int]
REMEMBERED: Final[int]

class RowWriter:
    def __init__(
        self,
        fields: Sequence[tuple[str, int, dict[str, bytes] | None]],
        prefix: bytes,
        tail: bytes,
        timestamp: Callable[[str], bytes],
        fallback: tuple[type[BaseException], ...],
    ) -> None: ...
    def __call__(self, row: Mapping[str, Any]) -> bytes | None: ...
