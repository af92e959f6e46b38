"""Every core of a node: ``mtawindows serve --workers N`` runs N server processes, each a member
of the cluster, under one supervisor (this module).

::

    mtawindows serve --workers 4 --host 0.0.0.0 --port 50051 --data-dir /var/lib/mtawindows

    supervisor (this process: no gRPC port)
      |-- embedded Redis on <data-dir>/redis (unix socket)   only without --redis-url
      |-- python -m mtawindows.server --port 50051 --advertise <host>:50051 --redis-url <url> ...
      |-- python -m mtawindows.server --port 50052 --advertise <host>:50052 --redis-url <url> ...
      '-- ... up to port 50051+N-1

**Children.** Worker ``i`` is ``python -m mtawindows.server`` with every flag of the supervisor
(rebuilt from the parsed arguments) except the ones it sets for each worker: ``--port P+i``,
``--advertise <host>:<A+i>`` (``<host>`` and ``A`` from ``--advertise`` when given, else the
bound ``--host``, or this machine's name when that is a wildcard address, and ``--port``),
``--metrics-port M+i`` when ``--metrics-port M`` is on, ``--redis-url`` (the one given, else
the supervisor's embedded Redis) and a port file of its own that says when it serves. Every
child dies with the supervisor, however the supervisor dies (``PR_SET_PDEATHSIG``, see
:mod:`.storage.processes`), and runs in its own session: a Ctrl-C reaches the supervisor only,
which stops the children itself.

**The embedded Redis** (no ``--redis-url``): the supervisor locks the data directory (the same
``lock`` file a single server takes, so a single server and a supervisor never share one) and
runs the Redis in ``<data-dir>/redis``, as a single server would: ``--workers 1`` and
``--workers N`` can take turns on one data directory. When that Redis dies, the supervisor
restarts it (at most ``--redis-restarts`` times per 5 minutes, with backoff, then it gives up
and exits 1) and then restarts every child, which reloads its streams from the durable state.

**Supervision.** A child that exits on its own is restarted on its port, after a backoff that
doubles from 0.5 s up to 10 s; past 5 restarts of one child within 300 seconds
(:class:`~.storage.processes.RestartBudget`) the supervisor logs why, stops the others and exits 1. A child
that exits before it ever served (a port taken, a bad flag) stops everything at once: exit 1.
``--port-file`` gets the first port once every child serves.

**Stop.** SIGTERM or SIGINT: SIGTERM to every child, each gets ``--grace`` seconds (and
:data:`STOP_MARGIN` more) to finish its calls and flush before SIGKILL, then the embedded Redis
stops (its AOF flushed); exit 0.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from .storage.datadir import DataDirLock
from .storage.embedded import EmbeddedRedis, EmbeddedRedisError
from .storage.processes import RestartBudget, describe_exit, dying_with_parent, spawn
from .transport.app import SUPERVISED_ENV, default_data_dir, ready_banner

__all__ = [
    "STOP_MARGIN",
    "Supervisor",
    "advertise_base",
    "child_argv",
    "run_workers",
]

log = logging.getLogger("mtawindows.server")

STOP_MARGIN = 15.0  # seconds past --grace a stopping child gets before SIGKILL
POLL = 0.1  # seconds between looks at the children

# set for each child by the supervisor, never passed through
_PER_CHILD = frozenset(
    {"help", "workers", "port", "port_file", "advertise", "metrics_port", "redis_url", "data_dir"}
)
_WILDCARDS = frozenset({"", "0.0.0.0", "::", "[::]"})


def _split_host_port(address: str) -> tuple[str, int | None]:
    """``"host"``, ``"host:port"``, ``"[v6]:port"`` or ``"v6"`` as (host, port or None)."""
    if address.startswith("["):
        host, _, rest = address[1:].partition("]")
        if rest.startswith(":") and rest[1:].isdigit():
            return host, int(rest[1:])
        return host, None
    host, sep, port = address.rpartition(":")
    if sep and ":" not in host and port.isdigit():
        return host, int(port)
    return address, None


def _join_host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def advertise_base(args: argparse.Namespace) -> tuple[str, int]:
    """The host and first port the workers advertise: ``--advertise`` (its port, if it has one,
    is the first worker's), else ``--host`` (this machine's name for a wildcard) and
    ``--port``."""
    if args.advertise:
        host, port = _split_host_port(args.advertise.strip())
        if not host:
            msg = f"--advertise: expected host or host:port, got {args.advertise!r}"
            raise ValueError(msg)
        return host, args.port if port is None else port
    host = args.host or ""
    return (socket.gethostname() if host in _WILDCARDS else host), args.port


def child_argv(
    parser: argparse.ArgumentParser,
    args: argparse.Namespace,
    *,
    port: int,
    advertise: str,
    redis_url: str,
    port_file: str,
    metrics_port: int,
) -> list[str]:
    """``python -m mtawindows.server`` with the flags of ``args`` (those of ``parser``, the
    server's, that have a value) and the ones of one worker."""
    flags: list[str] = []
    for action in parser._actions:
        if not action.option_strings or action.dest in _PER_CHILD:
            continue
        value = getattr(args, action.dest, None)
        if isinstance(action, argparse.BooleanOptionalAction):  # --x / --no-x: say which
            yes, no = sorted(action.option_strings, key=len)
            flags.append(yes if value else no)
            continue
        flag = max(action.option_strings, key=len)
        if action.nargs == 0:  # store_true
            if value:
                flags.append(flag)
        elif value is not None:
            flags += [flag, str(value)]
    flags += [
        "--workers", "1",
        "--port", str(port),
        "--advertise", advertise,
        "--redis-url", redis_url,
        "--port-file", port_file,
        "--metrics-port", str(metrics_port),
    ]  # fmt: skip
    return [sys.executable, "-m", "mtawindows.server", *flags]


@dataclass
class _Worker:
    index: int
    port: int
    advertise: str
    metrics_port: int
    port_file: Path
    proc: subprocess.Popen[bytes] | None = None
    served: bool = False  # some process of this worker has served
    ready: bool = False  # the current process serves (wrote its port file)
    recycle: bool = False  # stopped on purpose (the store restarted): start again at once
    next_start: float | None = None  # monotonic time of a pending (re)start
    restarts: RestartBudget = field(default_factory=RestartBudget)

    def name(self) -> str:
        pid = self.proc.pid if self.proc is not None else None
        return f"worker {self.index} (pid {pid}, port {self.port})"

    def info(self) -> dict[str, object]:
        pid = self.proc.pid if self.proc is not None else None
        return {"worker": self.index, "pid": pid, "port": self.port, "advertise": self.advertise}


class _GiveUp(Exception):
    """The supervisor stops everything and exits 1 (already logged)."""


class Supervisor:
    """N workers of one node and, without ``--redis-url``, the embedded Redis they share."""

    def __init__(self, args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
        n = args.workers
        if n < 1:
            msg = f"--workers must be >= 1, got {n}"
            raise ValueError(msg)
        if not args.port:
            msg = (
                f"--workers {n} needs a fixed --port > 0 (the workers listen on port.."
                f"port+{n - 1}), got {args.port}"
            )
            raise ValueError(msg)
        if args.port + n - 1 > 65535:
            msg = f"--workers {n} from --port {args.port} goes past port 65535"
            raise ValueError(msg)
        host, first = advertise_base(args)
        if not 0 < first <= 65535 - (n - 1):
            msg = f"--workers {n}: the advertised ports {first}..{first + n - 1} are not ports"
            raise ValueError(msg)
        self.args = args
        self.parser = parser
        self.embedded: EmbeddedRedis | None = None
        self.lock: DataDirLock | None = None
        self.redis_url: str = args.redis_url or ""
        self.tmp = Path(tempfile.mkdtemp(prefix="mtaw-workers-"))
        self.workers = [
            _Worker(
                index=i,
                port=args.port + i,
                advertise=_join_host_port(host, first + i),
                metrics_port=args.metrics_port + i if args.metrics_port else 0,
                port_file=self.tmp / f"worker-{i}.port",
            )
            for i in range(n)
        ]
        self._signal: int | None = None
        self._wake = threading.Event()
        self._announced = False
        self._store_restarts = RestartBudget(self.args.redis_restarts)

    # -- the whole life
    def run(self) -> int:
        """Start the store and the workers, supervise them until SIGTERM/SIGINT (0) or until
        one cannot be kept running (1); everything is stopped either way."""
        previous = {
            sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)
        }
        try:
            self._start_store()
            for w in self.workers:
                w.next_start = time.monotonic()
            return self._loop()
        except _GiveUp:
            return 1
        finally:
            self._stop_all()
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signal = signum
        self._wake.set()

    def _loop(self) -> int:
        while self._signal is None:
            self._check_store()
            for w in self.workers:
                self._check(w)
            if not self._announced and all(w.ready for w in self.workers):
                self._announce()
            self._wake.wait(POLL)
        log.info(
            f"supervisor stopping ({signal.Signals(self._signal).name})",
            extra={"event": "workers_stopping", "signal": signal.Signals(self._signal).name},
        )
        return 0

    # -- the embedded Redis
    def _start_store(self) -> None:
        if self.redis_url:
            return
        args = self.args
        # absolute: valkey runs with its own working directory
        data = (Path(args.data_dir) if args.data_dir else default_data_dir()).absolute()
        self.lock = DataDirLock(data, owner="mtawindows server").acquire()
        self.embedded = EmbeddedRedis(data / "redis")
        self.embedded.start()
        self.redis_url = self.embedded.url
        log.info(
            f"embedded Redis started (pid {self.embedded.pid})",
            extra={"event": "store_started", "pid": self.embedded.pid, "redis": self.redis_url},
        )

    def _check_store(self) -> None:
        """A dead embedded Redis: restart it (bounded), then every worker."""
        emb = self.embedded
        if emb is None or emb.running:
            return
        why = f"the embedded Redis (pid {emb.pid}) {emb.exit_reason()}"
        log.error("embedded Redis down", extra={"event": "store_down", "reason": why})
        while self._signal is None:
            if not self._store_restarts.take():
                log.error(
                    "embedded Redis not restarted: the supervisor stops",
                    extra={"event": "store_given_up", "reason": self._store_restarts.spent(why)},
                )
                raise _GiveUp
            try:
                emb.start()
                break
            except (EmbeddedRedisError, OSError) as ex:
                why = f"restart {len(self._store_restarts)} failed: {ex}"
                log.error(
                    "embedded Redis restart failed",
                    extra={"event": "store_restart_failed", "reason": why},
                )
            self._wake.wait(self._store_restarts.backoff())
        if self._signal is not None:
            return
        log.warning(
            "embedded Redis restarted: restarting the workers",
            extra={"event": "store_restarted", "pid": emb.pid},
        )
        for w in self.workers:  # each reloads its streams from what the AOF kept
            if w.proc is not None and w.proc.poll() is None:
                w.recycle = True
                w.proc.terminate()

    # -- the workers
    def _start(self, w: _Worker) -> None:
        w.port_file.unlink(missing_ok=True)
        argv = child_argv(
            self.parser,
            self.args,
            port=w.port,
            advertise=w.advertise,
            redis_url=self.redis_url,
            port_file=str(w.port_file),
            metrics_port=w.metrics_port,
        )
        cmd = dying_with_parent(argv)

        def popen() -> subprocess.Popen[bytes]:
            # stdout and stderr shared with the supervisor: one log stream for the node
            env = {**os.environ, SUPERVISED_ENV: "1"}  # its banner is the supervisor's
            return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, start_new_session=True, env=env)

        w.proc = spawn(popen)
        w.ready = False
        w.next_start = None
        log.info(f"{w.name()} started", extra={"event": "worker_started", **w.info()})

    def _check(self, w: _Worker) -> None:
        now = time.monotonic()
        proc = w.proc
        if proc is None:
            if w.next_start is not None and now >= w.next_start:
                self._start(w)
            return
        code = proc.poll()
        if code is None:
            if not w.ready and _read_port(w.port_file) == w.port:
                w.ready = w.served = True
                log.info(f"{w.name()} serving", extra={"event": "worker_serving", **w.info()})
            return
        how = describe_exit(code)
        log.warning(
            f"{w.name()} exited: {how}", extra={"event": "worker_exited", "how": how, **w.info()}
        )
        w.proc = None
        w.ready = False
        if w.recycle:
            w.recycle = False
            w.next_start = now
            return
        if not w.served:
            log.error(
                f"{w.name()} exited before it served ({how}): the supervisor stops",
                extra={"event": "workers_given_up", "how": how, **w.info()},
            )
            raise _GiveUp
        if not w.restarts.take(now):
            log.error(
                f"{w.name()} not restarted: the supervisor stops",
                extra={"event": "workers_given_up", "reason": w.restarts.spent(how), **w.info()},
            )
            raise _GiveUp
        delay = w.restarts.backoff()
        w.next_start = now + delay
        log.info(
            f"{w.name()} restarting in {delay:g}s",
            extra={
                "event": "worker_restarting",
                "delay_s": delay,
                "restarts": len(w.restarts),
                **w.info(),
            },
        )

    def _announce(self) -> None:
        self._announced = True
        ports = [w.port for w in self.workers]
        log.info(
            f"{len(ports)} workers serving on ports {ports[0]}..{ports[-1]}",
            extra={
                "event": "workers_serving",
                "workers": len(ports),
                "ports": f"{ports[0]}..{ports[-1]}",
                "advertise": ",".join(w.advertise for w in self.workers),
                "redis": self.redis_url,
            },
        )
        if self.args.port_file:
            Path(self.args.port_file).write_text(str(ports[0]))
        if not os.environ.get(SUPERVISED_ENV):
            members = [f"{w.advertise} (pid {w.proc.pid if w.proc else '?'})" for w in self.workers]
            banner = ready_banner([w.advertise for w in self.workers], self._store_text())
            lines = banner.splitlines()
            lines[1] = f"  members  {', '.join(members)}"
            print("\n".join(lines), flush=True)

    def _store_text(self) -> str:
        if self.embedded is None:
            return self.redis_url
        return (
            f"embedded, its data in {self.embedded.data_dir} (run by this supervisor: it "
            "outlives any one server)"
        )

    # -- stop
    def _stop_all(self) -> None:
        """SIGTERM every worker, wait (their grace, then SIGKILL), stop the embedded Redis."""
        live = [w for w in self.workers if w.proc is not None and w.proc.poll() is None]
        for w in live:
            assert w.proc is not None
            with contextlib.suppress(OSError):
                w.proc.terminate()
        deadline = time.monotonic() + self.args.grace + STOP_MARGIN
        for w in live:
            assert w.proc is not None
            try:
                w.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.error(
                    f"{w.name()} did not stop: SIGKILL",
                    extra={"event": "worker_killed", **w.info()},
                )
                w.proc.kill()
                w.proc.wait()
            log.info(
                f"{w.name()} exited: {describe_exit(w.proc.returncode)}",
                extra={
                    "event": "worker_exited",
                    "how": describe_exit(w.proc.returncode),
                    **w.info(),
                },
            )
        if self.embedded is not None:
            self.embedded.stop()
            log.info("embedded Redis stopped", extra={"event": "store_stopped"})
        if self.lock is not None:
            self.lock.release()
        shutil.rmtree(self.tmp, ignore_errors=True)
        log.info("supervisor stopped", extra={"event": "workers_stopped"})


def _read_port(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def run_workers(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``serve --workers N`` (N > 1): the supervisor, until it is stopped; the exit code.
    ``parser``: the server's (``build_parser()``), whose flags the workers get.
    A bad flag or a data directory in use raises ValueError or OSError (``error: ...``, exit
    1); an embedded Redis that does not start prints the same here."""
    try:
        return Supervisor(args, parser).run()
    except EmbeddedRedisError as ex:
        print(f"error: {ex}", file=sys.stderr)
        return 1
