"""The kit's :class:`RedisCluster`: slot ranges as valkey-cli splits them, a cluster that
forms (three primaries and a replica each, or one lone primary), fails over, and leaves no
valkey process behind. What the store does on it is in ``tests/storage/test_redis_cluster.py``."""

from __future__ import annotations

import itertools

import pytest

from mtawindows.server.storage.connect import connect
from mtawindows.testing import SLOT_RANGES, RedisCluster, slot_ranges
from tests.testing.support import alive, survivors

pytestmark = [pytest.mark.redis]


def test_slot_ranges_split_as_valkey_cli_does() -> None:
    assert SLOT_RANGES == ((0, 5460), (5461, 10922), (10923, 16383)) == slot_ranges(3)
    assert slot_ranges(1) == ((0, 16383),)
    for n in (1, 2, 3, 5, 7, 16):
        ranges = slot_ranges(n)
        assert ranges[0][0] == 0 and ranges[-1][1] == 16383 and len(ranges) == n
        assert all(b[0] == a[1] + 1 for a, b in itertools.pairwise(ranges))
    with pytest.raises(ValueError, match="primaries"):
        slot_ranges(0)


def test_a_lone_primary_cluster_serves_and_leaves_nothing_behind() -> None:
    with RedisCluster(primaries=1, replicas=0) as rc:
        assert len(rc.nodes) == 1 and rc.slots() == [(0, 16383, [rc.nodes[0].address])]
        pids = [n.proc.pid for n in rc.nodes if n.proc is not None]
        client = connect(rc.cluster_url, timeout=2.0)
        client.set("k", "v")
        assert client.get("k") == b"v"
        client.close()
        root = rc.root
    assert survivors(pids) == [] and not root.exists()


@pytest.mark.slow
def test_three_primaries_with_a_replica_each_fail_over_and_stop() -> None:
    with RedisCluster(primaries=3, replicas=1) as rc:
        assert len(rc.nodes) == 6 and [(s, e) for s, e, _ in rc.slots()] == list(SLOT_RANGES)
        assert all(len(rc.replicas_of(p)) == 1 for p in rc.primaries())
        pids = [n.proc.pid for n in rc.nodes if n.proc is not None]
        assert len(pids) == 6 and all(alive(p) for p in pids)
        old = rc.primaries()[1]
        promoted = rc.kill_primary(1)
        assert promoted is not old and promoted.alive and not old.alive
        assert rc.primary_for_slot(SLOT_RANGES[1][0]) is promoted
        rc.restart_node(old)  # rejoins as a replica of the one that replaced it
        rc.wait_ok(replicas=1)
        assert rc.replicas_of(promoted) == [old]
        assert old.proc is not None
        pids.append(old.proc.pid)
    assert survivors(pids) == []
