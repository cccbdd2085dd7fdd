"""Requests per page of rows of a sliced backfill, on a model of the engine (SPEC §15.3).

``tests/unit/slice_model.py`` drives the board as ``engine/slices.py`` does, in virtual time,
over tables spread like the benchmark's (200,000 rows, 1,000 a page, 250 ms a page, 50,000 rows
ahead): the count of requests is exact and the same on every run, and the virtual seconds say
whether a rule that saves requests costs speed. The integration test
(``tests/integration/test_slices_requests.py``) counts the same on the emulator.
"""

from __future__ import annotations

import pytest

from tests.unit.slice_model import Key, Model, rows_like_the_benchmark

ROWS = 200_000
PAGES = ROWS / 1_000
SEEDS = (0, 1, 2)  # jitter of the request latency: which slice finishes first


@pytest.fixture(scope="module")
def uniform() -> list[Key]:
    return rows_like_the_benchmark(ROWS, skewed=False)


@pytest.fixture(scope="module")
def skewed() -> list[Key]:
    return rows_like_the_benchmark(ROWS, skewed=True)


def _runs(rows: list[Key], slices: int) -> tuple[float, float]:
    """The worst requests per page and the slowest virtual seconds over the seeds."""
    runs = [Model(rows, slices, seed=seed).run() for seed in SEEDS]
    return max(r.requests for r in runs) / PAGES, max(r.seconds for r in runs)


def test_one_slice_spends_one_request_a_page(uniform: list[Key]) -> None:
    ratio, _ = _runs(uniform, 1)
    assert ratio == 1.0


@pytest.mark.parametrize(
    ("table", "slices", "most", "speedup"),
    [
        ("uniform", 4, 1.02, 3.5),
        ("uniform", 8, 1.02, 6.8),
        ("skewed", 4, 1.02, 3.5),
        ("skewed", 8, 1.03, 6.8),
    ],
)
def test_slices_spend_few_requests_without_losing_speed(
    request: pytest.FixtureRequest, table: str, slices: int, most: float, speedup: float
) -> None:
    rows: list[Key] = request.getfixturevalue(table)
    _, alone = _runs(rows, 1)
    ratio, seconds = _runs(rows, slices)
    assert ratio <= most, f"{ratio:.3f} requests per page of rows"
    assert alone / seconds >= speedup, f"{alone / seconds:.2f}x one slice's speed"
