"""The kit's :class:`LocalServer` and :class:`ServerFactory`: real ``mtawindows serve``
processes that serve, restart on their port and data, and leave no process behind (the server
and its embedded Redis), whether the test ends, raises or the test process itself is killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mtawindows.client import (
    Aggregation,
    Field,
    Policy,
    ResourceExhaustedError,
    StreamSpec,
    WindowClient,
    WindowSpec,
)
from mtawindows.server.storage import EmbeddedRedis
from mtawindows.testing import LocalServer, LocalServerError, ServerFactory
from tests.testing.support import alive, survivors

pytestmark = [pytest.mark.server, pytest.mark.redis]


def make(c: WindowClient) -> None:
    c.create_stream(StreamSpec("cpu", (Field("load", "DOUBLE"),), wall_clock=False))
    c.create_window(WindowSpec("cpu", "w", (Aggregation("n", "count"),), Policy.count(1000)))


def test_a_local_server_serves_then_leaves_nothing_behind() -> None:
    with LocalServer() as srv:
        assert srv.running and srv.health() == "SERVING"
        assert srv.target == f"127.0.0.1:{srv.port}" and srv.port > 0
        pids = [srv.pid, srv.redis_pid]
        assert pids[1] is not None and all(alive(p) for p in pids if p is not None)
        with srv.client() as c:
            make(c)
            c.append("cpu", {"ts": [1, 2, 3], "load": [0.1, 0.2, 0.3]})
            assert c.query("cpu", "w")["n"] == 3
        data_dir = srv.data_dir
        assert (data_dir / "server.log").exists()
    assert not srv.running
    assert survivors([p for p in pids if p is not None]) == []
    assert not data_dir.exists()  # a temporary data dir goes with it


def test_restart_keeps_the_port_and_the_data(tmp_path: Path) -> None:
    with LocalServer(tmp_path / "srv") as srv:
        port, first = srv.port, srv.pid
        with srv.client() as c:
            make(c)
            c.append("cpu", {"ts": [1, 2], "load": [1.0, 2.0]})
        srv.restart()
        assert (srv.port, srv.target) == (port, f"127.0.0.1:{port}")
        assert srv.pid != first and not alive(first)
        with srv.client() as c:
            assert c.query("cpu", "w")["n"] == 2
        assert srv.kill() == -signal.SIGKILL
        srv.start()  # after a crash too
        assert srv.port == port
        with srv.client() as c:
            assert c.get_stream("cpu").rows_appended == 2
    assert (tmp_path / "srv" / "server.log").exists()  # a given data dir stays


def test_kill_takes_the_embedded_redis_along_and_kill_all_both(tmp_path: Path) -> None:
    srv = LocalServer(tmp_path / "srv").start()
    try:
        redis_pid = srv.redis_pid
        assert redis_pid is not None
        srv.kill()
        assert survivors([redis_pid], wait=10) == []  # PR_SET_PDEATHSIG
        srv.start()
        pids = [srv.pid, srv.redis_pid]
        srv.kill_all()
        assert survivors([p for p in pids if p is not None], wait=10) == []
        assert srv.redis_pid is None and not srv.running
    finally:
        srv.close()


def test_an_exception_in_the_block_still_stops_everything() -> None:
    pids: list[int] = []
    with pytest.raises(RuntimeError, match="boom"), LocalServer() as srv:
        pids += [srv.pid, srv.redis_pid or -1]
        raise RuntimeError("boom")
    assert survivors([p for p in pids if p > 0]) == []


def test_on_a_given_redis_no_embedded_redis_is_started(tmp_path: Path) -> None:
    with (
        EmbeddedRedis(tmp_path / "redis") as redis,
        LocalServer(tmp_path / "srv", redis_url=redis.url) as srv,
        srv.client() as c,
    ):
        make(c)
        assert srv.redis_pid is None
        assert not (srv.redis_dir / "redis.pid").exists()
        assert "--redis-url" in srv.args


def test_flags_pass_through_and_a_refused_start_says_why(tmp_path: Path) -> None:
    with LocalServer(tmp_path / "ok", "--max-streams", "1") as srv, srv.client() as c:
        make(c)
        with pytest.raises(ResourceExhaustedError) as info:
            c.create_stream(StreamSpec("more", (Field("x", "DOUBLE"),), wall_clock=False))
        assert info.value.reason == "TOO_MANY_STREAMS"
    bad = LocalServer(tmp_path / "bad", "--lease-ms", "nonsense")
    with pytest.raises(RuntimeError, match="lease"):
        bad.start()
    assert not bad.running
    with pytest.raises(LocalServerError):
        LocalServer(tmp_path / "never").pid  # noqa: B018


def test_a_data_dir_too_long_for_the_redis_socket_is_refused_up_front(tmp_path: Path) -> None:
    deep = tmp_path / ("x" * 100)
    with pytest.raises(ValueError, match="too long"):
        LocalServer(deep)
    assert not deep.exists()
    assert LocalServer(deep, redis_url="redis://127.0.0.1:1").data_dir == deep  # no socket


def test_a_server_factory_starts_several_and_closes_them_all(tmp_path: Path) -> None:
    with ServerFactory(tmp_path) as factory:
        a = factory()
        b = factory("--max-streams", "1", flush_interval=None)
        assert a.port != b.port and a.health() == b.health() == "SERVING"
        assert "--flush-interval" not in " ".join(b.proc.args if b.proc else [])
        pids = [a.pid, b.pid, a.redis_pid or -1, b.redis_pid or -1]
    assert survivors([p for p in pids if p > 0]) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["server-1", "server-2"]


CHILD = """
import json, sys, time
from mtawindows.testing import LocalCluster, LocalServer, RedisCluster
srv = LocalServer().start()
cl = LocalCluster(2).start()
rc = RedisCluster(primaries=1, replicas=0).start()
pids = [srv.pid, srv.redis_pid, *(s.pid for s in cl.servers), cl.redis.pid,
        *(n.proc.pid for n in rc.nodes)]
print(json.dumps(pids), flush=True)
time.sleep(600)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_everything_dies_with_a_killed_test_process(tmp_path: Path) -> None:
    """The test process is killed (-9) with a server, a cluster and a Redis Cluster running:
    no process of theirs survives it (the kernel's death signal, not the test's care)."""
    import json

    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(CHILD)],
        stdout=subprocess.PIPE,
        cwd=tmp_path,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        pids = json.loads(line)
        assert len(pids) == 6 and all(alive(p) for p in pids), line
    finally:
        child.kill()
        child.wait(30)
    assert survivors(pids, wait=15) == []
