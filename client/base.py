"""What the blocking and the asyncio client hold and do alike: the seeds and the cluster's
:class:`~mtawindows.client.cluster_map.Topology`, one channel per server address (opened on first
use), the auth header, the default deadline, the retry policy, the per-stream schema cache,
and how a :class:`~mtawindows.client.calls.Call` goes to a server's stub (the clients only add
the waiting: blocking, or awaited)."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

import grpc

from mtawindows.v1 import relay
from mtawindows.v1 import windows_pb2 as pb
from mtawindows.v1 import windows_pb2_grpc as pb_grpc
from mtawindows.v1.reasons import Reason

from . import calls
from .channel import DEFAULT_MAX_MESSAGE_BYTES, auth_metadata, check_max_message_bytes
from .cluster_map import ClusterMap, Topology, seeds_of
from .errors import MessageTooLargeError, MtaWindowsError, UnavailableError, from_rpc_error

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
    ) -> None:
        self.metadata = auth_metadata(token)  # first: a bad token opens no channel
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
    def _course(self, call: calls.Call[Any, Any], retry: bool | None = None) -> calls.Course:
        return calls.Course(
            call, self.topology, retries=self.retries, retry_time=self.retry_time, retry=retry
        )

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
        self._check_size(call)
        send = getattr(self._stub(address), call.method)
        if future:
            send = send.future
        metadata = self.metadata + FORWARD if forward else self.metadata
        return send(call.request, timeout=timeout or self.timeout, metadata=metadata)

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

    def _check_size(self, call: calls.Call[Any, Any]) -> None:
        """:class:`MessageTooLargeError` for a request gRPC would refuse to send (a bare
        RESOURCE_EXHAUSTED otherwise), naming the limit and the size."""
        size = call.request.ByteSize()
        limit = self.max_message_bytes
        if size > limit:
            msg = (
                f"{call.method}: the request is {size} bytes, over this client's limit of "
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

    def _forget_schema(self, stream: str) -> None:
        self._schemas.pop(stream, None)


__all__ = ["MAP_TIMEOUT", "SUBSCRIBED", "ClientBase"]
