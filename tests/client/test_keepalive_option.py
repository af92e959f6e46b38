"""``keepalive_ms``: the SDK's keepalive interval (a ping that often, answered within as long).

The default (1 s) fails a silent server's calls in about two seconds; on a link slower than a
large request needs, the ping waits behind the request's bytes and closes a healthy
connection, so a client there sets a longer one. Checked through a real server behind a
FaultProxy throttled to 1 MB/s: a 3 MB Arrow batch with a 20 s keepalive is applied; and the
option's bounds (the servers refuse pings more often than once a second)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from mtawindows.client import (
    Aggregation,
    AsyncWindowClient,
    Field,
    Policy,
    StreamSpec,
    WindowClient,
    WindowSpec,
)
from mtawindows.client.channel import channel_options
from mtawindows.testing import FaultProxy, LocalServer

pytestmark = [pytest.mark.server, pytest.mark.redis]


def test_a_longer_keepalive_carries_a_large_batch_over_a_slow_link(tmp_path: Path) -> None:
    n = 200_000  # 3.2 MB in Arrow: about 3 s at 1 MB/s
    table = pa.table({"ts": pa.array(np.arange(n, dtype=np.int64)), "x": np.ones(n)})
    with LocalServer(tmp_path / "d") as srv, srv.client() as c:
        c.create_stream(StreamSpec("s", (Field("x", "DOUBLE"),), wall_clock=False))
        c.create_window(WindowSpec("s", "w", (Aggregation("n", "count"),), Policy.count(10**9)))
        with FaultProxy(srv.target) as proxy:
            proxy.bandwidth(1_000_000, "up")
            with WindowClient(proxy.address, keepalive_ms=20_000, timeout=60) as slow:
                assert slow.append("s", table).rows_applied == n
        assert c.query("s", "w").values["n"] == n


def test_the_keepalive_option_is_checked_and_applied() -> None:
    opts = dict(channel_options(keepalive_ms=20_000))
    assert opts["grpc.keepalive_time_ms"] == opts["grpc.keepalive_timeout_ms"] == 20_000
    assert dict(channel_options())["grpc.keepalive_time_ms"] == 1000
    for bad in (999, 0, -1, True, 1.5, "2000", 86_400_001):
        with pytest.raises(ValueError, match="keepalive_ms"):
            WindowClient("localhost:1", keepalive_ms=bad)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="keepalive_ms"):
            AsyncWindowClient("localhost:1", keepalive_ms=bad)  # type: ignore[arg-type]
