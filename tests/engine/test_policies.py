"""Built-in slide policies: validation, binding to record fields, and their semantics on
hand-checked windows (including the paper's running example)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from mtawindows.server.engine.amta import AmortizedMTA
from mtawindows.server.engine.lmta import LogMTA
from mtawindows.server.engine.monoids import ArgMax, Count, Last, Max, Record, Sum
from mtawindows.server.engine.naive import NaiveWindow
from mtawindows.server.engine.policies import (
    AllOf,
    AnyOf,
    BoundedSumPolicy,
    CountPolicy,
    MaxSubWindowPolicy,
    TimeRangePolicy,
)

ENGINES = [NaiveWindow, AmortizedMTA, LogMTA]


@pytest.mark.parametrize("engine", ENGINES)
def test_paper_running_example_bounded_sum(engine: Any) -> None:
    """Section 3.2: [2, 2, 3, 3] then 4 with a sum bound of 10 leaves [3, 3, 4]; max 3 -> 4."""
    from mtawindows.server.engine.monoids import Concat

    rec = Record(sum=Sum(), last=Last(), hi=Max(), cat=Concat())
    w = engine(rec, BoundedSumPolicy(10))
    for v in (2, 2, 3, 3):
        w.push(v)
    assert w.query()["cat"] == [2, 2, 3, 3]
    assert w.query()["hi"] == 3
    out = w.push(4)
    assert out["cat"] == [3, 3, 4]
    assert out["hi"] == 4
    # a suffix sum of exactly the bound stays; one above it leaves
    out = w.push(0)
    assert out["cat"] == [3, 3, 4, 0]
    out = w.push(5)
    assert out["cat"] == [4, 0, 5]


@pytest.mark.parametrize("engine", ENGINES)
def test_bounded_sum_single_item_over_the_bound_empties_the_window(engine: Any) -> None:
    from mtawindows.server.engine.monoids import Concat

    w = engine(Record(sum=Sum(), last=Last(), cat=Concat()), BoundedSumPolicy(10))
    w.push(3)
    assert w.push(11)["cat"] == []
    assert len(w) == 0


@pytest.mark.parametrize("engine", ENGINES)
def test_count_policy_keeps_the_newest_n(engine: Any) -> None:
    w = engine(Record(n=Count(), s=Sum()), CountPolicy(3))
    results = [w.push(v) for v in range(1, 8)]
    assert [r["s"] for r in results] == [1, 3, 6, 9, 12, 15, 18]
    assert len(w) == 3


@pytest.mark.parametrize("engine", ENGINES)
def test_time_range_keeps_items_newer_than_newest_minus_range(engine: Any) -> None:
    #  ts:   0   5   9   10  |  25
    #  range 10 at ts=10 keeps (0, 10] -> 5, 9, 10 ; at ts=25 keeps (15, 25] -> 25
    w = engine(Record(n=Count(), t=Max("ts")), TimeRangePolicy(10))
    for ts in (0, 5, 9, 10):
        out = w.push({"ts": ts})
    assert out["n"] == 3
    assert w.push({"ts": 25})["n"] == 1


@pytest.mark.parametrize("engine", ENGINES)
def test_time_range_with_datetimes_and_timedelta(engine: Any) -> None:
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    w = engine(Record(n=Count(), t=Last("ts")), TimeRangePolicy(dt.timedelta(hours=1)))
    for minutes in (0, 30, 59, 60, 61, 200):
        out = w.push({"ts": t0 + dt.timedelta(minutes=minutes)})
    assert out["n"] == 1
    w.push({"ts": t0 + dt.timedelta(minutes=230)})
    assert len(w) == 2


@pytest.mark.parametrize("engine", ENGINES)
def test_max_subwindow_evicts_items_older_than_the_maximum(engine: Any) -> None:
    #  1 4 2 [7] 3 5  -> window starts at the max 7
    from mtawindows.server.engine.monoids import Concat

    w = engine(Record(hi=Max(), cat=Concat()), MaxSubWindowPolicy())
    for v in (1, 4, 2, 7, 3, 5):
        out = w.push(v)
    assert out["cat"] == [7, 3, 5]
    assert w.push(9)["cat"] == [9]


@pytest.mark.parametrize("engine", ENGINES)
def test_max_subwindow_reads_argmax_and_combines_with_a_size_bound(engine: Any) -> None:
    rec = Record(n=Count(), am=ArgMax("v", "t"))
    w = engine(rec, AnyOf(MaxSubWindowPolicy(field="am"), CountPolicy(3)))
    for t, v in enumerate((9, 8, 7, 6, 5)):
        out = w.push({"v": v, "t": t})
    assert out["n"] == 3  # the count bound evicted 9 and 8; 7 now leads
    assert out["am"] == (7, 2)
    assert w.push({"v": 6, "t": 5})["n"] == 3  # 7 still the max: nothing older to drop
    assert w.push({"v": 8, "t": 6})["n"] == 1  # a new max: everything older leaves


@pytest.mark.parametrize("engine", ENGINES)
def test_all_of_needs_every_policy(engine: Any) -> None:
    w = engine(Record(n=Count(), t=Max("t")), AllOf(TimeRangePolicy(5), CountPolicy(2)))
    for t in (0, 1, 2, 3):
        w.push({"t": t})
    assert len(w) == 4  # nothing is 5 old
    w.push({"t": 100})
    assert len(w) == 2  # all are old, but the count keeps 2


@pytest.mark.parametrize(
    ("make", "error", "words"),
    [
        (lambda: TimeRangePolicy(-1), ValueError, "range must be > 0, got -1"),
        (lambda: TimeRangePolicy(0), ValueError, "range must be > 0, got 0"),
        (lambda: TimeRangePolicy(float("nan")), ValueError, "range must be > 0"),
        (lambda: TimeRangePolicy("1h"), TypeError, "range must be a number or timedelta, got str"),
        (lambda: TimeRangePolicy(dt.timedelta(seconds=-5)), ValueError, "must be > 0"),
        (lambda: CountPolicy(-3), ValueError, "size must be >= 0, got -3"),
        (lambda: CountPolicy(2.5), TypeError, "size must be an int, got float"),
        (lambda: BoundedSumPolicy(-1), ValueError, "bound must be >= 0, got -1"),
        (lambda: AnyOf(), ValueError, "at least one policy"),
    ],
)
def test_policy_parameters_are_validated_on_creation(make: Any, error: type, words: str) -> None:
    with pytest.raises(error, match=words):
        make()


def test_policies_are_frozen() -> None:
    p = CountPolicy(3)
    with pytest.raises(AttributeError):
        p.size = 4  # type: ignore[misc]


@pytest.mark.parametrize(
    ("monoid", "policy", "error", "words"),
    [
        (Record(a=Count(), b=Count()), CountPolicy(1), ValueError, "found several: \\['a', 'b'\\]"),
        (
            Record(s=Sum()),
            CountPolicy(1),
            ValueError,
            "expected exactly one Count field, found none",
        ),
        (Record(s=Sum()), CountPolicy(1, field="s"), TypeError, "field 's' must be a Count"),
        (Record(s=Sum()), CountPolicy(1, field="zz"), KeyError, "no field 'zz'"),
        (Sum(), CountPolicy(1), TypeError, "needs a Count monoid"),
        (Count(), CountPolicy(1, field="n"), ValueError, "needs a Record monoid"),
        (Sum(), BoundedSumPolicy(3), TypeError, "needs a Record with a Sum field and a Last"),
        (Record(s=Sum()), BoundedSumPolicy(3), ValueError, "Last field, found none"),
        (Record(a=Max(), b=Max()), TimeRangePolicy(3), ValueError, "pass field="),
        (Record(s=Sum()), 42, TypeError, "policy must be callable"),
    ],
)
def test_binding_errors_say_which_field_is_missing(
    monoid: Any, policy: Any, error: type, words: str
) -> None:
    with pytest.raises(error, match=words):
        AmortizedMTA(monoid, policy)


def test_requirements_name_the_fields_a_policy_needs() -> None:
    assert set(BoundedSumPolicy(3).requirements()) == {"sum", "last"}
    assert set(AnyOf(CountPolicy(2), TimeRangePolicy(4, field="ts")).requirements()) == {
        "count",
        "ts",
    }
    # a record built from the requirements binds
    reqs = AnyOf(CountPolicy(2), TimeRangePolicy(4, field="ts")).requirements()
    AmortizedMTA(Record(reqs), AnyOf(CountPolicy(2), TimeRangePolicy(4, field="ts")))


@pytest.mark.parametrize("engine", [AmortizedMTA, LogMTA])
def test_extend_equals_pushing_each_item_for_builtin_policies(engine: Any) -> None:
    """Holds for time-monotone, idempotent policies: every single built-in. (A union such as
    AnyOf(MaxSubWindow, Count) is not idempotent: once the count bound evicts the maximum,
    the next enforcement may evict more, so a batch and single pushes can differ.)"""
    import random

    from mtawindows.server.engine.monoids import Concat

    rec = Record(n=Count(), sum=Sum("v"), last=Last("v"), hi=Max("v"), t=Max("t"), cat=Concat("v"))
    policies = [
        CountPolicy(5),
        TimeRangePolicy(7, field="t"),
        BoundedSumPolicy(9, sum_field="sum", last_field="last"),
        MaxSubWindowPolicy(field="hi"),
    ]
    rnd = random.Random(7)
    for policy in policies:
        a, b = engine(rec, policy), engine(rec, policy)
        t = 0
        for _ in range(40):
            batch = []
            for _ in range(rnd.randint(0, 12)):
                t += rnd.choice([0, 1, 2, 5])
                batch.append({"v": rnd.randint(0, 4), "t": t})
            a.extend(batch)
            for x in batch:
                b.push(x)
            assert a.query() == b.query(), policy
