"""Supervision of ``mtawindows serve`` and its embedded Redis, with real processes.

- kill -9 of the server at different moments (serving, appending, starting, restarting its
  Redis): no valkey of its data dir survives (by pid and by the socket), and the next server
  on that dir starts and has every acknowledged batch of a durable window;
- kill -9 of the embedded valkey alone: NOT_SERVING, calls refused as UNAVAILABLE with reason
  STORE_UNAVAILABLE, then the server restarts it on the same AOF and is SERVING again with the
  durable window's acknowledged data; past its restart limit it stays NOT_SERVING;
- a Redis the server does not own (``--redis-url``) dying: UNAVAILABLE, never INTERNAL;
- an orphaned valkey on the data dir is shut down at start-up;
- one server per data dir, one server per port (unless ``--reuse-port``).

The Redis is kept down as long as a test needs by breaking its AOF manifest before killing
it (valkey then refuses to start), and repaired to let the restart succeed.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import redis

from mtawindows.client import (
    Aggregation,
    Field,
    Policy,
    Storage,
    StreamSpec,
    WindowClient,
    WindowResult,
    WindowSpec,
)
from mtawindows.client.errors import MtaWindowsError
from mtawindows.server.storage.embedded import server_binary
from mtawindows.testing import LocalServer, mtawindows_command
from tests.support.waiting import rpc_error, wait_until

pytestmark = [
    pytest.mark.skipif(
        not sys.platform.startswith("linux"), reason="reads /proc to find the valkey processes"
    ),
    pytest.mark.slow,
    pytest.mark.server,
    pytest.mark.redis,
]

ROWS = 20  # rows per batch, each x = 1.0: a window's count and sum tell how many batches it has
AGGS = (Aggregation("n", "count"), Aggregation("s", "sum", "x"))


# --------------------------------------------------------------------------- helpers


def redis_dir(srv: LocalServer) -> Path:
    return srv.data_dir / "data" / "redis"


def valkeys_of(data_dir: Path) -> set[int]:
    """Live (not zombie) valkey processes whose command line names the embedded Redis socket
    of the server data dir ``data_dir`` (valkey shows it in its process title), plus any
    process still starting one (the few lines of Python that exec it)."""
    sock = str(data_dir / "data" / "redis" / "redis.sock")
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            state = (entry / "stat").read_text().rpartition(")")[2].split()[0]
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            exe = Path(os.readlink(entry / "exe")).name
        except (OSError, IndexError):
            continue
        if state != "Z" and sock in cmd and ("valkey" in exe or "valkey-server" in cmd):
            found.add(int(entry.name))
    return found


def socket_answers(data_dir: Path) -> bool:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(2)
        try:
            s.connect(str(data_dir / "data" / "redis" / "redis.sock"))
        except OSError:
            return False
    return True


def assert_no_valkey_survives(data_dir: Path) -> None:
    wait_until(lambda: not valkeys_of(data_dir), f"every valkey of {data_dir} gone", timeout=15)
    # a valkey that outlived the server answers on its socket forever; a loaded machine may
    # still be tearing the last one's listener down as its process leaves the process table
    wait_until(lambda: not socket_answers(data_dir), f"no valkey answers in {data_dir}", timeout=5)


def recorded_pid(srv: LocalServer) -> int | None:
    """The pid in the embedded Redis's pid file (None while there is none)."""
    try:
        return int((redis_dir(srv) / "redis.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def log_events(srv: LocalServer) -> list[dict[str, Any]]:
    out = []
    for line in srv.log.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out


def has_event(srv: LocalServer, name: str) -> dict[str, Any] | None:
    return next((e for e in log_events(srv) if e.get("event") == name), None)


def make_windows(c: WindowClient, stream: str = "m") -> None:
    c.create_stream(StreamSpec(stream, (Field("x"),), wall_clock=False))
    c.create_window(
        WindowSpec(stream, "durable", AGGS, Policy.count(10**9), storage=Storage(durable=True))
    )
    c.create_window(WindowSpec(stream, "tiered", AGGS, Policy.count(10**9)))


def batch(seq: int) -> dict[str, list[Any]]:
    return {"ts": [seq * ROWS + i for i in range(ROWS)], "x": [1.0] * ROWS}


def break_manifest(srv: LocalServer) -> tuple[Path, bytes]:
    """Garbage in the AOF manifest (valkey reads it only at start): restarts now fail."""
    manifest = next((redis_dir(srv) / "appendonlydir").glob("*.manifest"))
    good = manifest.read_bytes()
    manifest.write_bytes(b"this is not a manifest\n")
    return manifest, good


def kill_valkey(srv: LocalServer) -> int:
    pid = recorded_pid(srv)
    assert pid is not None and pid in valkeys_of(srv.data_dir)
    os.kill(pid, signal.SIGKILL)
    return pid


# --------------------------------------------------------------------------- kill -9 of the server


def test_kill_9_of_the_server_at_any_moment_leaves_no_valkey(tmp_path: Path) -> None:
    """Five kills on one data dir: serving, appending, starting, restarting its Redis, and
    serving again. After each, no valkey of the dir lives; each next server starts (the lock
    went with the dead one) and the durable window has every acknowledged batch."""
    srv = LocalServer(tmp_path / "srv")
    acked = 0  # batches acknowledged so far (sequence numbers 1..acked)

    def kill_server() -> None:
        assert srv.proc is not None
        srv.stop(signal.SIGKILL)
        assert_no_valkey_survives(srv.data_dir)

    def check_durable(c: WindowClient) -> None:
        # an append in flight at the kill may have landed: one batch more, never one less
        got = c.query("m", "durable")
        assert acked * ROWS <= got.values["n"] <= (acked + 1) * ROWS
        assert got.values["s"] == got.values["n"]
        if acked:
            again = c.append("m", batch(acked), producer_id="p", sequence=acked)
            assert again.duplicate

    # 1. serving
    srv.start()
    with WindowClient(srv.target) as c:
        make_windows(c)
        for seq in range(1, 4):
            c.append("m", batch(seq), producer_id="p", sequence=seq)
            acked = seq
    kill_server()

    # 2. appending: a feeder appends until the server dies under it
    srv.start()
    with WindowClient(srv.target, retries=1) as c:
        check_durable(c)
        if c.query("m", "durable").values["n"] > acked * ROWS:
            acked += 1  # the batch in flight at the last kill did land: it counts
        progress = threading.Event()
        state = {"acked": acked}

        def feed() -> None:
            seq = state["acked"]
            try:
                while True:
                    seq += 1
                    c.append("m", batch(seq), producer_id="p", sequence=seq)
                    state["acked"] = seq
                    if seq - acked >= 5:
                        progress.set()
            except MtaWindowsError:
                progress.set()

        feeder = threading.Thread(target=feed)
        feeder.start()
        assert progress.wait(60)
        kill_server()
        feeder.join(60)
        assert not feeder.is_alive()
        acked = state["acked"]

    # 3. starting: killed once its Redis was spawned, before it serves
    srv.start()
    with WindowClient(srv.target) as c:
        check_durable(c)
        if c.query("m", "durable").values["n"] > acked * ROWS:
            acked += 1
    srv.stop()
    pid_file = redis_dir(srv) / "redis.pid"
    assert not pid_file.exists()  # a clean stop removes it
    proc = subprocess.Popen(
        [*mtawindows_command(), "serve", "--port", "0", "--data-dir", str(srv.data_dir / "data")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=srv.env,
    )
    try:
        wait_until(pid_file.exists, "the starting server spawned its Redis")
    finally:
        proc.kill()
        proc.wait(30)
    assert_no_valkey_survives(srv.data_dir)

    # 4. restarting its Redis: killed while the supervisor brings a new one up
    srv.start()
    first = recorded_pid(srv)
    kill_valkey(srv)
    wait_until(lambda: recorded_pid(srv) not in (None, first), "a restart spawned")
    kill_server()

    # 5. serving again, then the data
    srv.start()
    try:
        with WindowClient(srv.target) as c:
            check_durable(c)
            if c.query("m", "durable").values["n"] > acked * ROWS:
                acked += 1
            c.append("m", batch(acked + 1), producer_id="p", sequence=acked + 1)
            assert c.query("m", "durable").values["n"] == (acked + 1) * ROWS
    finally:
        kill_server()


# --------------------------------------------------------------------------- Redis dies alone


def test_redis_killed_alone_is_restarted_and_the_windows_come_back(tmp_path: Path) -> None:
    """kill -9 of the valkey (kept down by a broken manifest): NOT_SERVING, every call that
    needs the store is UNAVAILABLE / STORE_UNAVAILABLE; repaired: the server restarts it on
    the same AOF, SERVING, the durable window has every acknowledged batch, appends go on."""
    srv = LocalServer(tmp_path / "srv", "--redis-restarts", "1000").start()
    try:
        with WindowClient(srv.target, retries=1) as c:
            make_windows(c)
            for seq in range(1, 6):
                c.append("m", batch(seq), producer_id="p", sequence=seq)
            acked = c.query("m", "durable")
            assert acked.values == {"n": 5 * ROWS, "s": 5.0 * ROWS}
            manifest, good = break_manifest(srv)
            dead = kill_valkey(srv)
            wait_until(lambda: srv.health() == "NOT_SERVING", "health NOT_SERVING")
            assert srv.health("mtawindows.v1.WindowService") == "NOT_SERVING"
            event = wait_until(lambda: has_event(srv, "store_down"), "store_down logged")
            assert str(dead) in event["reason"]
            refusals = [
                rpc_error(lambda: c.append("m", batch(6), producer_id="p", sequence=6)),
                rpc_error(lambda: c.query("m", "durable")),
                rpc_error(lambda: c.query("m", "tiered")),
                rpc_error(
                    lambda: c.create_stream(StreamSpec("other", (Field("x"),), wall_clock=False))
                ),
            ]
            assert [(e.code, e.reason) for e in refusals] == [
                ("UNAVAILABLE", "STORE_UNAVAILABLE")
            ] * 4
            assert [s.spec.name for s in c.list_streams()] == ["m"]  # definitions: from memory
            wait_until(
                lambda: has_event(srv, "store_restart_failed"), "a failed restart", timeout=60
            )
            assert srv.health() == "NOT_SERVING"
            manifest.write_bytes(good)
            wait_until(lambda: srv.health() == "SERVING", "SERVING again", timeout=60)
            assert srv.health("mtawindows.v1.WindowService") == "SERVING"
            assert has_event(srv, "store_restarted")
            assert dead not in valkeys_of(srv.data_dir)
            assert len(valkeys_of(srv.data_dir)) == 1
            got = c.query("m", "durable")
            assert (got.values, got.size) == (acked.values, acked.size)
            assert c.append("m", batch(5), producer_id="p", sequence=5).duplicate
            c.append("m", batch(6), producer_id="p", sequence=6)
            assert c.query("m", "durable").values == {"n": 6 * ROWS, "s": 6.0 * ROWS}
            tiered = c.query("m", "tiered")  # reloaded: whatever its last checkpoint held
            assert tiered.values["n"] == tiered.values["s"]
            c.create_stream(StreamSpec("other", (Field("x"),), wall_clock=False))
        assert srv.stop() == 0
        srv.start()  # everything acknowledged survived the restarts
        with WindowClient(srv.target) as c:
            assert c.query("m", "durable").values == {"n": 6 * ROWS, "s": 6.0 * ROWS}
            assert {s.spec.name for s in c.list_streams()} == {"m", "other"}
    finally:
        srv.stop()
    assert_no_valkey_survives(srv.data_dir)


@pytest.mark.parametrize("durable", [True, False])
def test_redis_killed_alone_comes_back_for_a_keyed_stream(tmp_path: Path, durable: bool) -> None:
    """The same with a keyed stream on the server (an outsider's finding: its windows have no
    engine of their own, and the restart's reload of every window failed on them, leaving the
    server NOT_SERVING for good): kill -9 of the valkey, twice; each time the server restarts
    it, serves again, and every key of a durable window holds every acknowledged row (a
    window that is not durable holds at most them, and each key's count and sum agree)."""
    srv = LocalServer(tmp_path / "srv", "--redis-restarts", "1000").start()
    keys = [f"h{i}" for i in range(30)]
    try:
        with WindowClient(srv.target, retries=1) as c:
            c.create_stream(
                StreamSpec("k", (Field("h", "STRING"), Field("x")), key="h", wall_clock=False)
            )
            c.create_window(
                WindowSpec("k", "w", AGGS, Policy.count(10**9), storage=Storage(durable=durable))
            )
            sent = 0
            for rnd in range(2):
                for _ in range(3):
                    sent += 1
                    c.append("k", {"ts": [sent] * len(keys), "h": keys, "x": [1.0] * len(keys)})
                dead = kill_valkey(srv)
                wait_until(lambda r=rnd: _restarts(srv) == r + 1, "store_restarted", timeout=60)
                wait_until(lambda: srv.health() == "SERVING", "SERVING again", timeout=60)
                assert dead not in valkeys_of(srv.data_dir)
                for k in keys:
                    # (not durable: a key whose state no flush saved before the kill is gone,
                    # as its rows are: it holds at most what was acknowledged)
                    got = wait_until(
                        lambda k=k: _query_ok(c, k, gone_ok=not durable),
                        f"key {k} answers",
                        timeout=30,
                    )
                    assert got.values["n"] == got.values["s"], (rnd, k, got)
                    if durable:
                        assert got.values["n"] == sent, (rnd, k, got)
                    else:
                        assert got.values["n"] <= sent, (rnd, k, got)
            before = _query_ok(c, "h0", gone_ok=not durable).values["n"]
            sent += 1
            c.append("k", {"ts": [sent] * len(keys), "h": keys, "x": [1.0] * len(keys)})
            assert c.query("k", "w", key="h0").values["n"] == before + 1
    finally:
        srv.stop()
    assert_no_valkey_survives(srv.data_dir)


def _restarts(srv: LocalServer) -> int:
    return sum(e.get("event") == "store_restarted" for e in log_events(srv))


def _query_ok(c: WindowClient, key: str, gone_ok: bool = False) -> Any:
    """The key's result once the server answers; with ``gone_ok`` a key it no longer has
    (KEY_NOT_FOUND) as an empty result."""
    try:
        return c.query("k", "w", key=key)
    except MtaWindowsError as ex:
        if gone_ok and ex.reason == "KEY_NOT_FOUND":
            return WindowResult(window="w", values={"n": 0, "s": 0.0}, size=0)
        return None


def test_a_redis_that_cannot_restart_leaves_the_server_not_serving(tmp_path: Path) -> None:
    srv = LocalServer(tmp_path / "srv", "--redis-restarts", "2").start()
    try:
        with WindowClient(srv.target, retries=1) as c:
            make_windows(c)
            c.append("m", batch(1), producer_id="p", sequence=1)
            break_manifest(srv)
            kill_valkey(srv)
            event = wait_until(
                lambda: has_event(srv, "store_given_up"), "the server gave up", timeout=60
            )
            assert event["reason"]
            failures = [e for e in log_events(srv) if e.get("event") == "store_restart_failed"]
            assert len(failures) == 2
            assert srv.health() == "NOT_SERVING"
            assert not valkeys_of(srv.data_dir)
            for call in (
                lambda: c.query("m", "durable"),
                lambda: c.append("m", batch(2), producer_id="p", sequence=2),
            ):
                e = rpc_error(call)
                assert (e.code, e.reason) == ("UNAVAILABLE", "STORE_UNAVAILABLE")
        assert srv.stop() == 0  # still stops cleanly
    finally:
        srv.stop()
    assert_no_valkey_survives(srv.data_dir)


def test_an_external_redis_dying_gives_unavailable_never_internal(tmp_path: Path) -> None:
    """With ``--redis-url`` the server does not own the Redis: no supervisor, but a store that
    fails is UNAVAILABLE (Query of a window that must reload included), and the windows
    reload once it is back."""
    from mtawindows.server.storage.embedded import EmbeddedRedis

    ext = EmbeddedRedis(tmp_path / "external").start()
    srv = LocalServer(tmp_path / "srv", "--redis-url", ext.url).start()
    try:
        with WindowClient(srv.target, retries=1) as c:
            make_windows(c)
            for seq in range(1, 4):
                c.append("m", batch(seq), producer_id="p", sequence=seq)
            acked = c.query("m", "durable")
            ext.kill()
            for call in (
                lambda: c.append("m", batch(4), producer_id="p", sequence=4),
                lambda: c.query("m", "durable"),  # its window must reload: it cannot
                lambda: c.create_stream(StreamSpec("other", (Field("x"),), wall_clock=False)),
            ):
                e = rpc_error(call)
                assert (e.code, e.reason) == ("UNAVAILABLE", "STORE_UNAVAILABLE")
            ext.start()
            got = c.query("m", "durable")
            assert (got.values, got.size) == (acked.values, acked.size)
            c.append("m", batch(4), producer_id="p", sequence=4)
            assert c.query("m", "durable").values == {"n": 4 * ROWS, "s": 4.0 * ROWS}
    finally:
        srv.stop()
        ext.stop()


# --------------------------------------------------------------------------- orphans


@pytest.mark.parametrize("orphan", ["answering", "hung"])
def test_an_orphaned_valkey_on_the_data_dir_is_stopped_at_start_up(
    tmp_path: Path, orphan: str
) -> None:
    """A valkey left on the data dir by a server that died where the death signal does not
    exist: the next server shuts it down (SHUTDOWN if it answers, SIGKILL if it is hung,
    found by its recorded pid) and starts its own on the same AOF."""
    srv = LocalServer(tmp_path / "srv")
    rdir = redis_dir(srv)
    rdir.mkdir(parents=True)
    sock = rdir / "redis.sock"
    cmd = [server_binary(), "--port", "0", "--unixsocket", str(sock), "--dir", str(rdir)]
    cmd += ["--appendonly", "yes", "--save", "", "--logfile", str(rdir / "orphan.log")]
    stale = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        client = redis.Redis(unix_socket_path=str(sock), socket_timeout=5)
        wait_until(lambda: sock.exists() and _pings(client), "the orphan answers")
        client.set("written-before", "1")
        client.close()
        if orphan == "hung":
            (rdir / "redis.pid").write_text(f"{stale.pid}\n")
            os.kill(stale.pid, signal.SIGSTOP)
        assert valkeys_of(srv.data_dir) == {stale.pid}
        srv.start()
        try:
            stale.wait(30)  # ended by the server, not by this test
            assert stale.pid not in valkeys_of(srv.data_dir)
            assert len(valkeys_of(srv.data_dir)) == 1
            assert has_event(srv, "orphan_reaped")
            assert srv.health() == "SERVING"
            mine = redis.Redis(unix_socket_path=str(sock), socket_timeout=5)
            assert mine.get("written-before") == b"1"  # same AOF
            mine.close()
        finally:
            srv.stop()
        assert_no_valkey_survives(srv.data_dir)
    finally:
        if stale.poll() is None:
            stale.kill()
            stale.wait()


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False


# --------------------------------------------------------------------------- one server per ...


def run_serve(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``mtawindows serve`` expected to fail at start-up (bounded)."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MTAWINDOWS_")}
    return subprocess.run(
        [*mtawindows_command(), "serve", "--host", "127.0.0.1", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**environ, **(env or {})},
    )


def test_a_second_server_on_the_same_data_dir_stops_at_start_up(tmp_path: Path) -> None:
    srv = LocalServer(tmp_path / "srv").start()
    try:
        valkey = valkeys_of(srv.data_dir)
        assert len(valkey) == 1
        data = srv.data_dir / "data"
        second = run_serve("--port", "0", "--data-dir", str(data))
        assert second.returncode != 0
        assert str(data) in second.stderr
        assert f"pid {srv.pid}" in second.stderr
        assert "Traceback" not in second.stderr
        assert valkeys_of(srv.data_dir) == valkey  # the first one's, untouched
        assert srv.health() == "SERVING"
        with WindowClient(srv.target) as c:
            make_windows(c)
            c.append("m", batch(1))
    finally:
        srv.stop()
    assert_no_valkey_survives(srv.data_dir)


def test_a_second_server_on_a_taken_port_stops_at_start_up(tmp_path: Path) -> None:
    srv = LocalServer(tmp_path / "srv").start()
    try:
        other = tmp_path / "other"
        for flags in ([], ["--reuse-port"]):  # the first server did not opt in: never shared
            second = run_serve("--port", str(srv.port), "--data-dir", str(other / "data"), *flags)
            assert second.returncode != 0
            assert f"127.0.0.1:{srv.port}" in second.stderr
            assert "Traceback" not in second.stderr
            assert not valkeys_of(other)  # the port is bound before the Redis starts
        assert srv.health() == "SERVING"
    finally:
        srv.stop()


def test_reuse_port_is_opt_in_for_both_servers(tmp_path: Path) -> None:
    """``--reuse-port`` (or $MTAWINDOWS_REUSE_PORT) on both: the second server shares the
    port, as asked."""
    first = LocalServer(tmp_path / "a", "--reuse-port").start()
    second = LocalServer(tmp_path / "b", "--port", str(first.port))
    second.env["MTAWINDOWS_REUSE_PORT"] = "1"
    try:
        second.start()
        assert second.port == first.port
        assert second.health() == "SERVING"
    finally:
        second.stop()
        first.stop()


def test_a_relative_data_dir_works(tmp_path: Path) -> None:
    """`serve --data-dir reldata` from another working directory: valkey used to fail to open
    its files (it resolved the relative path against its own directory)."""
    from mtawindows.client.launch import start_server

    work = tmp_path / "cwd"
    work.mkdir()
    old = os.getcwd()
    os.chdir(work)
    try:
        proc, port = start_server(Path("rel"), program=mtawindows_command())
    finally:
        os.chdir(old)
    try:
        with WindowClient(f"127.0.0.1:{port}", timeout=30) as c:
            c.create_stream(StreamSpec("r", (Field("v", "DOUBLE"),), wall_clock=False))
            assert [s.spec.name for s in c.list_streams()] == ["r"]
        assert (work / "rel" / "data" / "redis").is_dir()
    finally:
        proc.terminate()
        assert proc.wait(30) == 0
