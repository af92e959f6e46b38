"""Running the service: :class:`ServeConfig`, :class:`Server` and :func:`serve` (``mtawindows serve``).

A :class:`Server` binds the port, starts (or connects to) Redis, restores every stream and
window, and serves the WindowService beside health and reflection; it supervises the embedded
Redis (restarts it, NOT_SERVING meanwhile), watches that its Redis answers (a PING watchdog:
NOT_SERVING while it does not) and stops gracefully.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import signal
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import redis
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from mtawindows.v1 import keepalive
from mtawindows.v1 import windows_pb2 as pb

from ..service.keyed import KeyedStream
from ..service.limits import Limits
from ..service.ownership import Ownership
from ..service.registry import Registry
from ..storage.connect import connect, ping_nodes
from ..storage.datadir import DataDirLock
from ..storage.embedded import EmbeddedRedis, EmbeddedRedisError
from ..storage.processes import RestartBudget
from ..storage.protocol import StoreError, StoreUnavailableError
from ..storage.replication import replicas_waiter
from .auth import TokenAuth
from .forward import Forwarder
from .metrics import Metrics
from .servicer import WindowServicer, add_servicer
from .status import receive_limit

__all__ = ["SERVICE_NAME", "ServeConfig", "Server", "default_data_dir", "serve"]

log = logging.getLogger("mtawindows.server")
SERVICE_NAME = pb.DESCRIPTOR.services_by_name["WindowService"].full_name


@dataclass
class ServeConfig:
    host: str = "127.0.0.1"
    port: int = 50051
    redis_url: str | None = None
    data_dir: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    tokens: set[str] = field(default_factory=set)
    metrics_port: int = 0
    metrics_host: str = "127.0.0.1"
    flush_interval: float = 1.0
    grace: float = 10.0
    workers: int = 8
    limits: Limits = field(default_factory=Limits)
    port_file: str | None = None  # write the bound port here once serving (tests, port 0)
    # SO_REUSEPORT (grpc's default on Linux) lets a second server bind the same port and take
    # half of the connections: off unless asked for, so a taken port is an error at start-up
    reuse_port: bool = False
    # the embedded Redis: restarts allowed within the window (then NOT_SERVING for good), and
    # seconds between checks of its process
    redis_restarts: int = RestartBudget.LIMIT
    redis_restart_window: float = RestartBudget.WINDOW
    supervise_interval: float = 0.2
    # the watchdog of the Redis (embedded or not): a PING every ``redis_ping_interval``
    # seconds (at most a quarter of the timeout) on a connection of its own; no answer for
    # ``redis_ping_timeout`` seconds (0: no watchdog) and the store counts as down until one
    # comes (a frozen or hung Redis: a SIGSTOP, a swap storm, a stalled disk)
    redis_ping_timeout: float = 2.0
    redis_ping_interval: float = 0.5
    # the cluster: this member's address for clients (None: host:port as bound), the lease of
    # a stream's owner, and the replicas a durable write waits for (Redis WAIT) and how long
    advertise: str | None = None
    lease_ms: int = 2000
    wait_replicas: int = 0
    wait_ms: int = 1000
    # print a few lines for people on stdout once serving (where, and how to call it); not
    # for a worker of ``--workers N`` (its supervisor prints one for all of them)
    banner: bool = False


_ADVERTISE = re.compile(r"^(?:[A-Za-z0-9_.-]{1,253}|\[[0-9A-Fa-f:.]{2,45}\]):(\d{1,5})$")


# at a graceful stop, once no handled call is in flight: how long the calls gRPC took as the
# stop began get to reach a handler (or the stop to end by itself) before they are cancelled
UNHANDLED_WAIT = 0.05
# after the grace: how long the cancelled calls get to end before the stop goes on without them
CANCEL_WAIT = 1.0
ABANDONED_EXIT = 3  # the exit status of a stop that left calls running past its grace
SUPERVISED_ENV = "MTAWINDOWS_SUPERVISED"  # set by ``--workers N`` for its server processes


def ready_banner(members: list[str], store: str, *, server: bool = False) -> str:
    """What ``mtawindows serve`` prints for people once it serves: where, on which Redis, and
    a line each to call it from the SDK and the CLI (``members``: the servers' addresses;
    several: a local cluster)."""
    target = ",".join(members)
    if server:
        head = f"mtawindows: serving on {target} (Ctrl-C stops it)"
    else:
        head = (
            f"mtawindows: a local cluster of {len(members)} servers on one Redis "
            "(Ctrl-C stops them all; a server that dies is started again)"
        )
    return "\n".join(
        [
            head,
            f"  {'address' if server else 'members'}  {', '.join(members)}",
            f"  Redis    {store}",
            f'  SDK      WindowClient("{target}")',
            f"  CLI      export MTAWINDOWS_TARGET={target}",
        ]
    )


def check_advertise(value: str) -> str:
    """``value`` if it is an address clients can call (``host:port``, port 1-65535, not a
    wildcard host); ValueError naming what is wrong."""
    m = _ADVERTISE.match(value)
    if m is None or not 0 < int(m.group(1)) < 65536:
        msg = (
            "--advertise: expected host:port (a name or an address clients reach this server "
            f"at, port 1-65535), got {value[:100]!r}"
        )
        raise ValueError(msg)
    host = value.rsplit(":", 1)[0]
    if host in ("0.0.0.0", "[::]"):
        msg = f"--advertise: {value!r} is a wildcard address, not one a client can call"
        raise ValueError(msg)
    return value


def advertised(host: str, port: int) -> str:
    """The address this server gives clients and the cluster: ``host:port``, this machine's
    name when bound to every interface."""
    if host in ("", "0.0.0.0", "::", "[::]"):
        host = socket.gethostname()
    return f"{host}:{port}"


def default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "mtawindows"


_SERVING = health_pb2.HealthCheckResponse.SERVING
_NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


class Server:
    """A running service: the gRPC server, its registry and (maybe) an embedded Redis.

    With the embedded Redis (no ``redis_url``) the server owns its data directory:

    - an exclusive lock on ``<data_dir>/lock``, taken before anything starts and held for the
      server's life: a second server on the directory stops at start-up, naming the holder;
    - the Redis process dies with the server, whatever kills it (``PR_SET_PDEATHSIG`` on
      Linux), and an orphan found on the directory at start-up is shut down (embedded.py);
    - a supervisor task watches the process. When it dies alone: health NOT_SERVING, calls
      that need the store refused as UNAVAILABLE (``STORE_UNAVAILABLE``), the process
      restarted on the same AOF (at most ``redis_restarts`` times per
      ``redis_restart_window`` seconds, with backoff), every Redis window marked to reload its
      durable state before its next call, health SERVING again. Past the limit it stays
      NOT_SERVING and logs why.

    Whatever the Redis (embedded or ``redis_url``), a watchdog PINGs it on a connection of its
    own (:meth:`_watch_store`): no answer for ``redis_ping_timeout`` seconds (a frozen, hung
    or unreachable Redis), and the server is NOT_SERVING and refuses the calls that need the
    store at once (UNAVAILABLE, ``STORE_UNAVAILABLE``) as above, until a PING is answered;
    nothing is reloaded then (a frozen Redis lost nothing; a call that failed meanwhile made
    its own windows reload). Health is SERVING only when neither the supervisor nor the
    watchdog holds the store down.

    The port is bound before the Redis starts, without SO_REUSEPORT unless ``reuse_port``.
    """

    def __init__(self, config: ServeConfig) -> None:
        self.config = config
        self.embedded: EmbeddedRedis | None = None
        self.lock: DataDirLock | None = None
        self.server: grpc.aio.Server | None = None
        self.health = health.aio.HealthServicer()
        self.port = 0
        self.registry: Registry | None = None
        self.cluster: Ownership | None = None
        self.forwarder: Forwarder | None = None
        self.advertise = ""
        self.servicer: WindowServicer | None = None
        self._restored = False
        self._stopping = False
        # a graceful stop left calls running past its grace (their streams unsaved): the
        # process exits without waiting for their threads (serve)
        self.abandoned = False
        self._tasks: list[asyncio.Task[None]] = []
        self._restart: asyncio.Future[EmbeddedRedis] | None = None
        # what holds the server down, per watcher ("process": the supervisor, "ping": the
        # watchdog, "isolation": cut off from the cluster): what refused callers are told
        # (None: health only); SERVING when empty
        self._down: dict[str, str | None] = {}

    async def start(self) -> int:
        """Lock the data directory, bind the port, start the Redis, restore every window and
        serve; returns the port. A failure leaves nothing running (lock released)."""
        try:
            return await self._start()
        except BaseException:
            await self._abandon()
            raise

    async def _start(self) -> int:
        cfg = self.config
        # absolute: valkey runs with its own working directory (a relative path failed there)
        if cfg.advertise:  # before anything starts
            check_advertise(cfg.advertise)
        data = (Path(cfg.data_dir) if cfg.data_dir else default_data_dir()).absolute()
        if not cfg.redis_url:
            self.lock = DataDirLock(data, owner="mtawindows server").acquire()
        server = self.server = self._grpc_server()
        self.port = self._bind(server)
        url = cfg.redis_url
        if not url:
            self.embedded = EmbeddedRedis(data / "redis")
            await asyncio.to_thread(self.embedded.start)
            url = self.embedded.url
        wait = replicas_waiter(cfg.wait_replicas, cfg.wait_ms)
        registry = self.registry = Registry(url, limits=cfg.limits, wait=wait)
        servicer = self.servicer = WindowServicer(
            registry,
            Metrics(lambda: servicer.window_stats(), lambda: servicer.key_stats()),
            workers=cfg.workers,
        )
        member = self.advertise = check_advertise(cfg.advertise or advertised(cfg.host, self.port))
        cluster = self.cluster = Ownership(
            registry,
            member=member,
            address=member,
            lease_ms=cfg.lease_ms,
            wait=wait,
            exclusive=self.embedded is not None,
        )
        servicer.join(cluster)
        # a newer server took this member id: stop (as on SIGTERM), writing nothing more
        cluster.on_usurped = lambda: os.kill(os.getpid(), signal.SIGTERM)
        try:
            await asyncio.to_thread(cluster.start)
        except (StoreError, redis.RedisError) as ex:
            msg = f"could not load the streams and windows from Redis: {ex}"
            raise OSError(msg) from ex
        self._restored = True
        restored = sum(len(s.windows) for s in list(registry.streams.values()))
        await self._serve(server, servicer)
        log.info(
            "serving",
            extra={
                "address": f"{cfg.host}:{self.port}",
                "member": member,
                "streams_owned": len(registry.streams),
                "redis": url,
                "windows_restored": restored,
                "tls": bool(cfg.tls_cert),
                "auth": bool(cfg.tokens),
                "reuse_port": cfg.reuse_port,
            },
        )
        if cfg.port_file:
            Path(cfg.port_file).write_text(str(self.port))
        if cfg.banner:
            store = url if cfg.redis_url else f"embedded, its data in {data / 'redis'}"
            print(ready_banner([member], store, server=True), flush=True)
        return self.port

    def _grpc_server(self) -> grpc.aio.Server:
        cfg = self.config
        interceptors = [TokenAuth(cfg.tokens)] if cfg.tokens else []
        options = [
            # twice the limit: a request between the two is refused by its size with a rich
            # status (MESSAGE_TOO_LARGE, servicer._within); past it gRPC cuts it itself
            ("grpc.max_receive_message_length", receive_limit(cfg.limits.max_message_bytes)),
            ("grpc.max_send_message_length", cfg.limits.max_message_bytes),
            ("grpc.so_reuseport", 1 if cfg.reuse_port else 0),
            # the channels' keepalive pings, every second, to find a silent connection
            *keepalive.server_options(),
        ]
        return grpc.aio.server(interceptors=interceptors, options=options)

    def _forwarder(self) -> Forwarder:
        """What sends calls on to their stream's owner for clients that cannot reach it
        (forward.py): over TLS when this server serves TLS, trusting its own certificate
        file (one certificate for the cluster, or a file that holds the members' CA)."""
        cfg = self.config
        creds = None
        if cfg.tls_cert:
            creds = grpc.ssl_channel_credentials(root_certificates=Path(cfg.tls_cert).read_bytes())
        assert self.servicer is not None
        self.forwarder = Forwarder(
            self.advertise,
            self.advertise,
            credentials=creds,
            max_message_bytes=cfg.limits.max_message_bytes,
            metrics=self.servicer.metrics,
        )
        return self.forwarder

    async def _serve(self, server: grpc.aio.Server, servicer: WindowServicer) -> None:
        """The WindowService, health and reflection on ``server``, started; then metrics,
        SERVING, the periodic flush and the supervisor of the embedded Redis."""
        add_servicer(servicer, server, self._forwarder())
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        reflection.enable_server_reflection(
            (
                SERVICE_NAME,
                health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
                reflection.SERVICE_NAME,
            ),
            server,
        )
        await server.start()
        if self.config.metrics_port:
            from prometheus_client import start_http_server

            start_http_server(
                self.config.metrics_port,
                addr=self.config.metrics_host,
                registry=servicer.metrics.registry,
            )
        await self._set_health(_SERVING)
        self._tasks.append(asyncio.create_task(self._flush_loop()))
        if self.embedded is not None:
            self._tasks.append(asyncio.create_task(self._supervise()))
        if self.config.redis_ping_timeout > 0 and self.registry is not None:
            self._tasks.append(asyncio.create_task(self._watch_store(self.registry.url)))
        if self.cluster is not None:
            self._tasks.append(asyncio.create_task(self._watch_isolation(self.cluster)))

    async def _watch_isolation(self, cluster: Ownership) -> None:
        """NOT_SERVING while this server is cut off from the cluster (no heartbeat answered for
        half a lease, :meth:`Ownership.isolated`), SERVING again once one is. Connected, it
        sleeps until the view would be that old (a heartbeat answered meanwhile moves that
        on: it looks again then); cut off, it looks every twentieth of a lease (100 ms by
        default). Its stream calls are refused meanwhile by the servicer itself
        (MEMBER_ISOLATED), whatever this loop last saw."""
        held = False
        step = cluster.lease_ms / 20_000
        while not self._stopping:
            left = (cluster.isolation_ms - cluster.view_age_ms()) / 1000
            await asyncio.sleep(step if held else max(step, left + 0.001))
            cut = cluster.isolated()
            if cut and not held:
                held = True
                why = cluster.isolation().message
                await self._hold_down("isolation", None)  # NOT_SERVING only
                log.error(
                    "cut off from the cluster: NOT_SERVING until a heartbeat is answered",
                    extra={"event": "member_isolated", "reason": why},
                )
            elif held and not cut:
                held = False
                serving = await self._release_down("isolation")
                log.warning(
                    "heartbeat answered again" + (": SERVING" if serving else ""),
                    extra={"event": "member_rejoined", "view_age_ms": cluster.view_age_ms()},
                )

    def _bind(self, server: grpc.aio.Server) -> int:
        cfg = self.config
        address = f"{cfg.host}:{cfg.port}"
        if cfg.tls_cert or cfg.tls_key:
            if not (cfg.tls_cert and cfg.tls_key):
                msg = "TLS needs both --tls-cert and --tls-key"
                raise ValueError(msg)
            creds = grpc.ssl_server_credentials(
                [(Path(cfg.tls_key).read_bytes(), Path(cfg.tls_cert).read_bytes())]
            )
        try:
            if cfg.tls_cert:
                port = server.add_secure_port(address, creds)
            else:
                port = server.add_insecure_port(address)
        except RuntimeError:  # grpcio >= 1.5x raises where older ones returned 0
            port = 0
        if port == 0:
            shared = "" if cfg.reuse_port else " (ports are not shared without --reuse-port)"
            msg = (
                f"could not listen on {address}: the port is taken (another server?) or the "
                f"address is not on this machine{shared}"
            )
            raise OSError(msg)
        return int(port)

    async def _set_health(self, status: Any) -> None:
        await self.health.set("", status)
        await self.health.set(SERVICE_NAME, status)

    async def _flush_loop(self) -> None:
        assert self.servicer is not None
        while True:
            await asyncio.sleep(self.config.flush_interval)
            cut = self.cluster is not None and self.cluster.isolated()
            if self.servicer.store_down is None and not cut:
                await self.servicer.flush_all()

    # -- supervision of the embedded Redis
    async def _supervise(self) -> None:
        emb = self.embedded
        assert emb is not None
        restarts = RestartBudget(self.config.redis_restarts, self.config.redis_restart_window)
        while not self._stopping:
            await asyncio.sleep(self.config.supervise_interval)
            if emb.running or self._stopping:
                continue
            why = f"the embedded Redis (pid {emb.pid}) {emb.exit_reason()}"
            try:
                await self._store_down(
                    why, "the embedded Redis is down; the server is restarting it"
                )
                if not await self._restart_store(restarts, why):
                    return
            except Exception:  # a bug here must not end the supervision unseen: log, go on
                log.exception(
                    "embedded Redis supervision failed; trying again",
                    extra={"event": "store_supervision_failed"},
                )

    async def _store_down(self, why: str, told: str) -> None:
        """NOT_SERVING; ``why`` goes to the log, ``told`` to refused callers."""
        await self._hold_down("process", told)
        log.error(
            "store down: NOT_SERVING until the embedded Redis is back",
            extra={"event": "store_down", "reason": why},
        )

    async def _hold_down(self, watcher: str, told: str | None) -> None:
        """``watcher`` holds the server down: NOT_SERVING and, with ``told``, the calls that
        need the store refused with it (None: health only; a cut-off member's stream calls are
        refused by the servicer itself, MEMBER_ISOLATED, and it still answers GetClusterMap
        with the age of its view)."""
        assert self.servicer is not None
        self._down[watcher] = told
        self.servicer.store_down = self._refusal()
        await self._set_health(_NOT_SERVING)

    async def _release_down(self, watcher: str) -> bool:
        """The store is back for ``watcher``; SERVING again unless another watcher still holds
        it down (whose reason callers are told meanwhile). Whether the server serves."""
        assert self.servicer is not None
        self._down.pop(watcher, None)
        self.servicer.store_down = self._refusal()
        if self._down:
            return False
        await self._set_health(_SERVING)
        return True

    def _refusal(self) -> str | None:
        """What calls that need the store are told while a watcher holds it down with a
        refusal; None while none does."""
        return next((told for told in self._down.values() if told is not None), None)

    # -- the watchdog: a Redis that does not answer (frozen, hung, unreachable)
    async def _watch_store(self, url: str) -> None:
        """PING the Redis at ``url`` (every node the server writes to, for a Redis Cluster:
        ``ping_nodes``) every ``redis_ping_interval`` seconds (at most a quarter of the
        timeout) on a client of its own, one PING at a time on a thread of its own. No
        answer for ``redis_ping_timeout`` seconds since the last one: the store is down
        (:meth:`_hold_down`, event ``store_unresponsive``), however long the PING in flight
        still waits; the first answer after: back (event ``store_answers``). Paused while the
        supervisor restarts a dead embedded Redis (that is its own state).

        The server's own stall is not Redis's: the silence is counted in the time the server
        ran. The watchdog wakes at least every interval; a wake later than asked (the process
        starved of CPU) does not count its lateness, and a wake later than a whole interval
        (the process stopped at some point of the wait: SIGSTOP, a VM freeze) counts none of
        that wait, whenever in it the stop began. A PING in flight across a stop (its answer
        may have come meanwhile; its thread wakes with the loop, in no set order) or the
        first one after it has what is left of the bound, as it had before the stop. A
        process starved all the time still sees a frozen Redis, within about twice the bound
        (its on-time waits count)."""
        cfg = self.config
        bound = cfg.redis_ping_timeout
        every = min(cfg.redis_ping_interval, bound / 4)
        loop = asyncio.get_running_loop()
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mtaw-ping")
        clients: list[Any] = []  # made on the ping thread (a cluster client asks its seeds)
        last_ok = time.monotonic()

        def after_wake(asked: float, due: float) -> float:
            """``last_ok`` moved on by the time the process did not run in the wait asked at
            ``asked`` to end at ``due``: its lateness, or (later than a wait lasts: stopped)
            the whole wait."""
            now = time.monotonic()
            late = now - due
            if late <= 0:
                return last_ok
            return min(now, last_ok + (now - asked if late > every else late))

        try:
            while True:
                started = time.monotonic()
                if not self._store_watched():
                    last_ok = started
                    await asyncio.sleep(every)
                    continue
                ping = loop.run_in_executor(pool, _ping, clients, url, bound)
                while not ping.done():
                    left = last_ok + bound - time.monotonic()
                    if left <= 0 and self._store_watched():
                        await self._unresponsive(bound, "no answer yet")
                        left = every
                    wait = max(min(left, every), 0.001)
                    asked = time.monotonic()
                    await asyncio.wait({ping}, timeout=wait)
                    last_ok = after_wake(asked, asked + wait)  # (its read may have timed out)
                failed = ping.result()
                now = time.monotonic()
                if failed is None:
                    last_ok = now
                    if "ping" in self._down:
                        await self._answers(now - started)
                elif now - last_ok >= bound and self._store_watched():
                    await self._unresponsive(bound, failed)
                pause = max(0.0, every - (now - started))
                asked = time.monotonic()
                await asyncio.sleep(pause)
                last_ok = after_wake(asked, asked + pause)
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
            for client in clients:
                with contextlib.suppress(Exception):
                    client.close()

    def _store_watched(self) -> bool:
        """Whether the watchdog's verdict counts now: not while the supervisor has the
        embedded Redis down (dead, restarting)."""
        emb = self.embedded
        return "process" not in self._down and (emb is None or emb.running)

    async def _unresponsive(self, bound: float, failed: str) -> None:
        if "ping" in self._down:
            return
        emb = self.embedded
        which = "the Redis" if emb is None else f"the embedded Redis (pid {emb.pid})"
        await self._hold_down(
            "ping", f"{which} has not answered for {bound:g}s (frozen, hung or unreachable)"
        )
        log.error(
            "store unresponsive: NOT_SERVING until Redis answers a PING",
            extra={
                "event": "store_unresponsive",
                "reason": f"no PING answered for {bound:g}s; last: {failed}",
            },
        )

    async def _answers(self, took: float) -> None:
        serving = await self._release_down("ping")
        log.warning(
            "Redis answers again" + (": SERVING" if serving else ""),
            extra={"event": "store_answers", "ping_ms": round(took * 1000, 1)},
        )

    async def _restart_store(self, restarts: RestartBudget, why: str) -> bool:
        """Restart the embedded Redis on its data directory (bounded, with backoff), then make
        every window reload its durable state and go back to SERVING. False: gave up."""
        emb = self.embedded
        assert emb is not None and self.servicer is not None
        while True:
            if not restarts.take():
                await self._hold_down(
                    "process",
                    "the embedded Redis is down and the server gave up restarting it (see its log)",
                )
                log.error(
                    "embedded Redis not restarted: NOT_SERVING until the server is restarted",
                    extra={
                        "event": "store_given_up",
                        "reason": restarts.spent(why),
                        "data_dir": str(emb.data_dir),
                    },
                )
                return False
            # shielded: a stop() during the restart waits for it instead of racing it
            self._restart = asyncio.ensure_future(asyncio.to_thread(emb.start))
            try:
                await asyncio.shield(self._restart)
                break
            except (EmbeddedRedisError, OSError) as ex:
                why = f"restart {len(restarts)} failed: {ex}"
                log.error(
                    "embedded Redis restart failed",
                    extra={"event": "store_restart_failed", "reason": why},
                )
            await asyncio.sleep(restarts.backoff())
        await self._invalidate_windows()
        serving = await self._release_down("process")
        log.warning(
            "embedded Redis restarted" + (": SERVING" if serving else ""),
            extra={"event": "store_restarted", "pid": emb.pid, "restarts": len(restarts)},
        )
        return True

    async def _invalidate_windows(self) -> None:
        """After a restart Redis holds what its AOF kept: every Redis window reloads its
        durable state before its next call (under its stream's lock, so between calls)."""
        assert self.registry is not None and self.servicer is not None
        lost = StoreUnavailableError("the embedded Redis restarted: reload the durable state")
        for name, stream in list(self.registry.streams.items()):
            async with self.servicer.lock(name):
                if isinstance(stream, KeyedStream):  # its windows are per key: all reload
                    stream.engine_failed()
                    continue
                stream.saved_state = None  # Redis may have lost it: the next flush saves it
                for w in list(stream.hosted().values()):
                    w.engine.invalidate(lost)

    # -- stop
    async def stop(self) -> None:
        """Graceful: NOT_SERVING, in-flight calls finish (grace), buffers flush, Redis stops."""
        log.info("shutting down")
        t0 = time.monotonic()
        self._stopping = True
        await self.health.enter_graceful_shutdown()
        await self._cancel_tasks()
        if self.servicer is not None:  # Subscribe and AppendBatches never end by themselves
            self.servicer.shutdown()
        if self.server is not None:
            await self._stop_calls(self.server, self.config.grace)
        self._abandon_busy()
        log.info("stop: in-flight calls done after %.3f s", time.monotonic() - t0)
        if self.forwarder is not None:
            await self.forwarder.close()
        if self.cluster is not None:  # hand every stream over (flushed), leave the cluster
            await asyncio.to_thread(self.cluster.stop)
            log.info("stop: streams handed over after %.3f s", time.monotonic() - t0)
        if self.registry is not None:
            await asyncio.to_thread(self.registry.close)
        if self.servicer is not None:
            self.servicer.pool.shutdown(wait=not self.abandoned)
            self.servicer.flush_pool.shutdown(wait=not self.abandoned)
        await self._release()
        log.info("stopped")

    def _abandon_busy(self) -> None:
        """After the grace: the streams whose calls are still running (a batch on a worker
        thread cannot be stopped) are left as they are, neither saved nor handed over, as
        if the server had been killed there: saving a stream in the middle of a batch would
        write half of it (a durable one's journal replays the batch at its next load; the
        others come back at their last checkpoint; their leases run out). The process then
        exits without waiting for those threads (:attr:`abandoned`)."""
        if self.servicer is None or self.registry is None or not len(self.servicer.in_flight):
            return
        busy = sorted(name for name, lk in self.servicer.locks.items() if lk.locked())
        if not busy:  # (calls that change no stream: they end with their cancellation)
            return
        for name in busy:
            self.registry.abandon(name)
        self.abandoned = True
        log.error(
            "stop: calls still running after the grace (%s): streams %s are left unsaved, as "
            "after a kill (a durable stream's journal replays its batch at the next load)",
            self.servicer.in_flight.describe(),
            busy,
            extra={"event": "stop_abandoned", "streams": busy},
        )

    async def _stop_calls(self, server: grpc.aio.Server, grace: float) -> None:
        """gRPC's graceful stop, ended once the calls this server's handlers took are over
        (:class:`InFlight`), or at the end of ``grace``: calls gRPC took as the stop began
        that reached no handler would hold it (and the streams' leases) the whole grace."""
        stopping = asyncio.ensure_future(server.stop(grace))
        if self.servicer is None:
            await stopping
            return
        calls = self.servicer.in_flight
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        while True:
            if not await calls.drained(max(0.0, deadline - loop.time())):
                log.warning(
                    "stop: calls still in flight after the grace (%.1f s): %s; cancelled",
                    grace,
                    calls.describe(),
                    extra={"event": "stop_grace_over"},
                )
                # a call whose batch runs on a worker thread ends only with it: not waited
                await asyncio.wait({stopping}, timeout=CANCEL_WAIT)
                return
            # a call just ended sends its status; one scheduled as the stop began starts
            done, _ = await asyncio.wait({stopping}, timeout=UNHANDLED_WAIT)
            if done:
                break
            if not len(calls):
                log.info(
                    "stop: every handled call ended; the calls that reached no handler are "
                    "cancelled",
                    extra={"event": "stop_unhandled_cancelled"},
                )
                await server.stop(None)
                break
        await stopping

    async def _cancel_tasks(self) -> None:
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._restart is not None:  # a restart in flight ends before the Redis is stopped
            await asyncio.gather(self._restart, return_exceptions=True)

    async def _release(self) -> None:
        if self.embedded is not None:
            await asyncio.to_thread(self.embedded.stop)
        if self.lock is not None:
            self.lock.release()

    async def _abandon(self) -> None:
        """Undo a start that failed half-way: nothing keeps running, the lock is released."""
        self._stopping = True
        await self._cancel_tasks()
        if self.server is not None:
            with contextlib.suppress(Exception):
                await self.server.stop(None)
        if self.forwarder is not None:
            with contextlib.suppress(Exception):
                await self.forwarder.close()
        if self.cluster is not None:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self.cluster.stop, release=self._restored)
        if self.registry is not None:
            with contextlib.suppress(Exception):
                if self._restored:
                    await asyncio.to_thread(self.registry.close)
                else:
                    self.registry.redis.close()
        if self.servicer is not None:
            self.servicer.pool.shutdown(wait=False)
            self.servicer.flush_pool.shutdown(wait=False)
        await self._release()

    async def serve_forever(self) -> None:
        await self.start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await self.stop()


def _ping(clients: list[Any], url: str, timeout: float) -> str | None:
    """One watchdog round (on the watchdog's thread): PING the Redis at ``url`` through the
    watchdog's own client (made on first use into ``clients``; no resend, ``timeout`` on
    each socket read). None when every node answered, else what failed (for the log)."""
    try:
        if not clients:
            clients.append(connect(url, timeout=timeout, retries=0))
        ping_nodes(clients[0])
    except Exception as ex:  # any failure is "no answer": the watchdog decides on time
        return f"{type(ex).__name__}: {str(ex)[:300]}"
    return None


def serve(config: ServeConfig) -> None:
    server = Server(config)
    asyncio.run(server.serve_forever())
    if server.abandoned:  # threads still running batches of streams left unsaved: not joined
        logging.shutdown()
        os._exit(ABANDONED_EXIT)
