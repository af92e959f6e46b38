"""Query-time ranges (:mod:`mtawindows.server.engine.suffix`): ``aggregate_range(count=...)`` and
``aggregate_range(time_range=..., field=...)`` of every engine that answers them (AMTA and LMTA
in memory and on Redis with tiny blocks and head caches, so the middle levels live in Redis;
FlatFAT, B-Int, FlatFIT), after random batches, bursts and time gaps (bulk evictions), against
the naive fold of the model's suffix, with the non-commutative Concat beside a count and the
timestamps' Max; every query leaves the window as it was (its result, size, counters, local
state and Redis contents). And the cost: store reads per suffix query grow as log n.
"""

from __future__ import annotations

import math
from typing import Any

import hypothesis.strategies as st
import pytest
import redis
from hypothesis import given, note, settings

from mtawindows.server.engine.algorithms import ALGORITHMS, answers_ranges, engine_class
from mtawindows.server.engine.monoids import Concat, Count, Max, Record
from mtawindows.server.engine.policies import AnyOf, CountPolicy, TimeRangePolicy
from mtawindows.server.engine.suffix import RangeNotSupportedError
from mtawindows.server.storage.memory import MemoryStore
from mtawindows.server.storage.redis_store import RedisStore
from mtawindows.testing import shared_redis_url as redis_url

ANSWERING = ("AMTA", "LMTA", "FLATFAT", "BINT", "FLATFIT")
REFUSING = tuple(a for a in ALGORITHMS if a not in ANSWERING)
# (engine, store): the MTAs also on a Redis store with 2-pair blocks and head caches
SETUPS = [
    ("AMTA", None),
    ("AMTA", "redis"),
    ("LMTA", None),
    ("LMTA", "redis"),
    ("FLATFAT", None),
    ("BINT", None),
    ("FLATFIT", None),
]
POLICIES = {
    "time-20": TimeRangePolicy(20, field="ts"),
    "count-25": CountPolicy(25, field="n"),
    "time-or-count": AnyOf(TimeRangePolicy(40, field="ts"), CountPolicy(30, field="n")),
}


def record() -> Record:
    return Record(seq=Concat("v"), n=Count(), ts=Max("t"))


def fold(monoid: Any, items: list[Any]) -> Any:
    acc = monoid.identity
    for u in items:
        acc = monoid.combine(acc, u)
    return acc


def redis_dump(store: RedisStore) -> dict[bytes, bytes]:
    """Every Redis key of the window with its serialized value."""
    client = redis.Redis.from_url(store.url)
    try:
        return {k: client.dump(k) for k in client.scan_iter(match=store.keys.pattern, count=1000)}
    finally:
        client.close()


def make(engine: str, where: str | None, policy: Any) -> Any:
    store = (
        RedisStore(redis_url(), block_size=2, cache_size=2, refill_at=1)
        if where == "redis"
        else None
    )
    return engine_class(engine)(record(), policy, store=store)


def visible(w: Any) -> tuple[Any, ...]:
    """What a reader can see of a window, local state included (a checkpoint's snapshot)."""
    stats = dict(w.stats())
    stats.pop("store", None)  # reads are counted there: a query may read
    return (w.query(), len(w), stats, w.snapshot())


batches = st.lists(
    st.tuples(st.integers(1, 40), st.sampled_from([0, 0, 1, 1, 2, 3, 7, 25, 60])),
    min_size=1,
    max_size=10,
)


@pytest.mark.parametrize(("engine", "where"), SETUPS)
@pytest.mark.parametrize("policy", sorted(POLICIES))
@settings(max_examples=20)
@given(plan=batches, data=st.data())
def test_suffix_of_a_random_window_is_the_fold_of_its_newest_rows(
    engine: str, where: str | None, policy: str, plan: list[tuple[int, int]], data: Any
) -> None:
    """After each batch (rows 1 time unit apart, the batch after a gap), random counts and
    time ranges against the naive fold of the model's newest rows::

        window   [ r0 r1 r2 r3 r4 r5 r6 ]      count=3 -> r4 r5 r6
                              ^ newest - ts < range: time_range keeps r3 .. r6
    """
    w = make(engine, where, POLICIES[policy])
    m = w.monoid
    rows: list[tuple[int, Any]] = []  # (ts, lifted) the model keeps
    t = 0
    seq = 0
    try:
        for size, gap in plan:
            t += gap
            batch = []
            for _ in range(size):
                batch.append({"v": seq, "t": t})
                seq += 1
                t += data.draw(st.sampled_from([0, 1, 1, 2]), label="step")
            w.extend(batch)
            rows.extend((x["t"], m.lift(x)) for x in batch)
            rows = rows[len(rows) - len(w) :]  # the window decides what stays: checked below
            if hasattr(w, "items"):
                assert [u for _, u in rows] == w.items()
            assert fold(m, [u for _, u in rows]) == w.aggregate()
            if where == "redis":
                w.flush()  # pending writes and deletions land before the dump
                w.store.sync()
                before_redis = redis_dump(w.store)
            before = visible(w)
            newest = rows[-1][0] if rows else 0
            for _ in range(4):
                c = data.draw(st.integers(0, len(rows) + 3), label="count")
                agg, n = w.aggregate_range(count=c)
                want_c = [u for _, u in rows][max(0, len(rows) - c) :]
                note(f"count={c} n={n}")
                assert n == len(want_c)
                assert agg == fold(m, want_c)
                r = data.draw(st.integers(0, 70), label="range")
                agg, n = w.aggregate_range(time_range=r, field="ts")
                want = [u for ts, u in rows if newest - ts < r]  # TimeRangePolicy's rule
                note(f"range={r} n={n} newest={newest}")
                assert n == len(want)
                assert agg == fold(m, want)
                assert w.query_range(count=c) == m.lower(fold(m, want_c))
            assert visible(w) == before
            if where == "redis":
                assert redis_dump(w.store) == before_redis
    finally:
        w.close()


def test_the_model_keeps_what_the_window_keeps() -> None:
    """The hypothesis test trusts the window's length for what stays (its policy is tested
    against the naive window elsewhere); here the rows it keeps are the ones a time range
    policy keeps."""
    w = make("AMTA", None, TimeRangePolicy(10, field="ts"))
    for i in range(100):
        w.push({"v": i, "t": i * 3})
    assert w.query()["seq"] == [96, 97, 98, 99]
    assert w.query_range(time_range=4, field="ts")["seq"] == [98, 99]
    assert w.query_range(time_range=3, field="ts")["seq"] == [99]  # 297 - 294 >= 3: out
    assert w.query_range(time_range=0, field="ts")["seq"] == []
    assert w.query_range(count=2)["seq"] == [98, 99]
    assert w.query_range(count=10**9)["seq"] == [96, 97, 98, 99]


@pytest.mark.parametrize("engine", REFUSING)
def test_engines_without_a_suffix_refuse_naming_the_algorithm(engine: str) -> None:
    from mtawindows.server.engine.monoids import Sum

    monoid = Record(n=Count(), s=Sum("v", integers=True), ts=Max("t"))
    w = engine_class(engine)(monoid, CountPolicy(5, field="n"))
    w.push({"v": 1, "t": 1})
    before = (w.query(), len(w))
    assert not answers_ranges(engine)
    with pytest.raises(RangeNotSupportedError) as info:
        w.aggregate_range(count=1)
    assert info.value.algorithm == engine
    assert engine in str(info.value)
    assert (w.query(), len(w)) == before


@pytest.mark.parametrize("engine", ANSWERING)
@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({}, ValueError, "neither"),
        ({"count": 1, "time_range": 1}, ValueError, "both"),
        ({"count": -1}, ValueError, "count must be >= 0, got -1"),
        ({"count": True}, TypeError, "count must be an int"),
        ({"count": 1.5}, TypeError, "count must be an int"),
        ({"time_range": -2, "field": "ts"}, ValueError, "time_range must be >= 0, got -2"),
        ({"time_range": "5m", "field": "ts"}, TypeError, "time_range must be a number"),
        ({"time_range": 5, "field": "n"}, TypeError, "must be a Max/Last monoid"),
    ],
)
def test_bad_arguments_are_refused_naming_them(
    engine: str, kwargs: dict[str, Any], error: type[Exception], words: str
) -> None:
    w = make(engine, None, CountPolicy(5, field="n"))
    w.push({"v": 1, "t": 1})
    with pytest.raises(error, match=words):
        w.aggregate_range(**kwargs)
    assert answers_ranges(engine)


class CountingStore(MemoryStore):
    """A store that counts the pairs read from it (each as a round trip: the worst case)."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.pairs = 0

    def read(self, level: int, start: int, stop: int) -> Any:
        self.pairs += stop - start
        return super().read(level, start, stop)


@pytest.mark.parametrize("engine", ["AMTA", "LMTA"])
def test_store_reads_per_suffix_query_grow_as_log_n(engine: str) -> None:
    """Windows of 2^8 .. 2^14 items with 2-pair blocks and head caches (nearly everything in
    the store): the pairs a suffix query reads from the store stay within 4 log2 n + 8 and
    grow by a constant per doubling, not with n."""
    worst = {}
    for e in range(8, 15):
        n = 1 << e
        store = CountingStore(block_size=2, cache_size=2, refill_at=1)
        w = engine_class(engine)(record(), CountPolicy(n, field="n"), store=store)
        w.extend({"v": i, "t": i} for i in range(n + n // 3))  # a bulk eviction too
        assert len(w) == n
        reads = []
        for c in (1, 3, n // 3, n // 2 + 7, n - 5, (n * 5) // 7):
            store.pairs = 0
            w.aggregate_range(count=c)
            reads.append(store.pairs)
        for r in (1, n // 5, n // 2 + 3, n - 9):
            store.pairs = 0
            w.aggregate_range(time_range=r, field="ts")
            reads.append(store.pairs)
        worst[e] = max(reads)
        assert worst[e] <= 4 * e + 8, (n, reads)
    print("pairs read per suffix query, worst, by log2 n:", worst)
    # a doubling adds a constant, far from doubling the reads
    assert worst[14] - worst[8] <= 4 * 6 + 8
    assert worst[14] < 4 * math.log2(1 << 14) + 8


def test_a_redis_suffix_query_takes_a_few_round_trips() -> None:
    """On Redis, the non-local pairs of a count's cover come in one round trip; a time range's
    search, its cover and its descent (``SPECULATE_LEVELS`` + 1 levels a trip) in a few."""
    store = RedisStore(redis_url(), block_size=8, cache_size=8, refill_at=4)
    w = engine_class("AMTA")(record(), CountPolicy(1 << 14, field="n"), store=store)
    try:
        w.extend({"v": i, "t": i} for i in range((1 << 14) + 1000))
        w.flush()
        store.sync()  # the checkpoint's deletions are round trips too
        for c in (5, 999, 7777, 12345):
            trips = store.stats.round_trips
            agg, n = w.aggregate_range(count=c)
            assert n == c
            assert agg[0] == tuple(range((1 << 14) + 1000 - c, (1 << 14) + 1000))
            assert store.stats.round_trips - trips <= 1
        for r in (5, 999, 7777, 12345):
            trips = store.stats.round_trips
            _, n = w.aggregate_range(time_range=r, field="ts")
            assert n == r
            assert store.stats.round_trips - trips <= 2 + 14 // 4 + 1
    finally:
        w.close()
