"""pytest fixtures of :mod:`mtawindows.testing`, registered by the ``pytest11`` entry point
``mtawindows`` (installing mtawindows is enough; ``-p no:mtawindows`` turns them off).

Nothing starts unless a test asks for a fixture (this module imports only pytest; the kit is
imported on first use):

``mtawindows_server``
    a fresh :class:`~mtawindows.testing.LocalServer` per test (its own embedded Redis),
    closed after it.
``mtawindows_server_factory``
    a :class:`~mtawindows.testing.ServerFactory`: ``factory("--max-streams", "10",
    redis_url=url)`` starts one more server with those flags; all closed after the test.
``mtawindows_cluster``
    a :class:`~mtawindows.testing.LocalCluster` of three servers on one embedded Redis per
    test (a few seconds to start: use a module-scoped fixture of your own to share one).
``redis_cluster``
    a :class:`~mtawindows.testing.RedisCluster` (three primaries, a replica each) for the
    session; a test that damages a cluster (a failover) should start its own.
``redis_url``
    :func:`~mtawindows.testing.shared_redis_url`: ``$REDIS_URL``, else a testcontainers
    Redis if Docker answers, else an embedded valkey; one per session.
``fault_proxy``
    a :class:`~mtawindows.testing.FaultProxyFactory`: ``fault_proxy("127.0.0.1:6379")``
    starts a :class:`~mtawindows.testing.FaultProxy` to that upstream (``.address`` to dial,
    ``.blackhole()``, ``.heal()``, ...); all closed after the test.

The servers' data dirs are short temporary ones (a unix socket path must stay under 108
bytes, which a deep ``tmp_path`` can pass); after the test each server's log is copied into
its ``tmp_path`` (``mtawindows-server.log``, ``mtawindows-server-2.log``, ...). A fixture of
the same name in your ``conftest.py`` wins over these. Example::

    from mtawindows.client import Field, StreamSpec
    from mtawindows.testing import LocalServer

    def test_streams_survive_a_restart(mtawindows_server: LocalServer) -> None:
        with mtawindows_server.client() as c:
            c.create_stream(StreamSpec("cpu", (Field("load", "DOUBLE"),)))
        mtawindows_server.restart()
        with mtawindows_server.client() as c:
            assert [s.spec.name for s in c.list_streams()] == ["cpu"]
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from mtawindows.testing import (
        FaultProxyFactory,
        LocalCluster,
        LocalServer,
        RedisCluster,
        ServerFactory,
    )


def _keep_logs(servers: Iterable[LocalServer], into: Path) -> None:
    """Stop ``servers`` and copy their logs into ``into`` (their data dirs go at close)."""
    for i, srv in enumerate(servers):
        srv.stop()
        name = "mtawindows-server.log" if i == 0 else f"mtawindows-server-{i + 1}.log"
        with contextlib.suppress(OSError):
            shutil.copyfile(srv.log, into / name)


@pytest.fixture
def mtawindows_server(tmp_path: Path) -> Iterator[LocalServer]:
    """A fresh ``mtawindows serve`` for this test, with its own embedded Redis."""
    from mtawindows.testing import LocalServer

    with LocalServer() as srv:
        try:
            yield srv
        finally:
            _keep_logs([srv], tmp_path)


@pytest.fixture
def mtawindows_server_factory(tmp_path: Path) -> Iterator[ServerFactory]:
    """``factory(*flags, **options)``: one more server for this test, started."""
    from mtawindows.testing import ServerFactory

    with ServerFactory() as factory:
        try:
            yield factory
        finally:
            _keep_logs(factory.servers, tmp_path)


@pytest.fixture
def mtawindows_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    """Three servers on one embedded Redis for this test, formed."""
    from mtawindows.testing import LocalCluster

    with LocalCluster(3) as cluster:
        try:
            yield cluster
        finally:
            cluster.stop()
            _keep_logs(cluster.servers, tmp_path)


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisCluster]:
    """A real Redis Cluster for the session: three primaries with a replica each."""
    from mtawindows.testing import RedisCluster

    with RedisCluster() as cluster:
        yield cluster


@pytest.fixture(scope="session")
def redis_url() -> str:
    """``$REDIS_URL``, else a testcontainers Redis if Docker answers, else an embedded one."""
    from mtawindows.testing import shared_redis_url

    return shared_redis_url()


@pytest.fixture
def fault_proxy() -> Iterator[FaultProxyFactory]:
    """``fault_proxy(upstream, **options)``: a :class:`~mtawindows.testing.FaultProxy` to
    ``upstream`` for this test, listening; all closed after it."""
    from mtawindows.testing import FaultProxyFactory

    with FaultProxyFactory() as factory:
        yield factory
