"""Forwarding a call to its stream's owner, for a client that cannot reach the owner itself
(:class:`Forwarder`, :func:`forwarding`).

A client cut off from one member (a partition between the two, while that member still reaches
Redis and the others) would otherwise wait until the member's streams move, which they never
do: the member is alive for the cluster. So the SDK sends such a call to another live member
with the header ``mtawindows-forward: 1``, and that member, when it does not own the stream
(the call's handler answers ``NOT_OWNER``), sends the call on to the owner itself::

    client --x-- A (owner of s)          client -> B: Append(s), mtawindows-forward: 1
       \\         ^                        B: NOT_OWNER, owner A -> A: Append(s) (the same bytes),
        \\-> B ---/                           mtawindows-forwarded: B, the caller's deadline
                                              and authorization
                                          A's reply, or A's status with every detail
                                          (grpc-status-details-bin) -> client, with trailing
                                          metadata mtawindows-served-by: A

* Only the unary calls about one stream (:data:`FORWARDABLE`); Subscribe is never forwarded
  (a subscription lives with its stream's owner: its client resubscribes after a move).
* Loop-free: a forwarded call carries ``mtawindows-forwarded`` and is never forwarded again;
  if the owner has moved meanwhile its ``NOT_OWNER`` goes back to the client, which follows it.
* The owner's answer comes back as it was, error or not; ``mtawindows-served-by`` tells the
  client which member answered (an error of the owner says nothing about this member). An
  owner that does not answer this member either (unreachable, or the call's deadline came
  first) is UNAVAILABLE ``OWNER_UNREACHABLE`` (metadata ``stream``, ``owner``): the call may
  have reached it, so the client resends only an idempotent call.
* An owner this member cannot connect to (it refuses connections: stopped, or dead before its
  lease ran out) is UNAVAILABLE ``STREAM_MOVING`` (metadata ``sent: false``): the call was
  never sent, so any call, idempotent or not, goes again once the stream has moved.
* The member's channels to the others are pooled (at most :data:`MAX_CHANNELS`), with the same
  keepalive as the SDK's: an owner gone silent fails a forwarded call in about two seconds. A
  member serving TLS forwards over TLS, trusting its own ``--tls-cert`` file (one certificate
  for the cluster, or a file that holds the CA the members' certificates are signed by).

Only the transport knows of forwarding: the servicer answers ``NOT_OWNER`` as ever, and
:func:`forwarding` wraps a handler to catch it.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from mtawindows.v1 import keepalive
from mtawindows.v1 import windows_pb2 as pb
from mtawindows.v1.reasons import Reason
from mtawindows.v1.relay import FORWARD, FORWARDABLE, FORWARDED, SERVED_BY

from ..service.refusals import ServiceError
from .decode import with_payload
from .metrics import Metrics

__all__ = [
    "CONNECT_WAIT",
    "FORWARD",
    "FORWARDABLE",
    "FORWARDED",
    "MAX_CHANNELS",
    "SERVED_BY",
    "Forwarder",
    "forwarding",
    "owner_not_connected",
    "owner_unreachable",
]

log = logging.getLogger("mtawindows.server")

MAX_CHANNELS = 64  # channels to other members kept open at once
# codes a forwarded call fails with, without a status of the owner, when the owner did not
# answer (no connection, a silent one, the deadline)
_UNREACHED = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED}
)
_DETAILS = "grpc-status-details-bin"
CONNECT_WAIT = 2.0  # seconds a forwarded call waits for a connection to the owner at most
_NOT_CONNECTING = frozenset(
    {grpc.ChannelConnectivity.TRANSIENT_FAILURE, grpc.ChannelConnectivity.SHUTDOWN}
)
_SERVICE = pb.DESCRIPTOR.services_by_name["WindowService"].full_name

Handler = Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]


def owner_unreachable(stream: str, owner: str, why: str) -> ServiceError:
    """UNAVAILABLE, ``OWNER_UNREACHABLE``: the owner did not answer a forwarded call."""
    return ServiceError(
        "UNAVAILABLE",
        Reason.OWNER_UNREACHABLE,
        f"stream {stream!r}: its owner {owner} did not answer the call forwarded to it ({why}); "
        "the call may have reached it",
        metadata={"stream": stream, "owner": owner},
    )


def owner_not_connected(stream: str, owner: str) -> ServiceError:
    """UNAVAILABLE, ``STREAM_MOVING``: the owner could not be connected to, so the call was
    not sent (nothing was done): its client calls again, any call, once the stream moved."""
    return ServiceError(
        "UNAVAILABLE",
        Reason.STREAM_MOVING,
        f"stream {stream!r}: its owner {owner} refuses connections from this member (stopped, "
        "or gone before its lease ran out): the call was not sent, nothing was done; the "
        "stream moves to a live member once the owner's lease ends: call again",
        metadata={"stream": stream, "owner": owner, "sent": "false"},
    )


async def _connected(channel: grpc.aio.Channel, wait: float) -> bool:
    """Whether ``channel`` is connected, or connects within ``wait`` seconds (False at once
    when a connection attempt failed: the owner refuses connections)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    state = channel.get_state(try_to_connect=True)
    while state != grpc.ChannelConnectivity.READY:
        left = deadline - loop.time()
        if state in _NOT_CONNECTING or left <= 0:
            return False
        try:
            await asyncio.wait_for(channel.wait_for_state_change(state), left)
        except TimeoutError:
            return False
        state = channel.get_state(try_to_connect=True)
    return True


class Forwarder:
    """Sends calls on to other members (see the module docstring): this server's ``member``
    id and ``address``; ``credentials`` for TLS (None: plaintext); replies up to
    ``max_message_bytes``; ``metrics`` counts forwarded calls by method and outcome."""

    def __init__(
        self,
        member: str,
        address: str,
        *,
        credentials: grpc.ChannelCredentials | None = None,
        max_message_bytes: int = 64 * 1024 * 1024,
        metrics: Metrics | None = None,
    ) -> None:
        self.member = member
        self.address = address
        self.credentials = credentials
        self.max_message_bytes = max_message_bytes
        self.metrics = metrics
        self._channels: collections.OrderedDict[str, grpc.aio.Channel] = collections.OrderedDict()
        self._closing: set[asyncio.Task[None]] = set()

    # -- what a call asks for
    def target(self, ex: ServiceError, context: grpc.aio.ServicerContext) -> str | None:
        """The owner to send the call on to, when ``ex`` (what the call's handler raised) is
        ``NOT_OWNER`` and the caller asked for forwarding on a call not forwarded yet; else
        None (``ex`` is the answer)."""
        if ex.reason != Reason.NOT_OWNER:
            return None
        owner = ex.metadata.get("owner") or ""
        if not owner or owner in (self.address, self.member):
            return None
        asked = forwarded = False
        for key, value in context.invocation_metadata() or ():
            if key == FORWARD and value == "1":
                asked = True
            elif key == FORWARDED:
                forwarded = True
        return owner if asked and not forwarded else None

    # -- sending it on
    async def forward(
        self,
        method: str,
        request: Any,
        owner: str,
        stream: str,
        context: grpc.aio.ServicerContext,
    ) -> bytes:
        """``request`` of ``method`` sent to ``owner``: its reply's bytes (trailing metadata
        ``mtawindows-served-by``), or the call aborted with its status as it came; raises
        ``OWNER_UNREACHABLE`` when it did not answer."""
        metadata = [(FORWARDED, self.member)]
        metadata += [(k, v) for k, v in context.invocation_metadata() or () if k == "authorization"]
        left = context.time_remaining()
        # a little before the caller's own deadline: it hears OWNER_UNREACHABLE from this
        # member (which it may keep using) rather than a deadline of its own
        timeout = None if left is None else max(0.001, left - min(0.25, left / 10))
        channel = self._channel(owner)
        if not await _connected(
            channel, CONNECT_WAIT if left is None else min(CONNECT_WAIT, left / 2)
        ):
            # never sent: the owner refuses connections (stopped, or dead before its lease
            # ran out): nothing was done, any call may go again once the stream has moved
            self._count(method, "unreachable")
            raise owner_not_connected(stream, owner)
        send = channel.unary_unary(f"/{_SERVICE}/{method}")
        try:
            # with the Arrow bytes the request carried (decode.carrying_parser)
            reply = await send(with_payload(request), timeout=timeout, metadata=metadata)
        except grpc.aio.AioRpcError as err:
            trailing = tuple(err.trailing_metadata() or ())
            code = err.code()
            if code in _UNREACHED and not any(k == _DETAILS for k, _ in trailing):
                self._count(method, "unreachable")
                why = f"{code.name}: {(err.details() or '')[:200]}"
                log.warning(
                    "forwarded call not answered",
                    extra={"method": method, "stream": stream, "owner": owner, "reason": why},
                )
                raise owner_unreachable(stream, owner, why) from None
            self._count(method, "refused")
            await context.abort(code, err.details() or "", (*trailing, (SERVED_BY, owner)))
            raise AssertionError("abort returned") from None  # pragma: no cover
        self._count(method, "answered")
        context.set_trailing_metadata(((SERVED_BY, owner),))
        return bytes(reply)

    def _channel(self, address: str) -> grpc.aio.Channel:
        channels = self._channels
        channel = channels.get(address)
        if channel is not None:
            channels.move_to_end(address)
            return channel
        options = [
            ("grpc.max_send_message_length", self.max_message_bytes),
            ("grpc.max_receive_message_length", self.max_message_bytes),
            *keepalive.channel_options(),
        ]
        if self.credentials is not None:
            channel = grpc.aio.secure_channel(address, self.credentials, options)
        else:
            channel = grpc.aio.insecure_channel(address, options)
        channels[address] = channel
        while len(channels) > MAX_CHANNELS:  # the least recently used goes
            _, old = channels.popitem(last=False)
            task = asyncio.ensure_future(old.close(grace=5.0))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)
        return channel

    def _count(self, method: str, outcome: str) -> None:
        if self.metrics is not None:
            self.metrics.forwarded.labels(method, outcome).inc()

    async def close(self) -> None:
        """Close every channel (the calls still forwarded are cancelled)."""
        channels = list(self._channels.values())
        self._channels.clear()
        for channel in channels:
            await channel.close()
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)


def forwarding(forwarder: Forwarder | None, method: str, handler: Handler) -> Handler:
    """``handler`` of ``method``, forwarding the call to the stream's owner where it asks
    for it and the handler answers ``NOT_OWNER`` (:meth:`Forwarder.target`); ``handler``
    itself for a method that is never forwarded, or without a forwarder."""
    if forwarder is None or method not in FORWARDABLE:
        return handler

    async def serve_or_forward(request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            return await handler(request, context)
        except ServiceError as ex:
            owner = forwarder.target(ex, context)
            if owner is None:
                raise
            stream = ex.metadata.get("stream", "")
        return await forwarder.forward(method, request, owner, stream, context)

    return serve_or_forward
