"""Large windows (block compaction, background freeing, deep trees), checked against closed-form
answers instead of the O(n) oracle: the window of the integers (a, b] has n = b - a, sum
(a+1 + b) * n / 2, first a + 1, last b."""

from __future__ import annotations

import pytest

from mtawindows.server.engine.amta import AmortizedMTA
from mtawindows.server.engine.lmta import LogMTA
from mtawindows.server.engine.monoids import Count, First, Last, Max, Record, Sum
from mtawindows.server.engine.policies import CountPolicy, TimeRangePolicy
from mtawindows.server.storage.memory import MemoryStore

pytestmark = [pytest.mark.slow]

REC = Record(n=Count(), s=Sum(), first=First(), last=Last(), hi=Max())


def expect(a: int, b: int) -> dict[str, int]:
    n = b - a
    return {"n": n, "s": (a + 1 + b) * n // 2, "first": a + 1, "last": b, "hi": b}


@pytest.mark.parametrize("algorithm", [AmortizedMTA, LogMTA])
@pytest.mark.parametrize("store", [None, "tiered"])
def test_count_window_of_70k_over_250k_items(algorithm: type, store: str | None) -> None:
    size = 70_000
    w = algorithm(
        REC,
        CountPolicy(size),
        store=MemoryStore(block_size=64, cache_size=64, refill_at=16) if store else None,
    )
    w.extend(range(1, 100_001))  # one batch, one bulk eviction
    assert w.query() == expect(100_000 - size, 100_000)
    for x in range(100_001, 250_001):
        out = w.push(x)
        if x % 9973 == 0:
            assert out == expect(x - size, x)
    assert w.query() == expect(250_000 - size, 250_000)
    assert len(w) == size


@pytest.mark.parametrize("algorithm", [AmortizedMTA, LogMTA])
@pytest.mark.parametrize("bulk_factor", [1, 4])
def test_time_window_with_gaps_evicts_in_bulk(algorithm: type, bulk_factor: int) -> None:
    kw = {"bulk_factor": bulk_factor} if algorithm is AmortizedMTA else {}
    rec = Record(n=Count(), s=Sum(), first=First(), last=Last(), hi=Max())
    w = algorithm(rec, TimeRangePolicy(50_000, field="hi"), **kw)
    x = 0
    for burst in range(6):
        w.extend(range(x + 1, x + 80_001))  # ts == value; keeps (newest - 50000, newest]
        x += 80_000
        assert w.query() == expect(x - 50_000, x), burst
        x += 30_000 + burst * 7_001  # silence, then one item evicts a large prefix at once
        out = w.push(x)
        lo = x - 50_000
        a = max(lo, x - 30_000 - burst * 7_001 - 50_000)
        assert out["last"] == x and out["hi"] == x
        kept = [v for v in range(a + 1, x - 30_000 - burst * 7_001 + 1) if v > lo] + [x]
        assert out["n"] == len(kept) and out["s"] == sum(kept)
    st = w.stats()
    assert st["bulk_evictions"] >= 6
