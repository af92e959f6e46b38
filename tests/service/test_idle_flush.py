"""An idle unkeyed stream's periodic flush writes nothing to Redis: its state and its columnar
windows' checkpoints are in Redis already (counted on a private Redis: INFO's command
counter). A change writes again, once; what was saved reloads exactly."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
import redis

from mtawindows.server.service import Registry
from mtawindows.v1.types import Aggregation, Field, Policy, Storage, StreamSpec, WindowSpec
from tests.support.redis_stats import commands_processed

pytestmark = [pytest.mark.redis]

AGGS = (Aggregation("n", "count"), Aggregation("mx", "max", "v"))


@pytest.mark.parametrize("durable", [False, True])
def test_an_idle_unkeyed_streams_flush_writes_nothing(private_redis: str, durable: bool) -> None:
    prefix = f"if{uuid.uuid4().hex[:12]}"
    reg = Registry(private_redis, prefix=prefix)
    client = redis.Redis.from_url(private_redis)
    try:
        reg.create_stream(StreamSpec("s", (Field("v", "DOUBLE"),), wall_clock=False))
        reg.create_window(
            WindowSpec("s", "c", AGGS, Policy.count(50), storage=Storage(durable=durable))
        )
        reg.create_window(WindowSpec("s", "t", AGGS, Policy.time_range(timedelta(microseconds=1))))
        reg.create_window(WindowSpec("s", "m", AGGS, Policy.count(5), storage=Storage("memory")))
        s = reg.stream("s")
        assert all("columnar" in s.windows[n].storage for n in ("c", "t"))
        s.append({"ts": ("TIMESTAMP", list(range(100))), "v": ("DOUBLE", [1.0] * 100)})
        for _ in range(3):  # the batch's writes, then the state they reach (a journal's)
            reg.flush(s, wait=False)
        reg.flush(s)
        idle = commands_processed(client)
        for _ in range(5):
            reg.flush(s, wait=False)
        reg.flush(s)
        assert commands_processed(client) - idle <= 1, (
            commands_processed(client) - idle
        )  # (INFO itself)
        s.append({"ts": ("TIMESTAMP", [100]), "v": ("DOUBLE", [9.0])})
        before = commands_processed(client)
        reg.flush(s)
        assert commands_processed(client) - before > 1  # a change: written
        want = {n: s.windows[n].result().values for n in ("c", "t")}
    finally:
        reg.close()
    reg = Registry(private_redis, prefix=prefix)
    try:
        reg.restore()
        s = reg.stream("s")
        assert {n: s.windows[n].result().values for n in ("c", "t")} == want
        assert s.state.newest == 100
    finally:
        reg.drop("s")
        client.close()
