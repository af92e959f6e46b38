"""Membership, leases and fencing (server/storage/membership.py, leases.py,
fencing.py, server/service/ownership.py),
on a real Redis and real server processes.

The promises attacked here: one writer per stream (a stale owner's every write is refused by
Redis, atomically, whatever it was paused in the middle of), a live owner per stream (a dead
one's streams move within the lease), and moves that lose nothing acknowledged.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import redis
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from mtawindows.server.service.ownership import Ownership
from mtawindows.server.service.registry import Registry
from mtawindows.server.storage.fencing import Fence, FencedError, fenced
from mtawindows.server.storage.journal import StreamJournal
from mtawindows.server.storage.leases import Leases
from mtawindows.server.storage.membership import Membership
from mtawindows.testing import LocalCluster, RedisCluster
from mtawindows.v1 import windows_pb2 as pb
from mtawindows.v1 import windows_pb2_grpc as pb_grpc
from mtawindows.v1.placement import place
from mtawindows.v1.types import Field, StreamSpec

pytestmark = [pytest.mark.redis]


def _prefix() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture
def client(redis_url: str) -> Iterator[Any]:
    c = redis.Redis.from_url(redis_url)
    yield c
    c.close()


# --------------------------------------------------------------------------- leases


def test_a_lease_has_one_holder_and_each_acquisition_a_newer_token(client: Any) -> None:
    prefix = _prefix()
    a = Leases(client, prefix, "a:1", "inc-a", "a:1", ttl_ms=1000)
    b = Leases(client, prefix, "b:1", "inc-b", "b:1", ttl_ms=1000)
    ours, other = a.acquire("s")
    assert ours is not None and other is None and ours.member == "a:1"
    theirs, holder = b.acquire("s")
    assert theirs is None and holder is not None and holder.member == "a:1"
    assert holder.token == ours.token
    seen_a, seen_b = a.holder("s"), b.holder("s")
    assert seen_a is not None and seen_b is not None
    assert (seen_a.member, seen_a.token) == (seen_b.member, seen_b.token) == ("a:1", ours.token)
    # a restarted incarnation of the same member takes it back at once, with a newer token
    a2 = Leases(client, prefix, "a:1", "inc-a2", "a:1", ttl_ms=1000)
    again, _ = a2.acquire("s")
    assert again is not None and again.token > ours.token
    # the first incarnation cannot renew it any more: the fence moved on
    assert a.renew({"s": Fence(a.keys("s")[1], ours.token)}) == {"s": False}
    assert a2.renew({"s": Fence(a.keys("s")[1], again.token)}) == {"s": True}
    # released: free for anyone; b's token is newer still
    assert a2.release("s", again.token)
    got, _ = b.acquire("s")
    assert got is not None and got.token > again.token


def test_a_lease_runs_out_and_another_member_takes_it(client: Any) -> None:
    prefix = _prefix()
    a = Leases(client, prefix, "a:1", "i", "a:1", ttl_ms=200)
    b = Leases(client, prefix, "b:1", "j", "b:1", ttl_ms=200)
    ours, _ = a.acquire("s")
    assert ours is not None
    assert b.acquire("s")[0] is None
    deadline = time.monotonic() + 5
    while a.holder("s") is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    theirs, _ = b.acquire("s")
    assert theirs is not None and theirs.token == ours.token + 1
    # a forced acquisition (a store this server just started) takes it from any holder
    forced, _ = a.acquire("s", force=True)
    assert forced is not None and forced.token == theirs.token + 1


def test_a_stale_token_writes_nothing_not_even_half_a_write(client: Any) -> None:
    prefix = _prefix()
    a = Leases(client, prefix, "a:1", "i", "a:1", ttl_ms=1000)
    b = Leases(client, prefix, "b:1", "j", "b:1", ttl_ms=1000)
    ours, _ = a.acquire("s")
    assert ours is not None
    fence_a = Fence(a.keys("s")[1], ours.token)
    tag = "{s}"
    k1, k2 = f"{prefix}:{tag}:x", f"{prefix}:{tag}:y"
    fenced(client, fence_a, [("SET", k1, ("1",)), ("RPUSH", k2, ("a",))])
    assert client.get(k1) == b"1"
    a.release("s", ours.token)
    theirs, _ = b.acquire("s")
    assert theirs is not None
    with pytest.raises(FencedError, match="FENCED"):
        fenced(client, fence_a, [("SET", k1, ("2",)), ("RPUSH", k2, ("b",))])
    assert fence_a.lost
    assert client.get(k1) == b"1" and client.lrange(k2, 0, -1) == [b"a"]
    fenced(client, Fence(b.keys("s")[1], theirs.token), [("SET", k1, ("3",))])
    assert client.get(k1) == b"3"


def test_the_journal_of_a_stale_owner_refuses_every_write(client: Any) -> None:
    prefix = _prefix()
    a = Leases(client, prefix, "a:1", "i", "a:1", ttl_ms=1000)
    ours, _ = a.acquire("s")
    assert ours is not None
    j = StreamJournal(client, prefix, "s", Fence(a.keys("s")[1], ours.token))
    j.append(1, "p", 1, "NONE", [], {"x": ("doubles", [1.0])})
    a.acquire("s", force=True)  # a newer owner (same member, new token)
    for write in (
        lambda: j.append(2, "p", 2, "NONE", [], {"x": ("doubles", [2.0])}),
        lambda: j.commit_state("{}", 1),
        lambda: j.save_state("{}"),
        j.drop_journal,
        j.delete,
    ):
        with pytest.raises(FencedError):
            write()
    assert [e.lsn for e in j.entries()] == [1]
    assert j.load_state() is None


def test_members_see_each_other_and_forget_the_silent(client: Any) -> None:
    prefix = _prefix()
    a = Membership(client, prefix, "a:1", "i", "a:1", ttl_ms=300)
    b = Membership(client, prefix, "b:1", "j", "b:1", ttl_ms=300)
    a.beat(3)
    seen = b.beat(0)
    assert sorted(seen) == ["a:1", "b:1"] and seen["a:1"].streams == 3
    time.sleep(0.5)  # a stops beating
    assert sorted(b.beat(0)) == ["b:1"]
    a.beat(0, leave=False)
    assert sorted(b.beat(0)) == ["a:1", "b:1"]
    a.beat(0, leave=True)
    assert sorted(b.beat(0)) == ["b:1"]


# --------------------------------------------------------------------------- ownership


def _columns(ts: list[int], xs: list[float]) -> dict[str, tuple[str, list[Any]]]:
    return {"ts": ("TIMESTAMP", ts), "x": ("DOUBLE", xs)}


def _registry(url: str, prefix: str) -> Registry:
    return Registry(url, prefix=prefix)


def _make(reg: Registry, own: Ownership, name: str, durable: bool = True) -> None:
    from mtawindows.v1.types import Aggregation, Policy, Storage, WindowSpec

    fence = own.claim(name)
    reg.create_stream(StreamSpec(name, (Field("x", "DOUBLE"),), wall_clock=False), fence)
    reg.create_window(
        WindowSpec(
            name,
            "w",
            (Aggregation("n", "count"), Aggregation("s", "sum", "x")),
            Policy.count(10_000),
            storage=Storage("redis", durable=durable, block_size=16, cache_size=16),
        )
    )


def test_streams_move_when_a_member_joins_and_nothing_acknowledged_is_lost(
    redis_url: str,
) -> None:
    prefix = _prefix()
    ra, rb = _registry(redis_url, prefix), _registry(redis_url, prefix)
    # leases far longer than the test: a's must not lapse before b looks (nothing renews
    # them here; under load, making twelve streams took past a 1 s lease and b adopted all)
    a = Ownership(ra, member="a:1", address="a:1", lease_ms=30_000)
    a.membership.beat(0)
    names = [f"s{i}" for i in range(12)]
    for n in names:
        _make(ra, a, n)
    for k, n in enumerate(names):
        ra.streams[n].append(_columns(list(range(1, 101)), [float(k)] * 100))
    b = Ownership(rb, member="b:1", address="b:1", lease_ms=30_000)
    b.membership.beat(0)
    a.membership.beat(len(names))
    a.rebalance()  # releases the streams placed on b (flushed)
    moved = [n for n in names if place(n, ["a:1", "b:1"]) == "b:1"]
    assert moved and sorted(set(names) - set(ra.streams)) == sorted(moved)
    b.rebalance()  # adopts them
    assert sorted(rb.streams) == sorted(moved)
    for n in moved:
        r = rb.result(n, "w")
        assert r.values["n"] == 100 and r.values["s"] == 100.0 * names.index(n)
        assert rb.streams[n].fence is not None
    # a write of a by a stale handle of a moved stream is refused: nothing applied
    a.stop(release=True)
    b.stop(release=True)
    ra.close()
    rb.close()


def test_a_paused_owner_loses_the_stream_and_every_write_it_tries_is_refused(
    redis_url: str,
) -> None:
    """In process: owner a is 'paused' (no renewals) past its lease, b takes the stream and
    writes; a, resumed, still holding its Stream object, tries to append and flush: refused
    by Redis, and b's window holds exactly the rows acknowledged by either."""
    prefix = _prefix()
    ra, rb = _registry(redis_url, prefix), _registry(redis_url, prefix)
    a = Ownership(ra, member="a:1", address="a:1", lease_ms=300)
    a.membership.beat(0)
    _make(ra, a, "s")
    sa = ra.streams["s"]
    sa.append(_columns([1, 2, 3], [1.0, 2.0, 3.0]))  # acknowledged by a
    time.sleep(0.5)  # a is paused: its lease and its membership run out
    b = Ownership(rb, member="b:1", address="b:1", lease_ms=300)
    b.membership.beat(0)
    got = b.route("s")  # placed on b now (a is not live): adopted
    assert got is rb.streams["s"]
    got.append(_columns([4], [10.0]))
    # a resumes: its stale Stream tries to write
    with pytest.raises(Exception, match=r"moved|FENCED|nothing was applied"):
        sa.append(_columns([5, 6], [100.0, 100.0]))
    with pytest.raises(Exception):  # noqa: B017 - a flush is refused too (FENCED)
        ra.flush(sa, final=True)
    assert sa.fence is not None and sa.fence.lost
    # and a's own check sends callers to b
    a.renew()
    assert "s" not in ra.streams
    r = rb.result("s", "w")
    assert r.values["n"] == 4 and r.values["s"] == 16.0
    b.stop()
    ra.close()
    rb.close()


# --------------------------------------------------------------------------- processes


def _reason(ex: grpc.RpcError) -> tuple[str, dict[str, str]]:
    st = rpc_status.from_call(ex)  # type: ignore[arg-type]
    assert st is not None
    for d in st.details:
        info = error_details_pb2.ErrorInfo()
        if d.Unpack(info):
            return info.reason, dict(info.metadata)
    return "", {}


def _spec(name: str) -> pb.StreamSpec:
    return pb.StreamSpec(
        name=name,
        timestamp_field="ts",
        fields=[pb.FieldSpec(name="x", type=pb.DOUBLE)],
        not_wall_clock=True,  # timestamps: small numbers
    )


def _window(name: str) -> pb.WindowSpec:
    return pb.WindowSpec(
        stream=name,
        name="w",
        aggregations=[
            pb.Aggregation(name="n", monoid="count"),
            pb.Aggregation(name="s", monoid="sum", field="x"),
        ],
        policy=pb.SlidePolicy(count=pb.CountPolicy(size=100_000)),
        storage=pb.Storage(kind=pb.REDIS, durable=True),
    )


def _append(stream: str, ts: list[int], xs: list[float], seq: int) -> pb.AppendRequest:
    return pb.AppendRequest(
        stream=stream,
        columns=[
            pb.Column(name="ts", timestamps=pb.Int64List(values=ts)),
            pb.Column(name="x", doubles=pb.DoubleList(values=xs)),
        ],
        producer_id="test",
        sequence=seq,
    )


@pytest.mark.server
@pytest.mark.slow
def test_sigstopped_owner_is_fenced_out_and_stops_serving(tmp_path: Path) -> None:
    """SIGSTOP the owner past its lease, let the other server take the stream and write,
    SIGCONT the old one: what it tries is refused, it serves the stream no more, and the
    window holds exactly what was acknowledged."""
    cluster = LocalCluster(2, "--lease-ms", "600", data_dir=tmp_path).start()
    a, b = cluster.servers
    stubs = {s.target: pb_grpc.WindowServiceStub(grpc.insecure_channel(s.target)) for s in (a, b)}
    try:
        # a stream placed on a (its name chosen so), created there
        name = next(
            f"s{i}" for i in range(1000) if place(f"s{i}", [a.target, b.target]) == a.target
        )
        sa = stubs[a.target]
        sa.CreateStream(pb.CreateStreamRequest(spec=_spec(name)), timeout=10)
        sa.CreateWindow(pb.CreateWindowRequest(spec=_window(name)), timeout=10)
        acked = 0.0
        rows = 0
        for seq in range(1, 6):
            sa.Append(_append(name, [seq], [float(seq)], seq), timeout=10)
            acked += seq
            rows += 1
        # b redirects to a while a lives
        with pytest.raises(grpc.RpcError) as info:
            stubs[b.target].Query(pb.QueryRequest(stream=name, window="w"), timeout=10)
        assert _reason(info.value) == (
            "NOT_OWNER",
            {"stream": name, "owner": a.target, "owner_id": a.target, "token": "1"},
        )
        os.kill(a.pid, signal.SIGSTOP)
        try:
            deadline = time.monotonic() + 20
            while True:  # b takes the stream once a's lease ran out
                try:
                    stubs[b.target].Append(_append(name, [10], [100.0], 10), timeout=5)
                    break
                except grpc.RpcError as ex:
                    reason, _ = _reason(ex)
                    assert reason in ("NOT_OWNER", "STREAM_MOVING"), ex
                    assert time.monotonic() < deadline
                    time.sleep(0.1)
            acked += 100.0
            rows += 1
        finally:
            os.kill(a.pid, signal.SIGCONT)
        # a, resumed, is asked to write: refused, sent to b (before its next heartbeat a knows
        # its view is stale: MEMBER_ISOLATED naming b; after it, NOT_OWNER naming b)
        with pytest.raises(grpc.RpcError) as info:
            sa.Append(_append(name, [11], [1000.0], 11), timeout=10)
        reason, meta = _reason(info.value)
        if reason == "MEMBER_ISOLATED":  # its view is stale: call the others (b)
            assert b.target in meta["members"].split(","), meta
        else:
            assert reason == "NOT_OWNER" and meta["owner"] == b.target, (reason, meta)
        r = stubs[b.target].Query(pb.QueryRequest(stream=name, window="w"), timeout=10)
        assert r.values["n"].int_value == rows and r.values["s"].double_value == acked
        assert "lost the lease" in a.log.read_text() or "adopted" in b.log.read_text()
    finally:
        cluster.close()


@pytest.mark.server
@pytest.mark.slow
def test_a_killed_owner_s_streams_move_and_keep_every_acknowledged_row(tmp_path: Path) -> None:
    cluster = LocalCluster(2, "--lease-ms", "1000", data_dir=tmp_path).start()
    a, b = cluster.servers
    stub_a = pb_grpc.WindowServiceStub(grpc.insecure_channel(a.target))
    stub_b = pb_grpc.WindowServiceStub(grpc.insecure_channel(b.target))
    try:
        name = next(
            f"k{i}" for i in range(1000) if place(f"k{i}", [a.target, b.target]) == a.target
        )
        stub_a.CreateStream(pb.CreateStreamRequest(spec=_spec(name)), timeout=10)
        stub_a.CreateWindow(pb.CreateWindowRequest(spec=_window(name)), timeout=10)
        for seq in range(1, 21):
            stub_a.Append(_append(name, [seq], [1.0], seq), timeout=10)
        a.kill()
        t0 = time.monotonic()
        while True:
            try:
                r = stub_b.Append(_append(name, [20], [1.0], 20), timeout=5)  # a retry
                break
            except grpc.RpcError as ex:
                assert _reason(ex)[0] in ("NOT_OWNER", "STREAM_MOVING"), ex
                assert time.monotonic() - t0 < 15
                time.sleep(0.05)
        assert r.duplicate  # applied once, before the kill
        q = stub_b.Query(pb.QueryRequest(stream=name, window="w"), timeout=10)
        assert q.values["n"].int_value == 20
        a.start()  # back on its port (the same member): the stream is placed on it again
        deadline = time.monotonic() + 20
        while True:
            try:
                q = stub_a.Query(pb.QueryRequest(stream=name, window="w"), timeout=5)
                break
            except grpc.RpcError as ex:
                assert _reason(ex)[0] in ("NOT_OWNER", "STREAM_MOVING", ""), ex
                assert time.monotonic() < deadline
                time.sleep(0.1)
        assert q.values["n"].int_value == 20
    finally:
        cluster.close()


# --------------------------------------------------------------------------- Redis Cluster


@pytest.mark.server
@pytest.mark.slow
def test_servers_on_redis_cluster_survive_a_primary_failover(tmp_path: Path) -> None:
    """Two servers on a real Redis Cluster (3 primaries, a replica each) with
    ``--redis-wait-replicas 1``: streams over every primary, definitions, leases, fences and
    windows across slots; the primary holding a stream is killed: calls fail clearly
    (UNAVAILABLE) meanwhile, then succeed, and every acknowledged row is there."""
    with RedisCluster() as rc:
        args = ("--redis-wait-replicas", "1", "--lease-ms", "1500")
        cluster = LocalCluster(2, *args, redis_url=rc.cluster_url, data_dir=tmp_path).start()
        targets = cluster.targets
        stubs = {t: pb_grpc.WindowServiceStub(grpc.insecure_channel(t)) for t in targets}

        def call(name: str, fn: Any, deadline: float = 30.0) -> Any:
            t = place(name, targets) or targets[0]
            end = time.monotonic() + deadline
            while True:
                try:
                    return fn(stubs[t])
                except grpc.RpcError as ex:
                    reason, meta = _reason(ex)
                    if reason == "NOT_OWNER":
                        t = meta["owner"]
                    elif ex.code() != grpc.StatusCode.UNAVAILABLE or time.monotonic() > end:
                        raise
                    time.sleep(0.1)

        try:
            names = [f"c{i}" for i in range(9)]
            slots = {rc.primary_for_key(f"{{{n}}}").address for n in names}
            assert len(slots) >= 2  # the streams spread over primaries
            acked: dict[str, int] = {}
            for n in names:
                call(n, lambda s, n=n: s.CreateStream(pb.CreateStreamRequest(spec=_spec(n))))
                call(n, lambda s, n=n: s.CreateWindow(pb.CreateWindowRequest(spec=_window(n))))
                for seq in range(1, 4):
                    call(n, lambda s, n=n, seq=seq: s.Append(_append(n, [seq], [1.0], seq)))
                acked[n] = 3
            victim = names[0]
            primary = rc.primary_for_key(f"{{{victim}}}")
            i = [p.address for p in rc.primaries()].index(primary.address)
            rc.kill_primary(i)  # returns once its replica is promoted
            for n in names:  # every acknowledged row survived; appends go on
                for seq in range(4, 6):
                    call(n, lambda s, n=n, seq=seq: s.Append(_append(n, [seq], [1.0], seq)))
                acked[n] += 2
            for n in names:
                q = call(n, lambda s, n=n: s.Query(pb.QueryRequest(stream=n, window="w")))
                assert q.values["n"].int_value == acked[n], n
        finally:
            cluster.close()


# --------------------------------------------------------------------------- found from outside


@pytest.mark.parametrize("met", ["anywhere", "answering"])
def test_an_append_journaled_before_its_stream_moved_is_not_answered_nothing_done(
    redis_url: str, monkeypatch: pytest.MonkeyPatch, met: str
) -> None:
    """A batch that reached the journal, then met the fence in a window's write: the new
    owner applies it from the journal, so the answer must not be NOT_OWNER ("nothing was
    done") but UNAVAILABLE asking for a resend with the same key (a duplicate then).
    ``answering``: the refused background write is met while the answer is built, after the
    windows took the batch (CI met it there once: a raw FencedError left the append)."""
    from mtawindows.server.engine.columnar import window as columnar
    from mtawindows.server.service.refusals import ServiceError
    from mtawindows.server.service.stream import Stream
    from mtawindows.server.storage.protocol import StoreError

    # the window keeps its rows as columns: every sealed slice written at once (not 32 to a
    # write), so that a write meets the fence within the batches below
    monkeypatch.setattr(columnar, "WRITE_SLICES", 1)

    prefix = _prefix()
    reg = _registry(redis_url, prefix)
    own = Ownership(reg, member="a:1", address="a:1", lease_ms=60_000)
    own.membership.beat(0)
    _make(reg, own, "s")
    s = reg.streams["s"]
    store = s.windows["w"].engine.store
    assert s.fence is not None and store.fence is s.fence
    store.fence = Fence(s.fence.key, s.fence.token + 1000)  # not the stream's token
    if met == "answering":
        finish = Stream._finish

        def settled(self: Stream, batch: Any) -> Any:
            if self is s:  # (not the new owner's replay below)
                with contextlib.suppress(StoreError):
                    store.sync()  # the window's writes land (or fail) before the answer
            return finish(self, batch)

        monkeypatch.setattr(Stream, "_finish", settled)
    n = 0
    with pytest.raises(ServiceError) as info:
        for seq in range(1, 200):  # until a background block write was refused
            s.append(
                _columns(list(range(n + 1, n + 41)), [1.0] * 40), producer_id="p", sequence=seq
            )
            n += 40
    # A write refused after its batch was journaled: UNAVAILABLE, resend (the new owner has
    # it). One met before (a background write of an earlier, answered batch seen as the next
    # append starts, ahead of its journal entry): FENCED, nothing of it done.
    assert info.value.code == "UNAVAILABLE", info.value
    journaled = info.value.reason == "STORE_UNAVAILABLE"
    if journaled:
        assert info.value.metadata.get("fenced") == "1"
    else:
        assert info.value.reason == "FENCED", info.value
    reg.drop("s")
    # the new owner replays the journal: a journaled refused batch is there, its retry a
    # duplicate; one refused before its journal entry is not
    other = _registry(redis_url, prefix)
    b = Ownership(other, member="a:1", address="a:1", lease_ms=60_000)
    got = b.adopt("s")
    assert got is not None
    assert other.result("s", "w").values["n"] == n + (40 if journaled else 0)
    again = got.append(_columns([n + 1], [1.0]), producer_id="p", sequence=seq)
    assert again.duplicate == journaled
    own.stop(release=False)
    b.stop()
    reg.close()
    other.close()


def test_a_second_live_server_with_the_same_member_id_is_refused(redis_url: str) -> None:
    prefix = _prefix()
    ra, rb = _registry(redis_url, prefix), _registry(redis_url, prefix)
    a = Ownership(ra, member="same:1", address="same:1", lease_ms=400)
    a.start()
    b = Ownership(rb, member="same:1", address="same:1", lease_ms=400)
    try:
        with pytest.raises(OSError, match="in use by another live server"):
            b.start()
    finally:
        a.stop()
    # once a stopped heartbeating (it left), the id is free again
    c = Ownership(rb, member="same:1", address="same:1", lease_ms=400)
    c.start()
    c.stop()
    ra.close()
    rb.close()


@pytest.mark.parametrize(
    "value",
    [
        "nonsense",
        "host:notaport",
        "127.0.0.1:0",
        "127.0.0.1:70000",
        ":50051",
        "a b:1",
        "x" * 300 + ":1",
        "0.0.0.0:5",
    ],
)
def test_advertise_must_be_an_address_clients_can_call(value: str) -> None:
    from mtawindows.server.transport.app import check_advertise

    with pytest.raises(ValueError, match="--advertise"):
        check_advertise(value)


def test_advertise_accepts_names_and_addresses() -> None:
    from mtawindows.server.transport.app import check_advertise

    for ok in ("mtaw1:50051", "10.0.0.5:1", "[::1]:50051", "host.example.com:65535"):
        assert check_advertise(ok) == ok


def test_a_seed_port_out_of_range_is_refused() -> None:
    from mtawindows.client.routing import split_targets

    with pytest.raises(ValueError, match="1-65535"):
        split_targets("127.0.0.1:50051,127.0.0.1:99999")
    assert split_targets("unix:/tmp/x.sock") == ("unix:/tmp/x.sock",)


def test_a_paused_member_whose_id_a_newer_server_took_steps_down(redis_url: str) -> None:
    """A pauses past its heartbeat, B starts with A's member id (allowed: A looks dead), A
    resumes: A sees the newer incarnation under its id and steps down, dropping its streams
    without a write; B keeps serving (no endless fight over the leases)."""
    prefix = _prefix()
    ra, rb = _registry(redis_url, prefix), _registry(redis_url, prefix)
    a = Ownership(ra, member="dup:1", address="dup:1", lease_ms=400)
    a.membership.beat(0)
    _make(ra, a, "s")
    time.sleep(0.5)  # a is paused: its heartbeat goes stale
    b = Ownership(rb, member="dup:1", address="dup:1", lease_ms=400)
    b.start()
    try:
        stopped: list[bool] = []
        a.on_usurped = lambda: stopped.append(True)
        a._heartbeat()  # a resumes
        assert a.usurped and stopped == [True]
        assert "s" not in ra.streams and not a.fences
        b._heartbeat()
        assert not b.usurped
        got = b.route("s")
        assert got is rb.streams["s"]
    finally:
        b.stop()
        a.stop()
        ra.close()
        rb.close()


def test_a_view_stale_from_a_pause_is_refreshed_by_the_call_not_refused(
    redis_url: str,
) -> None:
    """A member whose view went stale while its process was paused (a long garbage
    collection: no heartbeat failed, none under way) beats once when a call routes, and
    serves it; one whose last heartbeat was not answered refuses at once (MEMBER_ISOLATED)
    without trying the store again, until a heartbeat is answered."""
    from mtawindows.server.service.refusals import ServiceError
    from mtawindows.server.storage.protocol import StoreUnavailableError
    from mtawindows.v1.reasons import Reason

    prefix = _prefix()
    reg = _registry(redis_url, prefix)
    a = Ownership(reg, member="a:1", address="a:1", lease_ms=1000)
    a._beat()
    _make(reg, a, "s")
    a.beat_ok -= 5.0  # as after a five-second pause of the process
    assert a.isolated() and a.paused()
    assert a.route("s") is reg.streams["s"]  # beat once, then served
    assert not a.isolated()

    calls = 0
    real = a.membership.beat

    def unanswered(*args: Any, **kw: Any) -> Any:
        nonlocal calls
        calls += 1
        raise StoreUnavailableError("heartbeat: Redis is unavailable (test)")

    a.membership.beat = unanswered  # type: ignore[method-assign]
    with pytest.raises(StoreUnavailableError):
        a._beat()  # the heartbeat thread's beat fails
    a.beat_ok -= 5.0
    assert a.isolated() and not a.paused()
    with pytest.raises(ServiceError) as info:
        a.route("s")
    assert info.value.reason == Reason.MEMBER_ISOLATED
    assert calls == 1  # refused without a round trip to the store
    a.membership.beat = real  # type: ignore[method-assign]
    a._beat()  # answered again: serving
    assert not a.isolated() and a.route("s") is reg.streams["s"]
    a.stop(release=True)
    reg.close()


def test_time_stood_still_in_a_full_collection_does_not_age_the_view(redis_url: str) -> None:
    """Half a second in a full garbage collection (a callback of the collector sleeps in it,
    as a million keys' states make it last) does not cut the member off: its view's age
    leaves that time out. A stall of the same length outside the collector does."""
    import gc

    prefix = _prefix()
    reg = _registry(redis_url, prefix)
    a = Ownership(reg, member="a:1", address="a:1", lease_ms=400)  # isolated past 200 ms
    a._beat()

    def slow(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and info.get("generation") == 2:
            time.sleep(0.5)

    gc.callbacks.append(slow)
    try:
        t0 = time.monotonic()
        gc.collect()
    finally:
        gc.callbacks.remove(slow)
    assert time.monotonic() - t0 >= 0.5
    assert a.view_age_ms() < 200 and not a.isolated()
    time.sleep(0.3)  # not the collector: the view ages
    assert a.isolated()
    a.stop(release=False)
    reg.close()
