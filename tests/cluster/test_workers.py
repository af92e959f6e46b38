"""``python -m mtawindows.server --workers N``: a supervisor and N real server processes on ports
port..port+N-1 sharing the supervisor's embedded Redis (server/workers.py).

    supervisor (no port) --+-- embedded Redis (unix socket in <data-dir>/redis)
                           +-- worker 0: --port P   --advertise 127.0.0.1:P
                           '-- worker 1: --port P+1 --advertise 127.0.0.1:P+1

Every wait is bounded; nothing is timed.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from mtawindows.server.serve_command import build_parser
from mtawindows.server.workers import advertise_base, child_argv
from mtawindows.testing import free_port_run

pytestmark = [pytest.mark.server, pytest.mark.slow]

START = 90.0  # seconds a supervisor gets to have every worker serving (2 cores, cold imports)
_T = TypeVar("_T")


# --------------------------------------------------------------------------- helpers


def wait_for(what: str, probe: Callable[[], _T | None], timeout: float = START) -> _T:
    """``probe()`` until it returns something (not None), at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        got = probe()
        if got is not None:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout}s")
        time.sleep(0.1)


def health(port: int) -> str | None:
    """The health status of the server on ``port`` ("SERVING", ...), None if none answers."""
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        try:
            resp = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=3)
        except grpc.RpcError:
            return None
    return str(health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status))


def alive(pid: int) -> bool:
    """A process ``pid`` that is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


def children(parent: int) -> dict[str, int]:
    """The live children of ``parent``: ``"redis"`` and ``"port:<P>"`` (a worker) to pid."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmd = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        fields = stat.rpartition(")")[2].split()
        if len(fields) < 2 or fields[0] == "Z" or int(fields[1]) != parent:
            continue
        args = [c.decode(errors="replace") for c in cmd]
        if "--port" in args and "mtawindows.server" in args:
            found[f"port:{args[args.index('--port') + 1]}"] = int(entry.name)
        elif any("valkey" in a or "redis-server" in a for a in args[:1]):
            found["redis"] = int(entry.name)
    return found


def all_children(sup: Supervisor) -> dict[str, int] | None:
    """The supervisor's children once its Redis and every worker are there."""
    kids = children(sup.proc.pid)
    return kids if len(kids) == sup.workers + 1 else None


def env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("MTAWINDOWS_")}


class Supervisor:
    """``python -m mtawindows.server --workers N --port P --data-dir ...`` as a child; its log
    (stderr) in ``<tmp>/supervisor.log``."""

    def __init__(self, tmp: Path, workers: int, port: int, *flags: str) -> None:
        self.tmp = tmp
        self.port = port
        self.workers = workers
        self.port_file = tmp / "port"
        self.log = tmp / "supervisor.log"
        cmd = [
            sys.executable, "-m", "mtawindows.server",
            "--workers", str(workers),
            "--port", str(port),
            "--port-file", str(self.port_file),
            "--data-dir", str(tmp / "data"),
            "--flush-interval", "0.2",
            "--grace", "2",
            *flags,
        ]  # fmt: skip
        with self.log.open("ab") as err:
            self.proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=err, stderr=err, env=env()
            )

    def text(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def wait_serving(self) -> None:
        def ready() -> bool | None:
            if self.proc.poll() is not None:
                raise AssertionError(f"supervisor exited {self.proc.returncode}: {self.text()}")
            return True if self.port_file.exists() and self.port_file.read_text() else None

        wait_for("every worker serving (port file)", ready)

    def exit_code(self, timeout: float = 60.0) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"supervisor still running: {self.text()}") from None

    def close(self) -> None:
        if self.proc.poll() is None:  # SIGKILL: its children die with it (PDEATHSIG)
            self.proc.kill()
            self.proc.wait(timeout=30)


@pytest.fixture
def supervisor(tmp_path: Path) -> Iterator[Supervisor]:
    sup = Supervisor(tmp_path, 2, free_port_run(2))
    try:
        sup.wait_serving()
        yield sup
    finally:
        sup.close()


# --------------------------------------------------------------------------- tests


def test_two_workers_serve_restart_and_stop_cleanly(supervisor: Supervisor) -> None:
    """Both ports serve; a worker killed -9 comes back on its port; SIGTERM stops all, exit 0."""
    sup = supervisor
    p0, p1 = sup.port, sup.port + 1
    assert sup.port_file.read_text() == str(p0)  # --port-file: the first port
    assert health(p0) == "SERVING"
    assert health(p1) == "SERVING"
    kids = wait_for("two workers and the Redis", lambda: all_children(sup))
    assert set(kids) == {"redis", f"port:{p0}", f"port:{p1}"}

    from mtawindows.client import WindowClient

    for port in (p0, p1):  # the WindowService answers on both
        with WindowClient(f"127.0.0.1:{port}") as c:
            assert isinstance(c.list_streams(), list)

    # kill -9 worker 1: the supervisor starts another on the same port
    old = kids[f"port:{p1}"]
    os.kill(old, signal.SIGKILL)

    def restarted() -> int | None:
        pid = children(sup.proc.pid).get(f"port:{p1}")
        return pid if pid != old else None

    new = wait_for("worker 1 restarted", restarted)
    wait_for("worker 1 serving again", lambda: True if health(p1) == "SERVING" else None)
    assert health(p0) == "SERVING"
    assert kids[f"port:{p0}"] == children(sup.proc.pid)[f"port:{p0}"]  # the other one untouched

    # SIGTERM: every worker stops, then the Redis; exit 0 and no process left behind
    everyone = {new, kids[f"port:{p0}"], kids["redis"]}
    sup.proc.send_signal(signal.SIGTERM)
    assert sup.exit_code() == 0, sup.text()
    wait_for(
        "no orphans", lambda: True if not any(alive(p) for p in everyone) else None, timeout=30
    )
    log = sup.text()
    assert f"port {p1})" in log and "exited: killed by SIGKILL" in log  # the start/exit log
    assert "supervisor stopped" in log


def test_workers_die_with_a_killed_supervisor(supervisor: Supervisor) -> None:
    """kill -9 of the supervisor: its workers and its Redis die too (PR_SET_PDEATHSIG)."""
    sup = supervisor
    kids = wait_for("two workers and the Redis", lambda: all_children(sup))
    sup.proc.kill()
    sup.proc.wait(timeout=30)
    wait_for(
        "no orphans",
        lambda: True if not any(alive(p) for p in kids.values()) else None,
        timeout=30,
    )


def test_a_dead_embedded_redis_is_restarted_and_so_are_the_workers(
    supervisor: Supervisor,
) -> None:
    """kill -9 of the supervisor's Redis: it comes back on the same data, and every worker is
    started again (each reloads its streams from what the AOF kept) and serves."""
    sup = supervisor
    kids = wait_for("two workers and the Redis", lambda: all_children(sup))
    os.kill(kids["redis"], signal.SIGKILL)

    def all_new() -> dict[str, int] | None:
        now = all_children(sup)
        if now is None or any(now[k] == kids[k] for k in kids):
            return None
        return now

    wait_for("a new Redis and new workers", all_new)
    for port in (sup.port, sup.port + 1):
        wait_for(f"port {port} serving", lambda p=port: True if health(p) == "SERVING" else None)
    assert "embedded Redis restarted" in sup.text()
    sup.proc.send_signal(signal.SIGTERM)
    assert sup.exit_code() == 0, sup.text()


def test_workers_need_a_fixed_port(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "mtawindows.server", "--workers", "2", "--port", "0",
         "--data-dir", str(tmp_path / "data")],
        capture_output=True, text=True, timeout=60, env=env(), check=False,
    )  # fmt: skip
    assert r.returncode == 1
    assert "--workers 2 needs a fixed --port" in r.stderr
    assert not (tmp_path / "data").exists()  # nothing was started


def test_a_worker_that_cannot_start_stops_the_supervisor(tmp_path: Path) -> None:
    """Port P+1 is taken: worker 1 exits before it ever served, so the supervisor stops worker
    0 and its Redis and exits 1 (no endless restarts of a misconfigured node)."""
    first = free_port_run(2)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", first + 1))
        taken.listen()
        sup = Supervisor(tmp_path, 2, first)
        try:
            assert sup.exit_code(timeout=START) == 1, sup.text()
        finally:
            sup.close()
    assert "exited before it served" in sup.text()
    assert not sup.port_file.exists()


def test_child_argv_passes_every_flag_through() -> None:
    """The workers' command lines: the supervisor's flags, per-worker port, advertise, Redis,
    port file and metrics port; they parse with the server's own parser."""
    parser = build_parser()
    args = parser.parse_args(
        ["--workers", "3", "--host", "0.0.0.0", "--port", "7000", "--reuse-port",
         "--metrics-port", "9100", "--lease-ms", "1500", "--grace", "4", "--max-streams", "9",
         "--log-format", "text", "--port-file", "p", "--data-dir", "d"]
    )  # fmt: skip
    host, first = advertise_base(args)
    assert (host, first) == (socket.gethostname(), 7000)  # 0.0.0.0: this machine's name
    argv = child_argv(
        parser,
        args,
        port=7002,
        advertise=f"{host}:7002",
        redis_url="unix:///x/redis.sock",
        port_file="/t/worker-2.port",
        metrics_port=9102,
    )
    assert argv[:3] == [sys.executable, "-m", "mtawindows.server"]
    child = parser.parse_args(argv[3:])
    assert child.workers == 1
    assert (child.port, child.advertise, child.metrics_port) == (7002, f"{host}:7002", 9102)
    assert (child.redis_url, child.port_file) == ("unix:///x/redis.sock", "/t/worker-2.port")
    assert child.data_dir is None
    same = set(vars(args)) - {
        "workers", "port", "advertise", "metrics_port", "redis_url", "port_file", "data_dir"
    }  # fmt: skip
    assert {k: getattr(child, k) for k in same} == {k: getattr(args, k) for k in same}
    # a --x / --no-x flag goes through either way (the default and its opposite)
    for given, want in (([], True), (["--no-columnar-state"], False), (["--columnar-state"], True)):
        a = parser.parse_args(["--workers", "2", "--port", "7000", *given])
        kw = {"redis_url": "unix:///x", "port_file": "/t/p", "metrics_port": 9}
        got = parser.parse_args(child_argv(parser, a, port=7001, advertise="h:7001", **kw)[3:])
        assert (a.columnar_state, got.columnar_state) == (want, want), given

    # --advertise names the host (and the first worker's port) the workers are reached at
    args = parser.parse_args(["--workers", "2", "--port", "7000", "--advertise", "node7:8000"])
    assert advertise_base(args) == ("node7", 8000)
    args = parser.parse_args(["--workers", "2", "--port", "7000", "--advertise", "node7"])
    assert advertise_base(args) == ("node7", 7000)
    args = parser.parse_args(["--workers", "2", "--host", "::1", "--port", "7000"])
    assert advertise_base(args) == ("::1", 7000)
