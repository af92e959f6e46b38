"""``Aggregator.query_suffix(r)``: the aggregate of the newest ``r`` items, the query of a range
``r`` in the papers' multi-query experiments. Every FIFO aggregator, driven by random inserts,
evictions and bulk evictions, against a fold of the newest ``r`` items of a model list: Sum,
Max and the non-commutative Concat (where the aggregator runs any monoid), and for SlickDeque
Sum (of integers: an exact inverse), Max and a record of a count, a sum and a max, with and
without ranges registered in advance (``SlickDequeAggregator.set_ranges``).
"""

from __future__ import annotations

from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import given, note

from mtawindows.server.engine.algorithms import ALGORITHMS, EngineRefusal, engine_class
from mtawindows.server.engine.fifo import check_engine
from mtawindows.server.engine.laws import approx_equal
from mtawindows.server.engine.monoids import Concat, Count, Max, Record, Sum

#: the FIFO aggregators (every engine but the Monoid Tree Aggregators, which are windows only)
AGGREGATORS = tuple(e for e in ALGORITHMS if e not in ("AMTA", "LMTA"))
#: the efficient overrides (the others fold their items, Aggregator's default)
OVERRIDES = ("FLATFAT", "BINT", "FLATFIT", "SLICKDEQUE")


def exact_sum(field: str | None = None) -> Any:
    """A sum SlickDeque runs in its invertible form: of integers (its inverse exact), where
    the monoid has that option; else any Sum."""
    try:
        return Sum(field, integers=True)
    except TypeError:
        return Sum(field)


MONOIDS: dict[str, Any] = {
    "sum": Sum,
    "max": Max,
    "concat": Concat,
    "record": lambda: Record(n=Count(), s=exact_sum("v"), m=Max("v")),
}


def make(engine: str, kind: str) -> Any:
    if engine == "SLICKDEQUE" and kind == "sum":
        return exact_sum()
    return MONOIDS[kind]()


def accepts(engine: str, monoid: Any) -> bool:
    try:
        check_engine(engine_class(engine).aggregator, monoid)
    except EngineRefusal:
        return False
    return True


def runs(engine: str, kind: str) -> bool:
    """Concat where the aggregator runs any monoid (not SlickDeque); the record for SlickDeque
    (a count and a sum in its invertible form, a max in its deque)."""
    if kind == "record":
        return engine == "SLICKDEQUE"
    return accepts(engine, make(engine, kind))


PAIRS = [(e, k) for e in AGGREGATORS for k in MONOIDS if runs(e, k)]

integers = st.integers(-1000, 1000)
numbers = st.one_of(integers, st.floats(-1000, 1000, allow_nan=False, allow_infinity=False))


def fold(monoid: Any, items: list[Any]) -> Any:
    acc = monoid.identity
    for u in items:
        acc = monoid.combine(acc, u)
    return acc


def lift(monoid: Any, kind: str, x: Any) -> Any:
    return monoid.lift({"v": x} if kind == "record" else x)


def test_every_fifo_aggregator_and_monoid_is_covered() -> None:
    assert set(OVERRIDES) <= set(AGGREGATORS)
    for e in AGGREGATORS:
        kinds = {k for a, k in PAIRS if a == e}
        assert {"sum", "max"} <= kinds, e
        assert ("concat" in kinds) == (e != "SLICKDEQUE"), e
    assert ("SLICKDEQUE", "record") in PAIRS


@pytest.mark.parametrize(("engine", "kind"), PAIRS)
@given(data=st.data())
def test_query_suffix_is_a_fold_of_the_newest_items(engine: str, kind: str, data: Any) -> None:
    monoid = make(engine, kind)
    agg = engine_class(engine).aggregator(monoid)
    model: list[Any] = []
    registered: set[int] = set()
    # SlickDeque's sums are of integers (an exact inverse); the others take floats too
    values = integers if engine == "SLICKDEQUE" else numbers

    def check_some() -> None:
        n = len(model)
        assert len(agg) == n
        rs = data.draw(st.lists(st.integers(0, n), max_size=4), label="ranges asked")
        rs += [0, n]  # the empty range and the whole window, every time
        rs += [r for r in registered if r <= n]  # SlickDeque's running totals
        for r in rs:
            got = agg.query_suffix(r)
            want = fold(monoid, model[n - r :])
            assert approx_equal(got, want), (engine, kind, r, n, got, want)
        assert approx_equal(agg.query(), fold(monoid, model))

    steps = data.draw(st.integers(1, 80), label="steps")
    for _ in range(steps):
        op = data.draw(
            st.sampled_from(["insert", "insert", "insert", "burst", "evict", "bulk", "ranges"])
        )
        if op == "insert" or (op in ("evict", "bulk") and not model):
            u = lift(monoid, kind, data.draw(values))
            agg.insert(u)
            model.append(u)
        elif op == "burst":  # grows the structures past a resize
            for x in data.draw(st.lists(values, min_size=1, max_size=40)):
                u = lift(monoid, kind, x)
                agg.insert(u)
                model.append(u)
        elif op == "evict":
            agg.evict()
            del model[0]
        elif op == "bulk":
            k = data.draw(st.integers(0, len(model)), label="bulk eviction")
            agg.evict_many(k)
            del model[:k]
        elif engine == "SLICKDEQUE":  # ranges registered in advance (the paper's plan)
            registered = set(data.draw(st.lists(st.integers(1, 60), max_size=6)))
            agg.set_ranges(registered)
            assert agg.ranges == tuple(sorted(registered))
        note(f"{op}: {len(model)} items")
        check_some()
    agg.check()  # the structure (FlatFIT's compressed pointers, SlickDeque's totals) holds


@pytest.mark.parametrize("engine", AGGREGATORS)
def test_query_suffix_out_of_range_raises_naming_r_and_len(engine: str) -> None:
    agg = engine_class(engine).aggregator(make(engine, "sum"))
    for x in range(5):
        agg.insert(x)
    agg.evict()  # 4 items
    for r in (-1, 5, 100):
        with pytest.raises(ValueError, match=rf"r = {r}\b.*len = 4"):
            agg.query_suffix(r)
    assert agg.query_suffix(4) == 1 + 2 + 3 + 4
    assert agg.query_suffix(0) == 0
    empty = engine_class(engine).aggregator(make(engine, "sum"))
    assert empty.query_suffix(0) == 0
    with pytest.raises(ValueError, match=r"r = 1\b.*len = 0"):
        empty.query_suffix(1)


@pytest.mark.parametrize("engine", [e for e in OVERRIDES if e != "SLICKDEQUE"])
def test_concat_keeps_order_across_the_wraparound(engine: str) -> None:
    """Every range of every window of a stream that slides the items around the structure's
    array (FlatFAT's circular leaves, B-Int's circular levels, FlatFIT's circular arrays)."""
    monoid = Concat()
    agg = engine_class(engine).aggregator(monoid)
    n = 13
    for x in range(n):
        agg.insert((x,))
    for x in range(n, 5 * n):
        agg.evict()
        agg.insert((x,))
        for r in range(n + 1):
            assert agg.query_suffix(r) == tuple(range(x + 1 - r, x + 1)), (x, r)
    agg.check()


def test_flatfit_queries_of_many_ranges_share_the_compressed_pointers() -> None:
    """The max-multi-query of the FlatFIT paper (every range 1 .. n each slide): after the first
    slide each answer costs one combine (n - 1 per slide, section 4.1)."""
    calls = 0

    class CountingSum(Sum):
        def combine(self, older: Any, newer: Any) -> Any:
            nonlocal calls
            calls += 1
            return older + newer

    n = 32
    agg = engine_class("FLATFIT").aggregator(CountingSum())
    for x in range(n):
        agg.insert(x)
    for r in range(n, 0, -1):  # the first slide's walks (a wReset)
        agg.query_suffix(r)
    for x in range(n, 3 * n):
        agg.evict()
        agg.insert(x)
        calls = 0
        for r in range(n, 0, -1):
            assert agg.query_suffix(r) == sum(range(x + 1 - r, x + 1))
        assert calls == n - 1, calls
    agg.check()


def test_slickdeque_registered_ranges_move_with_every_slide() -> None:
    """A registered range's answer is its running total (two operations a slide, no fold); an
    unregistered range is still answered, from the items."""
    monoid = Record(n=Count(), s=exact_sum("v"), m=Max("v"))
    agg = engine_class("SLICKDEQUE").aggregator(monoid)
    agg.set_ranges([3, 10])
    items = [monoid.lift({"v": x}) for x in (5, 1, 9, 2, 2, 7, 3, 8, 0, 4, 6, 1)]
    model: list[Any] = []
    for u in items:
        agg.insert(u)
        model.append(u)
        if len(model) > 10:
            agg.evict()
            del model[0]
        for r in range(len(model) + 1):
            assert agg.query_suffix(r) == fold(monoid, model[len(model) - r :]), r
    counts = agg._running[0][1]  # the record's first invertible field, the count
    assert counts.ranged == {3: 3, 10: 10}  # the running totals of the registered ranges
    agg.check()
    with pytest.raises(ValueError, match="positive"):
        agg.set_ranges([0, 2])
