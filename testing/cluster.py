"""A cluster of ``mtawindows serve`` processes on one Redis, for tests: :class:`LocalCluster`.

::

    from mtawindows.testing import LocalCluster

    with LocalCluster(3, "--lease-ms", "1000") as cluster, cluster.client() as c:
        c.create_stream(...)                      # the SDK routes each call to the owner
        owner = cluster.owner("cpu")              # the LocalServer owning stream "cpu"
        cluster.kill(cluster.servers.index(owner))    # kill -9: its streams move
        cluster.restart(0)                        # back on its port, the same member

One Redis (an embedded valkey the cluster starts in ``<dir>/redis``, or ``redis_url``: any
Redis or Redis Cluster URL, e.g. a :class:`~mtawindows.testing.RedisCluster`'s) and ``n``
:class:`~mtawindows.testing.LocalServer` s on it, each on a free loopback port it advertises
(``--advertise 127.0.0.1:<port>``, its member id), in ``<dir>/server<i>``. :meth:`start`
returns when every member serves and every member's cluster map lists every member (the
heartbeats went round). ``seeds`` is the ``"a,b,c"`` string the SDK, the CLI and the Spark
connector take. Everything stops at :meth:`close` (the context manager's exit), and dies with
the test process on Linux (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
import weakref
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import grpc

from mtawindows.client import WindowClient
from mtawindows.v1 import windows_pb2 as pb
from mtawindows.v1 import windows_pb2_grpc as pb_grpc

from .ports import free_ports
from .server import LocalServer, LocalServerError

if TYPE_CHECKING:
    from mtawindows.server.storage import EmbeddedRedis

__all__ = ["LocalCluster"]


class LocalCluster:
    """``n`` servers on one Redis; ``args`` go to every server (``"--lease-ms", "1000"``).
    ``redis_url``: a Redis (or Redis Cluster) to use instead of the embedded one the cluster
    starts (``self.redis``, an :class:`~mtawindows.server.storage.EmbeddedRedis` in
    ``<data_dir>/redis``; ``self.redis_url`` is what the members use either way).
    ``data_dir``: where everything lives (kept), instead of a temporary directory removed at
    :meth:`close`. ``env``, ``flush_interval`` and ``start_timeout`` as for
    :class:`LocalServer`; ``timeout`` bounds the wait for the members to see each other. A
    context manager: started on enter, closed on exit. See the module docstring."""

    def __init__(
        self,
        n: int = 3,
        *args: str,
        redis_url: str | None = None,
        data_dir: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        flush_interval: float | None = 0.2,
        start_timeout: float = 60.0,
        timeout: float = 60.0,
    ) -> None:
        if n < 1:
            msg = f"LocalCluster: n must be >= 1, got {n!r}"
            raise ValueError(msg)
        if data_dir is None:
            self.data_dir = Path(tempfile.mkdtemp(prefix="mtaw-cluster-"))
            self._cleanup: weakref.finalize[Any, Any] | None = weakref.finalize(
                self, shutil.rmtree, str(self.data_dir), ignore_errors=True
            )
        else:
            self.data_dir = Path(data_dir).absolute()
            self.data_dir.mkdir(parents=True, exist_ok=True)
            self._cleanup = None
        self.n = n
        self.args = list(args)
        self.timeout = timeout
        self.redis: EmbeddedRedis | None = None
        if redis_url is None:  # started by start(); its URL is known already
            from mtawindows.server.storage import EmbeddedRedis

            self.redis = EmbeddedRedis(self.data_dir / "redis")
            redis_url = self.redis.url
        self.redis_url = redis_url
        self.servers: list[LocalServer] = []
        for i, port in enumerate(free_ports(n)):
            self.servers.append(
                LocalServer(
                    self.data_dir / f"server{i}",
                    "--advertise",
                    f"127.0.0.1:{port}",
                    *self.args,
                    redis_url=redis_url,
                    port=port,
                    env=env,
                    flush_interval=flush_interval,
                    start_timeout=start_timeout,
                )
            )

    def __repr__(self) -> str:
        return f"LocalCluster({self.seeds!r}, redis={self.redis_url!r})"

    # ------------------------------------------------------------------ where it is
    @property
    def live(self) -> list[LocalServer]:
        """The members whose process runs."""
        return [s for s in self.servers if s.running]

    @property
    def targets(self) -> list[str]:
        """Every member's address, running or not, in member order."""
        return [s.target for s in self.servers]

    @property
    def seeds(self) -> str:
        """The running members' addresses, ``"a,b,c"``: a client's ``target``."""
        return ",".join(s.target for s in self.live)

    def by_target(self, target: str) -> LocalServer:
        """The member at ``host:port`` (``KeyError`` if none)."""
        for s in self.servers:
            if s.target == target:
                return s
        msg = f"no member of {self!r} at {target!r}"
        raise KeyError(msg)

    def owner(self, stream: str) -> LocalServer:
        """The member that owns ``stream`` now (as the cluster map says)."""
        with self.client() as c:
            return self.by_target(c.owner(stream))

    def client(self, **options: Any) -> WindowClient:
        """A :class:`~mtawindows.client.WindowClient` given the running members as seeds
        (``options`` go to it)."""
        return WindowClient(self.seeds, **options)

    # ------------------------------------------------------------------ life cycle
    def start(self) -> LocalCluster:
        """Start the Redis (unless given) and every member, then :meth:`wait_formed`; on any
        failure everything started is stopped before the error is raised."""
        try:
            if self.redis is not None and not self.redis.running:
                self.redis.start()
            for s in self.servers:
                if not s.running:
                    s._launch()
            for s in self.servers:  # started together, waited for one by one
                s._await_port()
            self.wait_formed()
        except BaseException:
            self.stop()
            raise
        return self

    def wait_formed(self, timeout: float | None = None) -> None:
        """Until every running member's cluster map lists exactly the running members;
        ``TimeoutError`` naming what each map says after ``timeout`` (default the
        cluster's)."""
        timeout = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        seen: dict[str, Any] = {}
        while True:
            live = self.live
            want = sorted(s.target for s in live)
            for s in live:
                try:
                    with grpc.insecure_channel(s.target) as ch:
                        m = pb_grpc.WindowServiceStub(ch).GetClusterMap(
                            pb.GetClusterMapRequest(), timeout=10
                        )
                    seen[s.target] = sorted(x.address for x in m.members)
                except grpc.RpcError as ex:
                    seen[s.target] = f"{ex.code().name}"
            if live and all(seen.get(t) == want for t in want):
                return
            if not live:
                msg = f"{self!r}: no member is running"
                raise LocalServerError(msg)
            if time.monotonic() > deadline:
                msg = f"the cluster did not form in {timeout}s: want {want}, the maps say {seen}"
                raise TimeoutError(msg)
            time.sleep(0.1)

    def kill(self, i: int) -> int:
        """kill -9 member ``i`` (its leases run out, the others adopt its streams); its exit
        status."""
        return self.servers[i].kill()

    def restart(self, i: int, sig: int = signal.SIGTERM, *, wait: bool = True) -> LocalServer:
        """Member ``i`` stopped with ``sig`` if it runs, then started again on its port and
        data dir (the same member id); with ``wait``, until the cluster has formed again."""
        srv = self.servers[i]
        srv.stop(sig)
        srv.start()
        if wait:
            self.wait_formed()
        return srv

    def stop(self) -> None:
        """Stop every member (SIGTERM to all, then each waited for) and the Redis the cluster
        started; the data dir stays (:meth:`start` again reloads it)."""
        for s in self.servers:
            if s.running and s.proc is not None:
                s.proc.send_signal(signal.SIGTERM)
        for s in self.servers:
            s.stop()
        if self.redis is not None:
            self.redis.stop()

    def close(self) -> None:
        """:meth:`stop`, and remove the data dir if it is a temporary one of the cluster."""
        self.stop()
        if self._cleanup is not None:
            self._cleanup()

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __len__(self) -> int:
        return len(self.servers)

    def __iter__(self) -> Iterator[LocalServer]:
        return iter(self.servers)

    def __getitem__(self, i: int) -> LocalServer:
        return self.servers[i]
