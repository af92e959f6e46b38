"""The one way the product reaches Redis: a standalone server or a Redis Cluster, from one URL.

::

    client = connect("unix:///data/redis.sock")          # standalone (never a cluster)
    client = connect("redis://10.0.0.5:6379/0")           # standalone, or a cluster node:
                                                          # asked once (INFO cluster)
    client = connect("redis+cluster://10.0.0.5:7000,10.0.0.6:7000")   # a cluster: its seeds
    client = connect("rediss://:pw@10.0.0.5:7000?cluster=yes")        # a cluster, said so

**Which one.** A ``redis+cluster://`` / ``rediss+cluster://`` URL (``host:port`` seeds separated
by commas, the rest as in ``redis://``), or a query with ``cluster=1`` / ``yes`` / ``true``, is
a cluster; ``cluster=0`` / ``no`` / ``false`` is standalone. Otherwise a ``redis://`` or
``rediss://`` URL is asked once, over a plain connection, whether ``INFO cluster`` says
``cluster_enabled:1``; the answer is cached per URL for the process. A server that does not
answer then is taken as standalone and not cached: the caller's first command reports the
failure, and the next :func:`connect` asks again. A ``unix://`` URL is never a cluster.

**The clients.** Standalone: :class:`redis.Redis` with ``socket_timeout`` and
``socket_connect_timeout`` = ``timeout``, ``Retry(NoBackoff(), retries)`` (a command is resent
``retries`` times on a connection error, at once), no health checks. Cluster:
:class:`redis.cluster.RedisCluster` with the same socket options, ``Retry(NoBackoff(),
max(retries, CLUSTER_RETRIES))`` and ``reinitialize_steps=1``: on a connection error,
``CLUSTERDOWN``, an uncovered slot or a ``MOVED`` it refreshes its slot map (``CLUSTER SLOTS``
from a node that answers) and resends. So once a failed primary's replica is promoted, the next
command finds it by itself; while the failover runs (a node timeout plus an election: 1-3 s on
a local cluster) commands fail within ``(1 + retries) x`` (``timeout`` + a slot-map refresh),
with errors :func:`is_unavailable` recognises ("down or moving, retry later"). A cluster client
asks its seeds for the slot map when it is made: :class:`redis.ConnectionError` when none
answers.

Deviation from redis-py's defaults: ``reinitialize_steps`` is 5 there (refresh the slot map on
every 5th error). A transaction pipeline counts its errors from 0 and gives up after
``retries`` < 5 of them, so it never refreshes: a ``MULTI`` would go to a dead primary forever.

**Writes a replica must have.** ``WAIT`` counts the writes of *its own connection*, so the
write and the ``WAIT`` must share one: :func:`pipeline_on_key_node` gives a non-transactional
pipeline on one connection of the node serving a key's slot::

    append = client.register_script(LUA)            # a redis-py Script
    p = pipeline_on_key_node(client, journal_key)
    append(keys=[journal_key, fence_key], args=[token, entry], client=p)
    p.execute_command("WAIT", 1, 500)
    applied, replicas = p.execute()                 # replicas: how many have that write

Run scripts as above (a ``Script`` called with ``client=p``), not with a bare ``EVALSHA``: the
pipeline then loads them on its node first, and a promoted replica does not have the scripts
its primary had (``SCRIPT LOAD`` is not replicated: a bare ``EVALSHA`` answers ``NOSCRIPT``).
Keys of one hash tag (``mtaw:svc:{stream}:journal``, ``...:fence``) share a slot, hence a node.

Glossary (redis-py 8.1): ``ClusterNode(host, port)`` a seed; ``get_node_from_key`` the primary
serving a key's slot in the client's slot map; ``get_redis_connection(node)`` a
:class:`redis.Redis` bound to that node alone.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import redis
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.exceptions import (
    AskError,
    ClusterError,
    CrossSlotTransactionError,
    InvalidPipelineStack,
    RedisClusterException,
    TryAgainError,
)
from redis.retry import Retry

from .resp import PackedPipeline

__all__ = [
    "CLUSTER_RETRIES",
    "KeyNodeUnavailableError",
    "connect",
    "is_cluster",
    "is_unavailable",
    "ping_nodes",
    "pipeline_on_key_node",
]

CLUSTER_RETRIES = 3
"""Least number of resends of a cluster command (each after a slot-map refresh): one for the
``MOVED`` or refused connection that reveals a promoted replica, the rest for ``CLUSTERDOWN``
while the cluster agrees on it (redis-py sleeps 0.25 s before each of those)."""

_TRUE = frozenset({"1", "yes", "true", "on"})
_FALSE = frozenset({"0", "no", "false", "off"})
_CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}

_detected: dict[str, bool] = {}  # url -> whether that server is a cluster node
_detected_lock = threading.Lock()


class KeyNodeUnavailableError(redis.ConnectionError):
    """A :func:`pipeline_on_key_node` pipeline found its node gone, or the key's slot served
    elsewhere now (``MOVED``, ``ASK``, ``TRYAGAIN``, ``CLUSTERDOWN``, an uncovered slot).
    The client's slot map is refreshed before this is raised: a new pipeline goes to the node
    serving the slot now. A redirect means nothing of the pipeline ran there; a connection error
    leaves the outcome unknown, as any :class:`redis.ConnectionError` does."""


_UNAVAILABLE: tuple[type[BaseException], ...] = (
    redis.ConnectionError,
    redis.TimeoutError,
    ClusterError,
    AskError,
    TryAgainError,
    RedisClusterException,
)
_MISUSE = (CrossSlotTransactionError, InvalidPipelineStack)


def is_unavailable(ex: BaseException) -> bool:
    """Whether ``ex`` (raised by a client of :func:`connect`) means that Redis, or the node
    serving a slot, is down or moving right now: a connection error or timeout,
    ``CLUSTERDOWN``, a ``MOVED``/``ASK`` left after the resends, ``TRYAGAIN``, redis-py's
    ``RedisClusterException`` when no node of the slot map answers or a slot is not covered.
    Worth a retry later; never a data error (keys of two slots in one transaction are not
    this: that is a bug of the caller)."""
    return isinstance(ex, _UNAVAILABLE) and not isinstance(ex, _MISUSE)


def _safe_url(url: str) -> str:
    """The URL without its password (for error messages)."""
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
    except ValueError:
        return "<invalid url>"
    userinfo, at, hosts = netloc.rpartition("@")
    if not at or ":" not in userinfo:
        return url
    user = userinfo.split(":", 1)[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{hosts}"))


def _flag(url: str, value: str) -> bool:
    v = value.strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    msg = f"Redis URL {_safe_url(url)!r}: cluster must be one of 1/yes/true or 0/no/false, got {value!r}"
    raise ValueError(msg)


def _seeds(url: str, hosts: str) -> list[tuple[str, int]]:
    """``host:port[,host:port...]`` (IPv6 hosts in brackets; port 6379 when left out)."""
    out = []
    for part in hosts.split(","):
        item = part.strip()
        if not item:
            continue
        try:
            parsed = urlsplit(f"//{item}")
            host, port = parsed.hostname, parsed.port or 6379
        except ValueError as ex:
            msg = f"Redis URL {_safe_url(url)!r}: bad seed {item!r} ({ex})"
            raise ValueError(msg) from ex
        if not host:
            msg = f"Redis URL {_safe_url(url)!r}: seed {item!r} has no host"
            raise ValueError(msg)
        out.append((host, port))
    if not out:
        msg = f"Redis URL {_safe_url(url)!r}: no host:port seed"
        raise ValueError(msg)
    return out


def _parse(url: str) -> tuple[str, bool | None, list[tuple[str, int]]]:
    """(a ``redis://``/``rediss://``/``unix://`` URL redis-py parses, without ``cluster=``;
    whether it is a cluster, ``None``: ask the server; the seeds of a ``+cluster`` URL, the
    first one being the URL's host)."""
    try:
        parts = urlsplit(url)
    except ValueError as ex:
        msg = f"Redis URL {_safe_url(url)!r} is not a URL ({ex})"
        raise ValueError(msg) from ex
    scheme = parts.scheme.lower()
    query = parse_qsl(parts.query, keep_blank_values=True)
    cluster: bool | None = None
    rest = []
    for k, v in query:
        if k == "cluster":
            cluster = _flag(url, v)
        else:
            rest.append((k, v))
    seeds: list[tuple[str, int]] = []
    if scheme in _CLUSTER_SCHEMES:
        if cluster is False:
            msg = f"Redis URL {_safe_url(url)!r}: a {scheme}:// URL is a cluster, not cluster=no"
            raise ValueError(msg)
        userinfo, at, hosts = parts.netloc.rpartition("@")
        seeds = _seeds(url, hosts)
        host, port = seeds[0]
        first = f"[{host}]" if ":" in host else host
        netloc = f"{userinfo}{at}{first}:{port}"
        plain = urlunsplit(
            (_CLUSTER_SCHEMES[scheme], netloc, parts.path, urlencode(rest), parts.fragment)
        )
        return plain, True, seeds
    if scheme not in ("redis", "rediss", "unix"):
        msg = (
            f"Redis URL must start with redis://, rediss://, unix://, redis+cluster:// or "
            f"rediss+cluster://, got {_safe_url(url)!r}"
        )
        raise ValueError(msg)
    # unchanged unless a cluster flag was taken out (urlunsplit drops unix:///'s slashes)
    plain = url if len(rest) == len(query) else urlunsplit(parts._replace(query=urlencode(rest)))
    if plain.startswith("unix:/") and not plain.startswith("unix://"):
        plain = "unix://" + plain[len("unix:") :]
    if scheme == "unix":
        if cluster:
            msg = f"Redis URL {_safe_url(url)!r}: a unix socket cannot reach a Redis Cluster"
            raise ValueError(msg)
        return plain, False, []
    return plain, cluster, []


def _detect(url: str, timeout: float) -> bool:
    """Whether the server at ``url`` is a cluster node (cached per URL; a server that does
    not answer counts as standalone, uncached)."""
    with _detected_lock:
        known = _detected.get(url)
    if known is not None:
        return known
    probe = redis.Redis.from_url(
        url,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=Retry(NoBackoff(), 0),
        health_check_interval=0,
    )
    try:
        enabled = str(probe.info("cluster").get("cluster_enabled", 0)) == "1"
    except redis.RedisError:  # down, or refusing INFO: standalone; the first command tells
        return False
    finally:
        probe.close()
    with _detected_lock:
        _detected[url] = enabled
    return enabled


@functools.cache
def _driver_info() -> Any:
    """redis-py's CLIENT SETINFO metadata, made once: left to redis-py, every new connection
    looks its version up in the installed packages' metadata (milliseconds each, and a stream
    opening its windows opens connections)."""
    from redis.driver_info import DriverInfo

    return DriverInfo()


POOL_CONNECTIONS = 64  # a standalone client's connections (each window's writer takes one)
POOL_WAIT = 12  # a wait for a free connection: up to this many socket timeouts ...
POOL_WAIT_MIN = 60.0  # ... and at least this many seconds


def connect(url: str, *, timeout: float = 5.0, retries: int = 1, **kw: Any) -> Any:
    """A client of the Redis at ``url``: :class:`redis.Redis` for a standalone server,
    :class:`redis.cluster.RedisCluster` for a cluster (see the module docstring for which
    and how they retry). ``timeout`` (seconds) bounds each socket connect and reply;
    ``retries`` resends after a connection error; ``kw`` goes to the client (e.g.
    ``decode_responses=True``). ``ValueError`` for a URL that is neither."""
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
        msg = f"connect: timeout must be a number of seconds > 0, got {timeout!r}"
        raise ValueError(msg)
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        msg = f"connect: retries must be an int >= 0, got {retries!r}"
        raise ValueError(msg)
    plain, cluster, seeds = _parse(url)
    detected = cluster is None
    options: dict[str, Any] = {
        "socket_timeout": timeout,
        "socket_connect_timeout": timeout,
        "health_check_interval": 0,
        "driver_info": _driver_info(),
        **kw,
    }
    if cluster is None:
        cluster = _detect(plain, timeout)
    if not cluster:
        # a blocking pool: a burst past its connections (many windows' checkpoints at once)
        # waits for one instead of failing with "Too many connections". Waiting for a
        # connection is not Redis failing: every holder gives its connection back within a
        # socket timeout (``timeout``) whether Redis answers or not, so the wait is bounded by
        # the queue, and :data:`POOL_WAIT` x ``timeout`` is far past any queue a burst makes.
        # (It was ``timeout`` itself: on a loaded machine a flush of a keyed stream's many
        # windows failed with "No connection available" while Redis was fine, and a
        # non-durable stream went back to its last checkpoint.)
        pool = redis.BlockingConnectionPool.from_url(
            plain,
            retry=Retry(NoBackoff(), retries),
            timeout=max(POOL_WAIT * timeout, POOL_WAIT_MIN),
            max_connections=POOL_CONNECTIONS,
            **options,
        )
        client = redis.Redis(connection_pool=pool)
        client.auto_close_connection_pool = True
        return client
    # The first seed comes with the URL (its credentials and options): RedisCluster adds it
    # to the startup nodes (for a redis:// URL it is the only one).
    try:
        return RedisCluster(
            url=plain,
            startup_nodes=[ClusterNode(h, p) for h, p in seeds[1:]],  # type: ignore[no-untyped-call]
            retry=Retry(NoBackoff(), max(retries, CLUSTER_RETRIES)),
            **{"reinitialize_steps": 1, **options},
        )
    except RedisClusterException as ex:
        if detected:  # the node may have changed since it was asked: ask again next time
            with _detected_lock:
                _detected.pop(plain, None)
        msg = f"Redis Cluster at {_safe_url(url)}: no seed answered with the slot map ({ex})"
        raise redis.ConnectionError(msg) from ex


def is_cluster(client: Any) -> bool:
    """Whether ``client`` (from :func:`connect`) talks to a Redis Cluster."""
    return isinstance(client, RedisCluster)


def ping_nodes(client: Any) -> None:
    """``PING`` the servers ``client`` (from :func:`connect`) sends commands to: the server of
    a standalone client; every primary of a cluster client's slot map, one after the other,
    each on that node's own connection (no resend there). Each ``PING`` waits at most the
    client's socket timeout. Raises :class:`redis.RedisError` when one does not answer, naming
    the node; a cluster client's slot map is refreshed first, so that a primary the cluster
    failed over meanwhile leaves the next round. The server's watchdog calls it on a client
    of its own (a frozen Redis must not hold the connections of the calls)."""
    if not isinstance(client, RedisCluster):
        client.ping()
        return
    for node in client.get_primaries():  # type: ignore[no-untyped-call]
        try:
            client.get_redis_connection(node).ping()
        except redis.RedisError as ex:
            _refresh(client)
            msg = f"Redis Cluster node {node.name} did not answer PING ({type(ex).__name__})"
            raise redis.ConnectionError(msg) from ex


def _refresh(client: RedisCluster) -> None:
    """Ask the cluster for its slot map again (best effort: a command tries again anyway)."""
    with contextlib.suppress(redis.RedisError, RedisClusterException):
        client.nodes_manager.initialize()


class _KeyNodePipeline(PackedPipeline):
    """A pipeline on one node of a cluster that refreshes the cluster client's slot map when
    the node is gone or no longer serves the slot (then :class:`KeyNodeUnavailableError`)."""

    def __init__(self, cluster: RedisCluster, node: redis.Redis, key: Any) -> None:
        super().__init__(node.connection_pool, node.response_callbacks, False, None)
        self._cluster = cluster
        self._key = key

    def _gone(self, ex: BaseException) -> KeyNodeUnavailableError:
        _refresh(self._cluster)
        pool = self.connection_pool.connection_kwargs
        where = f"{pool.get('host')}:{pool.get('port')}"
        msg = (
            f"the node {where} serving key {self._key!r} failed or moved it "
            f"({type(ex).__name__}: {ex}); the slot map is refreshed, resend"
        )
        return KeyNodeUnavailableError(msg)

    def watched(self, keys: Any, commands: Any) -> list[Any] | None:
        try:
            return super().watched(keys, commands)
        except Exception as ex:
            if is_unavailable(ex):
                raise self._gone(ex) from ex
            raise

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        try:
            replies: list[Any] = super().execute(raise_on_error)
        except Exception as ex:
            if is_unavailable(ex):
                raise self._gone(ex) from ex
            raise
        for r in replies:
            if isinstance(r, BaseException) and is_unavailable(r):  # raise_on_error=False
                _refresh(self._cluster)
                break
        return replies


def pipeline_on_key_node(client: Any, key: Any) -> Any:
    """A non-transactional pipeline on one connection of the node serving ``key``'s slot
    (``client.pipeline(transaction=False)`` for a standalone server), so that a ``WAIT`` at
    its end counts the writes before it; it takes :class:`~.resp.Packed` arguments. A
    :class:`~.resp.PackedPipeline` (a :class:`redis.client.Pipeline`), typed ``Any`` like
    the clients: redis-py leaves its command methods untyped. Every key it touches must share ``key``'s slot (one
    hash tag). On a cluster, when that node fails or the slot moved, ``execute`` refreshes the
    slot map and raises :class:`KeyNodeUnavailableError`; raises it at once when the slot is
    not covered by the slot map."""
    if not isinstance(client, RedisCluster):
        return PackedPipeline(client.connection_pool, client.response_callbacks, False, None)
    try:
        node = client.get_node_from_key(key)  # type: ignore[no-untyped-call]
    except RedisClusterException as ex:
        _refresh(client)
        msg = f"no node serves key {key!r} in the cluster's slot map ({ex}); refreshed, resend"
        raise KeyNodeUnavailableError(msg) from ex
    return _KeyNodePipeline(client, client.get_redis_connection(node), key)
