"""What the blocking and the asyncio client hold and do alike: the seeds and the cluster's
:class:`~mtawindows.client.cluster_map.Topology`, one channel per server address (opened on first
use), the auth header, the default deadline, the retry policy, the per-stream schema cache,
and how a :class:`~mtawindows.client.calls.Call` goes to a server's stub (the clients only add
the waiting: blocking, or awaited); and what both do alike for a keyed stream whose key
groups are held apart on a cluster (:mod:`.key_groups`): which groups a key call is about,
how a ListKeys fan-out's answers are sorted, where a subscription's keys go."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

import grpc

from mtawindows.v1 import relay
from mtawindows.v1 import windows_pb2 as pb
from mtawindows.v1 import windows_pb2_grpc as pb_grpc
from mtawindows.v1.keepalive import KEEPALIVE_MS
from mtawindows.v1.keys import DEFAULT_KEY_GROUPS, key_group
from mtawindows.v1.reasons import Reason
from mtawindows.v1.types import StreamInfo

from . import calls
from .channel import (
    DEFAULT_MAX_MESSAGE_BYTES,
    auth_metadata,
    check_keepalive_ms,
    check_max_message_bytes,
)
from .cluster_map import ClusterMap, Topology, seeds_of
from .errors import (
    MessageTooLargeError,
    MtaWindowsError,
    StreamMovingError,
    UnavailableError,
    from_rpc_error,
)
from .key_groups import split_keys

MAP_TIMEOUT = 5.0  # seconds at most for one GetClusterMap (a dead seed must not hold a call)
SUBSCRIBED = "mtawindows-subscribed"  # the header a server sends once a subscription is live
FORWARD = ((relay.FORWARD, "1"),)  # asks a member to forward the call to the owner
MIN_PATIENCE = 1.0  # seconds an idempotent try waits before the map is looked at (at least)


class ClientBase:
    """``target``: the seeds, ``host:port``, ``"a:1,b:2"`` or a list of those; ``token`` a
    bearer token; ``timeout`` the default deadline per try in seconds; ``retries`` and
    ``retry_time`` bound the tries of one call (:class:`~mtawindows.client.calls.Course`);
    ``refresh_interval`` the cluster map's longest life in seconds; ``max_message_bytes``
    the largest request sent and reply taken (a larger request is refused before it is sent:
    :class:`~mtawindows.client.errors.MessageTooLargeError`); ``address_map``: where this
    client dials a member's address (``{advertised host:port: reachable host:port}``, for
    members it reaches through a tunnel, a NAT or a proxy; the map and the errors keep the
    advertised address)."""

    def __init__(
        self,
        target: str | Sequence[str],
        token: str | None,
        timeout: float,
        retries: int | None,
        retry_time: float = 10.0,
        refresh_interval: float = 30.0,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        address_map: Mapping[str, str] | None = None,
        keepalive_ms: int = KEEPALIVE_MS,
    ) -> None:
        self.metadata = auth_metadata(token)  # first: a bad token opens no channel
        self.keepalive_ms = check_keepalive_ms(keepalive_ms)
        self.address_map = dict(address_map or {})
        self.max_message_bytes = check_max_message_bytes(max_message_bytes)
        self.seeds = seeds_of(target)
        self.target = ",".join(self.seeds)
        self.timeout = timeout
        if retries is not None and retries < 1:
            msg = f"retries: expected a number of tries >= 1 (or None), got {retries!r}"
            raise ValueError(msg)
        self.retries = retries
        self.retry_time = retry_time
        self.topology = Topology(self.seeds, refresh_interval=refresh_interval)
        self._schemas: dict[str, dict[str, str]] = {}
        # stream -> (its key field, its key groups): ("", 0) for an unkeyed one; with the schema
        self._keyings: dict[str, tuple[str, int]] = {}
        self._channels: dict[str, Any] = {}
        self._stubs: dict[str, pb_grpc.WindowServiceStub] = {}
        self._lock = threading.Lock()

    # -- channels, one per address
    def _open(self, address: str) -> Any:
        """A new channel to ``address`` (blocking or grpc.aio: the client's kind), dialled
        where :meth:`_dial` says."""
        raise NotImplementedError

    def _dial(self, address: str) -> str:
        """Where this client connects for ``address`` (``address_map``, else itself)."""
        return self.address_map.get(address, address)

    def _adopt(self, address: str, channel: Any) -> pb_grpc.WindowServiceStub:
        with self._lock:
            self._channels[address] = channel
            stub = self._stubs[address] = pb_grpc.WindowServiceStub(channel)
            return stub

    def _stub(self, address: str) -> pb_grpc.WindowServiceStub:
        with self._lock:
            stub = self._stubs.get(address)
            if stub is None:
                channel = self._channels[address] = self._open(address)
                stub = self._stubs[address] = pb_grpc.WindowServiceStub(channel)
            return stub

    def _take_channels(self) -> list[Any]:
        with self._lock:
            channels = list(self._channels.values())
            self._channels.clear()
            self._stubs.clear()
            return channels

    # -- one call
    def _course(
        self,
        call: calls.Call[Any, Any],
        retry: bool | None = None,
        *,
        groups: Sequence[int] | None = None,
    ) -> calls.Course:
        """The course of ``call``; with ``groups``, about those key groups of its stream
        (:class:`~.calls.GroupCourse`: to their holder)."""
        if groups is not None:
            return calls.GroupCourse(
                call,
                self.topology,
                groups=groups,
                retries=self.retries,
                retry_time=self.retry_time,
                retry=retry,
            )
        return calls.Course(
            call, self.topology, retries=self.retries, retry_time=self.retry_time, retry=retry
        )

    def _failed(self, course: calls.Course, ex: MtaWindowsError) -> calls.Step:
        """:meth:`Course.failed`, forgetting what is cached of the stream when the call ends
        with ``STREAM_NOT_FOUND`` (deleted: a stream of that name may come back another)."""
        try:
            return course.failed(ex)
        except MtaWindowsError as end:
            self._gone(end, course.stream)
            raise

    def _gone(self, ex: MtaWindowsError, stream: str) -> None:
        if stream and ex.reason == Reason.STREAM_NOT_FOUND:
            self._forget_schema(stream)

    def _send(
        self,
        address: str,
        call: calls.Call[Any, Any],
        timeout: float | None,
        forward: bool = False,
        *,
        future: bool = False,
    ) -> Any:
        """The stub's reply (blocking client) or the awaitable of it (asyncio client), or
        with ``future`` the blocking stub's future; ``forward``: with the header that asks the
        server to forward the call to the stream's owner. A request over
        ``max_message_bytes`` raises before it is sent."""
        method, request = call.method, call.request
        if isinstance(request, calls.Pieces) and forward:
            method, request = "Append", request.request  # a member relays unary calls only
        self._check_size(method, request)
        if isinstance(request, calls.Pieces):
            request = iter(request)
        send = getattr(self._stub(address), method)
        if future:
            send = send.future
        metadata = self.metadata + FORWARD if forward else self.metadata
        return send(request, timeout=timeout or self.timeout, metadata=metadata)

    def _watched(self, course: calls.Course | None) -> bool:
        """Whether a try of ``course`` may be given up while it waits (:meth:`_patience`):
        an idempotent call about a stream, in a cluster."""
        return (
            course is not None
            and course.retry
            and bool(course.stream)
            and self.topology.clustered
            and self.retries is None
        )

    def _patience(self) -> float:
        """Seconds a watched try waits between looks at the map: half a lease (when the
        stream's owner is cut off, the others stop counting it live at 3/4 of a lease and
        its streams move at one), at least :data:`MIN_PATIENCE`."""
        cmap = self.topology.map
        half = cmap.lease_ms / 2000 if cmap is not None else 0.0
        return max(MIN_PATIENCE, half)

    def _check_size(self, method: str, request: Any) -> None:
        """:class:`MessageTooLargeError` for a request gRPC would refuse to send (a bare
        RESOURCE_EXHAUSTED otherwise), naming the limit and the size (AppendStream's: its
        largest piece's)."""
        size = request.ByteSize()
        limit = self.max_message_bytes
        if size > limit:
            msg = (
                f"{method}: the request is {size} bytes, over this client's limit of "
                f"{limit} bytes (max_message_bytes); send fewer rows per call"
            )
            raise MessageTooLargeError(
                msg,
                reason=Reason.MESSAGE_TOO_LARGE,
                metadata={"limit_bytes": str(limit), "size_bytes": str(size)},
            )

    def _subscription(self, address: str, call: calls.Call[Any, Any], timeout: float | None) -> Any:
        """The Subscribe call at ``address``; ``timeout`` bounds it (None: no bound)."""
        return self._stub(address).Subscribe(call.request, timeout=timeout, metadata=self.metadata)

    def _map_request(self, streams: Sequence[str]) -> pb.GetClusterMapRequest:
        return pb.GetClusterMapRequest(streams=list(streams))

    def _lookup(self, course: calls.Course) -> list[str]:
        """The streams whose owners the next map fetch asks for: the course's stream after
        it moved, unless the call creates it (a stream not created yet has no owner: the map
        answers NOT_FOUND for it, which is what a call about it answers)."""
        if not (course.lookup and course.stream) or course.call.method == "CreateStream":
            return []
        return [course.stream]

    def _map_timeout(self) -> float:
        return min(self.timeout, MAP_TIMEOUT)

    def _map_failure(self, err: grpc.RpcError, address: str) -> MtaWindowsError | None:
        """A failed GetClusterMap at ``address``: None when the server has none (an older
        server: then it is a cluster of one, learnt here), else the typed error, which ends
        the asking at once unless another member may answer (unreachable, timeout, store,
        a member cut off from the cluster): ``address`` is then a suspect."""
        if err.code() == grpc.StatusCode.UNIMPLEMENTED:
            self.topology.learn_single(address)
            return None
        ex = from_rpc_error(err, address)
        if ex.code not in ("UNAVAILABLE", "DEADLINE_EXCEEDED"):
            raise ex
        self.topology.failed(address, unreachable=not ex.reason)
        if ex.reason == Reason.MEMBER_ISOLATED:
            self.topology.introduce((ex.metadata.get("members") or "").split(","))
        return ex

    def _stale_map(self, reply: pb.ClusterMap, address: str) -> bool:
        """Whether ``reply`` (from ``address``) is stale (:meth:`Topology.stale`): the member
        is then a suspect, and the next candidate is asked."""
        if not self.topology.stale(reply):
            return False
        self.topology.failed(address, unreachable=False)
        return True

    def _no_fresh_map(
        self,
        tried: list[str],
        last: MtaWindowsError | None,
        stale: tuple[pb.ClusterMap, str] | None,
        strict: bool,
    ) -> bool:
        """No candidate answered a fresh map: the stale one taken if one came (better than
        none; asked again before the next call), else the error raised when ``strict``.
        False (no fresh map)."""
        if stale is not None:
            self.topology.learn(*stale, fresh=False)
            self.topology.fetch_failed()
            return False
        failure = self._no_map(tried, last)
        if strict:
            raise failure
        return False

    def _no_map(self, tried: list[str], last: MtaWindowsError | None) -> MtaWindowsError:
        """The error when no candidate gave the map: the last one's, naming every address
        asked."""
        self.topology.fetch_failed()
        where = tried[0] if len(tried) == 1 else ",".join(tried)
        if last is None:
            return UnavailableError("no server to ask for the cluster map", target=where)
        return type(last)(
            last.message,
            code=last.code,
            reason=last.reason,
            violations=last.violations,
            metadata=last.metadata,
            target=where,
        )

    def _cluster_map(self) -> ClusterMap:
        cmap = self.topology.map
        assert cmap is not None
        return cmap

    def _learn_stream(self, info: StreamInfo) -> dict[str, str]:
        """Cache what appends need of a stream: its column types and its keying."""
        spec = info.spec
        groups = (spec.key_groups or DEFAULT_KEY_GROUPS) if spec.key else 0
        self._keyings[spec.name] = (spec.key, groups)
        s = self._schemas[spec.name] = calls.schema_of(info)
        return s

    def _forget_schema(self, stream: str) -> None:
        """Forget what is cached of ``stream``: schema, keying, key-group holders."""
        self._schemas.pop(stream, None)
        self._keyings.pop(stream, None)
        self.topology.forget_groups(stream)

    # -- keyed streams whose key groups are held apart (:mod:`.key_groups`)
    def _key_field(self, stream: str) -> str:
        """The key field of ``stream`` as cached with its schema ("" unkeyed, or unknown)."""
        return self._keyings.get(stream, ("", 0))[0]

    def _members_due(self) -> bool:
        """Before routing by key group: whether to ask the map (its members) first, to know
        whether this is a cluster (never asked, from a single seed)."""
        return not self.topology.known and not self.topology.clustered

    def _holders_due(self, stream: str, force: bool = False) -> bool:
        """Whether to ask the map about ``stream`` (its key groups' holders) before routing
        by group: on a cluster, when they are not known or stale, or the map is due
        (``force``: in any case)."""
        t = self.topology
        return force or (t.clustered and (t.holders(stream) is None or t.needs_refresh()))

    def _holders_now(self, stream: str) -> tuple[str, ...]:
        """The holders of ``stream``'s key groups by group, as last learnt (the callers ask
        the map first when due); () when not routed by group (a server alone, an unkeyed
        stream, groups not owned apart, not known)."""
        if not self.topology.clustered:
            return ()
        return self.topology.holders(stream, fresh=False) or ()

    def _key_groups_of(self, stream: str, keys: Sequence[str]) -> tuple[int, ...]:
        holders = self._holders_now(stream)
        if not holders:
            return ()
        return tuple(sorted({key_group(k, len(holders)) for k in keys}))

    def _key_course(self, call: calls.Call[Any, Any], key: str) -> calls.Course | None:
        """The course of a call about one key (its text) on a stream whose key groups are
        held apart (to the holder of its group), None elsewhere (to the stream's owner)."""
        holders = self._holders_now(call.stream)
        if not key or not holders:
            return None
        return self._course(call, groups=(key_group(key, len(holders)),))

    def _sort_pages(
        self, addresses: Sequence[str], outcomes: Sequence[Any]
    ) -> tuple[list[pb.ListKeysResponse], MtaWindowsError | None]:
        """The members' ListKeys answers (``outcomes``, one per address): the pages, and a
        failure of a member to answer (UNAVAILABLE, a timeout: it is a suspect then; its
        groups are missing). A member that refused (``NOT_OWNER``, ``STREAM_MOVING``)
        answered for no group; any other error raises."""
        pages: list[pb.ListKeysResponse] = []
        failure: MtaWindowsError | None = None
        for address, got in zip(addresses, outcomes, strict=True):
            if isinstance(got, pb.ListKeysResponse):
                pages.append(got)
                continue
            assert isinstance(got, MtaWindowsError)
            if got.reason in (Reason.NOT_OWNER, Reason.STREAM_MOVING):
                continue
            if got.code in ("UNAVAILABLE", "DEADLINE_EXCEEDED", "CANCELLED"):
                self.topology.failed(got.target or address, unreachable=not got.reason)
                failure = failure or got
                continue
            raise got
        return pages, failure

    @staticmethod
    def _moving(stream: str, missing: set[int]) -> StreamMovingError:
        """The error that stands for key groups no member answered for (they move)."""
        first = min(missing)
        msg = f"stream {stream!r}: {len(missing)} key groups (from {first}) have no holder now"
        return StreamMovingError(
            msg,
            code="UNAVAILABLE",
            reason=Reason.STREAM_MOVING,
            metadata={"stream": stream, "group": str(first)},
        )

    def _slots(self, stream: str, keys: Sequence[str] | None) -> dict[str, list[str] | None]:
        """Where a subscription to ``keys`` (None: every key) goes: for each member, the keys
        of the groups it holds (every live member, every key, for None)."""
        if keys is None:
            return dict.fromkeys(self.topology.live())
        holders = self._holders_now(stream)
        if not holders:
            return {self.topology.route(stream): list(keys)}
        way = self.topology.group_way
        return dict(split_keys(keys, len(holders), lambda g: way(stream, g)))

    def _start_slot(
        self,
        fan: Any,
        stream: str,
        window: str,
        deadline: float | None,
        got: tuple[Any, str, list[str] | None, Any],
    ) -> None:
        """Read a confirmed subscription ``got`` into ``fan`` (the blocking client: a thread,
        the async one: a task)."""
        raise NotImplementedError

    def _fan_slots(
        self, fan: Any, req: Any, deadline: float | None, given: tuple[Any, str, Any] | None
    ) -> dict[str, list[str] | None]:
        """The subscriptions a keyed Subscribe ``req`` still opens (address -> its keys) into
        ``fan``; ``given``: the one confirmed at the stream's owner (every key of that member),
        started here."""
        keys = list(req.keys) or None
        slots = self._slots(req.stream, keys)
        if given is not None:
            sub, at, first = given
            slots.pop(at, None)
            fan.covered.add(at)
            fan.track(sub)
            self._start_slot(fan, req.stream, req.window, deadline, (sub, at, None, first))
        if keys is None:
            fan.covered.update(slots)
        return slots

    def _reslot(
        self, stream: str, address: str, keys: list[str] | None, covered: set[str]
    ) -> tuple[str | None, list[str] | None, dict[str, list[str] | None]]:
        """After a member's subscription ended (its groups moved) and a fresh map: where it
        goes on (an address, None when it ends: every key's, at a member gone from the map)
        with which keys, and the other subscriptions to open (the keys now held elsewhere;
        for every key, the live members ``covered``, the members subscribed to every key,
        does not list: they are added to it, and a member gone is taken out)."""
        if keys is None:  # ``covered`` is updated: the members gone out, the new ones in
            live = self.topology.live()
            others: dict[str, list[str] | None] = {a: None for a in live if a not in covered}
            others.pop(address, None)
            covered.update(others)
            if address in live:
                return address, None, others
            covered.discard(address)
            return None, None, others
        slots = self._slots(stream, keys)
        if address in slots:
            mine = slots.pop(address)
        else:
            address, mine = slots.popitem()
        return address, mine, slots


__all__ = ["MAP_TIMEOUT", "SUBSCRIBED", "ClientBase"]
