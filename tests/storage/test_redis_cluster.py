"""A real Redis Cluster (six valkey-server processes on loopback, the testing kit's
:class:`mtawindows.testing.RedisCluster`):
the cluster forms, :func:`~mtawindows.server.storage.connect.connect` tells a cluster from a
standalone server, a stream's keys share a slot (pipelines, Lua, ``WAIT`` on the node of the
slot), windows work on it through :class:`RedisStore`, and a primary's failover keeps what
``WAIT`` acknowledged while the clients find the promoted replica by themselves."""

from __future__ import annotations

import random
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster as ClusterClient

from mtawindows.server.engine.amta import AmortizedMTA
from mtawindows.server.engine.laws import approx_equal as same
from mtawindows.server.engine.lmta import LogMTA
from mtawindows.server.engine.monoids import Concat, Count, Max, Mean, Record, Sum
from mtawindows.server.engine.naive import NaiveWindow
from mtawindows.server.engine.policies import CountPolicy, TimeRangePolicy
from mtawindows.server.storage.connect import (
    KeyNodeUnavailableError,
    connect,
    is_cluster,
    is_unavailable,
    pipeline_on_key_node,
)
from mtawindows.server.storage.protocol import StoreUnavailableError
from mtawindows.server.storage.redis_store import RedisStore
from mtawindows.testing import SLOT_RANGES, RedisCluster, free_port

pytestmark = [pytest.mark.redis]

ALGS = [AmortizedMTA, LogMTA]
REC = Record(n=Count(), s=Sum("v"), t=Max("t"), cat=Concat("v"))
NUM = Record(n=Count(), s=Sum("v"), t=Max("t"), mean=Mean("v"))
SMALL = {"block_size": 4, "cache_size": 4, "refill_at": 2, "checkpoint_every": 37}

# KEYS[1] - a stream's journal (list), KEYS[2] - its fence (the newest owner's token)
# ARGV[1] - the writer's fencing token, ARGV[2] - the entry to append
# returns the journal's length, or -1 when a newer owner holds the fence (nothing written)
FENCED_APPEND = """
local fence = tonumber(redis.call('GET', KEYS[2]) or '0')
if tonumber(ARGV[1]) < fence then return -1 end
redis.call('SET', KEYS[2], ARGV[1])
return redis.call('RPUSH', KEYS[1], ARGV[2])
"""


def rows(n: int, start: int = 0, seed: int = 1) -> list[dict[str, Any]]:
    rnd = random.Random(seed)
    return [{"v": rnd.randint(-9, 9), "t": start + i} for i in range(n)]


def stream_keys(stream: str) -> tuple[str, str]:
    tag = f"mtaw:svc:{{{stream}}}"
    return f"{tag}:journal", f"{tag}:fence"


def tag_of(key: str) -> str:
    """The hash tag of ``key`` (what decides its slot)."""
    found = re.search(r"\{([^}]+)\}", key)
    assert found, key
    return found.group(1)


def unique(name: str) -> str:
    return f"{name}-{time.time_ns()}"


@pytest.fixture
def own_cluster() -> Iterator[RedisCluster]:
    """A cluster of this test alone (it gets damaged)."""
    with RedisCluster() as cluster:
        yield cluster


# ----------------------------------------------------------------------------- the cluster
def test_the_fixture_forms_a_real_cluster_of_three_primaries_with_a_replica_each(
    redis_cluster: RedisCluster,
) -> None:
    roles = []
    for node in redis_cluster.nodes:
        with node.client() as r:
            info = r.execute_command("CLUSTER INFO")
            assert info["cluster_state"] == "ok"
            assert info["cluster_slots_assigned"] == "16384"
            assert info["cluster_known_nodes"] == "6"
            assert info["cluster_size"] == "3"
            roles.append(r.info("replication")["role"])
    assert sorted(roles) == ["master"] * 3 + ["slave"] * 3
    slots = redis_cluster.slots()
    assert [(s, e) for s, e, _ in slots] == list(SLOT_RANGES)
    assert all(len(addrs) == 2 for _, _, addrs in slots)  # a primary and its replica
    assert len({a for _, _, addrs in slots for a in addrs}) == 6
    for primary in redis_cluster.primaries():
        with primary.client() as r:
            assert r.info("replication")["connected_slaves"] == 1


# ----------------------------------------------------------------------------- connect()
def test_connect_gives_a_cluster_client_for_a_node_url_and_for_a_cluster_url(
    redis_cluster: RedisCluster,
) -> None:
    assert redis_cluster.url.startswith("redis://127.0.0.1:")
    assert redis_cluster.cluster_url.startswith("redis+cluster://127.0.0.1:")
    for url in (redis_cluster.url, redis_cluster.cluster_url, redis_cluster.url + "?cluster=1"):
        client = connect(url, timeout=2.0)
        assert isinstance(client, ClusterClient) and is_cluster(client), url
        # one key in each slot range: every primary answers through the one client
        keys = {redis_cluster.range_of_slot(client.keyslot(f"k{i}")): f"k{i}" for i in range(40)}
        assert sorted(keys) == [0, 1, 2]
        for key in keys.values():
            client.set(key, url)
            assert client.get(key) == url.encode()
        client.close()
    # cluster=no: a plain client of that one node (it answers MOVED for the others' keys)
    plain = connect(redis_cluster.url + "?cluster=no")
    assert type(plain) is redis.Redis and not is_cluster(plain)
    assert plain.ping()


def test_connect_gives_a_plain_client_for_a_standalone_server(redis_url: str) -> None:
    client = connect(redis_url)
    assert type(client) is redis.Redis and not is_cluster(client)
    assert client.ping()
    pipe = pipeline_on_key_node(client, "mtaw:svc:{s}:journal")
    pipe.rpush("mtaw:svc:{s}:journal", b"x")
    pipe.execute_command("WAIT", 0, 100)  # no replica: WAIT answers 0 at once
    assert pipe.execute()[1] == 0
    client.delete("mtaw:svc:{s}:journal")


def test_connect_to_a_server_that_is_down_assumes_standalone_and_the_first_command_fails() -> None:
    url = f"redis://127.0.0.1:{free_port()}"
    client = connect(url, timeout=1.0, retries=0)  # does not raise
    assert not is_cluster(client)
    with pytest.raises(redis.ConnectionError) as err:
        client.ping()
    assert is_unavailable(err.value)


def test_a_cluster_url_with_a_dead_seed_connects_through_the_others(
    redis_cluster: RedisCluster,
) -> None:
    live = redis_cluster.cluster_url.removeprefix("redis+cluster://")
    client = connect(f"redis+cluster://127.0.0.1:{free_port()},{live}", timeout=2.0)
    assert is_cluster(client)
    client.set("dead-seed", b"1")
    assert client.get("dead-seed") == b"1"
    with pytest.raises(redis.ConnectionError):  # no seed answers: a connection error
        connect(f"redis+cluster://127.0.0.1:{free_port()}", timeout=1.0)


@pytest.mark.parametrize(
    ("url", "match"),
    [
        ("http://u:secret@localhost:6379", "must start with"),
        ("redis://u:secret@localhost:6379?cluster=maybe", "cluster must be"),
        ("unix:///tmp/x.sock?cluster=1", "unix socket"),
        ("redis+cluster://u:secret@", "no host:port seed"),
        ("redis+cluster://u:secret@h:1?cluster=no", "is a cluster"),
    ],
)
def test_connect_refuses_bad_urls_without_showing_the_password(url: str, match: str) -> None:
    with pytest.raises(ValueError, match=match) as err:
        connect(url)
    assert "secret" not in str(err.value)


def test_connect_checks_its_options() -> None:
    with pytest.raises(ValueError, match="timeout"):
        connect("redis://localhost", timeout=0)
    with pytest.raises(ValueError, match="retries"):
        connect("redis://localhost", retries=-1)


# ----------------------------------------------------------------------------- one slot per stream
def test_keys_of_one_hash_tag_share_a_slot_and_a_lua_script_touches_two_of_them(
    redis_cluster: RedisCluster,
) -> None:
    client = connect(redis_cluster.cluster_url)
    journal, fence = stream_keys(unique("stream"))
    window_key = f"mtaw:{{{tag_of(journal)}}}:w:w1:meta"
    assert client.keyslot(journal) == client.keyslot(fence) == client.keyslot(window_key)
    append = client.register_script(FENCED_APPEND)
    assert append(keys=[journal, fence], args=[3, b"a"]) == 1
    assert append(keys=[journal, fence], args=[3, b"b"]) == 2
    assert append(keys=[journal, fence], args=[2, b"stale owner"]) == -1  # fenced off
    assert client.lrange(journal, 0, -1) == [b"a", b"b"]
    # two keys of two slots in one script: Redis refuses, nothing written
    other_journal, _ = stream_keys(unique("other"))
    assert client.keyslot(other_journal) != client.keyslot(journal)
    with pytest.raises((redis.ResponseError, redis.RedisClusterException)):
        append(keys=[other_journal, fence], args=[9, b"x"])
    assert client.llen(journal) == 2 and not client.exists(other_journal)
    # a transaction over keys of one slot works on the cluster (RedisStore's checkpoints)
    pipe = client.pipeline(transaction=True)
    pipe.set(fence, 5)
    pipe.ltrim(journal, 1, -1)
    pipe.execute()
    assert client.lrange(journal, 0, -1) == [b"b"] and client.get(fence) == b"5"


def test_a_write_and_wait_on_the_node_of_the_key_count_the_replica(
    redis_cluster: RedisCluster,
) -> None:
    """``WAIT`` counts the writes of its own connection: the script and the ``WAIT`` go down
    one pipeline on the node serving the key's slot, so ``WAIT 1`` answers 1 (the replica)."""
    client = connect(redis_cluster.url)
    journal, fence = stream_keys(unique("waited"))
    append = client.register_script(FENCED_APPEND)
    for i in range(5):
        pipe = pipeline_on_key_node(client, journal)
        append(keys=[journal, fence], args=[1, f"entry {i}"], client=pipe)  # loaded there first
        pipe.execute_command("WAIT", 1, 5000)
        assert pipe.execute() == [i + 1, 1]
    primary = redis_cluster.primary_for_key(journal)
    (replica,) = redis_cluster.replicas_of(primary)
    with replica.client() as r:
        r.execute_command("READONLY")
        assert r.llen(journal) == 5  # the replica has every waited write


# ----------------------------------------------------------------------------- windows on a cluster
def cluster_urls(cluster: RedisCluster) -> dict[str, str]:
    return {"node-url": cluster.url, "cluster-url": cluster.cluster_url}


@pytest.mark.parametrize("cls", ALGS)
@pytest.mark.parametrize("which", ["node-url", "cluster-url"])
def test_a_durable_window_works_on_the_cluster_and_reopens(
    redis_cluster: RedisCluster, cls: Any, which: str
) -> None:
    url = cluster_urls(redis_cluster)[which]
    policy = TimeRangePolicy(50, field="t")
    wid = unique(f"cluster-{cls.__name__}-{which}")
    w = cls(REC, policy, store=RedisStore(url, window_id=wid, durable=True, **SMALL), debug=True)
    oracle = NaiveWindow(REC, policy)
    data = rows(700)
    for x in data[:400]:
        assert same(w.push(x), oracle.push(x))
    for k in range(400, 600, 50):
        w.extend(data[k : k + 50])
        oracle.extend(data[k : k + 50])
        assert same(w.query(), oracle.query())
    w.store.sync()
    # every key of the window sits in one slot (one hash tag), hence on one node
    client = connect(url)
    tag = tag_of(w.store.keys.meta)
    keys = list(client.scan_iter(match=f"*{{{tag}}}*", count=1000))
    assert len(keys) > 5
    assert {client.keyslot(k) for k in keys} == {client.keyslot(w.store.keys.meta)}
    w.store._exec.shutdown(wait=False, cancel_futures=True)  # abandon it, as a crash would
    w2 = cls.open(wid, REC, policy, url=url, durable=True, debug=True, **SMALL)
    assert w2.store.reopened
    assert len(w2) == len(oracle) and same(w2.query(), oracle.query())
    for x in data[600:]:
        assert same(w2.push(x), oracle.push(x))
    w2.check_invariants()
    w2.flush()
    assert w2.store.delete_window() > 0
    assert not RedisStore.exists(url, wid)
    w2.close()


def test_many_windows_spread_over_the_primaries(redis_cluster: RedisCluster) -> None:
    policy = CountPolicy(30)
    windows = []
    for i in range(12):
        w = AmortizedMTA(
            NUM, policy, store=RedisStore(redis_cluster.cluster_url, window_id=unique(f"m{i}"))
        )
        w.extend(rows(100, seed=i))
        w.flush()
        windows.append(w)
    served_by = {redis_cluster.primary_for_key(w.store.keys.meta).address for w in windows}
    assert len(served_by) >= 2  # 12 random ids: (almost surely) more than one primary
    for i, w in enumerate(windows):
        oracle = NaiveWindow(NUM, policy)
        oracle.extend(rows(100, seed=i))
        again = AmortizedMTA.open(w.window_id, NUM, policy, url=redis_cluster.url)
        assert same(again.query(), oracle.query())
        again.close()
        w.close()


# ----------------------------------------------------------------------------- failover
@pytest.mark.slow
def test_a_failover_keeps_what_wait_acknowledged_and_the_client_finds_the_new_primary(
    own_cluster: RedisCluster,
) -> None:
    """Writes acknowledged by ``WAIT 1`` survive a kill -9 of their primary; meanwhile the
    client reports unavailability (never a wrong answer), and once the replica is promoted it
    writes there by itself.

        primary P (slots of the stream)  --kill -9-->  x
        replica R  --(1 node timeout + election)-->  primary
    """
    client = connect(own_cluster.cluster_url, timeout=1.0)
    journal, fence = stream_keys(unique("failover"))
    # a Script run on the pipeline is loaded on the pipeline's node first: the promoted
    # replica does not have the scripts of its primary (SCRIPT LOAD is not replicated)
    append = client.register_script(FENCED_APPEND)
    for i in range(50):
        pipe = pipeline_on_key_node(client, journal)
        append(keys=[journal, fence], args=[1, f"waited {i}"], client=pipe)
        pipe.execute_command("WAIT", 1, 5000)
        assert pipe.execute() == [i + 1, 1]
    tx_client = connect(own_cluster.url, timeout=1.0)  # its slot map goes stale: transactions only
    assert tx_client.llen(journal) == 50
    old = own_cluster.primary_for_key(journal)
    (replica,) = own_cluster.replicas_of(old)
    own_cluster.kill_node(old)
    failures: list[BaseException] = []
    deadline = time.monotonic() + 30
    while True:  # until the promoted replica takes the write
        try:
            pipe = pipeline_on_key_node(client, journal)
            append(keys=[journal, fence], args=[1, "after"], client=pipe)
            n, _ = pipe.execute_command("WAIT", 0, 0).execute()
            break
        except Exception as ex:
            if not is_unavailable(ex) or time.monotonic() > deadline:
                raise
            failures.append(ex)
            time.sleep(0.05)
    assert failures  # the node was down for a while: it said so
    assert any(isinstance(ex, KeyNodeUnavailableError) for ex in failures)
    new = own_cluster.wait_promoted(own_cluster.range_of_slot(own_cluster.slot_of(journal)), old)
    assert new is replica and own_cluster.primary_for_key(journal) is replica
    entries = client.lrange(journal, 0, -1)
    assert entries[:50] == [f"waited {i}".encode() for i in range(50)]
    assert entries[50:] == [b"after"] and n == 51
    assert client.get(fence) == b"1"
    # plain commands on the same client go to the new primary too
    client.rpush(journal, b"plain")
    assert client.llen(journal) == 52
    # and a MULTI from a client that never saw the failover finds it (a slot-map refresh on
    # its first connection error, not on its 5th)
    deadline = time.monotonic() + 30
    while True:
        try:
            tx = tx_client.pipeline(transaction=True)
            tx.llen(journal)
            tx.get(fence)
            assert tx.execute() == [52, b"1"]
            break
        except redis.ConnectionError:
            assert time.monotonic() < deadline, "the transaction never found the new primary"
            time.sleep(0.05)


@pytest.mark.slow
@pytest.mark.parametrize("cls", ALGS)
def test_a_durable_window_survives_the_failover_of_its_primary(
    own_cluster: RedisCluster, cls: Any
) -> None:
    """Push with idempotency keys; a ``WAIT 1`` barrier on the window's node makes everything
    before it acknowledged by the replica; kill -9 the primary. Meanwhile every call fails with
    StoreUnavailableError (or succeeds); after the promotion the window reloads a state that
    holds every acknowledged batch and equals the oracle over exactly the batches it says it
    applied, and goes on."""
    policy = TimeRangePolicy(60, field="t")
    wid = unique(f"failover-{cls.__name__}")
    url = own_cluster.cluster_url
    store = RedisStore(url, window_id=wid, durable=True, timeout=1.0, **SMALL)
    w = cls(REC, policy, store=store, debug=True)
    data = rows(600)
    producer = "p"
    for seq in range(200):
        w.push(data[seq], producer_id=producer, sequence=seq)
    # the barrier: a write in the window's slot + WAIT 1 on the same connection; the replica
    # then has every write made before it (replication keeps the primary's order)
    client = connect(url)
    pipe = pipeline_on_key_node(client, w.store.keys.meta)
    pipe.set(f"test:{{{tag_of(w.store.keys.meta)}}}:barrier", b"1")
    pipe.execute_command("WAIT", 1, 5000)
    assert pipe.execute() == [True, 1]
    acked = 199
    for seq in range(200, 260):  # acknowledged by the primary only: may be lost
        w.push(data[seq], producer_id=producer, sequence=seq)
    old = own_cluster.primary_for_key(w.store.keys.meta)
    own_cluster.kill_node(old)

    failures = 0
    pushed = 0
    deadline = time.monotonic() + 30
    while pushed < 20:  # push on through the failover
        try:
            if w.stale:
                w.reload()
            seq = (w.last_sequence(producer) or 0) + 1
            w.push(data[seq], producer_id=producer, sequence=seq)
            pushed += 1
        except StoreUnavailableError:
            failures += 1
            assert time.monotonic() < deadline, "the window did not recover from the failover"
            time.sleep(0.05)
    assert failures > 0  # the primary was gone for a while and the store said so
    own_cluster.wait_promoted(own_cluster.range_of_slot(own_cluster.slot_of(store.keys.meta)), old)

    applied = w.last_sequence(producer)
    assert applied is not None and applied >= acked + 20
    oracle = NaiveWindow(REC, policy)
    oracle.extend(data[: applied + 1])
    assert len(w) == len(oracle) and same(w.query(), oracle.query())
    w.check_invariants()
    # reopened from the promoted replica by another process's view: the same state
    w.flush()
    again = cls.open(wid, REC, policy, url=own_cluster.url, durable=True, **SMALL)
    assert again.last_sequence(producer) == applied
    assert same(again.query(), oracle.query())
    for seq in range(applied + 1, applied + 50):
        assert same(
            again.push(data[seq], producer_id=producer, sequence=seq), oracle.push(data[seq])
        )
    again.close()


@pytest.mark.slow
def test_kill_primary_returns_the_promoted_replica_and_the_old_primary_rejoins_as_its_replica(
    own_cluster: RedisCluster,
) -> None:
    client = connect(own_cluster.cluster_url, timeout=1.0)
    key = next(
        f"k{i}" for i in range(100) if own_cluster.range_of_slot(client.keyslot(f"k{i}")) == 2
    )
    pipe = pipeline_on_key_node(client, key)
    pipe.set(key, b"kept")
    pipe.execute_command("WAIT", 1, 5000)
    assert pipe.execute() == [True, 1]
    old = own_cluster.primaries()[2]
    (replica,) = own_cluster.replicas_of(old)
    new = own_cluster.kill_primary(2)
    assert new is replica and own_cluster.primaries()[2] is new and not old.alive
    own_cluster.restart_node(old)
    own_cluster.wait_ok(replicas=1)  # every primary has a replica again: old follows new
    assert own_cluster.replicas_of(new) == [old]
    assert client.get(key) == b"kept"
