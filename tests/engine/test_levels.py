"""Level queues against a plain list model: append, drop_front, truncate and peek at absolute
positions, across block boundaries (MemoryLevel) and write-buffer/cache/store boundaries
(TieredLevel), starting anywhere."""

from __future__ import annotations

from collections import deque
from typing import Any

import hypothesis.strategies as st
from hypothesis import given

from mtawindows.server.engine.levels import MemoryLevel, TieredLevel
from mtawindows.server.storage.memory import MemoryStore

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 700)),
        st.tuples(st.just("drop"), st.floats(0, 1)),
        st.tuples(st.just("truncate"), st.floats(0, 1)),
    ),
    max_size=30,
)


def run(level: Any, start: int, ops: list[tuple[str, Any]], counter: list[int]) -> None:
    model = {start: level.head}
    lo, hi = start, start + 1
    for op, arg in ops:
        if op == "append":
            for _ in range(arg):
                counter[0] += 1
                p = [counter[0], -counter[0]]
                level.append(p)
                model[hi] = p
                hi += 1
        elif op == "drop" and hi - lo > 1:
            new = lo + int(arg * (hi - lo - 1))
            if new > lo:
                level.drop_front(new)
                lo = new
        elif op == "truncate" and hi - lo > 1:
            new = lo + 1 + int(arg * (hi - lo - 1))
            if new < hi:
                level.truncate(new)
                hi = new
        assert (level.start, level.end) == (lo, hi)
        assert list(level.head) == model[lo]
        assert list(level.tail) == model[hi - 1]
        for pos in {lo, hi - 1, (lo + hi) // 2, lo + 1 if lo + 1 < hi else lo}:
            assert list(level.peek(pos)) == model[pos], pos


@given(start=st.integers(0, 2**34), ops=OPS)
def test_memory_level_matches_a_list(start: int, ops: list[tuple[str, Any]]) -> None:
    grave: deque[list[Any]] = deque()
    run(MemoryLevel(0, start, [0, 0], grave), start, ops, [0])


@given(
    start=st.integers(0, 2**34),
    ops=OPS,
    sizes=st.sampled_from([(1, 1, 0), (2, 3, 1), (7, 5, 2), (64, 64, 32)]),
)
def test_tiered_level_matches_a_list(
    start: int, ops: list[tuple[str, Any]], sizes: tuple[int, int, int]
) -> None:
    b, c, r = sizes
    store = MemoryStore(block_size=b, cache_size=c, refill_at=r)
    run(TieredLevel(store, 3, start, [0, 0]), start, ops, [0])


def test_memory_level_frees_evicted_pairs_in_the_background() -> None:
    grave: deque[list[Any]] = deque()
    lv = MemoryLevel(0, 0, [0, 0], grave)
    for i in range(1, 100_000):
        lv.append([i, i])
    lv.drop_front(99_990)  # a bulk eviction: pointer moves, dead blocks queue up
    queued = sum(len(b) for b in grave)
    assert queued >= 90_000
    for i in range(1000):
        lv.append([i, i])
    assert sum(len(b) for b in grave) == queued - 4 * 1000  # drained by the inserts
