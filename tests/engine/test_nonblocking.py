"""The service tries small batches on its event loop with ``nonblocking=True`` (the window holds
its store in non-blocking mode for the call): an operation that would wait for Redis (a miss,
a refill in flight, a large eviction) raises WouldBlock before anything changed; retried
normally it gives the same window as if it had never been tried. Checked against the naive
window after every step, with invariants."""

from __future__ import annotations

import random

import pytest

from mtawindows.server.engine.amta import AmortizedMTA
from mtawindows.server.engine.lmta import LogMTA
from mtawindows.server.engine.monoids import Concat, Count, Max, Record, Sum
from mtawindows.server.engine.naive import NaiveWindow
from mtawindows.server.engine.policies import AnyOf, CountPolicy, TimeRangePolicy
from mtawindows.server.storage.protocol import WouldBlock
from mtawindows.server.storage.redis_store import RedisStore

pytestmark = [pytest.mark.slow, pytest.mark.redis]

MONOID = Record(n=Count(), s=Sum("v"), m=Max("t"), c=Concat("v"))


@pytest.mark.parametrize("algorithm", [AmortizedMTA, LogMTA])
@pytest.mark.parametrize("durable", [False, True])
def test_would_block_changes_nothing_and_the_retry_matches(
    redis_url: str, algorithm: type, durable: bool
) -> None:
    policy = AnyOf(TimeRangePolicy(40, field="m"), CountPolicy(300, field="n"))
    store = RedisStore(redis_url, block_size=2, cache_size=2, refill_at=1, durable=durable)
    w = algorithm(MONOID, policy, store=store, debug=True)
    naive = NaiveWindow(MONOID, policy)
    rng = random.Random(5)
    t = 0
    blocked = applied_inline = 0
    for step in range(700):
        t += rng.choice((0, 1, 1, 2, 30 if step % 97 == 0 else 1))
        size = 80 if step % 97 == 96 else rng.choice((1, 1, 2, 5))  # 80: evicts > 64 at once
        batch = [{"v": rng.randint(0, 5), "t": t} for _ in range(size)]
        lifted = [MONOID.lift(x) for x in batch]
        before = (len(w), w.query(), w.stats()["inserted"], w.stats()["evicted"])
        try:
            w.apply_lifted(lifted, "p", step + 1, nonblocking=True)
            applied_inline += 1
        except WouldBlock:
            blocked += 1
            assert (len(w), w.query(), w.stats()["inserted"], w.stats()["evicted"]) == before
            w.check_invariants()
            w.apply_lifted(lifted, "p", step + 1)
        assert not store.nonblocking  # held by the window for the call only
        for x in batch:
            naive.insert(x)
        naive.enforce()
        assert len(w) == len(naive)
        assert w.query() == naive.query()
    if durable:  # every operation appends to the journal: never tried without waiting
        assert applied_inline == 0
    else:
        assert blocked > 0 and applied_inline > 0
    assert w.last_sequence("p") == 700
    w.close()


def test_service_defers_a_batch_and_resumes_it_where_it_stopped(redis_url: str) -> None:
    """Stream.append(nonblocking=True) raises Deferred at the first window that would wait;
    resume() finishes the batch; every window equals a memory twin fed the same rows."""
    from mtawindows.server.service import Deferred, Registry
    from mtawindows.v1.types import Aggregation, Field, Policy, Storage, StreamSpec, WindowSpec

    reg = Registry(redis_url, prefix=f"nbtest{random.randrange(10**9)}")
    reg.create_stream(StreamSpec("s", (Field("v", "DOUBLE"),), wall_clock=False))
    aggs = (Aggregation("n", "count"), Aggregation("s", "sum", "v"), Aggregation("f", "first", "v"))
    tiny = Storage("redis", block_size=2, cache_size=2)
    from datetime import timedelta

    policies = (
        Policy.count(37),
        Policy.max_sub_window("v", 50),
        Policy.time_range(timedelta(microseconds=100)),  # ~100 rows; a jump evicts them all
    )
    for i, policy in enumerate(policies):
        reg.create_window(WindowSpec("s", f"r{i}", aggs, policy, storage=tiny))
        reg.create_window(WindowSpec("s", f"m{i}", aggs, policy, storage=Storage("memory")))
    s = reg.stream("s")
    rng = random.Random(11)
    deferred = 0
    t = 0
    for i in range(600):
        t += 1_000 if i % 150 else 1_000_000  # every 150 rows a 1 ms jump: > 64 rows leave
        cols = {"ts": ("TIMESTAMP", [t]), "v": ("DOUBLE", [float(rng.randint(0, 9))])}
        assert s.inline_ok(1, "FINAL")
        try:
            res = s.append(cols, mode="FINAL", nonblocking=True)
        except Deferred as d:
            deferred += 1
            res = s.resume(d.batch)
        for k in (0, 1, 2):
            assert res.results[f"r{k}"].values == res.results[f"m{k}"].values
            assert res.results[f"r{k}"].size == res.results[f"m{k}"].size
    assert deferred > 0
    assert s.info().rows_appended == 600 and s.info().batches_appended == 600
    reg.close()
