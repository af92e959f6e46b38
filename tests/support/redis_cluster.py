"""A real Redis Cluster on loopback for the tests: six ``valkey-server`` processes (the binary
the embedded server uses), three primaries and one replica each, built without valkey-cli::

    with RedisClusterProcesses() as cluster:
        client = connect(cluster.url)              # a node's URL: detected as a cluster
        client = connect(cluster.cluster_url)      # redis+cluster://h:p,h:p,h:p
        cluster.kill_primary(0)                    # kill -9 the primary of slots 0-5460,
                                                   # back when its replica is promoted

Layout (range ``i`` of slots is first served by node ``i``; node ``3 + i`` replicates it)::

    node 0  primary  slots     0 -  5460   <- node 3 replica
    node 1  primary  slots  5461 - 10922   <- node 4 replica
    node 2  primary  slots 10923 - 16383   <- node 5 replica

Each node listens on 127.0.0.1 only (TCP port and cluster bus port both free loopback ports),
writes its AOF with ``appendfsync always`` into its own directory of one temporary directory,
and lets a replica fail over whatever its replication lag (``cluster-replica-validity-factor
0``) one node timeout (1 s) after its primary stops answering. The processes die with the test
process (``PR_SET_PDEATHSIG``, see :mod:`mtawindows.server.storage.processes`).

The cluster is formed the way valkey-cli does it: distinct config epochs, ``CLUSTER
ADDSLOTSRANGE`` on the primaries, ``CLUSTER MEET`` from node 0 to every other node, then
``CLUSTER REPLICATE`` on the replicas; :meth:`RedisClusterProcesses.start` returns when every
node says ``cluster_state:ok``, sees all six nodes and every primary has its replica online.
Every wait is bounded (``timeout``) and says what it was waiting for when it gives up.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
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
from mtawindows.server.storage.processes import _describe_exit, dying_with_parent, spawn_daemon

__all__ = ["SLOT_RANGES", "ClusterNodeProcess", "RedisClusterError", "RedisClusterProcesses"]

HOST = "127.0.0.1"
SLOT_RANGES = ((0, 5460), (5461, 10922), (10923, 16383))
NODE_TIMEOUT_MS = 1000


class RedisClusterError(RuntimeError):
    """The test cluster could not be started, formed or failed over in time."""


@dataclass
class ClusterNodeProcess:
    """One ``valkey-server`` of the cluster: its ports, directory, process and node id."""

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


def _free_ports(n: int) -> list[int]:
    """``n`` distinct loopback TCP ports nothing listens on (held together while chosen, so
    they differ; free when this returns)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind((HOST, 0))
            socks.append(s)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def _cluster_info(r: redis.Redis) -> dict[str, str]:
    """``CLUSTER INFO`` (redis-py parses it into a dict)."""
    info = r.execute_command("CLUSTER INFO")
    return {str(k): str(v).strip() for k, v in dict(info).items()}


def _cluster_slots(r: redis.Redis) -> list[tuple[int, int, list[str]]]:
    """``CLUSTER SLOTS`` as (start, end, [primary address, replica addresses...])."""
    out = []
    for entry in r.execute_command("CLUSTER SLOTS"):
        start, end, *nodes = entry
        out.append((int(start), int(end), [f"{n[0]}:{int(n[1])}" for n in nodes]))
    return sorted(out)


def _known_ids(r: redis.Redis) -> set[str]:
    """Ids of the nodes ``CLUSTER NODES`` lists, past the handshake (redis-py parses the
    reply into a dict per address)."""
    table: dict[str, dict[str, Any]] = r.execute_command("CLUSTER NODES")
    return {
        str(n["node_id"])
        for n in table.values()
        if "handshake" not in n["flags"] and "noaddr" not in n["flags"]
    }


class RedisClusterProcesses:
    """Six ``valkey-server`` processes forming one Redis Cluster on loopback (a context
    manager: :meth:`start` on enter, :meth:`stop` on exit). See the module docstring."""

    def __init__(self, *, timeout: float = 30.0, replicas: int = 1) -> None:
        if replicas < 0:
            msg = f"RedisClusterProcesses: replicas must be >= 0, got {replicas!r}"
            raise ValueError(msg)
        self.timeout = timeout
        self.replicas = replicas
        self.root = Path(tempfile.mkdtemp(prefix="mtaw-cluster-"))
        self.nodes: list[ClusterNodeProcess] = []

    # ------------------------------------------------------------------ addresses
    @property
    def url(self) -> str:
        """``redis://`` URL of one node (the first live one, first primary first): a plain
        URL that :func:`~mtawindows.server.storage.connect.connect` detects as a cluster."""
        return self._first_live().url

    @property
    def cluster_url(self) -> str:
        """``redis+cluster://`` URL with the original primaries as seeds."""
        return "redis+cluster://" + ",".join(n.address for n in self.nodes[:3])

    def _first_live(self) -> ClusterNodeProcess:
        for n in self.nodes:
            if n.alive:
                return n
        msg = "no node of the test cluster is running"
        raise RedisClusterError(msg)

    def node(self, address: str) -> ClusterNodeProcess:
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

    def primary_for_slot(self, slot: int) -> ClusterNodeProcess:
        for start, end, addrs in self.slots():
            if start <= slot <= end:
                return self.node(addrs[0])
        msg = f"slot {slot} is not served by the test cluster"
        raise RedisClusterError(msg)

    def primaries(self) -> list[ClusterNodeProcess]:
        """The current primary of each slot range, in range order (index ``i`` serves
        ``SLOT_RANGES[i]``)."""
        return [self.primary_for_slot(start) for start, _ in SLOT_RANGES]

    def replicas_of(self, primary: ClusterNodeProcess) -> list[ClusterNodeProcess]:
        for _start, _end, addrs in self.slots():
            if addrs[0] == primary.address:
                return [self.node(a) for a in addrs[1:]]
        return []

    def primary_for_key(self, key: str | bytes) -> ClusterNodeProcess:
        """The node serving ``key``'s slot now."""
        return self.primary_for_slot(self.slot_of(key))

    @staticmethod
    def slot_of(key: str | bytes) -> int:
        return int(key_slot(key.encode() if isinstance(key, str) else key))

    @staticmethod
    def range_of_slot(slot: int) -> int:
        """Index of the slot range holding ``slot``."""
        for i, (start, end) in enumerate(SLOT_RANGES):
            if start <= slot <= end:
                return i
        msg = f"slot {slot} is outside 0-16383"
        raise ValueError(msg)

    # ------------------------------------------------------------------ life cycle
    def start(self) -> RedisClusterProcesses:
        """Start the six processes and form the cluster (bounded by ``timeout``); on a port
        taken meanwhile by someone else, once more on fresh ports."""
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

    def _command(self, node: ClusterNodeProcess) -> list[str]:
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
        return dying_with_parent(args)

    def _spawn(self, node: ClusterNodeProcess) -> None:
        node.proc = spawn_daemon(self._command(node), node.dir / "stderr")
        node.last_exit = None

    def _spawn_all(self) -> None:
        n = 3 * (1 + self.replicas)
        ports = _free_ports(2 * n)
        self.nodes = []
        for i in range(n):
            d = self.root / str(ports[i])
            d.mkdir(parents=True)
            node = ClusterNodeProcess(i, ports[i], ports[n + i], d)
            self.nodes.append(node)
            self._spawn(node)
        for node in self.nodes:
            self._wait_answers(node)

    def _wait_answers(self, node: ClusterNodeProcess) -> None:
        def ready() -> bool:
            if node.proc is not None and node.proc.poll() is not None:
                node.last_exit = _describe_exit(node.proc.returncode)
                msg = f"node {node.address} {node.last_exit} at start-up: {node.log_tail()}"
                raise RedisClusterError(msg)
            try:
                with node.client(timeout=1) as r:
                    return bool(r.ping())
            except (redis.ConnectionError, redis.TimeoutError):
                return False

        self._wait(ready, f"node {node.address} to answer PING")

    def _form(self) -> None:
        primaries = self.nodes[:3]
        for i, node in enumerate(self.nodes):
            with node.client() as r:
                node.node_id = str(r.execute_command("CLUSTER MYID"))
                r.execute_command("CLUSTER SET-CONFIG-EPOCH", i + 1)
        for node, (start, end) in zip(primaries, SLOT_RANGES, strict=True):
            with node.client() as r:
                r.execute_command("CLUSTER ADDSLOTSRANGE", start, end)
        with self.nodes[0].client() as r:
            for other in self.nodes[1:]:
                r.execute_command("CLUSTER MEET", HOST, other.port, other.bus_port)
        ids = {n.node_id for n in self.nodes}

        def all_met() -> bool:
            for node in self.nodes:
                with node.client() as r:
                    if _known_ids(r) != ids:
                        return False
            return True

        self._wait(all_met, "every node to know every other node (CLUSTER MEET)")
        for k, node in enumerate(self.nodes[3:]):
            primary = primaries[k % 3]
            with node.client() as r:
                r.execute_command("CLUSTER REPLICATE", primary.node_id)
        self.wait_ok(replicas=self.replicas)

    def wait_ok(self, *, replicas: int = 0, timeout: float | None = None) -> None:
        """Until every live node says ``cluster_state:ok`` and they agree on who serves the
        three slot ranges (all live), each primary with at least ``replicas`` replicas online."""

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
                if any(v != views[0] for v in views) or len(views[0]) != len(SLOT_RANGES):
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

    def kill_node(self, node: ClusterNodeProcess) -> None:
        """SIGKILL one node (its directory stays: :meth:`restart_node` brings it back)."""
        proc, node.proc = node.proc, None
        if proc is not None:
            proc.kill()
            proc.wait()
            node.last_exit = _describe_exit(proc.returncode)

    def wait_promoted(
        self, i: int, old: ClusterNodeProcess, *, timeout: float | None = None
    ) -> ClusterNodeProcess:
        """Until slot range ``i`` is served by a live node other than ``old`` and the
        cluster is ok again; that node."""
        start = SLOT_RANGES[i][0]
        found: list[ClusterNodeProcess] = []

        def promoted() -> bool:
            try:
                node = self.primary_for_slot(start)
            except (redis.ConnectionError, redis.TimeoutError, RedisClusterError):
                return False
            if node is old or not node.alive:
                return False
            found[:] = [node]
            return True

        self._wait(promoted, f"a replica to take over slots {SLOT_RANGES[i]}", timeout)
        self.wait_ok(replicas=0, timeout=timeout)
        return found[0]

    def kill_primary(self, i: int, *, timeout: float | None = None) -> ClusterNodeProcess:
        """kill -9 the primary serving slot range ``i``; return its promoted replica once it
        serves the range and the cluster is ok again (bounded by ``timeout``)."""
        old = self.primaries()[i]
        self.kill_node(old)
        return self.wait_promoted(i, old, timeout=timeout)

    def restart_node(self, node: ClusterNodeProcess) -> None:
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
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> RedisClusterProcesses:
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
