"""Four loose ends of issue 20, each against real processes (a server, its embedded valkey,
gRPC) unless it is a check of one function:

1. a frozen Redis (SIGSTOP) is seen by the PING watchdog: NOT_SERVING and stream calls refused
   at once (UNAVAILABLE, ``STORE_UNAVAILABLE``), SERVING again when it answers, nothing lost;
2. a request over the server's ``--max-message-bytes`` gets RESOURCE_EXHAUSTED with an
   ErrorInfo (``MESSAGE_TOO_LARGE``, the limit and the size), and one over the client's own
   limit a typed error before it is sent;
3. a plugin monoid whose ``lower`` raises on a batch's result refuses the batch before anything
   changes (``LOWER_FAILED``): same answer on a retry, the window and the ledger untouched;
4. int64 overflow in a CEL policy is an evaluation error (counted in ``policy_errors``, the
   prefix stays), never a wider or wrapped value.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mtawindows.client import (
    Aggregation,
    Field,
    Policy,
    Storage,
    StreamSpec,
    WindowClient,
    WindowSpec,
)
from mtawindows.client.errors import MtaWindowsError
from tests.support.servers import ServerProcess

LINUX = sys.platform.startswith("linux")


def wait_until(pred: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {what}")
        time.sleep(0.02)


def rpc_error(call: Callable[[], Any]) -> MtaWindowsError:
    with pytest.raises(MtaWindowsError) as info:
        call()
    return info.value


# --------------------------------------------------------------------------- 1. frozen Redis

ROWS = 10  # rows per batch, x = 1.0 each: count and sum tell how many batches a window has
AGGS = (Aggregation("n", "count"), Aggregation("s", "sum", "x"))


def batch(seq: int) -> dict[str, list[Any]]:
    return {"ts": [seq * ROWS + i for i in range(ROWS)], "x": [1.0] * ROWS}


def valkey_pid(srv: ServerProcess) -> int:
    """The embedded valkey's pid, as the server recorded it in its data dir."""
    pid = int((srv.data_dir / "data" / "redis" / "redis.pid").read_text().split()[0])
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    assert b"redis.sock" in cmdline  # that valkey, not a reused pid
    return pid


@pytest.mark.server
@pytest.mark.redis
@pytest.mark.slow
@pytest.mark.skipif(not LINUX, reason="reads /proc for the valkey's command line")
def test_a_frozen_redis_is_seen_and_refused_fast_then_served_again(tmp_path: Path) -> None:
    """SIGSTOP of the embedded valkey: within the watchdog's bound (1 s here) health is
    NOT_SERVING and an Append is refused at once, UNAVAILABLE / STORE_UNAVAILABLE, far under
    its 20 s deadline (no call waits on the frozen Redis); SIGCONT: SERVING again, every
    acknowledged batch is there, appends go on."""
    srv = ServerProcess(tmp_path / "srv", "--redis-ping-timeout-ms", "1000").start()
    pid = 0
    try:
        with WindowClient(srv.target, timeout=20, retries=1) as c:
            c.create_stream(StreamSpec("m", (Field("x"),)))
            c.create_window(
                WindowSpec("m", "durable", AGGS, Policy.count(10**9), storage=Storage(durable=True))
            )
            c.create_window(WindowSpec("m", "tiered", AGGS, Policy.count(10**9)))
            for seq in range(1, 4):
                c.append("m", batch(seq), producer_id="p", sequence=seq)
            pid = valkey_pid(srv)
            os.kill(pid, signal.SIGSTOP)
            stopped = time.monotonic()
            wait_until(lambda: srv.health() == "NOT_SERVING", "NOT_SERVING", timeout=10)
            seen = time.monotonic() - stopped
            assert seen < 3.0, seen  # bound 1 s + a ping interval + the health call
            assert srv.health("mtawindows.v1.WindowService") == "NOT_SERVING"
            t0 = time.monotonic()
            e = rpc_error(lambda: c.append("m", batch(4), producer_id="p", sequence=4))
            refused_in = time.monotonic() - t0
            assert (e.code, e.reason) == ("UNAVAILABLE", "STORE_UNAVAILABLE")
            assert refused_in < 1.0, refused_in
            e = rpc_error(lambda: c.query("m", "durable"))
            assert (e.code, e.reason) == ("UNAVAILABLE", "STORE_UNAVAILABLE")
            assert [s.spec.name for s in c.list_streams()] == ["m"]  # from memory: answers
            os.kill(pid, signal.SIGCONT)
            pid = 0
            wait_until(lambda: srv.health() == "SERVING", "SERVING again", timeout=10)
            for name in ("durable", "tiered"):
                assert c.query("m", name).values == {"n": 3 * ROWS, "s": 3.0 * ROWS}
            assert c.append("m", batch(3), producer_id="p", sequence=3).duplicate
            c.append("m", batch(4), producer_id="p", sequence=4)
            for name in ("durable", "tiered"):
                assert c.query("m", name).values == {"n": 4 * ROWS, "s": 4.0 * ROWS}
        log = srv.log.read_text()
        assert '"store_unresponsive"' in log and '"store_answers"' in log
        assert srv.stop() == 0
        srv.start()  # and it all survived a restart of the server
        with WindowClient(srv.target) as c:
            assert c.query("m", "durable").values == {"n": 4 * ROWS, "s": 4.0 * ROWS}
    finally:
        if pid:
            os.kill(pid, signal.SIGCONT)
        srv.stop()


@pytest.mark.server
@pytest.mark.redis
@pytest.mark.slow
def test_a_frozen_primary_of_a_redis_cluster_is_seen_too(tmp_path: Path) -> None:
    """``--redis-url`` to a Redis Cluster (three primaries, no replica: nothing fails over):
    the watchdog PINGs every primary, so freezing any one of them makes the server
    NOT_SERVING and refuse appends fast; thawed, it serves again and nothing was lost."""
    from tests.support.redis_cluster import RedisClusterProcesses

    with RedisClusterProcesses(replicas=0) as cluster:
        srv = ServerProcess(
            tmp_path / "srv", "--redis-url", cluster.cluster_url, "--redis-ping-timeout-ms", "1000"
        ).start()
        frozen = None
        try:
            with WindowClient(srv.target, timeout=20, retries=1) as c:
                c.create_stream(StreamSpec("m", (Field("x"),)))
                c.create_window(
                    WindowSpec("m", "w", AGGS, Policy.count(10**9), storage=Storage(durable=True))
                )
                c.append("m", batch(1), producer_id="p", sequence=1)
                frozen = cluster.primaries()[-1].proc
                assert frozen is not None
                os.kill(frozen.pid, signal.SIGSTOP)
                wait_until(lambda: srv.health() == "NOT_SERVING", "NOT_SERVING", timeout=10)
                t0 = time.monotonic()
                e = rpc_error(lambda: c.append("m", batch(2), producer_id="p", sequence=2))
                assert (e.code, e.reason) == ("UNAVAILABLE", "STORE_UNAVAILABLE")
                assert time.monotonic() - t0 < 1.0
                os.kill(frozen.pid, signal.SIGCONT)
                frozen = None
                wait_until(lambda: srv.health() == "SERVING", "SERVING again", timeout=20)
                c.append("m", batch(2), producer_id="p", sequence=2)
                assert c.query("m", "w").values == {"n": 2 * ROWS, "s": 2.0 * ROWS}
        finally:
            if frozen is not None:
                os.kill(frozen.pid, signal.SIGCONT)
            srv.stop()
