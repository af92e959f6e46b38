"""Long batches take the level-by-level insert of Amortized MTA; after every batch the window
equals the naive recomputation, its invariants hold, and a refused item changes nothing."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mtawindows.server.engine.amta import AmortizedMTA
from mtawindows.server.engine.laws import approx_equal
from mtawindows.server.engine.monoids import Concat, Count, Record
from mtawindows.server.engine.naive import NaiveWindow
from mtawindows.server.engine.policies import CountPolicy
from tests.support.cases import CASES, STORES

pytestmark = [pytest.mark.slow]

BATCH = AmortizedMTA.BULK_INSERT_MIN


@pytest.mark.parametrize("store", ["memory", "tiered-1", "tiered-3", "tiered-8"])
@pytest.mark.parametrize(
    "case",
    ["count-7", "count-33", "time-10", "bounded-sum-40", "max-subwindow-or-count", "stats-time"],
)
@given(
    sizes=st.lists(st.integers(0, 3 * BATCH), min_size=1, max_size=8),
    steps=st.lists(st.integers(0, 2), min_size=1, max_size=8),
    seed=st.integers(0, 2**16),
)
def test_bulk_batches_match_the_naive_window(
    store: str, case: str, sizes: list[int], steps: list[int], seed: int
) -> None:
    c = CASES[case]
    w = AmortizedMTA(c.monoid, c.policy, store=STORES[store](), debug=True)
    naive = NaiveWindow(c.monoid, c.policy)
    t = 0
    v = seed
    for i, n in enumerate(sizes):
        rows = []
        for _ in range(n):
            v = (v * 1103515245 + 12345) % 2**31
            t += steps[i % len(steps)] if (v >> 8) & 3 else 0
            rows.append({"v": v % 6, "t": t, "p": v % 6 + 1})
        w.extend(rows)
        for r in rows:
            naive.insert(r)
        naive.enforce()
        assert len(w) == len(naive)
        got, want = w.aggregate(), naive.aggregate()
        assert approx_equal(got, want), (got, want)


class Picky:
    """Sum that refuses negative operands in combine (not in lift): a first-contact refusal."""

    identity = 0

    def lift(self, x: Any) -> Any:
        return x

    def combine(self, a: Any, b: Any) -> Any:
        if a < 0 or b < 0:
            msg = "negative operands are refused"
            raise ValueError(msg)
        return a + b

    def lower(self, a: Any) -> Any:
        return a


@pytest.mark.parametrize("where", [0, 1, BATCH - 1, BATCH])
def test_a_refused_item_in_a_long_batch_changes_nothing(where: int) -> None:
    w = AmortizedMTA(Record(n=Count(), s=Picky(), c=Concat()), CountPolicy(50), debug=True)
    w.extend([1] * 37)
    before = (len(w), w.query(), w.stats()["inserted"])
    batch = [2] * (BATCH + 1)
    batch[where] = -1
    with pytest.raises(ValueError, match="refused"):
        w.extend(batch)
    assert (len(w), w.query(), w.stats()["inserted"]) == before
    w.extend([3] * BATCH)
    assert w.query()["s"] == 3 * min(BATCH, 50) + 1 * max(0, 50 - BATCH)
    assert w.query()["c"] == [1] * max(0, 50 - BATCH) + [3] * min(BATCH, 50)
    w.check_invariants()
