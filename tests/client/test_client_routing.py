"""The SDK's routing over a cluster, against real gRPC servers on loopback that keep the
cluster's contract by script (:class:`FakeCluster`: members that answer ``GetClusterMap``,
refuse a stream they do not own with ``NOT_OWNER``, a moving one with ``STREAM_MOVING``, and
die on demand), plus the pure parts: the topology (fake clock), each call's course, per-key
stream names and the connector's use of one cluster-aware client.

The servers' side of the contract is tested with the real servers in
``tests/cluster/test_cluster_routing.py``.
"""

from __future__ import annotations

import asyncio
import json
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from mtawindows.client import (
    AsyncWindowClient,
    ClusterMap,
    FailedPreconditionError,
    NotOwnerError,
    RedirectLoopError,
    Router,
    StreamMovingError,
    UnavailableError,
    WindowClient,
    calls,
)
from mtawindows.client.cluster_map import Topology, seeds_of
from mtawindows.client.errors import MtaWindowsError, from_rpc_error
from mtawindows.client.routing import split_targets, stable_hash
from mtawindows.spark_connector import ConnectorError, ConnectorOptions
from mtawindows.testing import free_port
from mtawindows.v1 import windows_pb2 as pb
from mtawindows.v1 import windows_pb2_grpc as pb_grpc
from mtawindows.v1.placement import place
from mtawindows.v1.reasons import DOMAIN, Reason

# --------------------------------------------------------------------------- a scripted cluster


def _abort(context: grpc.ServicerContext, code: grpc.StatusCode, reason: str, **md: str) -> None:
    info = error_details_pb2.ErrorInfo(reason=reason, domain=DOMAIN, metadata=md)
    detail = any_pb2.Any()
    detail.Pack(info)
    status = status_pb2.Status(code=code.value[0], message=f"scripted {reason}", details=[detail])
    context.abort_with_status(rpc_status.to_status(status))


class FakeMember(pb_grpc.WindowServiceServicer):
    """One member: a real gRPC server on a loopback port, keeping the cluster's contract over
    the state its :class:`FakeCluster` shares. ``claims``: streams it names another owner of
    (whatever the cluster says: a member that disagrees); ``events``: what its subscriptions
    send (a batch number, or None: the stream moved, end with NOT_OWNER); ``isolated``: its
    map says it is cut off from the cluster; ``hang``: streams whose appends it holds until
    the call ends (a server stuck on its Redis). A call asking to be forwarded
    (``mtawindows-forward: 1``) for a stream another member owns is served here as the
    owner's (what a real member's forwarding gives the client), seen as ``forward <method>``."""

    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster
        self.claims: dict[str, str] = {}
        self.events: queue.Queue[int | None] = queue.Queue()
        self.lose_ack: set[str] = set()  # apply an append, then fail as a dying server
        self.isolated = False
        self.hang: set[str] = set()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        pb_grpc.add_WindowServiceServicer_to_server(self, self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.address = f"127.0.0.1:{self.port}"
        self.up = True
        self.server.start()

    def kill(self) -> None:
        self.up = False
        self.server.stop(None)

    def _check(self, method: str, stream: str, context: grpc.ServicerContext) -> None:
        c = self.cluster
        with c.lock:
            c.seen.append((self.address, method, stream))
            moving = c.moving.get(stream, 0)
            if moving:
                c.moving[stream] = moving - 1
            owner = self.claims.get(stream) or c.owner_of(stream)
            md = dict(context.invocation_metadata() or ())
            if owner != self.address and md.get("mtawindows-forward") == "1":
                c.seen.append((self.address, f"forward {method}", stream))
                owner = self.address  # the owner's answer, through this member
        if moving:
            _abort(context, grpc.StatusCode.UNAVAILABLE, Reason.STREAM_MOVING,
                   stream=stream, retry_after_ms="1")  # fmt: skip
        if owner != self.address:
            _abort(context, grpc.StatusCode.FAILED_PRECONDITION, Reason.NOT_OWNER,
                   stream=stream, owner=owner, owner_id=owner, token="7")  # fmt: skip

    def GetClusterMap(self, request: Any, context: grpc.ServicerContext) -> pb.ClusterMap:
        c = self.cluster
        with c.lock:
            c.seen.append((self.address, "GetClusterMap", ""))
            live = sorted(m.address for m in c.members if m.up)
            owners = [
                pb.StreamOwner(stream=s, member=c.owner_of(s), address=c.owner_of(s), token=7)
                if not c.moving.get(s)
                else pb.StreamOwner(stream=s)
                for s in request.streams
            ]
        members = [pb.ClusterMember(id=a, address=a, incarnation="i1") for a in live]
        return pb.ClusterMap(
            members=members,
            owners=owners,
            lease_ms=2000,
            view_age_ms=5000 if self.isolated else 10,
            isolated=self.isolated,
            **{"self": self.address},
        )

    def CreateStream(self, request: Any, context: grpc.ServicerContext) -> pb.StreamInfo:
        self._check("CreateStream", request.spec.name, context)
        with self.cluster.lock:
            self.cluster.streams.add(request.spec.name)
        return pb.StreamInfo(spec=request.spec)

    def CreateWindow(self, request: Any, context: grpc.ServicerContext) -> pb.WindowInfo:
        self._check("CreateWindow", request.spec.stream, context)
        return pb.WindowInfo(spec=request.spec)

    def GetStream(self, request: Any, context: grpc.ServicerContext) -> pb.StreamInfo:
        self._check("GetStream", request.name, context)
        spec = pb.StreamSpec(
            name=request.name,
            timestamp_field="ts",
            fields=[pb.FieldSpec(name="x", type=pb.DOUBLE)],
            not_wall_clock=True,  # the tests' timestamps: small numbers
        )
        return pb.StreamInfo(spec=spec)

    def ListStreams(self, request: Any, context: grpc.ServicerContext) -> pb.ListStreamsResponse:
        c = self.cluster
        with c.lock:
            c.seen.append((self.address, "ListStreams", ""))
            mine = sorted(s for s in c.streams if c.owner_of(s) == self.address)
        return pb.ListStreamsResponse(
            streams=[pb.StreamInfo(spec=pb.StreamSpec(name=s)) for s in mine]
        )

    def Append(self, request: Any, context: grpc.ServicerContext) -> pb.AppendResponse:
        self._check("Append", request.stream, context)
        deadline = time.monotonic() + 30
        while request.stream in self.hang and context.is_active():
            assert time.monotonic() < deadline
            time.sleep(0.02)
        if not context.is_active():  # given up by the client: never applied here
            return pb.AppendResponse()
        c = self.cluster
        key = (request.producer_id, request.sequence)
        with c.lock:
            done = c.applied.setdefault(request.stream, [])
            duplicate = bool(request.producer_id) and key in done
            if not duplicate:
                done.append(key)
            lose = request.stream in self.lose_ack
            if lose:  # the batch is applied; this server dies before it answers
                self.lose_ack.discard(request.stream)
                self.up = False
        if lose:
            context.abort(grpc.StatusCode.UNAVAILABLE, "scripted: the server died")
        return pb.AppendResponse(rows_applied=0 if duplicate else 1, duplicate=duplicate)

    def Query(self, request: Any, context: grpc.ServicerContext) -> pb.WindowResult:
        self._check("Query", request.stream, context)
        with self.cluster.lock:
            n = len(self.cluster.applied.get(request.stream, []))
        return pb.WindowResult(window=request.window, size=n)

    def Subscribe(self, request: Any, context: grpc.ServicerContext) -> Iterator[pb.SubscribeEvent]:
        self._check("Subscribe", request.stream, context)
        context.send_initial_metadata((("mtawindows-subscribed", "1"),))
        deadline = time.monotonic() + 60
        while context.is_active() and time.monotonic() < deadline:
            try:
                item = self.events.get(timeout=0.05)
            except queue.Empty:
                continue
            if item is None:
                owner = self.cluster.owner_of(request.stream)
                _abort(context, grpc.StatusCode.FAILED_PRECONDITION, Reason.NOT_OWNER,
                       stream=request.stream, owner=owner, owner_id=owner, token="8")  # fmt: skip
            yield pb.SubscribeEvent(batch=item, result=pb.WindowResult(window=request.window))


class FakeCluster:
    """``n`` :class:`FakeMember` s sharing: the owners of record (``owners``, else placement
    over the live members, as the servers do), streams answering STREAM_MOVING a number of
    times (``moving``), the streams, the idempotency keys applied per stream (``applied``) and
    every call each member saw (``seen``: (address, method, stream))."""

    def __init__(self, n: int) -> None:
        self.lock = threading.RLock()
        self.owners: dict[str, str] = {}
        self.moving: dict[str, int] = {}
        self.streams: set[str] = set()
        self.applied: dict[str, list[tuple[str, int]]] = {}
        self.seen: list[tuple[str, str, str]] = []
        self.members = [FakeMember(self) for _ in range(n)]

    def owner_of(self, stream: str) -> str:
        with self.lock:
            placed = place(stream, [m.address for m in self.members if m.up])
            return self.owners.get(stream) or placed or ""

    def member(self, address: str) -> FakeMember:
        return next(m for m in self.members if m.address == address)

    def calls_at(self, address: str, method: str = "") -> list[str]:
        with self.lock:
            return [s for a, m, s in self.seen if a == address and (not method or m == method)]

    def stop(self) -> None:
        for m in self.members:
            if m.up:
                m.kill()


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    c = FakeCluster(3)
    yield c
    c.stop()


@pytest.fixture(autouse=True)
def _short_pauses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(calls, "backoff", lambda attempt: 0.001)


def placement(stream: str, members: list[str]) -> str:
    """Where placement puts ``stream`` among ``members``."""
    where = place(stream, members)
    assert where is not None
    return where


def stream_not_placed_on(cluster: FakeCluster, address: str, prefix: str = "s") -> str:
    """A stream name that placement puts on another member than ``address``."""
    live = [m.address for m in cluster.members if m.up]
    return next(f"{prefix}{i}" for i in range(1000) if place(f"{prefix}{i}", live) != address)


# --------------------------------------------------------------------------- errors


def test_cluster_refusals_decode_as_typed_errors(cluster: FakeCluster) -> None:
    """NOT_OWNER and STREAM_MOVING, as a raw stub gets them, decode by reason with their
    metadata (the rich google.rpc.Status, never the message)."""
    m0 = cluster.members[0]
    name = stream_not_placed_on(cluster, m0.address)
    with grpc.insecure_channel(m0.address) as ch:
        stub = pb_grpc.WindowServiceStub(ch)
        with pytest.raises(grpc.RpcError) as raw:
            stub.Query(pb.QueryRequest(stream=name, window="w"), timeout=10)
        ex = from_rpc_error(raw.value, m0.address)
        assert isinstance(ex, NotOwnerError) and isinstance(ex, FailedPreconditionError)
        assert (ex.code, ex.reason) == ("FAILED_PRECONDITION", "NOT_OWNER")
        assert ex.metadata["owner"] == cluster.owner_of(name) and ex.metadata["stream"] == name
        cluster.moving["m"] = 1
        with pytest.raises(grpc.RpcError) as raw:
            stub.Query(pb.QueryRequest(stream="m", window="w"), timeout=10)
        moving = from_rpc_error(raw.value, m0.address)
        assert isinstance(moving, StreamMovingError) and isinstance(moving, UnavailableError)
        assert (moving.reason, moving.metadata["retry_after_ms"]) == ("STREAM_MOVING", "1")


# --------------------------------------------------------------------------- routing


def test_calls_go_where_placement_puts_them_and_follow_redirects(cluster: FakeCluster) -> None:
    """One seed is enough: the client learns the members, sends each call where placement
    puts its stream, and where the owner of record is another member (a lease kept after a
    member joined), follows the redirect once and remembers the owner."""
    m0, _m1, m2 = cluster.members
    live = [m.address for m in cluster.members]
    placed = stream_not_placed_on(cluster, m0.address)
    moved = next(f"k{i}" for i in range(1000) if place(f"k{i}", live) != m2.address)
    cluster.owners[moved] = m2.address  # its owner of record is not where placement says
    with WindowClient(m0.address, timeout=10) as c:
        for name in (placed, moved):
            c.create_stream(pb_stream(name))
            for seq in (1, 2):
                c.append(name, {"ts": [seq], "x": [1.0]}, producer_id="p", sequence=seq)
            assert c.query(name, "w").size == 2
        assert c.cluster_map().addresses == tuple(sorted(live))
        assert c.topology.cached_owner(moved) == m2.address == c.owner(moved)
        assert c.owner(placed) == place(placed, live)
    wrong = placement(moved, live)
    assert cluster.calls_at(wrong, "CreateStream").count(moved) == 1  # redirected once
    assert moved not in cluster.calls_at(wrong, "Append") + cluster.calls_at(wrong, "Query")
    assert cluster.applied[moved] == [("p", 1), ("p", 2)]
    assert cluster.calls_at(placement(placed, live)).count(placed) == 5  # create, schema, 2+1


def test_async_client_routes_the_same_way(cluster: FakeCluster) -> None:
    m0, _, m2 = cluster.members
    live = [m.address for m in cluster.members]
    name = next(f"a{i}" for i in range(1000) if place(f"a{i}", live) != m2.address)
    cluster.owners[name] = m2.address

    async def go() -> None:
        async with AsyncWindowClient([m0.address], timeout=10) as c:
            await c.create_stream(pb_stream(name))
            res = await c.append(name, {"ts": [1], "x": [1.0]}, producer_id="p", sequence=1)
            assert res.rows_applied == 1
            assert (await c.query(name, "w")).size == 1
            assert c.topology.cached_owner(name) == m2.address == await c.owner(name)
            cmap = await c.cluster_map()
            assert isinstance(cmap, ClusterMap) and cmap.lease_ms == 2000
            assert sorted(s.spec.name for s in await c.list_streams()) == [name]

    asyncio.run(go())
    assert cluster.calls_at(placement(name, live), "CreateStream") == [name]


def test_servers_that_disagree_for_a_moment_do_not_end_the_call(cluster: FakeCluster) -> None:
    """A failover's moment: m1 says m2 owns the stream, m2 says m1 (one of them has not seen
    the move yet), then they agree; the call, past the redirects' bound meanwhile, pauses
    and asks again instead of ending (an outside tester: RedirectLoopError within
    milliseconds of a keyed failover, with 30 s of retry_time left)."""
    _, m1, m2 = cluster.members
    live = [m.address for m in cluster.members]
    name = next(f"moment{i}" for i in range(1000) if place(f"moment{i}", live) == m1.address)
    m1.claims[name] = m2.address
    m2.claims[name] = m1.address
    settled = threading.Timer(0.5, lambda: m1.claims.pop(name))  # m1 takes the stream
    settled.start()
    try:
        with WindowClient(m1.address, timeout=10, retry_time=10.0) as c:
            c.query(name, "w")  # answered by m1 once it agrees
    finally:
        settled.cancel()


def test_servers_that_disagree_on_the_owner_end_in_a_named_loop(cluster: FakeCluster) -> None:
    """m1 says m2 owns the stream, m2 says m1: the client follows a bounded number of
    redirects (pausing when the chain comes back), then pauses and asks the map again (a
    member that has not seen a move yet), until the call's budget is spent: then an error
    naming the path."""
    _, m1, m2 = cluster.members
    live = [m.address for m in cluster.members]
    name = next(f"loop{i}" for i in range(1000) if place(f"loop{i}", live) == m1.address)
    m1.claims[name] = m2.address
    m2.claims[name] = m1.address
    with (
        WindowClient(m1.address, timeout=10, retry_time=1.0) as c,
        pytest.raises(RedirectLoopError) as info,
    ):
        c.query(name, "w")
    err = info.value
    assert err.reason == "NOT_OWNER" and isinstance(err, NotOwnerError)
    assert set(err.path) == {m1.address, m2.address}
    assert len(err.path) >= calls.MAX_REDIRECTS + 2  # every try, and the redirect refused
    assert "disagree" in str(err) and m1.address in str(err)


def test_a_moving_stream_is_waited_out_by_any_call(cluster: FakeCluster) -> None:
    """STREAM_MOVING: nothing was done, so even a call that is never resent after a failure
    (a window's creation) waits ``retry_after_ms`` and goes again."""
    m0 = cluster.members[0]
    with WindowClient(m0.address, timeout=10) as c:
        c.cluster_map()  # a cluster of three: waits are failovers, bounded by retry_time
        cluster.moving["mv"] = 6
        info = c.create_window(pb_window("mv"))
        assert info.spec.stream == "mv"
        cluster.moving["mv"] = 3
        few = WindowClient(m0.address, timeout=10, retries=3)  # three tries at most
        with few, pytest.raises(StreamMovingError):
            few.create_window(pb_window("mv"))
    owner = cluster.owner_of("mv")
    assert cluster.calls_at(owner, "CreateWindow").count("mv") == 7 + 3


def test_an_idempotent_append_survives_its_owner_dying(cluster: FakeCluster) -> None:
    """The owner applies a batch and dies before it answers; the stream moves. The client
    resends the same (producer, sequence) at the new owner, which acknowledges it as a
    duplicate: applied once. Then the next batch goes there directly."""
    m0 = cluster.members[0]
    name = stream_not_placed_on(cluster, m0.address, "d")
    with WindowClient(m0.address, timeout=10) as c:
        c.append(name, {"ts": [1], "x": [1.0]}, producer_id="p", sequence=1)
        first = cluster.owner_of(name)
        dying = cluster.member(first)
        dying.lose_ack.add(name)
        res = c.append(name, {"ts": [2], "x": [2.0]}, producer_id="p", sequence=2)
        assert res.duplicate  # the new owner saw it applied (the same key)
        dying.kill()
        c.append(name, {"ts": [3], "x": [3.0]}, producer_id="p", sequence=3)
        assert cluster.owner_of(name) != first
    assert cluster.applied[name] == [("p", 1), ("p", 2), ("p", 3)]
    assert cluster.calls_at(first, "Append").count(name) == 2  # not a third time


def test_a_plain_append_surfaces_its_server_dying(cluster: FakeCluster) -> None:
    """Without an idempotency key an append is never resent after a failure (it may have
    been applied): the error names the server; the next call goes to the stream's new
    owner."""
    m0 = cluster.members[0]
    name = stream_not_placed_on(cluster, m0.address, "u")
    with WindowClient(m0.address, timeout=10) as c:
        c.append(name, {"ts": [1], "x": [1.0]})
        owner = cluster.owner_of(name)
        cluster.member(owner).lose_ack.add(name)
        with pytest.raises(UnavailableError) as info:
            c.append(name, {"ts": [2], "x": [2.0]})
        assert info.value.target == owner
        c.append(name, {"ts": [3], "x": [3.0]})
    assert len(cluster.applied[name]) == 3 and cluster.owner_of(name) != owner


def stream_placed_on(cluster: FakeCluster, address: str, prefix: str = "s") -> str:
    """A stream name that placement puts on ``address``."""
    live = [m.address for m in cluster.members if m.up]
    return next(f"{prefix}{i}" for i in range(1000) if place(f"{prefix}{i}", live) == address)


def test_an_owner_the_client_cannot_reach_is_reached_through_another_member(
    cluster: FakeCluster,
) -> None:
    """The client cannot reach member a (its ``address_map`` sends a to a closed port: a
    partition between the two only), which the others still list and which owns the stream.
    An idempotent append's first try fails (a is unreachable: a suspect, cut off) and is
    resent at once to the member placement puts the stream on among the others, with the
    header that asks it to forward the call to a; the next calls go the same way while a is
    a suspect, a plain append (no idempotency key) too."""
    a, b, c_ = cluster.members
    name = stream_placed_on(cluster, a.address, "cut")
    relay = placement(name, [b.address, c_.address])
    closed = f"127.0.0.1:{free_port()}"
    seeds = f"{b.address},{c_.address}"
    with WindowClient(seeds, timeout=10, address_map={a.address: closed}) as c:
        c.append(name, {"ts": [1], "x": [1.0]}, producer_id="p", sequence=1)
        c.append(name, {"ts": [2], "x": [1.0]}, producer_id="p", sequence=2)
        assert c.query(name, "w").size == 2
        assert c.topology.is_cut(a.address) and c.owner(name) == a.address  # still the owner
    assert cluster.calls_at(relay, "forward Append") == [name, name]
    assert cluster.calls_at(relay, "forward Query") == [name]
    assert cluster.calls_at(a.address) == []  # a was never reached: the relay answered
    assert cluster.applied[name] == [("p", 1), ("p", 2)]

    async def go() -> None:  # the asyncio client the same way
        async with AsyncWindowClient(seeds, timeout=10, address_map={a.address: closed}) as ac:
            await ac.append(name, {"ts": [3], "x": [1.0]}, producer_id="p", sequence=3)
            assert ac.topology.is_cut(a.address)

    asyncio.run(go())
    assert cluster.calls_at(relay, "forward Append") == [name] * 3

    with WindowClient(seeds, timeout=10, address_map={a.address: closed}) as c:
        c.get_stream(name)  # a read: a fails it (a suspect now), the relay answers
        c.append(name, {"ts": [4], "x": [1.0]})  # no key: straight through the relay
    assert cluster.calls_at(relay, "forward GetStream") == [name] * 4  # schemas, 3 clients
    assert cluster.calls_at(relay, "forward Append") == [name] * 4
    assert len(cluster.applied[name]) == 4


def test_a_stale_map_is_passed_over_for_a_fresh_one(cluster: FakeCluster) -> None:
    """A member cut off from the cluster's Redis still answers GetClusterMap, saying so
    (``isolated``, an old ``view_age_ms``): the client takes the next member's map instead
    and leaves the cut-off one out of placement for a while; with no other answer, it takes
    the stale map rather than none."""
    a, b, _ = cluster.members
    a.isolated = True
    with WindowClient(f"{a.address},{b.address}", timeout=10) as c:
        assert c.cluster_map().answered_by == b.address
        assert c.topology.is_down(a.address) and not c.topology.is_cut(a.address)
        name = stream_not_placed_on(cluster, a.address, "st")
        assert c.topology.route(name) != a.address
    with WindowClient(a.address, timeout=10) as c:
        assert c.cluster_map().answered_by == a.address  # the only one to ask
        assert c.topology.needs_refresh()  # asked again before the next call


def test_an_idempotent_append_stuck_at_a_server_the_stream_left_is_given_up(
    cluster: FakeCluster,
) -> None:
    """The owner holds an append (stuck on its Redis, say) and meanwhile the stream moves to
    another member. The waiting try looks at the map every half lease (asked of a member
    other than the one it waits on): once the map names the new owner, the try is given up
    (cancelled; the stuck server never applies it) and the same key is sent there, instead
    of waiting out the whole deadline."""
    a, b, c_ = cluster.members
    name = stream_placed_on(cluster, a.address, "stuck")
    with WindowClient(f"{b.address},{c_.address}", timeout=30) as c:
        c.append(name, {"ts": [1], "x": [1.0]}, producer_id="p", sequence=1)
        a.hang.add(name)
        threading.Timer(0.3, lambda: cluster.owners.__setitem__(name, b.address)).start()
        began = time.monotonic()
        c.append(name, {"ts": [2], "x": [1.0]}, producer_id="p", sequence=2)
        took = time.monotonic() - began
    assert 0.9 < took < 5, took  # a look at the map after half a lease (1 s), not 30 s
    assert cluster.applied[name] == [("p", 1), ("p", 2)]
    assert cluster.calls_at(b.address, "Append") == [name]
    a.hang.clear()


def test_a_dead_seed_is_skipped(cluster: FakeCluster) -> None:
    m0, m1, _ = cluster.members
    m0.kill()
    with WindowClient(f"{m0.address},{m1.address}", timeout=10) as c:
        assert c.cluster_map().addresses == tuple(sorted(m.address for m in cluster.members[1:]))
        c.create_stream(pb_stream("alive"))
        assert [s.spec.name for s in c.list_streams()] == ["alive"]


def test_list_streams_asks_every_member(cluster: FakeCluster) -> None:
    names = [f"l{i}" for i in range(12)]
    with WindowClient(cluster.members[0].address, timeout=10) as c:
        for n in names:
            c.create_stream(pb_stream(n))
        assert [s.spec.name for s in c.list_streams()] == sorted(names)
    holders = {cluster.owner_of(n) for n in names}
    assert len(holders) > 1  # the names are spread: the merge took several lists
    for m in cluster.members:
        assert cluster.calls_at(m.address, "ListStreams") == [""]


def test_a_subscription_follows_its_stream_to_the_new_owner(cluster: FakeCluster) -> None:
    """Subscribing where placement puts the stream is refused (NOT_OWNER, before any
    header): the client subscribes at the owner of record. That owner ends the subscription
    with NOT_OWNER (the stream moved): the iterator subscribes at the new owner by itself and
    goes on with its events."""
    m0 = cluster.members[0]
    name = stream_not_placed_on(cluster, m0.address, "sub")
    placed = cluster.owner_of(name)
    old, new = (m for m in cluster.members if m.address != placed)
    cluster.owners[name] = old.address
    with WindowClient(m0.address, timeout=10) as c:
        it = c.subscribe(name, "w", timeout=60)
        assert cluster.calls_at(placed, "Subscribe") == [name]  # refused there
        old.events.put(1)
        assert next(it)[0] == 1
        cluster.owners[name] = new.address
        old.events.put(None)  # moved
        new.events.put(5)
        assert next(it)[0] == 5
        it.close()
    assert cluster.calls_at(new.address, "Subscribe") == [name]


def test_an_async_subscription_follows_its_stream_too(cluster: FakeCluster) -> None:
    m0 = cluster.members[0]
    name = stream_not_placed_on(cluster, m0.address, "asub")
    placed = cluster.owner_of(name)
    old, new = (m for m in cluster.members if m.address != placed)
    cluster.owners[name] = old.address  # refused where placement puts it, first

    async def go() -> list[int]:
        async with AsyncWindowClient(m0.address, timeout=10) as c:
            it = await c.subscribe(name, "w", timeout=60)
            old.events.put(1)
            got = [(await anext(it))[0]]
            cluster.owners[name] = new.address
            old.events.put(None)
            new.events.put(6)
            got.append((await anext(it))[0])
            await it.aclose()
            return got

    assert asyncio.run(go()) == [1, 6]
    assert [cluster.calls_at(m.address, "Subscribe") for m in (old, new)] == [[name], [name]]


def test_the_cli_takes_seeds_and_routes(
    cluster: FakeCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--target a,b``: the CLI's client is the cluster-aware one (a dead seed skipped,
    streams listed from every member, a query sent to the stream's owner)."""
    from mtawindows.client.commands import main

    m0, m1, _ = cluster.members
    names = [f"cli{i}" for i in range(6)]
    with WindowClient(m1.address, timeout=10) as c:
        for n in names:
            c.create_stream(pb_stream(n))
            c.append(n, {"ts": [1], "x": [1.0]}, producer_id="p", sequence=1)
    m0.kill()
    seeds = ["--target", f"{m0.address},{m1.address}", "--timeout", "10", "--json", "--raw"]
    assert main(["streams", "list", *seeds]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert sorted(s["spec"]["name"] for s in listed) == names
    assert main(["query", names[0], "w", *seeds]) == 0
    assert json.loads(capsys.readouterr().out)["size"] == 1
    assert names[0] in cluster.calls_at(cluster.owner_of(names[0]), "Query")


# --------------------------------------------------------------------------- the pure parts


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def cluster_map(*members: str, me: str = "", owners: dict[str, str] | None = None) -> pb.ClusterMap:
    return pb.ClusterMap(
        members=[pb.ClusterMember(id=m, address=m, incarnation="i") for m in members],
        owners=[pb.StreamOwner(stream=s, member=a, address=a) for s, a in (owners or {}).items()],
        lease_ms=3000,
        **{"self": me or members[0]},
    )


def test_topology_routes_by_owner_then_placement_then_seed() -> None:
    clock = Clock()
    t = Topology(seeds_of("seed:1"), refresh_interval=30, clock=clock)
    assert (t.route("s"), t.needs_refresh(), t.clustered) == ("seed:1", True, False)
    t.learn(cluster_map("a:1", "b:1", "c:1", owners={"s": "c:1"}), via="seed:1")
    assert (t.clustered, t.needs_refresh()) == (True, False)
    assert t.route("s") == "c:1"  # the owner of record
    assert t.route("other") == place("other", ["a:1", "b:1", "c:1"])
    t.failed("c:1")  # unreachable: a suspect for the lease, left out of placement
    assert t.cached_owner("s") == "c:1" and t.needs_refresh()
    assert t.route("s") == place("s", ["a:1", "b:1"]) and t.is_down("c:1") and t.is_cut("c:1")
    # a call that may be forwarded goes to the stream's placement among the others, asking it
    # to forward the call to c (still live in the map)
    assert t.way("s", relay=True) == (place("s", ["a:1", "b:1"]), True)
    assert t.way("other", relay=True) == (place("other", ["a:1", "b:1"]), False)
    clock.now += 3.0  # the lease of the map
    assert not t.is_down("c:1") and t.route("s") == "c:1"
    t.failed("c:1")  # again, once its suspicion ran out: twice as long
    clock.now += 3.0
    assert t.is_down("c:1")
    clock.now += 3.0
    assert not t.is_down("c:1")
    t.failed("c:1", unreachable=False)  # it answered, unwell: still called for its streams
    assert t.is_down("c:1") and not t.is_cut("c:1") and t.way("s", relay=True) == ("c:1", False)
    assert t.route("other") == place("other", ["a:1", "b:1"])  # but out of placement
    t.answered("c:1")
    assert not t.is_down("c:1")
    t.failed("c:1")  # the count of suspicions starts over after an answer
    clock.now += 3.0
    assert not t.is_down("c:1")
    t.forget("s")
    t.learn(cluster_map("a:1", "b:1", "c:1"), via="seed:1")
    assert t.route("s") == place("s", ["a:1", "b:1", "c:1"])
    t.redirected("s", "b:1")
    t.learn(cluster_map("a:1", "c:1", me="a:1"), via="a:1")  # b left: its owners go
    assert t.cached_owner("s") is None
    clock.now += 30.0
    assert t.needs_refresh()  # the map's life


def test_a_cluster_of_one_is_called_where_it_was_reached() -> None:
    """A lone server may advertise its bind address; an older one has no map at all."""
    t = Topology(("myhost:50051",))
    t.learn(cluster_map("0.0.0.0:50051"), via="myhost:50051")
    assert (t.route("s"), t.clustered) == ("myhost:50051", False)
    assert t.member_addresses() == ("myhost:50051",)
    t2 = Topology(("old:1", "old:2"))
    cmap = t2.learn_single("old:2")
    assert cmap.addresses == ("old:2",) and cmap.lease_ms == 0 and t2.route("x") == "old:2"


def _refusal(code: str, reason: str = "", target: str = "a:1", **md: str) -> MtaWindowsError:
    cls = {"UNAVAILABLE": UnavailableError, "FAILED_PRECONDITION": NotOwnerError}.get(
        code, MtaWindowsError
    )
    return cls("scripted", code=code, reason=reason, metadata=md, target=target)


def test_a_course_waits_out_a_failover_only_in_a_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unset ``retries``: in a cluster, an unreachable server, a timeout, a store failure are
    waited out as long as ``retry_time`` allows (counted in time from the first try, not in
    tries); DEFAULT_TRIES (7) tries on a server alone; a call that may not be resent ends at once, unless
    nothing of it was done (STREAM_MOVING, MEMBER_ISOLATED)."""
    read = calls.query("s", "w")
    alone = calls.Course(read, Topology(("a:1",)), retries=None, retry_time=10)
    for _ in range(calls.DEFAULT_TRIES - 1):
        assert alone.failed(_refusal("UNAVAILABLE")).pause == 0.001
    with pytest.raises(UnavailableError):
        alone.failed(_refusal("UNAVAILABLE"))

    two = Topology(("a:1", "b:1"))
    monkeypatch.setattr(calls, "backoff", lambda attempt: 1 / 128)
    course = calls.Course(read, two, retries=None, retry_time=0.5)
    n = 0
    with pytest.raises(UnavailableError):
        while n < 1000:
            course.failed(_refusal("UNAVAILABLE"))
            n += 1
    assert n == 64 and course.paused == 0.5  # the budget, not a count

    clock = Clock()
    timed = Topology(("a:1", "b:1"), clock=clock)
    for failure in (
        _refusal("DEADLINE_EXCEEDED"),
        _refusal("UNAVAILABLE", "STORE_UNAVAILABLE"),
        _refusal("UNAVAILABLE", "SERVER_STOPPING"),
    ):
        budget = calls.Course(read, timed, retries=None, retry_time=10)
        for _ in range(20):  # far more than DEFAULT_TRIES: only the time counts
            assert budget.failed(failure).pause == 1 / 128
        clock.now += 9.995
        assert budget.failed(failure).pause == pytest.approx(0.005)  # what is left of it
        clock.now += 0.005
        with pytest.raises(MtaWindowsError):
            budget.failed(failure)
        assert timed.is_down("a:1")  # each of them makes the server a suspect

    plain = calls.append(calls.append_request("s", {"ts": [1]}, None, None, None, "none", ()))
    with pytest.raises(UnavailableError):
        calls.Course(plain, two, retries=None, retry_time=10).failed(_refusal("UNAVAILABLE"))
    moving = calls.Course(plain, two, retries=None, retry_time=10)
    step = moving.failed(_refusal("UNAVAILABLE", "STREAM_MOVING", retry_after_ms="250"))
    assert step.pause == 0.25 and moving.lookup  # any call; the owner asked again
    cut_off = calls.Course(plain, Topology(("a:1", "b:1")), retries=None, retry_time=10)
    step = cut_off.failed(_refusal("UNAVAILABLE", "MEMBER_ISOLATED", members="b:1,c:1"))
    assert step.pause == 1 / 128 and cut_off.lookup  # any call: refused before anything
    assert cut_off.topology.is_down("a:1") and not cut_off.topology.is_cut("a:1")
    assert "c:1" in cut_off.topology.candidates()  # named by the cut-off member
    # gRPC could not even connect: nothing was sent, so any call may go elsewhere
    unsent = UnavailableError(
        "failed to connect to all addresses; last error: UNAVAILABLE: ipv4:127.0.0.1:9: "
        "Connection refused",
        code="UNAVAILABLE",
        target="a:1",
    )
    assert calls.never_sent(unsent) and not calls.never_sent(_refusal("UNAVAILABLE"))
    resent = calls.Course(plain, Topology(("a:1", "b:1")), retries=None, retry_time=10)
    assert resent.failed(unsent).pause == 1 / 128 and resent.topology.is_down("a:1")


def test_a_redirect_to_a_dead_owner_waits_for_its_lease() -> None:
    t = Topology(("a:1", "b:1"))
    course = calls.Course(calls.query("s", "w"), t, retries=None, retry_time=10)
    assert course.address() == t.route("s")
    t.failed("b:1")
    step = course.failed(_refusal("FAILED_PRECONDITION", "NOT_OWNER", owner="b:1"))
    assert step.pause > 0 and course.redirects == 0  # not followed: b is down
    assert course.address() != "b:1"
    step = course.failed(_refusal("FAILED_PRECONDITION", "NOT_OWNER", owner="c:1"))
    assert step.pause == 0 and course.address() == "c:1" and course.redirects == 1


# --------------------------------------------------------------------------- names, the Router


def test_targets_are_split_and_checked() -> None:
    assert split_targets("a:1") == ("a:1",)
    assert split_targets(" a:1 , b:2") == ("a:1", "b:2")
    assert seeds_of(["a:1", "b:2"]) == seeds_of("a:1,b:2") == ("a:1", "b:2")
    assert Router(["a:1", "b:2"]).targets == Router("a:1,b:2").targets == ("a:1", "b:2")
    for bad in ("", " , ", "a:1,,b:2"):
        with pytest.raises(ValueError, match="expected host:port"):
            split_targets(bad)
    with pytest.raises(ValueError, match="listed twice"):
        Router(["a:1", "a:1"])
    with pytest.raises(ValueError, match="listed twice"):
        WindowClient("a:1,a:1")


def test_router_owners_are_stable_and_spread() -> None:
    router = Router("a:1,b:2,c:3", pinned=["tele"])
    assert router.primary == "a:1"
    assert router.owner("tele") == "a:1"  # pinned: stays on the first
    names = [f"tele-{i}" for i in range(60)]
    owners = {n: router.owner(n) for n in names}
    assert set(owners.values()) == {"a:1", "b:2", "c:3"}
    assert Router("solo:1").owner("anything") == "solo:1"
    # the same in another process (no salted hash)
    code = "from mtawindows.client import Router; print(Router('a:1,b:2,c:3').owner('tele:h7'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == router.owner("tele:h7")
    assert stable_hash("x") == stable_hash("x") != stable_hash("y")


def test_the_connector_uses_one_cluster_aware_client(cluster: FakeCluster) -> None:
    """``endpoint`` holds seeds: one client per process for every stream, which the cluster
    places (no fixed hash over the list)."""
    from mtawindows.spark_connector.clients import client_for

    seeds = ",".join(m.address for m in cluster.members[:2])
    opts = ConnectorOptions.parse({"endpoint": seeds, "stream": "t", "key_column": "k"})
    assert opts.endpoints == tuple(seeds.split(","))
    c = client_for(opts)
    assert client_for(opts) is c
    assert c.seeds == opts.endpoints
    for name in ("t", "u", "v"):
        assert c.owner(name) == cluster.owner_of(name)
    with pytest.raises(ConnectorError, match="option 'endpoint': a server is listed twice"):
        ConnectorOptions.parse({"endpoint": "a:1,a:1", "stream": "t"})


# --------------------------------------------------------------------------- specs


def pb_stream(name: str) -> Any:
    from mtawindows.client import Field, StreamSpec

    return StreamSpec(name, (Field("x", "DOUBLE"),), timestamp_field="ts", wall_clock=False)


def pb_window(stream: str) -> Any:
    from mtawindows.client import Aggregation, Policy, WindowSpec

    return WindowSpec(stream, "w", (Aggregation("n", "count"),), Policy.count(3))
