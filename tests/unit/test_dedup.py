"""The dedup cache (SPEC §5 Dedup): suppress only byte-identical repeats, bounded memory."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from snowsource.core.dedup import DedupCache, digest

T1, T2, T3 = "2026-09-29 07:30:41", "2026-09-29 07:30:42", "2026-09-29 07:30:43"


def test_digest_is_16_bytes_and_discriminates() -> None:
    a = digest(b'{"sys_id":"1","state":"1"}')
    assert isinstance(a, bytes)
    assert len(a) == 16
    assert a == digest(b'{"sys_id":"1","state":"1"}')
    assert a != digest(b'{"sys_id":"1","state":"2"}')
    assert digest(b"") != digest(b"\x00")


def test_identical_value_is_suppressed_anything_else_emitted() -> None:
    cache = DedupCache(10)
    d1, d2 = digest(b"v1"), digest(b"v2")
    assert cache.should_emit("a", T1, d1)
    cache.remember("a", T1, d1)
    assert not cache.should_emit("a", T1, d1)
    # An update inside the same second (same ts, new bytes) is never lost.
    assert cache.should_emit("a", T1, d2)
    # Another id with the same bytes is unrelated.
    assert cache.should_emit("b", T1, d1)
    # A newer version is emitted, and afterwards it is the one suppressed.
    assert cache.should_emit("a", T2, d2)
    cache.remember("a", T2, d2)
    assert not cache.should_emit("a", T2, d2)
    assert cache.should_emit("a", T1, d1)
    assert len(cache) == 1


def test_contains_tracks_remembered_ids() -> None:
    cache = DedupCache(1)
    assert not cache.contains("a")
    cache.remember("a", T1, digest(b"a"))
    assert cache.contains("a")
    cache.remember("b", T2, digest(b"b"))  # the cap pushes "a" out
    assert not cache.contains("a")
    assert cache.contains("b")
    cache.evict_older_than(T3)
    assert not cache.contains("b")


def test_evict_older_than_is_strict_and_counts() -> None:
    cache = DedupCache(10)
    for id_, ts in (("a", T1), ("b", T2), ("c", T2), ("d", T3)):
        cache.remember(id_, ts, digest(id_.encode()))
    assert cache.evict_older_than(T1) == 0
    assert cache.evict_older_than(T2) == 1
    assert len(cache) == 3
    assert cache.should_emit("a", T1, digest(b"a"))
    assert not cache.should_emit("b", T2, digest(b"b"))
    assert cache.evict_older_than(T3) == 2
    assert len(cache) == 1
    assert not cache.should_emit("d", T3, digest(b"d"))
    assert cache.evictions_by_cap == 0


def test_evict_older_than_uses_the_latest_ts_of_an_id() -> None:
    cache = DedupCache(10)
    cache.remember("a", T1, digest(b"1"))
    cache.remember("a", T3, digest(b"3"))  # the T1 heap node is now stale
    assert cache.evict_older_than(T2) == 0
    assert not cache.should_emit("a", T3, digest(b"3"))
    # A late row re-remembered with an older ts moves the entry back.
    cache.remember("a", T1, digest(b"1"))
    assert cache.evict_older_than(T2) == 1
    assert len(cache) == 0


def test_cap_evicts_smallest_ts_then_insertion_order() -> None:
    cache = DedupCache(3)
    cache.remember("x", T2, digest(b"x"))
    cache.remember("y", T1, digest(b"y"))  # late row: oldest by ts despite coming second
    cache.remember("z", T2, digest(b"z"))
    assert cache.evictions_by_cap == 0
    cache.remember("w", T3, digest(b"w"))
    assert cache.evictions_by_cap == 1
    assert cache.should_emit("y", T1, digest(b"y"))  # evicted
    assert not cache.should_emit("x", T2, digest(b"x"))
    cache.remember("v", T3, digest(b"v"))
    assert cache.evictions_by_cap == 2
    # x and z share T2: x was remembered first, so it goes first.
    assert cache.should_emit("x", T2, digest(b"x"))
    assert not cache.should_emit("z", T2, digest(b"z"))
    assert len(cache) == 3


def test_re_remembering_counts_as_a_new_insertion() -> None:
    cache = DedupCache(2)
    cache.remember("a", T2, digest(b"a"))
    cache.remember("b", T2, digest(b"b"))
    cache.remember("a", T2, digest(b"a2"))  # same ts, but now newer than b
    cache.remember("c", T3, digest(b"c"))
    assert cache.should_emit("b", T2, digest(b"b"))
    assert not cache.should_emit("a", T2, digest(b"a2"))
    assert cache.evictions_by_cap == 1


def test_zero_cap_keeps_nothing() -> None:
    cache = DedupCache(0)
    cache.remember("a", T1, digest(b"a"))
    assert len(cache) == 0
    assert cache.should_emit("a", T1, digest(b"a"))
    assert cache.evictions_by_cap == 1


def test_negative_cap_refused() -> None:
    with pytest.raises(ValueError, match="max_entries"):
        DedupCache(-1)


def test_clear_empties_but_keeps_counter() -> None:
    cache = DedupCache(1)
    cache.remember("a", T1, digest(b"a"))
    cache.remember("b", T1, digest(b"b"))
    assert cache.evictions_by_cap == 1
    cache.clear()
    assert len(cache) == 0
    assert cache.should_emit("b", T1, digest(b"b"))
    assert cache.evictions_by_cap == 1
    assert cache.evict_older_than(T3) == 0


def test_memory_stays_bounded_under_repeated_updates() -> None:
    cache = DedupCache(100)
    rng = random.Random(1)
    for i in range(50_000):
        id_ = f"id{rng.randrange(150)}"
        cache.remember(id_, f"2026-09-29 07:{(i // 1000) % 60:02d}:00", digest(str(i).encode()))
        assert len(cache) <= 100
    # The lazy-deletion heap is rebuilt well before it can grow with the number of updates.
    assert len(cache._heap) <= 2 * 100 + 64 + 1
    assert cache.evictions_by_cap > 0


class _Model:
    """Obviously-correct reference: a list scanned in full on every operation."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.entries: dict[str, tuple[str, bytes, int]] = {}
        self.seq = 0
        self.by_cap = 0

    def remember(self, id_: str, ts: str, d: bytes) -> None:
        self.seq += 1
        self.entries[id_] = (ts, d, self.seq)
        while len(self.entries) > self.cap:
            oldest = min(self.entries, key=lambda k: (self.entries[k][0], self.entries[k][2]))
            del self.entries[oldest]
            self.by_cap += 1

    def evict(self, ts: str) -> int:
        old = [k for k, v in self.entries.items() if v[0] < ts]
        for k in old:
            del self.entries[k]
        return len(old)


_ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("remember"),
            st.sampled_from("abcdefgh"),
            st.integers(0, 9),
            st.sampled_from([b"1", b"2"]),
        ),
        st.tuples(st.just("evict"), st.just(""), st.integers(0, 9), st.just(b"")),
        st.tuples(
            st.just("check"),
            st.sampled_from("abcdefgh"),
            st.integers(0, 9),
            st.sampled_from([b"1", b"2"]),
        ),
    ),
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(cap=st.integers(0, 5), ops=_ops)
def test_matches_reference_model(cap: int, ops: list[tuple[str, str, int, bytes]]) -> None:
    cache, model = DedupCache(cap), _Model(cap)
    for op, id_, second, value in ops:
        ts, d = f"2026-09-29 07:30:{second:02d}", digest(value)
        if op == "remember":
            cache.remember(id_, ts, d)
            model.remember(id_, ts, d)
        elif op == "evict":
            assert cache.evict_older_than(ts) == model.evict(ts)
        else:
            entry = model.entries.get(id_)
            assert cache.should_emit(id_, ts, d) == (entry is None or entry[:2] != (ts, d))
        assert len(cache) == len(model.entries)
        assert cache.evictions_by_cap == model.by_cap
