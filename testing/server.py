"""One ``mtawindows serve`` process on a loopback port, for tests: :class:`LocalServer`.

::

    from mtawindows.testing import LocalServer

    with LocalServer() as srv, srv.client() as c:   # a temporary data dir, its own Redis
        c.create_stream(...)
        srv.restart()                                # SIGTERM, then the same port and data
        srv.kill()                                   # SIGKILL (its embedded Redis dies with it)
        srv.start()

The server runs as the README says: ``mtawindows serve --host 127.0.0.1 --port 0 --port-file
<dir>/port --data-dir <dir>/data --flush-interval 0.2 <your flags>``, its stderr (the JSON log)
in ``<dir>/server.log``. :meth:`LocalServer.start` returns once the port file is written (every
service registered, SERVING). Without ``redis_url`` the server starts its own embedded Redis
(valkey) in ``<dir>/data/redis``; the data dir outlives :meth:`~LocalServer.stop`, so a
restarted server reloads what it had. A restart binds the port it had (same target, same
cluster member id). The environment is inherited except ``$MTAWINDOWS_REDIS_URL``.

Every process dies with the test: :meth:`~LocalServer.close` (the context manager's exit)
stops it (SIGTERM; SIGKILL after ``stop_timeout``) and removes a temporary data dir; on Linux
the kernel kills it if the test process dies (``PR_SET_PDEATHSIG``), and the embedded Redis
dies with the server the same way.

:class:`ServerFactory` starts several (``factory(*flags)``) under one folder and closes them
together: the ``mtawindows_server_factory`` fixture of :mod:`mtawindows.testing.pytest_plugin`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from mtawindows.client import WindowClient
from mtawindows.client.launch import server_argv, wait_for_port
from mtawindows.server.storage.processes import servers_naming

from ._children import end, launch

__all__ = ["LocalServer", "LocalServerError", "ServerFactory", "mtawindows_command"]


# the longest unix socket path the platform takes (sockaddr_un.sun_path, less its NUL)
_SOCKET_PATH_MAX = 107 if sys.platform.startswith("linux") else 103


class LocalServerError(RuntimeError):
    """A local server is not running where it has to be, or did not become SERVING in time."""


def mtawindows_command() -> list[str]:
    """The ``mtawindows`` command of this interpreter: the console script beside it, else
    ``python -m mtawindows.cli`` (the same program)."""
    script = Path(sys.executable).parent / "mtawindows"
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    return [sys.executable, "-m", "mtawindows.cli"]


class LocalServer:
    """``mtawindows serve`` on 127.0.0.1 with its data in ``data_dir`` (default: a temporary
    directory, removed by :meth:`close`), plus ``args`` (any ``serve`` flags, last on the
    command line). ``redis_url``: a Redis to use instead of the embedded one; ``port``: the
    port of the first start (0: a free one); ``env``: variables added to the inherited
    environment (which loses ``$MTAWINDOWS_REDIS_URL``; ``self.env`` may be changed before a
    start); ``flush_interval``: seconds
    between checkpoints (the server's default is 1; None leaves it). A context manager:
    started on enter, closed on exit. See the module docstring."""

    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None = None,
        *args: str,
        redis_url: str | None = None,
        port: int = 0,
        env: Mapping[str, str] | None = None,
        flush_interval: float | None = 0.2,
        start_timeout: float = 60.0,
        stop_timeout: float = 30.0,
    ) -> None:
        self.args = list(args)
        if redis_url is not None:
            self.args[:0] = ["--redis-url", redis_url]
        self.redis_url = redis_url
        # the inherited environment names no Redis: the server's own, unless told
        inherited = {k: v for k, v in os.environ.items() if k != "MTAWINDOWS_REDIS_URL"}
        self.env = {**inherited, **(env or {})}
        embedded = "--redis-url" not in self.args and "MTAWINDOWS_REDIS_URL" not in self.env
        if data_dir is not None:
            self.data_dir = Path(data_dir).absolute()
            socket = os.fsencode(self.data_dir / "data" / "redis" / "redis.sock")
            if embedded and len(socket) > _SOCKET_PATH_MAX:
                msg = (
                    f"LocalServer: data dir {str(self.data_dir)!r} is too long for the embedded "
                    f"Redis's unix socket (<data_dir>/data/redis/redis.sock: {len(socket)} "
                    f"bytes, at most {_SOCKET_PATH_MAX}): give a shorter one, or None for a "
                    "temporary one"
                )
                raise ValueError(msg)
            self.data_dir.mkdir(parents=True, exist_ok=True)
            self._cleanup: weakref.finalize[Any, Any] | None = None
        else:
            self.data_dir = Path(tempfile.mkdtemp(prefix="mtaw-server-"))
            self._cleanup = weakref.finalize(
                self, shutil.rmtree, str(self.data_dir), ignore_errors=True
            )
        self.flush_interval = flush_interval
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = port
        self.log = self.data_dir / "server.log"

    def __repr__(self) -> str:
        state = f"pid {self.proc.pid}" if self.running and self.proc else "stopped"
        return f"LocalServer({self.target}, {state}, data_dir={str(self.data_dir)!r})"

    # ------------------------------------------------------------------ where it is
    @property
    def target(self) -> str:
        """``127.0.0.1:<port>``: what a client dials (and the member id it advertises)."""
        return f"127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int:
        """The process id of the server (``LocalServerError`` when it was not started or was
        stopped since)."""
        if self.proc is None:
            msg = f"{self!r}: no process (not started, or stopped)"
            raise LocalServerError(msg)
        return self.proc.pid

    @property
    def redis_dir(self) -> Path:
        """The embedded Redis's directory (its AOF, socket, log and ``redis.pid``)."""
        return self.data_dir / "data" / "redis"

    @property
    def redis_pid(self) -> int | None:
        """The process id of the embedded Redis running on this data dir, if one is."""
        try:
            pid = int((self.redis_dir / "redis.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None
        return pid if servers_naming(str(self.redis_dir), [pid]) else None

    # ------------------------------------------------------------------ life cycle
    def start(self, timeout: float | None = None) -> LocalServer:
        """Start the server; return once it serves (``RuntimeError`` with the end of its log
        if it exits first, ``TimeoutError`` after ``timeout``, default ``start_timeout``).
        The first start binds ``port`` (0: a free one); the later ones the port it got."""
        self._launch()
        return self._await_port(timeout)

    def _launch(self) -> None:
        """The first half of :meth:`start`: the process is started (a cluster starts all its
        members, then waits for each)."""
        if self.running:
            msg = f"{self!r}: already running"
            raise LocalServerError(msg)
        (self.data_dir / "port").unlink(missing_ok=True)
        cmd = server_argv(
            self.data_dir,
            *self.args,
            program=mtawindows_command(),
            port=self.port,
            flush_interval=self.flush_interval,
        )
        self.proc = launch(cmd, stderr=self.log, env=self.env)

    def _await_port(self, timeout: float | None = None) -> LocalServer:
        """The second half of :meth:`start`: until the server wrote its port."""
        if self.proc is None:
            msg = f"{self!r}: not launched"
            raise LocalServerError(msg)
        try:
            self.port = wait_for_port(
                self.proc, self.data_dir, self.start_timeout if timeout is None else timeout
            )
        except BaseException:
            end(self.proc, signal.SIGKILL)
            raise
        return self

    def wait_serving(self, timeout: float = 60.0) -> None:
        """Until the health service says SERVING (after a restart of its Redis, say);
        ``LocalServerError`` with the end of the log after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self.health() == "SERVING":
                    return
            except grpc.RpcError:  # restarting
                pass
            if not self.running:
                msg = f"{self!r} is not running: {self._log_tail()}"
                raise LocalServerError(msg)
            if time.monotonic() > deadline:
                msg = f"{self!r} not SERVING within {timeout}s: {self._log_tail()}"
                raise LocalServerError(msg)
            time.sleep(0.1)

    def stop(self, sig: int = signal.SIGTERM, timeout: float | None = None) -> int:
        """Send ``sig`` (SIGTERM: it flushes, hands its streams over and exits) and wait, then
        SIGKILL after ``timeout`` (default ``stop_timeout``). Its exit status (0 after a
        graceful stop; negative: killed by that signal); 0 if it was not started. The data
        dir stays: :meth:`start` brings the server back on it."""
        proc, self.proc = self.proc, None
        if proc is None:
            return 0
        return end(proc, sig, self.stop_timeout if timeout is None else timeout)

    def kill(self) -> int:
        """SIGKILL the server (a crash); its embedded Redis dies with it (Linux)."""
        return self.stop(signal.SIGKILL)

    def kill_all(self) -> None:
        """SIGKILL the embedded Redis and the server together (the machine dying)."""
        rpid = self.redis_pid
        if rpid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(rpid, signal.SIGKILL)
        self.kill()

    def restart(self, sig: int = signal.SIGTERM, timeout: float | None = None) -> LocalServer:
        """:meth:`stop` with ``sig``, then :meth:`start` on the same port and data."""
        self.stop(sig)
        return self.start(timeout)

    def close(self) -> None:
        """:meth:`stop`, and remove the data dir if it is a temporary one of this server."""
        self.stop()
        if self._cleanup is not None:
            self._cleanup()

    def __enter__(self) -> LocalServer:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # ------------------------------------------------------------------ talking to it
    def client(self, **options: Any) -> WindowClient:
        """A :class:`~mtawindows.client.WindowClient` of this server (``options`` go to it);
        close it, or use it as a context manager."""
        return WindowClient(self.target, **options)

    def health(self, service: str = "", channel: grpc.Channel | None = None) -> str:
        """The gRPC health status of ``service`` ("" the server, or
        ``mtawindows.v1.WindowService``): ``SERVING``, ``NOT_SERVING``, ...; raises
        ``grpc.RpcError`` if the server does not answer."""
        own = channel is None
        ch = channel or grpc.insecure_channel(self.target)
        try:
            stub = health_pb2_grpc.HealthStub(ch)
            resp = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
            return str(health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status))
        finally:
            if own:
                ch.close()

    def _log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"


class ServerFactory:
    """Starts :class:`LocalServer` s, each in a temporary data dir (or in ``root/server-1``,
    ``root/server-2``, ...), and closes them all at :meth:`close` (a context manager too).
    ``factory(*flags, **options)`` takes what :class:`LocalServer` takes after its data dir
    and returns the server started."""

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        self.root = Path(root) if root is not None else None
        self.servers: list[LocalServer] = []

    def __call__(self, *args: str, **options: Any) -> LocalServer:
        data_dir = None if self.root is None else self.root / f"server-{len(self.servers) + 1}"
        srv = LocalServer(data_dir, *args, **options)
        self.servers.append(srv)
        return srv.start()

    def close(self) -> None:
        for srv in reversed(self.servers):
            srv.close()

    def __enter__(self) -> ServerFactory:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
