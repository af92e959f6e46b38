"""Keyed hopping windows in the service against a real Redis, with a key cache of a few keys'
worth: keys leave memory between their rows (packed, then, clean after a flush, gone to
Redis) with their slicer's state, load again on their next row, across the compact-to-tree
threshold and a reopening of the stream; every key's boundaries stay its oracle's."""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from mtawindows.server.engine.hopping import HopPlan
from mtawindows.server.service import Registry
from mtawindows.server.service.limits import Limits
from mtawindows.v1.types import Aggregation, Field, Policy, StreamSpec, WindowSpec
from tests.engine.test_hopping import oracle
from tests.support.keyed_oracle import drop_prefix

pytestmark = [pytest.mark.redis]

S = 1_000_000_000
PLANS = {
    "t": (
        timedelta(seconds=10),
        Policy.time_range(timedelta(seconds=25)),
        HopPlan("time", 10 * S, "time", 25 * S),
    ),
    "r": (3, Policy.count(7), HopPlan("rows", 3, "rows", 7)),
}
AGGS = (Aggregation("n", "count"), Aggregation("f", "first", "v"), Aggregation("l", "last", "v"))


@pytest.fixture
def registry_of(redis_url: str) -> Iterator[Any]:
    prefix = f"kh{uuid.uuid4().hex[:12]}"
    made: list[Registry] = []

    def make() -> Registry:
        r = Registry(
            redis_url, limits=Limits(key_compact_items=3, key_cache_bytes=8000), prefix=prefix
        )
        made.append(r)
        return r

    yield make
    for r in made:
        r.redis.close()
    drop_prefix(redis_url, prefix)


def _want(plan: HopPlan, rows: list[tuple[int, float]]) -> list[tuple[int, int, float, float]]:
    """(boundary, count, first, last) of each boundary of a key's rows."""
    got = oracle(plan, [(t, i) for i, (t, _) in enumerate(rows)])
    return [(b, len(idx), rows[idx[0]][1], rows[idx[-1]][1]) for b, idx in got]


def test_keys_paged_out_and_back_keep_their_boundaries(registry_of: Any) -> None:
    reg = registry_of()
    reg.create_stream(
        StreamSpec(
            "kh", (Field("host", "STRING"), Field("v", "DOUBLE")), key="host", wall_clock=False
        )
    )
    for name, (slide, policy, _) in PLANS.items():
        reg.create_window(WindowSpec("kh", name, AGGS, policy, slide=slide))
    keys = [f"h{i:02d}" for i in range(40)]
    rows_of: dict[str, list[tuple[int, float]]] = {k: [] for k in keys}
    rng = random.Random(8)
    t = 0
    for rnd in range(12):
        stream = reg.stream("kh")
        sub = rng.sample(keys, 12)
        ks = [rng.choice(sub) for _ in range(40)]
        ts = []
        for _ in ks:
            t += rng.choice([0, 1, 2, 4, 9]) * S
            ts.append(t)
        vs = [float(rng.randint(-9, 9)) for _ in ks]
        stream.append({"ts": ("TIMESTAMP", ts), "host": ("STRING", ks), "v": ("DOUBLE", vs)})
        for k, a, v in zip(ks, ts, vs, strict=True):
            rows_of[k].append((a, v))
        if rnd == 7:  # a restart: the stream opened again from Redis
            reg.flush(stream)
            reg.drop("kh")
            reg.redis.close()
            reg = registry_of()
            reg.adopt("kh")
        else:
            reg.flush(stream)
        stream = reg.stream("kh")
        for k in keys:
            for name, (_, _, plan) in PLANS.items():
                want = _want(plan, rows_of[k])
                if not rows_of[k]:
                    continue
                r = stream.query(name, k)
                got = (r.boundary, r.size, r.values["f"], r.values["l"]) if want else (0, 0)
                assert got == (want[-1] if want else (0, 0)), (rnd, k, name, r)
                assert r.sequence == len(want), (rnd, k, name)
    cache = reg.key_cache
    assert cache.evictions > 0 and cache.loads > 0, vars(cache)
