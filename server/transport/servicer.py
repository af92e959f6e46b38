"""The WindowService handlers (:class:`WindowServicer`) and their registration (:func:`add_servicer`).

Each stream has an asyncio lock; its batches run on a worker thread under that lock, so a
stream waiting on Redis (a cache miss, a checkpoint) never blocks the event loop or the other
streams.

Every handler runs behind a guard (:func:`add_servicer`): the request is admitted first (it
parsed; its strings, lists and enums are within limits, inputs.py; the store is up if the call
needs it), before any other work; whatever then escapes the handler ends the call with the
status ``status.py`` maps it to (a refusal, or INTERNAL with an error id), never grpcio's own
answer (UNKNOWN with the exception's text).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NoReturn, TypeVar

import grpc
import redis

from mtawindows.v1 import convert
from mtawindows.v1 import windows_pb2 as pb
from mtawindows.v1 import windows_pb2_grpc as pb_grpc
from mtawindows.v1.keys import split_unit
from mtawindows.v1.reasons import Reason
from mtawindows.v1.relay import FORWARDABLE
from mtawindows.v1.types import AppendResult

from ..service.batch import Batch, Deferred
from ..service.cel import CelError, CelLimits, check_limits
from ..service.compute import compute
from ..service.fanout import Ending, Fanout, Subscription
from ..service.inputs import check_request
from ..service.keyed import KeyedStream, not_keyed
from ..service.ownership import Ownership
from ..service.ranges import range_query
from ..service.refusals import ServiceError, group_refusal, invalid, not_found
from ..service.registry import Registry
from ..service.row_results import RowResults, arrow_ipc
from ..service.stream import Stream
from ..storage.protocol import StoreError
from . import decode, status
from .forward import Forwarder, forwarding
from .inflight import InFlight
from .metrics import Metrics
from .pieces import IDLE, PIECES_MESSAGES, Assembly, later_piece
from .wire import RowResultsPart, with_row_results

__all__ = ["NEEDS_STORE", "WindowServicer", "add_servicer"]

log = logging.getLogger("mtawindows.server")
T = TypeVar("T")

# Calls that read or change windows, or write definitions: they need the store. The others
# (GetStream, ListStreams, GetWindow, ListWindows, Subscribe) answer from memory.
NEEDS_STORE = frozenset(
    {
        "CreateStream",
        "DeleteStream",
        "CreateWindow",
        "DeleteWindow",
        "Append",
        "AppendStream",
        "AppendBatches",
        "Query",
        "ReadResults",
        "GetClusterMap",
        "ListKeys",
        "GetKey",
        "DeleteKey",
    }
)
# the calls about one stream: a cut-off member (Ownership.isolated) refuses them at once
STREAM_CALLS = FORWARDABLE | {"Subscribe", "AppendStream", "AppendBatches"}
# an Arrow batch of at most this many rows into a stream of columnar windows runs on the
# event loop (Stream.inline_arrays_ok): a few milliseconds at most
INLINE_ARROW_ROWS = 16_384
MAX_OWNER_LOOKUPS = 1000  # streams one GetClusterMap may ask about


def _ends_the_call(ex: BaseException, streaming: bool) -> bool:
    """Whether ``ex`` is the call ending by itself, to let through unmapped: an abort already
    sent, a cancellation of this very call (its task is being cancelled: a deadline, a
    client's cancel, a shutdown), or a stream's generator being closed. Anything else, a
    plugin's KeyboardInterrupt, SystemExit, GeneratorExit or CancelledError included, is an
    internal error: a real Ctrl-C never reaches a handler (the server takes SIGINT and SIGTERM
    itself)."""
    if isinstance(ex, grpc.aio.AbortError):
        return True
    if isinstance(ex, asyncio.CancelledError):
        task = asyncio.current_task()
        return task is not None and task.cancelling() > 0
    return streaming and isinstance(ex, GeneratorExit)


class WindowServicer(pb_grpc.WindowServiceServicer):
    def __init__(self, registry: Registry, metrics: Metrics, *, workers: int = 8) -> None:
        self.registry = registry
        self.metrics = metrics
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="mtaw-stream")
        # the periodic flush's writes of keyed streams, outside the streams' locks (one at a
        # time: a thread of its own, never waiting behind the calls that may wait for it)
        self.flush_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mtaw-flush")
        self.locks: dict[str, asyncio.Lock] = {}
        # the calls whose handler started and whose RPC has not ended: a graceful stop waits
        # for these, not for calls gRPC took as the stop began that reached no handler
        self.in_flight = InFlight()
        limits = registry.limits
        self.fanout = Fanout(
            limits.subscriber_queue_bytes,
            limits.subscribers_total_bytes,
            on_cut=lambda e: self.metrics.errors.labels("Subscribe", e.code, e.reason).inc(),
        )
        # why the store cannot be used (set by the server's supervisor while the embedded
        # Redis is down): calls in NEEDS_STORE are refused as UNAVAILABLE meanwhile
        self.store_down: str | None = None
        # the cluster (None: this server owns every stream of its Redis, unfenced)
        self.cluster: Ownership | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        # set by shutdown(): an AppendBatches call ends between two batches; the tasks of
        # those waiting for their next batch, cancelled then (their clients may never send)
        self.stopping = asyncio.Event()
        self.waiting_batches: set[asyncio.Task[Any]] = set()

    def join(self, cluster: Ownership) -> None:
        """Serve as a member of ``cluster``: calls are routed through it; a stream moves only
        while none of its calls is in flight; its subscriptions end with the new owner."""
        self.cluster = cluster
        self.loop = asyncio.get_running_loop()
        cluster.serialize = self._serialized
        cluster.on_moved = self._moved
        self.registry.serve_groups = cluster.serve_groups
        self.registry.owns_fresh = cluster.fresh

    def _serialized(self, stream: str, fn: Callable[[], T]) -> T:
        """``fn()`` under the stream's call lock (from a thread that is not the loop's); a key
        group's unit (``"<stream>#<g>"``) under its stream's."""
        stream = split_unit(stream)[0]
        loop = self.loop
        if loop is None or loop.is_closed():
            return fn()

        async def under_lock() -> T:
            async with self.lock(stream):
                return await self.run(fn)

        return asyncio.run_coroutine_threadsafe(under_lock(), loop).result()

    def _moved(self, stream: str, answer: ServiceError) -> None:
        loop = self.loop
        if loop is None or loop.is_closed():
            return
        stream, group = split_unit(stream)
        if group is not None:  # a key group left: its keys' subscribers follow it
            answer = group_refusal(answer, stream, group)
        ending = Ending(answer.code, answer.reason, answer.message, dict(answer.metadata))
        loop.call_soon_threadsafe(self.fanout.stream_moved, stream, ending)

    async def owned(self, name: str) -> Any:
        """Stream ``name`` if this server serves it now; else NOT_OWNER (where it is),
        STREAM_MOVING or STREAM_NOT_FOUND."""
        cluster = self.cluster
        if cluster is None:
            return self.registry.stream(name)
        self.connected(f"stream {name!r}")  # cut off: refused before anything
        s = self.registry.streams.get(name)
        if s is not None and cluster.fresh(name):
            return s
        if self.store_down is not None:  # routing asks Redis (a renewal, the lease): not now
            raise status.store_unavailable_refusal(f"stream {name!r}", self.store_down)
        return await self.run(cluster.route, name)

    async def data_stream(self, name: str) -> Any:
        """The stream whose rows, keys or results a call is about: a keyed stream's part on this
        server (whatever groups it holds: the call's keys' groups are checked, and adopted when
        placed here, by :meth:`Ownership.serve_groups` as the stream meets them); else the
        stream as :meth:`owned` routes it."""
        cluster = self.cluster
        s = self.registry.streams.get(name)
        if cluster is None or (s is not None and not s.keyed):
            return await self.owned(name)
        self.connected(f"stream {name!r}")
        if s is not None:
            return s
        if self.store_down is not None:
            raise status.store_unavailable_refusal(f"stream {name!r}", self.store_down)
        part = await self.run(self.registry.open_part, name)
        return part if part is not None else await self.owned(name)

    async def window_of(self, stream: str, window: str) -> tuple[Any, Any]:
        s = await self.owned(stream)
        return s, self.registry.window(stream, window)

    async def data_window(self, stream: str, window: str) -> tuple[Any, Any]:
        s = await self.data_stream(stream)
        if window not in s.windows and getattr(s, "resync", None) is not None:
            await self.run(_resync, s)  # a part opened before the window was created
        return s, self.registry.window_of(s, window)

    def lock(self, stream: str) -> asyncio.Lock:
        lk = self.locks.get(stream)
        if lk is None:
            lk = self.locks[stream] = asyncio.Lock()
        return lk

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on a worker thread. A cancelled caller (a client's deadline or
        cancel, a shutdown) cannot stop the thread, so it waits for it before it goes: the
        stream's lock it holds must not let another call run beside a thread still changing
        the stream (that corrupted windows when appends timed out while Redis restarted)."""
        loop = asyncio.get_running_loop()
        fut = loop.run_in_executor(self.pool, fn, *args)
        try:
            return await asyncio.shield(fut)
        except asyncio.CancelledError:
            while not fut.done():
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    await asyncio.shield(fut)  # its outcome went with the caller
            raise

    # -- what the guards call
    def admit(self, method: str, request: Any) -> None:
        """Refuse a request that did not parse or whose strings, lists or enums are out of
        bounds (inputs.py), and a call that needs the store while it is down; before any
        other work."""
        if isinstance(request, decode.Malformed | ServiceError):  # unparsed, or too large
            raise request
        check_request(request)
        if method in STREAM_CALLS:
            self.connected(method)
        if method in NEEDS_STORE and not (method == "GetClusterMap" and not request.streams):
            self.store_ready(method)  # the members alone come from memory: no store needed

    def connected(self, method: str) -> None:
        """Refuse a stream call while this server is cut off from the cluster (no heartbeat
        answered for half a lease): MEMBER_ISOLATED naming the members it last knew, so the
        caller goes to one of them; STORE_UNAVAILABLE when it knows no other member."""
        cluster = self.cluster
        if cluster is None or not cluster.isolated():
            return
        if cluster.paused():
            # stale for no failure of the store (this process paused: a long garbage
            # collection): the call goes on, served under a lease still fresh, else routed
            # on its worker thread, which beats once and refuses it there when the store
            # does not answer (never a round trip on the event loop)
            return
        refusal = cluster.isolation()
        if refusal.metadata.get("members"):
            raise refusal
        raise status.store_unavailable_refusal(method, refusal.message)

    def store_ready(self, method: str) -> None:
        """Refuse a call that needs the store while it is down (the supervisor or the
        watchdog says so), or while this server is cut off from the cluster, at once: at
        admission, and again once the call holds its stream's lock (it may have gone down
        while the call waited: no call waits on it)."""
        if method in STREAM_CALLS:
            self.connected(method)
        if self.store_down is not None:
            raise status.store_unavailable_refusal(method, self.store_down)

    async def fail(
        self,
        method: str,
        context: grpc.aio.ServicerContext,
        ex: BaseException,
        *,
        streaming: bool = False,
    ) -> NoReturn:
        """End the call for ``ex``: counted, logged and sent as ``status.py`` maps it, unless
        the call is ending by itself (:func:`_ends_the_call`); never a call left hanging."""
        if _ends_the_call(ex, streaming):
            raise ex
        if isinstance(ex, ServiceError) and self.cluster is not None:
            stream = ex.metadata.get("stream", "")
            unit = ex.metadata.get("unit", stream)  # a key group's: "<stream>#<g>"
            if ex.reason == Reason.FENCED:  # nothing was done: where the stream is now
                ex = await self.run(self.cluster.lost, unit)
                name, group = split_unit(unit)
                if group is not None and isinstance(ex, ServiceError):
                    ex = group_refusal(ex, name, group)
            elif ex.metadata.get("fenced"):  # done elsewhere (journaled): the error stands
                await self.run(self.cluster.lost, unit)
        end = status.failure(method, ex)
        self.metrics.errors.labels(method, end.code, end.reason).inc()
        await context.abort_with_status(end.status)
        raise AssertionError("abort_with_status returned")  # pragma: no cover

    # -- streams
    async def CreateStream(self, request: pb.CreateStreamRequest, context: Any) -> pb.StreamInfo:
        spec = decode.stream_spec(request)
        cluster = self.cluster
        if cluster is None:
            info = await self.run(self.registry.create_stream, spec)
            return convert.stream_info_to_proto(info)
        async with self.lock(spec.name):
            fence = await self.run(cluster.claim, spec.name)
            ok = False
            try:
                info = await self.run(self.registry.create_stream, spec, fence)
                ok = True
            finally:
                cluster.created(spec.name, ok)
        return convert.stream_info_to_proto(info)

    async def DeleteStream(self, request: pb.DeleteStreamRequest, context: Any) -> Any:
        await self.owned(request.name)
        async with self.lock(request.name):
            stream = await self.owned(request.name)
            await self.run(self.registry.delete_stream, request.name)
            if self.cluster is not None:
                await self.run(self.cluster.deleted, request.name)
            for listener in list(stream.listeners):
                listener(-1, {})
        self.locks.pop(request.name, None)
        return pb.DeleteStreamResponse()

    async def ListStreams(self, request: pb.ListStreamsRequest, context: Any) -> Any:
        """The streams this server owns (a cluster-aware client asks every member)."""
        infos = [s.info() for s in list(self.registry.streams.values())]
        return pb.ListStreamsResponse(streams=[convert.stream_info_to_proto(i) for i in infos])

    async def GetStream(self, request: pb.GetStreamRequest, context: Any) -> pb.StreamInfo:
        return convert.stream_info_to_proto((await self.owned(request.name)).info())

    async def GetClusterMap(self, request: pb.GetClusterMapRequest, context: Any) -> Any:
        """The live members and the owners of the streams asked about: NOT_FOUND,
        STREAM_NOT_FOUND for a name no member knows (an owner "" means a stream that exists
        is moving: a client that retries on it must not retry a typo forever)."""
        if len(request.streams) > MAX_OWNER_LOOKUPS:
            raise invalid(
                "streams",
                f"expected at most {MAX_OWNER_LOOKUPS} names, got {len(request.streams)}",
            )
        return await self.run(self._cluster_map, list(request.streams))

    def _cluster_map(self, streams: list[str]) -> pb.ClusterMap:
        cluster = self.cluster
        if cluster is None:
            for name in streams:
                self.registry.stream(name)  # STREAM_NOT_FOUND for one it does not have
            return pb.ClusterMap(self="", lease_ms=0)
        age = cluster.view_age_ms()  # the members' ages age by this server's clock
        out = pb.ClusterMap(
            self=cluster.member,
            lease_ms=cluster.lease_ms,
            view_age_ms=age,
            isolated=cluster.isolated(),
        )
        for mid in sorted(cluster.live()):
            m = cluster.membership.members.get(mid)
            if m is None:  # this server, before its first heartbeat answered
                out.members.add(
                    id=mid,
                    address=cluster.address,
                    incarnation=cluster.incarnation,
                    heartbeat_age_ms=age,
                )
                continue
            out.members.add(
                id=m.id,
                address=m.address,
                incarnation=m.incarnation,
                heartbeat_age_ms=(age if m.id == cluster.member else m.age_ms + age),
                streams=m.streams,
            )
        if out.isolated and streams:  # owners come from Redis, out of reach: ask another member
            self.connected("GetClusterMap")
        for name in streams:
            member, address, token = cluster.owner_of(name)
            if not member and not self.registry.exists(name):  # no owner: moving, or none
                raise not_found(Reason.STREAM_NOT_FOUND, f"no stream named {name!r}", stream=name)
            out.owners.add(
                stream=name,
                member=member,
                address=address,
                token=token,
                group_members=cluster.group_members(name),
            )
        return out

    # -- windows
    async def CreateWindow(self, request: pb.CreateWindowRequest, context: Any) -> pb.WindowInfo:
        spec = decode.window_spec(request)
        if spec.policy.kind == "expression":  # before anything parses it
            await self.run(self._check_cel, spec.policy.cel)
        await self.owned(spec.stream)
        async with self.lock(spec.stream):
            await self.owned(spec.stream)
            info = await self.run(self.registry.create_window, spec)
        return convert.window_info_to_proto(info)

    def _check_cel(self, text: str) -> None:
        """A new CEL policy within the size and nesting limits (on a worker thread)."""
        limits = self.registry.limits
        try:
            check_limits(text, CelLimits(limits.max_cel_bytes, limits.max_cel_depth))
        except CelError as ex:
            raise invalid("spec.policy.expression.cel", str(ex), ex.code, ex.metadata) from None

    async def DeleteWindow(self, request: pb.DeleteWindowRequest, context: Any) -> Any:
        await self.window_of(request.stream, request.name)
        async with self.lock(request.stream):
            await self.window_of(request.stream, request.name)
            await self.run(self.registry.delete_window, request.stream, request.name)
            self.fanout.window_deleted(request.stream, request.name)
        return pb.DeleteWindowResponse()

    async def GetWindow(self, request: pb.GetWindowRequest, context: Any) -> pb.WindowInfo:
        s, w = await self.window_of(request.stream, request.name)
        return convert.window_info_to_proto(w.info(s.rows_late))

    async def ListWindows(self, request: pb.ListWindowsRequest, context: Any) -> Any:
        s = await self.owned(request.stream)
        infos = [w.info(s.rows_late) for w in list(s.windows.values())]
        return pb.ListWindowsResponse(windows=[convert.window_info_to_proto(i) for i in infos])

    # -- data
    async def Append(self, request: pb.AppendRequest, context: Any) -> pb.AppendResponse | bytes:
        await self.data_stream(request.stream)
        mode = decode.result_mode(request)
        async with self.lock(request.stream):
            self.store_ready("Append")
            stream = await self.data_stream(request.stream)  # it may have moved meanwhile
            if not decode.arrow_payload(request) and stream.inline_ok(
                decode.rows_hint(request), mode
            ):
                # small batch: on the loop unless a window would wait for Redis
                try:
                    return self._append(stream, request, mode, nonblocking=True)
                except Deferred as d:
                    self.metrics.deferred.labels(stream.spec.name).inc()
                    return await self.run(self._resume, stream, d.batch, request.arrow_results)
            payload = decode.ARROW.get()
            if payload and stream.inline_arrays_ok() and not request.columns:
                # an Arrow batch into columnar windows only: read here (no copy), and a
                # small one applied here as a small batch is (each window one vectorized
                # step, a millisecond or so; the hop to a worker thread and back cost about
                # as much), unless a window would wait for Redis
                payload = decode.arrow_table(payload, self.registry.limits.max_batch_rows)
                if payload.num_rows <= INLINE_ARROW_ROWS:
                    try:
                        return self._append(stream, request, mode, payload, nonblocking=True)
                    except Deferred as d:
                        self.metrics.deferred.labels(stream.spec.name).inc()
                        return await self.run(self._resume, stream, d.batch, request.arrow_results)
            return await self.run(self._append, stream, request, mode, payload)

    async def append_pieces(
        self, first: pb.AppendRequest, payload: Any, rest: AsyncIterator[Any], context: Any
    ) -> pb.AppendResponse | bytes:
        """Append's batch in pieces (pieces.py): the first message (admitted by the guard,
        ``payload`` its Arrow bytes) says everything, ``rest`` brings the next rows. The
        stream is looked up first (a stream elsewhere or missing is refused before a piece
        is read); nothing changes before the client half-closes and every piece was taken."""
        if first.columns:
            raise invalid(
                "columns",
                "AppendStream takes the rows as Arrow IPC pieces (arrow_ipc), not protobuf "
                "columns; send those with Append",
            )
        await self.data_stream(first.stream)
        limits = self.registry.limits
        batch = Assembly(
            limits.max_batch_rows, first.rows, PIECES_MESSAGES * limits.max_message_bytes
        )
        batch.add(payload)
        index = 1
        marked = False  # the last message repeats rows (a stream of one needs no mark)
        while True:
            try:
                piece = await asyncio.wait_for(anext(rest), IDLE)
            except StopAsyncIteration:
                break
            except TimeoutError:
                raise ServiceError(
                    "DEADLINE_EXCEEDED",
                    Reason.INVALID_ARGUMENT,
                    f"no piece of the AppendStream for {IDLE:g} s after {index} message(s); "
                    "nothing was applied",
                ) from None
            index += 1
            if isinstance(piece, decode.Malformed | ServiceError):
                raise piece
            if marked:
                raise invalid(
                    "rows",
                    f"message {index} of an AppendStream came after its end mark (the "
                    "message that repeats rows): the end mark is the last message",
                )
            message, data = (
                (piece.message, piece.payload)
                if isinstance(piece, decode.Carried)
                else (piece, b"")
            )
            marked = later_piece(message, index, first.rows)
            batch.add(data)
        # refused unless every row told came and the stream was marked ended
        table = batch.table(marked or index == 1 or first.rows == 0)
        if context.cancelled():
            raise asyncio.CancelledError
        mode = decode.result_mode(first)
        async with self.lock(first.stream):
            self.store_ready("AppendStream")
            stream = await self.data_stream(first.stream)  # it may have moved meanwhile
            return await self.run(
                self._append, stream, first, mode, table if table is not None else b""
            )

    async def AppendBatches(
        self, requests: AsyncIterator[Any], context: Any
    ) -> AsyncIterator[pb.AppendResponse | bytes]:
        """Batches one after another, each applied as :meth:`Append` applies it and answered
        in order; the call ends at the first one refused (its error, naming its index), or
        between two when the server stops (``SERVER_STOPPING``). gRPC reads the next
        batches while one is applied: the client, the network and this server overlap."""
        name: str | None = None
        index = 0
        rest = aiter(requests)
        while True:
            item = await self._next_batch(rest, index)
            if item is None:
                return
            t0 = time.perf_counter()
            token = None
            if isinstance(item, decode.Carried):  # its Arrow bytes, for Append
                token = decode.ARROW.set(item.payload)
                item = item.message
            try:
                self.admit("AppendBatches", item)
                if name is None:
                    name = item.stream
                elif item.stream != name:
                    raise invalid(
                        "stream",
                        f"every batch of an AppendBatches names the first one's stream ({name!r})",
                        given=repr(item.stream),
                    )
                reply = await self.Append(item, context)
            except ServiceError as ex:
                raise _at_batch(ex, index) from None
            finally:
                if token is not None:
                    decode.ARROW.reset(token)
                self.metrics.latency.labels("AppendBatches").observe(time.perf_counter() - t0)
            yield reply
            index += 1

    async def _next_batch(self, rest: AsyncIterator[Any], index: int) -> Any:
        """The next message of an AppendBatches (None after the client's last), unless the
        server is stopping: then ``SERVER_STOPPING`` (:meth:`shutdown` cancels a call waiting
        here, which may wait for ever: a producer keeps its call open between batches)."""
        if self.stopping.is_set():
            raise _stopping(index)
        task = asyncio.current_task()
        assert task is not None
        self.waiting_batches.add(task)
        try:
            return await anext(rest)
        except StopAsyncIteration:
            return None
        except asyncio.CancelledError:
            if not self.stopping.is_set():  # the call's own end (its client, a deadline)
                raise
            task.uncancel()  # cancelled by shutdown(): the call ends with a status
            raise _stopping(index) from None
        finally:
            self.waiting_batches.discard(task)

    def shutdown(self) -> None:
        """The server is stopping: AppendBatches calls end before their next batch, and
        subscriptions end (:meth:`Fanout.shutdown`), so that a graceful stop waits for the
        batches being applied only, not for calls that never end by themselves."""
        self.stopping.set()
        for task in list(self.waiting_batches):
            task.cancel()
        self.fanout.shutdown()

    def _append(
        self,
        stream: Stream,
        request: pb.AppendRequest,
        mode: str,
        payload: Any = None,
        *,
        nonblocking: bool = False,
    ) -> pb.AppendResponse | bytes:
        limit = self.registry.limits.max_batch_rows
        # an Arrow batch's numbers as arrays for a stream that takes them (no Python object
        # per value), as lists for any other; ``payload``: the Arrow bytes the request
        # carried (decode.ARROW, read on the handler's task)
        columns = decode.columns_of(
            request,
            limit,
            arrays=stream.takes_arrays,
            key_bytes=stream.key_bytes,
            payload=payload,
        )
        # a keyed batch's part other than its first (the SDK's split) does not count it again
        extra = {"counted": False} if request.continuation and stream.keyed else {}
        return self._respond(
            stream,
            lambda: stream.append(
                columns,
                producer_id=request.producer_id,
                sequence=request.sequence,
                mode=mode,
                which=list(request.windows),
                max_rows=limit,
                nonblocking=nonblocking,
                **extra,
            ),
            request.arrow_results,
        )

    def _resume(self, stream: Stream, batch: Batch, arrow: bool) -> pb.AppendResponse | bytes:
        return self._respond(stream, lambda: stream.resume(batch), arrow)

    def _respond(
        self, stream: Stream, apply: Callable[[], AppendResult], arrow: bool = False
    ) -> pb.AppendResponse | bytes:
        """Run ``apply`` (an append or a resumed one), count its outcome, build the answer
        (``arrow``: per-row results as Arrow IPC, ``AppendRequest.arrow_results``)."""
        name = stream.spec.name
        try:
            res = apply()
        except ServiceError as ex:
            self.metrics.batches.labels(name, ex.reason.lower()).inc()
            raise
        empty = not (res.duplicate or res.rows_applied or res.rows_late or res.rows_buffered)
        outcome = "duplicate" if res.duplicate else "empty" if empty else "applied"
        self.metrics.batches.labels(name, outcome).inc()
        self.metrics.rows.labels(name).inc(res.rows_applied)
        if res.rows_late:
            self.metrics.late.labels(name).inc(res.rows_late)
        out = pb.AppendResponse(
            rows_applied=res.rows_applied,
            rows_late=res.rows_late,
            rows_buffered=res.rows_buffered,
            duplicate=res.duplicate,
        )
        for wname, r in res.results.items():
            out.results.append(convert.result_to_proto(r, stream.windows[wname].type_tags))
        for r in res.key_results:  # a keyed stream's: one per (window, key) changed
            out.results.append(convert.result_to_proto(r, stream.windows[r.window].type_tags))
        positions = res.row_positions
        # not every row has a result (late rows left): the request's row of each, as "rows"
        # (and as an Arrow table's "_row" column)
        rows = pb.Int64List(values=positions) if positions is not None else None
        if arrow:  # one Arrow IPC stream per window: no value becomes a Python object
            parts: list[RowResultsPart] = []
            for wname, rr in res.row_results.items():
                assert isinstance(rr, RowResults)
                parts.append((wname, arrow_ipc(rr.arrow(positions)), rows))
            if parts:
                return self._within_limit(
                    "Append", with_row_results(out, "row_results", parts), out.rows_applied
                )
            return out
        for wname, rr in res.row_results.items():
            assert isinstance(rr, RowResults)
            out.row_results.append(
                pb.WindowRowResults(
                    window=wname,
                    columns=[
                        convert.column_to_proto(c, t, vs) for c, (t, vs) in rr.typed().items()
                    ],
                    sizes=pb.Int64List(values=rr.sizes()),
                    rows=rows,
                )
            )
        return self._fitting(out)

    def _fitting(self, out: pb.AppendResponse) -> pb.AppendResponse | bytes:
        """``out``, unless per-row results make it larger than a message may be: then
        RESOURCE_EXHAUSTED ``MESSAGE_TOO_LARGE`` saying the batch was applied (gRPC would
        otherwise fail the call without a reason, after the same). With per-row results it
        is serialized here, once (its size is its serialized length: ``ByteSize`` would
        encode it a first time), and the bytes go out as they are (``_passthrough``)."""
        if out.row_results:
            return self._within_limit("Append", out.SerializeToString(), out.rows_applied)
        return out

    def _within_limit(self, method: str, data: bytes, applied: int | None = None) -> bytes:
        """A serialized reply, unless it is larger than a message may be (RESOURCE_EXHAUSTED
        ``MESSAGE_TOO_LARGE``; ``applied``: an Append's rows, applied all the same)."""
        limit = self.registry.limits.max_message_bytes
        if len(data) > limit:
            raise status.reply_too_large(method, len(data), limit, applied=applied)
        return data

    async def Query(self, request: pb.QueryRequest, context: Any) -> pb.WindowResult:
        # a query-time range (range or count): checked before anything is read
        q = range_query(
            request.count,
            (request.range.seconds, request.range.nanos) if request.HasField("range") else None,
        )
        fetch = self.data_window if request.key else self.window_of
        _, w = await fetch(request.stream, request.window)
        async with self.lock(request.stream):
            self.store_ready("Query")
            s, w = await fetch(request.stream, request.window)
            if isinstance(s, KeyedStream) and request.key:
                r = await self.run(s.query, request.window, request.key, q)
            elif request.key:
                raise not_keyed(request.stream, "is not keyed: query it without a key")
            else:
                r = await self.run(self.registry.result, request.stream, request.window, q)
        return convert.result_to_proto(r, w.type_tags)

    async def Compute(self, request: pb.ComputeRequest, context: Any) -> bytes:
        # stateless: the stream's window definitions are read, nothing of it changes
        s = await self.owned(request.stream)
        return await self.run(self._compute, s, request, decode.arrow_payload(request))

    def _compute(self, s: Any, request: pb.ComputeRequest, payload: Any) -> bytes:
        import numpy as np

        limits = self.registry.limits
        table = decode.arrow_table(payload, limits.max_batch_rows)
        got = compute(
            s.spec,
            dict(s.windows),
            list(request.windows),
            table,
            request.key_column,
            request.context_rows,
            limits.max_batch_rows,
        )
        rows = np.arange(request.context_rows, table.num_rows, dtype=np.int64)
        parts: list[RowResultsPart] = []
        size = 0
        for name, rr in got.items():
            ipc = arrow_ipc(rr.arrow(rows))
            size += ipc.size
            if size > limits.max_message_bytes:  # before the next window's is computed
                raise status.reply_too_large("Compute", size, limits.max_message_bytes)
            parts.append((name, ipc, None))
        return self._within_limit(
            "Compute", with_row_results(pb.ComputeResponse(), "results", parts)
        )

    # -- keys
    async def _keyed(self, name: str) -> Any:
        s = await self.data_stream(name)
        if not s.keyed:
            raise not_keyed(name, "is not keyed (it has no key field): it has no keys")
        return s

    async def ListKeys(self, request: pb.ListKeysRequest, context: Any) -> pb.ListKeysResponse:
        if request.limit < 0:
            raise invalid("limit", f"expected a number >= 0, got {request.limit}")
        await self._keyed(request.stream)
        async with self.lock(request.stream):
            self.store_ready("ListKeys")
            s = await self._keyed(request.stream)
            keys, token = await self.run(
                s.list_keys, request.prefix, request.limit, request.page_token
            )
            groups = s.held_groups() if self.cluster is not None else []
        return pb.ListKeysResponse(
            keys=[convert.key_info_to_proto(k, {}) for k in keys],
            next_page_token=token,
            groups=groups,
        )

    async def GetKey(self, request: pb.GetKeyRequest, context: Any) -> pb.KeyInfo:
        await self._keyed(request.stream)
        async with self.lock(request.stream):
            self.store_ready("GetKey")
            s = await self._keyed(request.stream)
            info = await self.run(s.get_key, request.key)
            types = {n: w.type_tags for n, w in s.windows.items()}
        return convert.key_info_to_proto(info, types)

    async def DeleteKey(self, request: pb.DeleteKeyRequest, context: Any) -> Any:
        await self._keyed(request.stream)
        async with self.lock(request.stream):
            self.store_ready("DeleteKey")
            s = await self._keyed(request.stream)
            await self.run(s.delete_key, request.key)
        return pb.DeleteKeyResponse()

    async def ReadResults(self, request: pb.ReadResultsRequest, context: Any) -> Any:
        if request.after_sequence < 0 or request.limit < 0:
            raise invalid(
                "after_sequence" if request.after_sequence < 0 else "limit",
                f"expected a number >= 0, got after_sequence={request.after_sequence}, "
                f"limit={request.limit}",
            )
        s, _ = await self.window_of(request.stream, request.window)
        if s.keyed:
            raise not_keyed(
                request.stream,
                "is keyed: it keeps no result history; read a key's result with Query(key=) "
                "or follow keys with Subscribe(keys=)",
            )
        limit = min(request.limit or 1000, 10_000)
        async with self.lock(request.stream):
            self.store_ready("ReadResults")
            _, w = await self.window_of(request.stream, request.window)
            got = await self.run(w.results_after, request.after_sequence, limit)
            latest = w.sequence
        return pb.ReadResultsResponse(
            results=[convert.result_to_proto(r, w.type_tags) for r in got],
            latest_sequence=latest,
        )

    async def Subscribe(self, request: pb.SubscribeRequest, context: Any) -> AsyncIterator[bytes]:
        """Results of every batch applied after the headers went out, through a queue bounded
        in bytes (``Limits.subscriber_queue_bytes``, ``subscribers_total_bytes``): a
        subscriber that falls that far behind is cut (RESOURCE_EXHAUSTED,
        SUBSCRIBER_TOO_SLOW). Events are serialized once per window and batch (fanout.py)."""
        sub = await self._subscribe(request)
        # the call's end (cancelled, deadline, aborted) drops the queue at once, even while
        # this generator waits on a write that a stalled client never lets through
        context.add_done_callback(lambda _ctx: self.fanout.unsubscribe(sub))
        try:
            # headers go out once the subscription is in place: a client that waits for them
            # knows it will see every batch applied from then on
            await context.send_initial_metadata((("mtawindows-subscribed", "1"),))
            while True:
                data = sub.pop()
                if data is not None:
                    yield data
                    continue
                if sub.ended is not None:
                    await self._unsubscribed(sub.ended, context)
                    return
                await sub.wait()
        finally:
            self.fanout.unsubscribe(sub)

    async def _subscribe(self, request: pb.SubscribeRequest) -> Subscription:
        await self.data_window(request.stream, request.window)
        async with self.lock(request.stream):
            # again under the lock: the stream or window may have gone meanwhile
            stream, window = await self.data_window(request.stream, request.window)
            limit = self.registry.limits.max_subscribers
            if self.fanout.count >= limit:
                raise ServiceError(
                    "RESOURCE_EXHAUSTED",
                    Reason.TOO_MANY_SUBSCRIBERS,
                    f"the server holds its limit of {limit} subscriptions",
                    metadata={"limit": str(limit)},
                )
            encode = functools.partial(_event_bytes, window.type_tags)
            keys: frozenset[str] | None = None
            if request.keys:
                if not stream.keyed:
                    raise not_keyed(request.stream, "is not keyed: subscribe without keys")
                for i, k in enumerate(request.keys):
                    stream.check_key(k, f"keys[{i}]")
                keys = frozenset(request.keys)
            return self.fanout.subscribe(stream, request.window, encode, keys)

    async def _unsubscribed(self, ended: Ending, context: Any) -> None:
        """End a Subscribe call whose subscription ended (the subscriber leaving ends it
        quietly)."""
        if ended.reason == Reason.UNSUBSCRIBED:
            return
        if ended.reason != Reason.SUBSCRIBER_TOO_SLOW:  # counted when it was cut
            self.metrics.errors.labels("Subscribe", ended.code, ended.reason).inc()
        await context.abort_with_status(status.ending_status(ended))

    # -- durability
    async def flush_all(self) -> None:
        """The periodic flush of every stream, under its lock; a keyed stream's writes are
        prepared under it and written outside it (its appends go on meanwhile)."""
        for name, stream in list(self.registry.streams.items()):
            try:
                # a keyed stream's flush goes in turns of whole groups (KeyedStream.flush_begin):
                # as many as its dirty keys call for now, the lock free between them
                turns = stream.flush_turns() if isinstance(stream, KeyedStream) else 1
                for _ in range(turns):
                    async with self.lock(name):
                        if stream.gone:
                            break
                        # prepared and handed to the flush thread in one step on the worker:
                        # a cancelled flush (shutdown) cannot leave prepared writes nobody
                        # runs, which would hold the stream's next flush (its release) forever
                        pending = await self.run(functools.partial(self._begin_flush, stream))
                    if pending is None:
                        break
                    await asyncio.shield(asyncio.wrap_future(pending))
            except ServiceError as ex:
                if ex.reason == Reason.FENCED and self.cluster is not None:
                    async with self.lock(name):
                        await self.run(self.cluster.lost, ex.metadata.get("unit", name))
                else:
                    log.warning("periodic flush failed: %s", ex, extra={"stream": name})
            except (StoreError, redis.RedisError) as ex:  # retried by the next flush
                log.warning("periodic flush failed: %s", ex, extra={"stream": name})
            except Exception:
                log.exception("periodic flush failed", extra={"stream": name})

    def _begin_flush(self, stream: Any) -> concurrent.futures.Future[None] | None:
        """On a worker, under the stream's lock: a flush's writes prepared and started on the
        flush thread (None: nothing to write); writes that cannot start are marked back
        unwritten."""
        writes = self.registry.flush_begin(stream)
        if writes is None:
            return None
        try:
            return self.flush_pool.submit(writes.run)
        except BaseException:
            writes.abandon()
            raise

    def key_stats(self) -> tuple[list[tuple[str, dict[str, int]]], dict[str, int]]:
        return _key_stats(self.registry)

    def window_stats(self) -> Iterator[tuple[str, str, dict[str, int]]]:
        for sname, s in list(self.registry.streams.items()):
            for wname, w in list(s.windows.items()):
                try:
                    yield sname, wname, w.stats(s.rows_late)
                except Exception:  # pragma: no cover - a window mid-change: skip this scrape
                    continue


def _resync(s: KeyedStream) -> None:
    """A keyed stream's part follows the stream's definitions now (on a worker thread)."""
    with s.lock:
        if s.resync is not None:
            s.resync()


def _key_stats(registry: Registry) -> tuple[list[tuple[str, dict[str, int]]], dict[str, int]]:
    """Keyed streams' figures per stream, and the key cache's (metrics)."""
    streams = []
    for name, s in list(registry.streams.items()):
        if isinstance(s, KeyedStream):
            try:
                st = s.stats()
            except Exception:  # pragma: no cover - a stream mid-change: skip this scrape
                continue
            streams.append((name, st))
    c = registry.key_cache
    return streams, {"used": c.used, "evictions": c.evictions, "loads": c.loads}


def _at_batch(ex: ServiceError, index: int) -> ServiceError:
    """An AppendBatches' refusal of its batch ``index``: the batch's error, saying so (a
    batch applied whose per-row results passed the message limit says ``applied``)."""
    done = "the batches before it were applied, none from it on"
    if ex.metadata.get("applied"):  # its reply passed the message limit
        done = "it and the batches before it were applied, none after it"
    return ServiceError(
        ex.code,
        ex.reason,
        f"batch {index} of the AppendBatches call ({done}): {ex.message}",
        ex.violations,
        {**ex.metadata, "batch": str(index)},
    )


def _stopping(index: int) -> ServiceError:
    return ServiceError(
        "UNAVAILABLE",
        Reason.SERVER_STOPPING,
        f"the server is stopping: the AppendBatches call ends before its batch {index} (the "
        f"batches before it were applied, none from it on); send the rest again, elsewhere or "
        f"later",
        metadata={"batch": str(index)},
    )


def _event_bytes(tags: Any, batch: int, result: Any) -> bytes:
    """A serialized SubscribeEvent: ``result`` of a window (output types ``tags``) after
    ``batch``."""
    event = pb.SubscribeEvent(batch=batch, result=convert.result_to_proto(result, tags))
    return event.SerializeToString()  # type: ignore[no-any-return]


# --------------------------------------------------------------------------- registration


def add_servicer(
    servicer: WindowServicer, server: grpc.aio.Server, forwarder: Forwarder | None = None
) -> None:
    """Register the WindowService, each handler behind its guard, with parsers that turn
    malformed bytes, and requests over the message limit, into a refusal. The server lets
    gRPC take requests up to :func:`~.status.receive_limit` (twice the limit) for that. With
    a ``forwarder``, the unary calls about a stream are sent on to its owner when their client
    asks for it (forward.py): their replies may then be the owner's bytes, passed through."""
    service = pb.DESCRIPTOR.services_by_name["WindowService"]
    limit = servicer.registry.limits.max_message_bytes
    handlers = {}
    for method in service.methods:
        request = getattr(pb, method.input_type.name)
        response = getattr(pb, method.output_type.name)
        if method.client_streaming and method.server_streaming:  # AppendBatches
            handlers[method.name] = grpc.stream_stream_rpc_method_handler(
                _guard_stream(servicer, method.name, servicer.AppendBatches, admit=False),
                request_deserializer=_within(limit, request, decode.carrying_parser(request)),
                response_serializer=_passthrough(response),
            )
            continue
        if method.server_streaming:
            handlers[method.name] = grpc.unary_stream_rpc_method_handler(
                _guard_stream(servicer, method.name, getattr(servicer, method.name)),
                request_deserializer=_within(limit, request, decode.safe_parser(request)),
                response_serializer=_passthrough(response),
            )
            continue
        if method.client_streaming:  # AppendStream: pieces, each parsed as it comes
            handlers[method.name] = grpc.stream_unary_rpc_method_handler(
                _guard_pieces(servicer, method.name, servicer.append_pieces),
                request_deserializer=_within(limit, request, decode.carrying_parser(request)),
                response_serializer=_passthrough(response),
            )
            continue
        handler = forwarding(forwarder, method.name, getattr(servicer, method.name))
        # a batch's Arrow bytes stay in the request's buffer (decode.carrying_parser)
        parser = (
            decode.carrying_parser(request)
            if "arrow_ipc" in request.DESCRIPTOR.fields_by_name
            else decode.safe_parser(request)
        )
        handlers[method.name] = grpc.unary_unary_rpc_method_handler(
            _guard_unary(servicer, method.name, handler),
            request_deserializer=_within(limit, request, parser),
            response_serializer=_passthrough(response),
        )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service.full_name, handlers),)
    )


def _within(limit: int, message: Any, parse: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    """``parse``, for requests of at most ``limit`` bytes; a larger one is not parsed: it
    becomes its refusal (RESOURCE_EXHAUSTED, ``MESSAGE_TOO_LARGE``), which the guard raises."""
    name = message.DESCRIPTOR.name

    def parse_within(data: bytes) -> Any:
        size = len(data)
        if size > limit:
            return status.message_too_large(name, size, limit)
        return parse(data)

    return parse_within


def _passthrough(message: Any) -> Callable[[Any], bytes]:
    """``message``'s serializer, passing bytes through: Subscribe yields events serialized
    once for all the subscribers of a window, and a forwarded call answers the owner's
    reply as it came."""
    serialize = message.SerializeToString

    def ser(m: Any) -> bytes:
        return m if isinstance(m, bytes) else serialize(m)

    return ser


def _guard_unary(servicer: WindowServicer, method: str, fn: Callable[..., Any]) -> Any:
    async def handle(request: Any, context: grpc.aio.ServicerContext) -> Any:
        t0 = time.perf_counter()
        servicer.in_flight.enter(method, context)
        token = None
        if isinstance(request, decode.Carried):  # its Arrow bytes, for this call's handler
            token = decode.ARROW.set(request.payload)
            request = request.message
        try:
            servicer.admit(method, request)
            return await fn(request, context)
        except BaseException as ex:
            await servicer.fail(method, context, ex)
        finally:
            if token is not None:
                decode.ARROW.reset(token)
            servicer.metrics.latency.labels(method).observe(time.perf_counter() - t0)

    return handle


def _guard_pieces(servicer: WindowServicer, method: str, fn: Callable[..., Any]) -> Any:
    """The guard of a client stream (AppendStream): its first message admitted as a unary
    request is, then ``fn(first, its Arrow bytes, the next messages, context)``."""

    async def handle(pieces: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> Any:
        t0 = time.perf_counter()
        servicer.in_flight.enter(method, context)
        try:
            rest = aiter(pieces)
            try:
                first = await asyncio.wait_for(anext(rest), IDLE)
            except StopAsyncIteration:
                raise invalid(
                    "messages", f"an {method} sent no message: expected at least one"
                ) from None
            except TimeoutError:
                msg = f"no first message of the {method} for {IDLE:g} s"
                raise ServiceError("DEADLINE_EXCEEDED", Reason.INVALID_ARGUMENT, msg) from None
            payload: Any = b""
            if isinstance(first, decode.Carried):
                first, payload = first.message, first.payload
            servicer.admit(method, first)
            return await fn(first, payload, rest, context)
        except BaseException as ex:
            await servicer.fail(method, context, ex)
        finally:
            servicer.metrics.latency.labels(method).observe(time.perf_counter() - t0)

    return handle


def _guard_stream(
    servicer: WindowServicer, method: str, fn: Callable[..., Any], *, admit: bool = True
) -> Any:
    """The guard of a call that streams its replies: Subscribe (its request admitted first)
    and AppendBatches (``admit`` False: ``fn`` admits each message itself, a message that
    did not parse refused at its turn, after the batches before it)."""

    async def handle(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        servicer.in_flight.enter(method, context)
        events = None
        try:
            if admit:
                servicer.admit(method, request)
            events = fn(request, context)
            async for event in events:
                yield event
        except BaseException as ex:
            await servicer.fail(method, context, ex, streaming=True)
        finally:
            if events is not None:  # the handler's own cleanup runs now, not at collection
                await events.aclose()

    return handle
