"""The kit's :class:`LocalCluster`: three real servers on one Redis that see each other, route
a client given their seeds, survive a member killed and restarted on its address, and leave
no process behind (the members and the Redis the cluster started)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mtawindows.client import Field, StreamSpec
from mtawindows.server.storage import EmbeddedRedis
from mtawindows.testing import LocalCluster
from mtawindows.v1.placement import place
from tests.testing.support import alive, survivors

pytestmark = [pytest.mark.server, pytest.mark.redis]


def test_a_local_cluster_forms_routes_fails_over_and_leaves_nothing_behind() -> None:
    with LocalCluster(3, "--lease-ms", "1000") as cluster:
        assert len(cluster) == 3 and cluster.seeds == ",".join(cluster.targets)
        assert cluster.redis is not None and cluster.redis_url == cluster.redis.url
        pids = [s.pid for s in cluster] + [cluster.redis.pid or -1]
        assert all(alive(p) for p in pids)
        names = [f"s{i}" for i in range(12)]
        with cluster.client() as c:
            for name in names:
                c.create_stream(StreamSpec(name, (Field("x", "DOUBLE"),), wall_clock=False))
            members = sorted(m.address for m in c.cluster_map().members)
            assert members == sorted(cluster.targets)  # each advertises 127.0.0.1:<port>
            owners = {name: cluster.owner(name).target for name in names}
            assert owners == {n: place(n, cluster.targets) for n in names}
            assert len(set(owners.values())) > 1  # spread over the members
            victim = cluster.owner(names[0])
            i = cluster.servers.index(victim)
            cluster.kill(i)
            assert victim.target not in cluster.seeds.split(",")
            cluster.wait_formed()  # the others dropped it
            assert c.get_stream(names[0]).spec.name == names[0]  # adopted elsewhere
            assert cluster.owner(names[0]) is not victim
            cluster.restart(i)  # back on its address: the same member
            assert cluster.seeds == ",".join(cluster.targets)
            assert victim.pid not in pids
            pids.append(victim.pid)
        data_dir = cluster.data_dir
    assert survivors([p for p in pids if p > 0]) == []
    assert cluster.seeds == "" and not data_dir.exists()


def test_a_local_cluster_on_a_given_redis(tmp_path: Path) -> None:
    with (
        EmbeddedRedis(tmp_path / "redis") as redis,
        LocalCluster(2, redis_url=redis.url, data_dir=tmp_path / "cluster") as cluster,
    ):
        assert cluster.redis is None and cluster.redis_url == redis.url
        assert all(s.redis_pid is None for s in cluster)
        with cluster.client() as c:
            c.create_stream(StreamSpec("a", (Field("x", "DOUBLE"),), wall_clock=False))
            assert [s.spec.name for s in c.list_streams()] == ["a"]
    assert (tmp_path / "cluster" / "server0" / "server.log").exists()
