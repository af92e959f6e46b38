"""Hopping windows at the engine: a :class:`Hopper` over every final aggregator against a naive
oracle of the boundaries' ranges, with a non-commutative monoid (a concatenation), ties, gaps
and bursts; and the hopper's checkpointed state resuming mid-stream."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mtawindows.server.engine.algorithms import ALGORITHMS, engine_class
from mtawindows.server.engine.hopping import HopGroup, Hopper, HopPlan, SliceCutoff, slice_record
from mtawindows.server.engine.monoids import Concat, Count, Max, Record
from mtawindows.server.storage.codecs import codec_for

RECORD = Record(cat=Concat("v"), n=Count(), hi=Max("v"))


def oracle(plan: HopPlan, rows: list[tuple[int, int]]) -> list[tuple[int, tuple[int, ...]]]:
    """(boundary, the values of its range in order) for each boundary the rows close."""
    out: list[tuple[int, tuple[int, ...]]] = []
    s, r = plan.slide, plan.range
    for j, (t, _) in enumerate(rows):
        before = rows[:j]
        if plan.slide_kind == "time":
            if not before:
                continue
            prev = before[-1][0]
            first = (prev // s + 1) * s
            if plan.range_kind == "time":
                b = first
                while b <= t:
                    vs = tuple(v for ts, v in before if b - r <= ts < b)
                    if vs:
                        out.append((b, vs))
                    b += s
            elif t >= first:
                out.append((first, tuple(v for _, v in before[-r:])))
        c = j + 1
        if plan.slide_kind == "rows" and c % s == 0:
            upto = rows[:c]
            if plan.range_kind == "rows":
                vs = tuple(v for _, v in upto[-r:])
            else:
                vs = tuple(v for ts, v in upto if ts > t - r)
            out.append((c, vs))
    return out


def hopper(plan: HopPlan, algorithm: str) -> Hopper:
    cut = SliceCutoff()
    rec = slice_record(RECORD)
    engine = engine_class(algorithm)(rec, cut)
    h = Hopper(plan, RECORD, engine, cut)
    h.codec = codec_for(rec)
    return h


def run(h: Hopper, rows: list[tuple[int, int]], cuts: list[int]) -> list[tuple[int, Any, int]]:
    got: list[tuple[int, Any, int]] = []
    lower = h.engine.monoid.lower
    i = 0
    for c in [*cuts, len(rows)]:
        part = rows[i:c]
        lifted = [RECORD.lift({"v": v}) for _, v in part]
        totals: list[Any] = []
        sizes: list[int] = []
        bs, _ = h.apply(lifted, [t for t, _ in part], totals, sizes)
        assert len(totals) == len(part) == len(sizes)
        got += [(b.at, tuple(lower(b.aggregate)["cat"]), b.size) for b in bs]
        if bs:  # after a row that closed boundaries, its per-row result is the last one's
            assert sizes[-1] == bs[-1].size
        state = h.state()  # a checkpoint here; the next part resumes from it
        h.restore(state)
        i = c
    return got


plans = st.one_of(
    st.builds(HopPlan, st.just("time"), st.integers(1, 12), st.just("time"), st.integers(1, 40)),
    st.builds(HopPlan, st.just("time"), st.integers(1, 12), st.just("rows"), st.integers(1, 9)),
    st.builds(HopPlan, st.just("rows"), st.integers(1, 6), st.just("rows"), st.integers(1, 15)),
    st.builds(HopPlan, st.just("rows"), st.integers(1, 6), st.just("time"), st.integers(1, 40)),
)


@st.composite
def streams(draw: Any) -> tuple[list[tuple[int, int]], list[int]]:
    gaps = draw(
        st.lists(st.one_of(st.just(0), st.integers(0, 5), st.integers(20, 200)), max_size=80)
    )
    t = draw(st.integers(-50, 50))
    rows = []
    for i, g in enumerate(gaps):
        t += g
        rows.append((t, i))
    cuts = sorted(set(draw(st.lists(st.integers(0, len(rows)), max_size=4))))
    return rows, cuts


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=plans, data=streams())
def test_hopper_matches_oracle(algorithm: str, plan: HopPlan, data: Any) -> None:
    if algorithm == "SLICKDEQUE":
        pytest.skip("a concatenation is neither invertible nor a selection")
    rows, cuts = data
    got = run(hopper(plan, algorithm), rows, cuts)
    want = oracle(plan, rows)
    assert [(b, vs) for b, vs, _ in got] == want
    assert [n for _, _, n in got] == [len(vs) for _, vs in want]


def test_edges_of_pairs() -> None:
    """A range that is no multiple of the slide: edges at k*slide and k*slide - range."""
    p = HopPlan("time", 10, "time", 25)
    edges = [0]
    while edges[-1] < 60:
        edges.append(p.next_edge(edges[-1]))
    assert edges == [0, 5, 10, 15, 20, 25, 30, 35, 40, 45, 50, 55, 60]
    p = HopPlan("time", 10, "time", 24)
    edges = [0]
    while edges[-1] < 40:
        edges.append(p.next_edge(edges[-1]))
    assert edges == [0, 6, 10, 16, 20, 26, 30, 36, 40]
    assert HopPlan("time", 10, "time", 60).next_edge(-1) == 0


sliced_plans = st.one_of(
    st.builds(HopPlan, st.just("time"), st.integers(1, 12), st.just("time"), st.integers(1, 40)),
    st.builds(HopPlan, st.just("rows"), st.integers(1, 6), st.just("rows"), st.integers(1, 15)),
)


@settings(max_examples=150, deadline=None)
@given(
    plans=st.lists(sliced_plans, min_size=2, max_size=5),
    joins=st.lists(st.integers(0, 40), min_size=5, max_size=5),
    data=streams(),
    algorithm=st.sampled_from(["AMTA", "FLATFAT", "TWO_STACKS"]),
)
def test_a_group_shares_slices_and_each_member_matches_its_oracle(
    plans: list[HopPlan], joins: list[int], data: Any, algorithm: str
) -> None:
    """Windows of different ranges and slides over one record, driven by one HopGroup (a row
    combined once for all), members joining mid-stream (as a window created later) and the
    group checkpointed and restored between batches: each member's boundaries are its own
    oracle's over the rows since it joined."""
    rows, cuts = data
    members = [hopper(p, algorithm) for p in plans]
    start = [min(j, len(rows)) for j in joins[: len(plans)]]
    start[0] = 0
    got: list[list[tuple[int, tuple[int, ...]]]] = [[] for _ in members]
    lower = members[0].engine.monoid.lower
    edges = sorted({0, len(rows), *cuts, *start})
    for a, b in itertools.pairwise(edges):
        live = [i for i, s in enumerate(start) if s <= a]
        part = rows[a:b]
        lifted = [RECORD.lift({"v": v}) for _, v in part]
        res = HopGroup([members[i] for i in live]).apply(lifted, [t for t, _ in part])
        for i, (bs, _) in zip(live, res, strict=True):
            got[i] += [(x.at, tuple(lower(x.aggregate)["cat"])) for x in bs]
        for i in live:  # a checkpoint and a restore: equal open slices, not the same object
            members[i].restore(members[i].state())
    for i, p in enumerate(plans):
        mine = rows[start[i] :]
        want = oracle(p, mine)
        assert got[i] == want, (i, p)
