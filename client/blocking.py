"""The blocking client :class:`WindowClient`: each call through the blocking stub of the server
its stream lives on, in a loop that follows redirects and sleeps between tries (requests,
replies, retry policy and errors: :mod:`.calls`; the cluster: :mod:`.cluster_map`)."""

from __future__ import annotations

import time
from collections.abc import Generator, Mapping, Sequence
from typing import Any, TypeVar

import grpc

from mtawindows.v1 import windows_pb2 as pb
from mtawindows.v1.types import (
    AppendResult,
    StreamInfo,
    StreamSpec,
    WindowInfo,
    WindowResult,
    WindowSpec,
)

from . import calls
from .base import SUBSCRIBED, ClientBase
from .batch_writer import BatchWriter
from .channel import DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_TARGET, credentials, open_channel
from .cluster_map import ClusterMap
from .errors import MtaWindowsError, from_rpc_error
from .rows import Rows

T = TypeVar("T")


class WindowClient(ClientBase):
    """Blocking client of the window service: one server, or a cluster of them.

    ``target``: the seeds, ``host:port``, ``"a:1,b:2"`` or a list of those: any servers of the
    cluster (one is enough; several survive one being down). The client learns the cluster's
    members from them (``GetClusterMap``) and sends each call about a stream to the server
    that owns it, following ``NOT_OWNER`` redirects and waiting out ``STREAM_MOVING``; an
    older server without cluster support is a cluster of one. ``token`` a bearer token;
    ``tls`` True (system roots) or a CA file; ``timeout`` the default deadline per try in
    seconds; ``channel`` an open channel to the first seed to use instead of one of its own.

    Retries (see :class:`~mtawindows.client.calls.Course`): ``retries`` tries at most per
    call (default: no count in a cluster; 5 on a server alone); ``retry_time`` the budget of
    one call in a cluster, in seconds from its first try: no new try starts after it
    (default 10: a failover is the lease, 2 s by default, then the new owner opening the
    stream; measured, a stream whose owner is cut off answers again 2-3 s later). Only reads
    and appends with a ``producer_id`` and ``sequence`` are sent again after their server
    failed or timed out (the same key every time: the new owner acknowledges a batch the
    old one applied as a duplicate); any call is resent after a ``NOT_OWNER``,
    ``STREAM_MOVING`` or ``MEMBER_ISOLATED`` (nothing was done). A server that fails a call
    (UNAVAILABLE for any reason, a timeout) is a suspect for a while: the map is asked of
    another member, and a stream whose owner this client cannot reach is reached through
    another member, which forwards the call (:mod:`.cluster_map`). An idempotent try that
    waits on a server looks at the map every half lease (from another member) and is given
    up once the map says the stream left that server. Every channel pings its server every
    second: a silent connection fails its calls in about two seconds (:mod:`.channel`).
    ``refresh_interval``: the cluster map's longest life in seconds. ``address_map``: where
    this client dials a member's advertised address, ``{"10.0.0.5:50051": "localhost:15051"}``
    (a tunnel, a NAT, a proxy); the map and the errors keep the advertised address.
    ``max_message_bytes`` (default 64 MiB, the
    server's default too): the largest request sent and reply taken; a larger request
    raises :class:`~mtawindows.client.errors.MessageTooLargeError` (its size and the limit)
    before it is sent, and one over the server's own limit gets the same error from it."""

    def __init__(
        self,
        target: str | Sequence[str] = DEFAULT_TARGET,
        *,
        token: str | None = None,
        tls: bool | str | None = None,
        timeout: float = 30.0,
        retries: int | None = None,
        channel: grpc.Channel | None = None,
        retry_time: float = 10.0,
        refresh_interval: float = 30.0,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        address_map: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(
            target,
            token,
            timeout,
            retries,
            retry_time,
            refresh_interval,
            max_message_bytes,
            address_map,
        )
        self._creds = credentials(tls)
        first = self.seeds[0]
        self.channel = channel if channel is not None else self._open(first)
        self.stub = self._adopt(first, self.channel)  # the first seed's: raw calls

    def _open(self, address: str) -> grpc.Channel:
        return open_channel(self._dial(address), self._creds, self.max_message_bytes)

    def __enter__(self) -> WindowClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for channel in self._take_channels():
            channel.close()

    # -- the way of a call
    def _try(
        self,
        address: str,
        call: calls.Call[Any, T],
        timeout: float | None,
        course: calls.Course | None = None,
    ) -> T:
        """One try at ``address`` (forwarded, or watched, as ``course`` says); a failure
        raises typed, naming the server that answered."""
        try:
            if self._watched(course):
                assert course is not None
                reply = self._watch(address, call, timeout, course)
            else:
                forward = course is not None and course.forward
                reply = self._send(address, call, timeout, forward)
        except grpc.RpcError as err:
            raise from_rpc_error(err, address) from None
        self.topology.answered(address)
        return call.decode(reply)

    def _watch(
        self, address: str, call: calls.Call[Any, T], timeout: float | None, course: calls.Course
    ) -> Any:
        """The reply of an idempotent try at ``address``, looking at the map (asked of
        another member) every :meth:`_patience` seconds while it waits: given up (cancelled,
        :meth:`Course.abandoned`) once the stream left the server it means to reach."""
        began = time.monotonic()
        future = self._send(address, call, timeout, course.forward, future=True)
        patience = self._patience()
        try:
            while True:
                try:
                    return future.result(timeout=patience)
                except grpc.FutureTimeoutError:
                    pass
                if self._moved_away(course, address):
                    raise course.abandoned(time.monotonic() - began)
        finally:
            future.cancel()  # a no-op once it ended

    def _moved_away(self, course: calls.Course, address: str) -> bool:
        """Whether a fresh map (asked of a member other than ``address`` and the server the
        try means to reach) says the stream left that server (:meth:`Course.gone`)."""
        try:
            fresh = self._refresh([course.stream], strict=False, avoid=(address, course.aim))
        except MtaWindowsError:  # the map says nothing now (a stream deleted meanwhile...)
            return False
        return fresh and course.gone()

    def _run(self, call: calls.Call[Any, T], timeout: float | None) -> T:
        course = self._course(call)
        while True:
            try:
                self._ensure_map(course)
                return self._try(course.address(), call, timeout, course)
            except MtaWindowsError as ex:
                step = course.failed(ex)  # raises when the call ends here
            time.sleep(step.pause)

    def _ensure_map(self, course: calls.Course) -> None:
        if course.lookup or self.topology.needs_refresh():
            lookup = self._lookup(course)
            course.lookup = False
            self._refresh(lookup, strict=not self.topology.known)

    def _refresh(
        self, streams: Sequence[str] = (), *, strict: bool = True, avoid: Sequence[str] = ()
    ) -> bool:
        """Ask the candidates (but ``avoid``; the suspects last) for the map and the owners
        of ``streams`` until one answers a fresh one (a stale one, from a member cut off from
        the cluster, is passed over: taken only if no other comes); raises when none answers
        and ``strict`` (else the map held stays). Whether a fresh map was learnt."""
        req = self._map_request(streams)
        tried: list[str] = []
        last: MtaWindowsError | None = None
        stale: tuple[pb.ClusterMap, str] | None = None
        for address in self.topology.candidates(avoid):
            tried.append(address)
            try:
                reply = self._stub(address).GetClusterMap(
                    req, timeout=self._map_timeout(), metadata=self.metadata
                )
            except grpc.RpcError as err:
                last = self._map_failure(err, address)
                if last is None:
                    return True
                continue
            if self._stale_map(reply, address):
                stale = stale or (reply, address)
                continue
            self.topology.learn(reply, address)
            return True
        return self._no_fresh_map(tried, last, stale, strict)

    # -- the cluster
    def cluster_map(self) -> ClusterMap:
        """The cluster as a member sees it now (asked of the members and seeds in turn;
        UnavailableError when none answers): the live members and the lease time. An older
        server without cluster support is a cluster of one (``lease_ms`` 0)."""
        self._refresh()
        return self._cluster_map()

    def owner(self, stream: str) -> str:
        """The address calls about ``stream`` go to: its owner, asked of the cluster now;
        while it has none (it is moving), where placement puts it among the live members.
        NotFoundError (``STREAM_NOT_FOUND``) at once when no member knows the stream."""
        self._refresh([stream])
        return self.topology.cached_owner(stream) or self.topology.route(stream)

    # -- streams
    def create_stream(self, spec: StreamSpec, *, timeout: float | None = None) -> StreamInfo:
        return self._run(calls.create_stream(spec), timeout)

    def delete_stream(self, name: str, *, timeout: float | None = None) -> None:
        self._forget_schema(name)
        self._run(calls.delete_stream(name), timeout)

    def list_streams(self, *, timeout: float | None = None) -> list[StreamInfo]:
        """Every stream of the cluster: each live member lists those it owns (sorted by name
        when there are several members)."""
        call = calls.list_streams()
        course = self._course(call)
        while True:
            try:
                self._ensure_map(course)
                lists = [self._try(a, call, timeout) for a in self.topology.member_addresses()]
                return calls.merge_streams(lists)
            except MtaWindowsError as ex:
                step = course.failed(ex)
            time.sleep(step.pause)

    def get_stream(self, name: str, *, timeout: float | None = None) -> StreamInfo:
        return self._run(calls.get_stream(name), timeout)

    # -- windows
    def create_window(self, spec: WindowSpec, *, timeout: float | None = None) -> WindowInfo:
        return self._run(calls.create_window(spec), timeout)

    def delete_window(self, stream: str, name: str, *, timeout: float | None = None) -> None:
        self._run(calls.delete_window(stream, name), timeout)

    def get_window(self, stream: str, name: str, *, timeout: float | None = None) -> WindowInfo:
        return self._run(calls.get_window(stream, name), timeout)

    def list_windows(self, stream: str, *, timeout: float | None = None) -> list[WindowInfo]:
        return self._run(calls.list_windows(stream), timeout)

    # -- data
    def schema(self, stream: str) -> dict[str, str]:
        """The stream's column types (cached): how :meth:`append` types the columns."""
        s = self._schemas.get(stream)
        if s is None:
            s = self._schemas[stream] = calls.schema_of(self.get_stream(stream))
        return s

    def append(
        self,
        stream: str,
        rows: Rows,
        *,
        producer_id: str | None = None,
        sequence: int | None = None,
        results: str = "none",
        windows: Sequence[str] = (),
        timeout: float | None = None,
    ) -> AppendResult:
        """Append a batch atomically. ``results``: "none", "final" (each window's result
        after the batch) or "per_row" (each window's result after every row, columnar).
        With ``producer_id`` and ``sequence`` the append is idempotent: retried (across a
        failover too) with the same key, applied once."""
        schema = self.schema(stream)
        req = calls.append_request(stream, rows, schema, producer_id, sequence, results, windows)
        return self._run(calls.append(req), timeout)

    def query(self, stream: str, window: str, *, timeout: float | None = None) -> WindowResult:
        return self._run(calls.query(stream, window), timeout)

    def read_results(
        self,
        stream: str,
        window: str,
        *,
        after_sequence: int = 0,
        limit: int = 0,
        timeout: float | None = None,
    ) -> tuple[list[WindowResult], int]:
        """Results of a window with a sequence above ``after_sequence``, oldest first (at most
        ``limit``; 0 = the server's default), and the window's latest sequence."""
        return self._run(calls.read_results(stream, window, after_sequence, limit), timeout)

    def subscribe(
        self, stream: str, window: str, *, timeout: float | None = None
    ) -> Generator[tuple[int, WindowResult], None, None]:
        """(batch number, result) after every batch applied to the stream from the moment this
        returns (the stream's owner confirms the subscription before it does). ``timeout``
        bounds the whole subscription; close the iterator (or let it go) to cancel.

        When the stream moves to another server (``NOT_OWNER``, ``STREAM_MOVING``; in a
        cluster, also its server failing), the iterator subscribes again at the new owner
        by itself: the results of the batches applied in between are not seen (the batch
        numbers are per server); :meth:`read_results` catches up on them by sequence."""
        call = calls.subscribe(stream, window)
        deadline = None if timeout is None else time.monotonic() + timeout
        sub, address, first = self._subscribe(call, deadline, None)
        return self._follow(call, deadline, sub, address, first)

    def _subscribe(
        self, call: calls.Call[Any, Any], deadline: float | None, ended: MtaWindowsError | None
    ) -> tuple[Any, str, Any]:
        """A confirmed subscription (the call, its address, an event read ahead or None);
        after ``ended`` (how the last one ended) unless that ends the subscription."""
        course = self._course(call, retry=self.topology.clustered)
        step = None if ended is None else calls.resume(course, ended)
        while True:
            if step is not None:
                time.sleep(step.pause)
            try:
                self._ensure_map(course)
                address = course.address()
                sub = self._subscription(address, call, calls.left(deadline))
                try:
                    if any(k == SUBSCRIBED for k, _ in sub.initial_metadata() or ()):
                        self.topology.answered(address)
                        return sub, address, None
                    return sub, address, next(sub, None)  # refused, or a server without
                except grpc.RpcError as err:  # the header: the first event tells
                    sub.cancel()
                    raise from_rpc_error(err, address) from None
            except MtaWindowsError as ex:
                step = calls.resume(course, ex)

    def _follow(
        self,
        call: calls.Call[Any, Any],
        deadline: float | None,
        sub: Any,
        address: str,
        first: Any,
    ) -> Generator[tuple[int, WindowResult], None, None]:
        try:
            if first is not None:
                yield calls.event(first)
            while True:
                try:
                    for m in sub:
                        yield calls.event(m)
                    return
                except grpc.RpcError as err:
                    if err.code() == grpc.StatusCode.CANCELLED:  # we went away
                        return
                    ended = from_rpc_error(err, address)
                sub.cancel()
                sub, address, first = self._subscribe(call, deadline, ended)
                if first is not None:
                    yield calls.event(first)
        finally:
            sub.cancel()

    def writer(
        self,
        stream: str,
        *,
        batch_rows: int = 10_000,
        producer_id: str | None = None,
        start_sequence: int = 1,
        max_pending: int = 4,
    ) -> BatchWriter:
        """A batching writer: rows go out in batches of ``batch_rows`` with increasing
        sequence numbers (idempotent, so retried); at most ``max_pending`` batches wait for
        the sender before :meth:`BatchWriter.write` blocks (back-pressure)."""
        return BatchWriter(self, stream, batch_rows, producer_id, start_sequence, max_pending)


__all__ = ["WindowClient"]
