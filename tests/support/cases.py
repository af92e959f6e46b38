"""The test matrix: algorithms x storage x (monoid, policy) cases, shared by the test modules."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mtawindows.server.engine.amta import AmortizedMTA
from mtawindows.server.engine.lmta import LogMTA
from mtawindows.server.engine.monoids import (
    ArgMax,
    ArgMin,
    Concat,
    Count,
    First,
    GeometricMean,
    Last,
    Max,
    MaxCount,
    Mean,
    Min,
    Record,
    StdDev,
    Sum,
    Variance,
)
from mtawindows.server.engine.policies import (
    AllOf,
    AnyOf,
    BoundedSumPolicy,
    CountPolicy,
    MaxSubWindowPolicy,
    TimeRangePolicy,
)
from mtawindows.server.storage.memory import MemoryStore
from mtawindows.server.storage.redis_store import RedisStore
from mtawindows.testing import shared_redis_url as redis_url

ALGORITHMS = {"AMTA": AmortizedMTA, "LMTA": LogMTA}

# storage: None = all levels local; otherwise a tiered store with tiny block/cache sizes so that
# every flush, refill, miss and drop path runs.
STORES: dict[str, Callable[[], Any]] = {
    "memory": lambda: None,
    "tiered-1": lambda: MemoryStore(block_size=1, cache_size=1, refill_at=0),
    "tiered-2": lambda: MemoryStore(block_size=2, cache_size=2, refill_at=1),
    "tiered-3": lambda: MemoryStore(block_size=3, cache_size=3, refill_at=2),
    "tiered-8": lambda: MemoryStore(block_size=8, cache_size=8, refill_at=4),
    # the Redis tier, same tiny sizes; odd sizes durable (log + checkpoints), even ones flushed
    "redis-1": lambda: RedisStore(
        redis_url(), block_size=1, cache_size=1, refill_at=0, durable=True, checkpoint_every=7
    ),
    "redis-2": lambda: RedisStore(
        redis_url(), block_size=2, cache_size=2, refill_at=1, checkpoint_every=5
    ),
    "redis-3": lambda: RedisStore(
        redis_url(), block_size=3, cache_size=3, refill_at=2, durable=True, checkpoint_every=50
    ),
    "redis-8": lambda: RedisStore(
        redis_url(), block_size=8, cache_size=8, refill_at=4, checkpoint_every=64
    ),
}

# One record with every field a built-in policy needs, plus a non-commutative field (Concat)
# that makes any operand-order bug visible.
EXACT = Record(
    n=Count(),
    sum=Sum("v"),
    last=Last("v"),
    mx=Max("v"),
    t=Max("t"),
    cat=Concat("v"),
    first=First("v"),
)
# Only fixed-shape numbers: the Redis tier stores these with the struct codec.
NUMERIC = Record(
    n=Count(),
    sum=Sum("v"),
    mx=Max("v"),
    mn=Min("v"),
    t=Max("t"),
    mean=Mean("v"),
    var=Variance("v"),
    mc=MaxCount("v"),
)
# Floating-point statistics and the arg-monoids (compared with a tolerance).
STATS = Record(
    n=Count(),
    mean=Mean("v"),
    var=Variance("v", ddof=1),
    sd=StdDev("v"),
    geo=GeometricMean("p"),
    amax=ArgMax("v", "t"),
    amin=ArgMin("v", "t"),
    mc=MaxCount("v"),
    mn=Min("v"),
    t=Max("t"),
)


def sum_at_least(k: int) -> Callable[[Any, Any], bool]:
    """A plain-callable policy over a plain Sum: keep the newest items whose sum reaches k."""

    def policy(total: Any, old: Any) -> bool:
        return bool(total - old >= k)

    return policy


@dataclass(frozen=True)
class Case:
    name: str
    monoid: Any
    policy: Any
    values: str = "small"  # "small": ints 0..5; "zeros": mostly 0 (lift == identity)


def policy_cases() -> list[Case]:
    return [
        Case("count-0", EXACT, CountPolicy(0)),
        Case("count-1", EXACT, CountPolicy(1)),
        Case("count-7", EXACT, CountPolicy(7)),
        Case("count-33", EXACT, CountPolicy(33)),
        Case("time-1", EXACT, TimeRangePolicy(1, field="t")),
        Case("time-10", EXACT, TimeRangePolicy(10, field="t")),
        Case("time-60", EXACT, TimeRangePolicy(60, field="t")),
        Case("bounded-sum-0", EXACT, BoundedSumPolicy(0)),
        Case("bounded-sum-12", EXACT, BoundedSumPolicy(12)),
        Case("bounded-sum-40", EXACT, BoundedSumPolicy(40)),
        Case("max-subwindow", EXACT, MaxSubWindowPolicy(field="mx")),
        Case(
            "max-subwindow-or-count", EXACT, AnyOf(MaxSubWindowPolicy(field="mx"), CountPolicy(9))
        ),
        Case("time-and-count", EXACT, AllOf(TimeRangePolicy(5, field="t"), CountPolicy(3))),
        Case("stats-time", STATS, TimeRangePolicy(8, field="t")),
        Case("stats-count", STATS, CountPolicy(12)),
        Case("numeric-time", NUMERIC, TimeRangePolicy(10, field="t")),
        Case("numeric-count", NUMERIC, CountPolicy(20)),
        Case("zeros-sum", Sum("v"), sum_at_least(2), values="zeros"),
    ]


CASES = {c.name: c for c in policy_cases()}
