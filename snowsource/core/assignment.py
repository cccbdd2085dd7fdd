"""Which task runs which table: rendezvous (highest-random-weight) hashing (SPEC §10).

Every process computes the same answer from the alias list and ``tasks.max`` alone, with no
coordination. Changing the number of candidate tasks moves only the tables the added task wins
(or the removed task held); offsets are per table, so a move never loses one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import mmh3

__all__ = ["assign", "owner", "rendezvous_weight"]

SEED: Final = 0x5F3759DF


def rendezvous_weight(alias: str, candidate: str) -> int:
    """Unsigned MurmurHash3_x86_32 of UTF-8(``alias#candidate``) with the SPEC seed: the weight
    of one candidate (a task id, a group member's key) for one table."""
    return int(mmh3.hash(f"{alias}#{candidate}".encode(), SEED, signed=False))


def _weight(alias: str, task: int) -> int:
    return rendezvous_weight(alias, str(task))


def owner(alias: str, tasks_max: int, n_aliases: int) -> int:
    """The task that runs ``alias``: argmax over ``j`` in ``[0, min(tasks_max, n_aliases))`` of
    unsigned MurmurHash3_x86_32(UTF-8(``alias#j``), seed 0x5f3759df); ties go to the lowest
    ``j``."""
    if tasks_max < 1:
        raise ValueError(f"tasks_max must be >= 1, got {tasks_max}")
    if n_aliases < 1:
        raise ValueError(f"n_aliases must be >= 1, got {n_aliases}")
    best_task, best_weight = 0, _weight(alias, 0)
    for task in range(1, min(tasks_max, n_aliases)):
        weight = _weight(alias, task)
        if weight > best_weight:  # strictly greater: a tie keeps the lower task
            best_task, best_weight = task, weight
    return best_task


def assign(aliases: Sequence[str], tasks_max: int) -> dict[str, int]:
    """Owner task of every alias, in the order given. Aliases must be unique."""
    if len(set(aliases)) != len(aliases):
        raise ValueError(f"aliases must be unique: {list(aliases)!r}")
    return {alias: owner(alias, tasks_max, len(aliases)) for alias in aliases}
