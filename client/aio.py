"""The asyncio client :class:`AsyncWindowClient`: the same calls as :class:`WindowClient`, each
through the grpc.aio stub of the server its stream lives on and awaited (requests, replies,
retry policy and errors: :mod:`.calls`; the cluster: :mod:`.cluster_map`). A keyed stream whose
key groups are held apart on a cluster (:mod:`.key_groups`) has its append parts, its ListKeys
fan-out and its subscriptions at every holder run as tasks at once (``asyncio.gather``)."""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Mapping,
    Sequence,
)
from datetime import timedelta
from typing import Any, TypeVar

import grpc

from mtawindows.v1 import convert
from mtawindows.v1 import windows_pb2 as pb
from mtawindows.v1.keepalive import KEEPALIVE_MS
from mtawindows.v1.types import (
    AppendResult,
    KeyInfo,
    StreamInfo,
    StreamSpec,
    WindowInfo,
    WindowResult,
    WindowSpec,
)

from . import calls
from .base import SUBSCRIBED, ClientBase
from .calls import Key, KeyPage
from .channel import DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_TARGET, credentials, open_aio_channel
from .cluster_map import ClusterMap
from .errors import MtaWindowsError, NotOwnerError, from_rpc_error
from .key_groups import KeyedAppend, Pending, merge_key_pages, missing_groups
from .pipeline import (
    AsyncBatchFeed,
    alone,
    at_batch,
    batches_call,
    check_arguments,
    resendable,
    timed_out,
)
from .rows import Rows

T = TypeVar("T")
_END = object()  # a merged subscription's queue: a member's subscription ended


async def _each(batches: Iterable[Any] | AsyncIterable[Any]) -> AsyncIterator[Any]:
    if isinstance(batches, AsyncIterable):
        async for b in batches:
            yield b
    else:
        for b in batches:
            yield b


async def _chained(first: list[Any], rest: AsyncIterator[Any]) -> AsyncIterator[Any]:
    for item in first:
        yield item
    async for item in rest:
        yield item


async def _raising(ex: BaseException) -> AsyncIterator[pb.AppendRequest]:
    """A source of batches that raises ``ex`` when the next batch is asked for."""
    nothing: tuple[pb.AppendRequest, ...] = ()
    for item in nothing:  # (nothing: an async generator that raises at its first step)
        yield item
    raise ex


class _FanIn:
    """As the blocking client's: the subscriptions at several members of one
    :meth:`AsyncWindowClient.subscribe`, each read by a task into one bounded queue."""

    def __init__(self, maxsize: int = 1024) -> None:
        self.queue: asyncio.Queue[Any] = asyncio.Queue(maxsize)
        self.stopped = False
        self.calls: set[Any] = set()
        self.tasks: set[asyncio.Future[None]] = set()
        self.active = 0
        self.covered: set[str] = set()

    async def put(self, item: Any) -> bool:
        """Queue ``item`` (waits while the queue is full); False once closed."""
        if self.stopped:
            return False
        await self.queue.put(item)
        return True

    def track(self, call: Any) -> None:
        self.calls.add(call)
        if self.stopped:
            call.cancel()

    def untrack(self, call: Any) -> None:
        self.calls.discard(call)

    def start(self, target: Callable[[], Awaitable[None]]) -> None:
        """Run a reader of one member's subscription."""
        self.active += 1
        task = asyncio.ensure_future(self._run(target))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _run(self, target: Callable[[], Awaitable[None]]) -> None:
        try:
            await target()
        except asyncio.CancelledError:
            self.active -= 1
            raise
        except BaseException as ex:  # the merged iterator raises it
            await self.put(ex)
        self.active -= 1
        await self.put(_END)

    def close(self) -> None:
        self.stopped = True
        for c in list(self.calls):
            c.cancel()
        for t in list(self.tasks):
            t.cancel()


class AsyncWindowClient(ClientBase):
    """The asyncio twin of :class:`WindowClient` (grpc.aio); same arguments (but
    ``channel``), same routing over a cluster, same methods, awaitable."""

    def __init__(
        self,
        target: str | Sequence[str] = DEFAULT_TARGET,
        *,
        token: str | None = None,
        tls: bool | str | None = None,
        timeout: float = 30.0,
        retries: int | None = None,
        retry_time: float = 10.0,
        refresh_interval: float = 30.0,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        address_map: Mapping[str, str] | None = None,
        keepalive_ms: int = KEEPALIVE_MS,
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
            keepalive_ms,
        )
        self._creds = credentials(tls)
        first = self.seeds[0]
        self.channel = self._open(first)
        self.stub = self._adopt(first, self.channel)  # the first seed's: raw calls

    def _open(self, address: str) -> grpc.aio.Channel:
        return open_aio_channel(
            self._dial(address), self._creds, self.max_message_bytes, self.keepalive_ms
        )

    async def __aenter__(self) -> AsyncWindowClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        for channel in self._take_channels():
            await channel.close()

    # -- the way of a call
    async def _try(
        self,
        address: str,
        call: calls.Call[Any, T],
        timeout: float | None,
        course: calls.Course | None = None,
    ) -> T:
        """As :meth:`WindowClient._try`."""
        try:
            if self._watched(course):
                assert course is not None
                reply = await self._watch(address, call, timeout, course)
            else:
                forward = course is not None and course.forward
                reply = await self._send(address, call, timeout, forward)
        except grpc.RpcError as err:
            raise from_rpc_error(err, address) from None
        self.topology.answered(address)
        return call.decode(reply)

    async def _watch(
        self, address: str, call: calls.Call[Any, T], timeout: float | None, course: calls.Course
    ) -> Any:
        """As :meth:`WindowClient._watch`."""
        began = time.monotonic()
        rpc = self._send(address, call, timeout, course.forward)
        waiting = asyncio.ensure_future(rpc)
        patience = self._patience()
        try:
            while True:
                done, _ = await asyncio.wait({waiting}, timeout=patience)
                if done:
                    return waiting.result()
                if await self._moved_away(course, address):
                    raise course.abandoned(time.monotonic() - began)
        finally:
            if not waiting.done():  # given up, or the caller went away
                rpc.cancel()
                waiting.cancel()

    async def _moved_away(self, course: calls.Course, address: str) -> bool:
        """As :meth:`WindowClient._moved_away`."""
        try:
            avoid = (address, course.aim)
            fresh = await self._refresh([course.stream], strict=False, avoid=avoid)
        except MtaWindowsError:
            return False
        return fresh and course.gone()

    async def _run(
        self, call: calls.Call[Any, T], timeout: float | None, course: calls.Course | None = None
    ) -> T:
        course = course or self._course(call)
        while True:
            try:
                await self._ensure_map(course)
                return await self._try(course.address(), call, timeout, course)
            except MtaWindowsError as ex:
                step = self._failed(course, ex)  # raises when the call ends here
            await asyncio.sleep(step.pause)

    async def _ask(
        self, address: str, call: calls.Call[Any, Any], timeout: float | None, course: Any = None
    ) -> Any:
        """As :meth:`WindowClient._ask`."""
        try:
            return await self._try(address, call, timeout, course)
        except MtaWindowsError as ex:
            return ex

    async def _group_holders(self, stream: str, force: bool = False) -> tuple[str, ...]:
        """As :meth:`WindowClient._group_holders`."""
        if self._members_due():
            await self._refresh(strict=False)
        if self._holders_due(stream, force):
            await self._refresh([stream], strict=False)
        return self._holders_now(stream)

    async def _ensure_map(self, course: calls.Course) -> None:
        if course.lookup or self.topology.needs_refresh():
            lookup = self._lookup(course)
            course.lookup = False
            await self._refresh(lookup, strict=not self.topology.known)

    async def _refresh(
        self, streams: Sequence[str] = (), *, strict: bool = True, avoid: Sequence[str] = ()
    ) -> bool:
        """As :meth:`WindowClient._refresh`."""
        req = self._map_request(streams)
        tried: list[str] = []
        last: MtaWindowsError | None = None
        stale: tuple[pb.ClusterMap, str] | None = None
        for address in self.topology.candidates(avoid):
            tried.append(address)
            try:
                reply = await self._stub(address).GetClusterMap(
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
    async def cluster_map(self) -> ClusterMap:
        """As :meth:`WindowClient.cluster_map`."""
        await self._refresh()
        return self._cluster_map()

    async def owner(self, stream: str) -> str:
        """As :meth:`WindowClient.owner`."""
        await self._refresh([stream])
        return self.topology.cached_owner(stream) or self.topology.route(stream)

    async def create_stream(self, spec: StreamSpec, *, timeout: float | None = None) -> StreamInfo:
        return await self._run(calls.create_stream(spec), timeout)

    async def delete_stream(self, name: str, *, timeout: float | None = None) -> None:
        self._forget_schema(name)
        await self._run(calls.delete_stream(name), timeout)

    async def list_streams(self, *, timeout: float | None = None) -> list[StreamInfo]:
        """As :meth:`WindowClient.list_streams` (the members asked at once)."""
        call = calls.list_streams()
        course = self._course(call)
        while True:
            try:
                await self._ensure_map(course)
                addresses = self.topology.member_addresses()
                lists = await asyncio.gather(*(self._try(a, call, timeout) for a in addresses))
                return calls.merge_streams(lists)
            except MtaWindowsError as ex:
                step = course.failed(ex)
            await asyncio.sleep(step.pause)

    async def get_stream(self, name: str, *, timeout: float | None = None) -> StreamInfo:
        return await self._run(calls.get_stream(name), timeout)

    async def create_window(self, spec: WindowSpec, *, timeout: float | None = None) -> WindowInfo:
        return await self._run(calls.create_window(spec), timeout)

    async def delete_window(self, stream: str, name: str, *, timeout: float | None = None) -> None:
        await self._run(calls.delete_window(stream, name), timeout)

    async def get_window(
        self, stream: str, name: str, *, timeout: float | None = None
    ) -> WindowInfo:
        return await self._run(calls.get_window(stream, name), timeout)

    async def list_windows(self, stream: str, *, timeout: float | None = None) -> list[WindowInfo]:
        return await self._run(calls.list_windows(stream), timeout)

    async def schema(self, stream: str) -> dict[str, str]:
        """As :meth:`WindowClient.schema`."""
        s = self._schemas.get(stream)
        if s is None:
            s = self._learn_stream(await self.get_stream(stream))
        return s

    async def append(
        self,
        stream: str,
        rows: Rows,
        *,
        producer_id: str | None = None,
        sequence: int | None = None,
        results: str = "none",
        windows: Sequence[str] = (),
        arrow: bool = False,
        timeout: float | None = None,
    ) -> AppendResult:
        """As :meth:`WindowClient.append` (the parts of a split one sent as tasks at once)."""
        schema = await self.schema(stream)
        req = calls.append_request(
            stream, rows, schema, producer_id, sequence, results, windows, arrow
        )
        return await self._append_request(req, timeout)

    async def _append_request(self, req: pb.AppendRequest, timeout: float | None) -> AppendResult:
        key_field = self._key_field(req.stream)
        if key_field:
            return await self._append_keyed(req, key_field, timeout)
        return await self._run(calls.append(req), timeout)

    def append_batches(
        self,
        stream: str,
        batches: Iterable[Rows] | AsyncIterable[Rows],
        *,
        producer_id: str | None = None,
        start_sequence: int = 1,
        results: str = "none",
        windows: Sequence[str] = (),
        arrow: bool = False,
        in_flight: int = 4,
        timeout: float | None = None,
    ) -> AsyncIterator[AppendResult]:
        """As :meth:`WindowClient.append_batches`: an async iterator of each batch's
        :class:`AppendResult`, in order; ``batches`` an iterable or an async iterable (the
        batches pulled as the pipeline has room)."""
        check_arguments(results, arrow, in_flight, producer_id, start_sequence)
        return self._append_batches(
            stream, batches, producer_id, start_sequence, results, windows, arrow, in_flight,
            timeout,
        )  # fmt: skip

    async def _append_batches(
        self,
        stream: str,
        batches: Iterable[Rows] | AsyncIterable[Rows],
        producer_id: str | None,
        start_sequence: int,
        results: str,
        windows: Sequence[str],
        arrow: bool,
        in_flight: int,
        timeout: float | None,
    ) -> AsyncGenerator[AppendResult, None]:
        schema = await self.schema(stream)
        first = start_sequence if producer_id else None

        async def requests() -> AsyncIterator[pb.AppendRequest]:
            i = 0
            async for rows in _each(batches):
                seq = first + i if first is not None else None
                i += 1
                req = calls.append_request(
                    stream, rows, schema, producer_id, seq, results, windows, arrow
                )
                if not alone(req):  # (one that goes alone is checked as append checks it)
                    self._check_size("AppendBatches", req)
                yield req

        source: AsyncIterator[pb.AppendRequest] = requests()
        if self._key_field(stream) and len(await self._group_holders(stream)) > 1:
            i = 0
            async for req in source:  # held apart: each batch split by holder
                try:
                    yield await self._append_request(req, timeout)
                except MtaWindowsError as ex:
                    raise at_batch(ex, i) from None
                i += 1
            return
        done = 0
        idempotent = bool(producer_id)
        while True:
            feed = AsyncBatchFeed(source, in_flight, alone)
            async for result in self._pipeline(stream, feed, timeout):
                yield result
            ended = feed.ended
            done += feed.answers
            if ended is not None and not resendable(ended, feed.unanswered(), idempotent):
                feed.stop()
                raise at_batch(ended, done)
            left = await feed.close()
            if not left:
                if feed.error is not None:
                    raise at_batch(feed.error, done)
                if ended is None:
                    return
                try:
                    nxt = await anext(source, None)
                except Exception as ex:  # the next batch did not encode
                    raise at_batch(ex, done) from None
                if nxt is None:
                    return
                left = [nxt]
            if feed.error is not None:
                source = _raising(feed.error)
            try:
                yield await self._append_request(left[0], timeout)
            except MtaWindowsError as ex:
                raise at_batch(ex, done) from None
            done += 1
            source = _chained(left[1:], source)

    async def _pipeline(
        self, stream: str, feed: AsyncBatchFeed, timeout: float | None
    ) -> AsyncGenerator[AppendResult, None]:
        """As :meth:`WindowClient._pipeline`; how the call ended goes in ``feed.ended``."""
        course = self._course(batches_call(stream))
        try:
            await self._ensure_map(course)
        except MtaWindowsError as ex:
            feed.ended = ex
            return
        address = course.address()
        rpc = self._stub(address).AppendBatches(feed.requests(), metadata=self.metadata)
        limit = timeout or self.timeout
        watch = asyncio.ensure_future(feed.watch(rpc, limit))
        try:
            async for reply in rpc:
                feed.answer()
                yield convert.append_result_from_proto(reply)
        except grpc.RpcError as err:
            feed.ended = timed_out(address, limit) if feed.expired else from_rpc_error(err, address)
            return
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if not feed.expired or (task is not None and task.cancelling()):
                raise  # this task is cancelled, not the call by the watchdog
            feed.ended = timed_out(address, limit)
            return
        finally:
            watch.cancel()
            rpc.cancel()  # a no-op once it ended; else (the caller left) it ends here
        self.topology.answered(address)

    async def _append_keyed(
        self, req: pb.AppendRequest, key_field: str, timeout: float | None
    ) -> AppendResult:
        """As :meth:`WindowClient._append_keyed`."""
        again = False
        while True:
            await self._group_holders(req.stream, force=again)
            plan = KeyedAppend(
                req, key_field, self.topology, retries=self.retries, retry_time=self.retry_time
            )
            if plan.start():
                return await self._drive(plan, timeout)
            call = calls.append(req)
            course = self._course(call)
            course.follow_groups = again
            try:
                return await self._run(call, timeout, course)
            except NotOwnerError as ex:
                if again or calls.named_group(ex) is None:
                    raise
            again = True

    async def _drive(self, plan: KeyedAppend, timeout: float | None) -> AppendResult:
        """As :meth:`WindowClient._drive`: each round's parts as tasks at once."""
        try:
            while plan.pending:
                outcomes = await asyncio.gather(
                    *(self._send_part(p, timeout) for p in plan.pending)
                )
                pause = plan.settle(outcomes)
                if plan.pending:
                    await asyncio.sleep(pause)
                    await self._refresh([plan.stream], strict=False)
                    plan.resplit()
        except MtaWindowsError as ex:
            self._gone(ex, plan.stream)
            raise
        return convert.append_result_from_proto(plan.result())

    async def _send_part(self, p: Pending, timeout: float | None) -> Any:
        p.course.aim_at(p.part.address)
        return await self._ask(p.part.address, p.course.call, timeout, p.course)

    async def query(
        self,
        stream: str,
        window: str,
        *,
        key: Key | None = None,
        range: timedelta | None = None,
        count: int | None = None,
        timeout: float | None = None,
    ) -> WindowResult:
        """As :meth:`WindowClient.query` (``range`` or ``count``: a query-time range)."""
        call = calls.query(stream, window, key, range, count)
        return await self._run(call, timeout, await self._keyed_course(call, call.request.key))

    async def compute(
        self,
        stream: str,
        rows: Any,
        *,
        windows: Sequence[str] = (),
        key_column: str | None = None,
        context_rows: int = 0,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """As :meth:`WindowClient.compute`."""
        call = calls.compute(stream, rows, windows, key_column, context_rows)
        return await self._run(call, timeout)

    async def _keyed_course(self, call: calls.Call[Any, Any], key: str) -> calls.Course | None:
        """As :meth:`WindowClient._keyed_course`."""
        if not key:
            return None
        await self._group_holders(call.stream)
        return self._key_course(call, key)

    async def read_results(
        self,
        stream: str,
        window: str,
        *,
        after_sequence: int = 0,
        limit: int = 0,
        timeout: float | None = None,
    ) -> tuple[list[WindowResult], int]:
        """As :meth:`WindowClient.read_results`."""
        call = calls.read_results(stream, window, after_sequence, limit)
        return await self._run(call, timeout)

    async def subscribe(
        self,
        stream: str,
        window: str,
        *,
        keys: Iterable[Key] = (),
        timeout: float | None = None,
    ) -> AsyncGenerator[tuple[int, WindowResult], None]:
        """As :meth:`WindowClient.subscribe`: results of every batch applied from the moment
        the awaited call returns, following the stream when it moves (of ``keys`` only, on a
        keyed stream, when given)."""
        call = calls.subscribe(stream, window, keys)
        deadline = None if timeout is None else time.monotonic() + timeout
        if call.request.keys and await self._group_holders(stream):  # a keyed stream's keys
            return await self._subscribe_groups(call, deadline)
        sub, address, first = await self._subscribe(call, deadline, None)
        if not call.request.keys and await self._held_apart(stream, sub):
            return await self._subscribe_groups(call, deadline, (sub, address, first))
        return self._follow(call, deadline, sub, address, first)

    async def _held_apart(self, stream: str, sub: Any) -> bool:
        """After a subscription to every key (or an unkeyed stream's) is confirmed at the
        stream's owner: whether the stream is keyed with its groups held apart (its keying
        cached with its schema: one GetStream per stream). When that cannot be told, the
        subscription goes on as it is."""
        if not self.topology.clustered:
            return False
        try:
            await self.schema(stream)
            return bool(self._key_field(stream)) and bool(await self._group_holders(stream))
        except MtaWindowsError:
            return False
        except BaseException:
            sub.cancel()
            raise

    # -- a subscription at every holder (as the blocking client's, with tasks)
    async def _subscribe_groups(
        self,
        call: calls.Call[Any, Any],
        deadline: float | None,
        given: tuple[Any, str, Any] | None = None,
    ) -> AsyncGenerator[tuple[int, WindowResult], None]:
        req = call.request
        fan = _FanIn()
        slots = self._fan_slots(fan, req, deadline, given)
        try:
            for address, ks in slots.items():
                await self._open_slot(fan, req.stream, req.window, address, ks, deadline)
        except BaseException:
            fan.close()
            raise
        merged = self._merged(fan)
        weakref.finalize(merged, fan.close)  # let go before its first event: closed too
        return merged

    async def _merged(self, fan: _FanIn) -> AsyncGenerator[tuple[int, WindowResult], None]:
        try:
            while True:
                item = await fan.queue.get()
                if item is _END:
                    if fan.active == 0:
                        return
                    continue
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            fan.close()

    async def _open_slot(
        self,
        fan: _FanIn,
        stream: str,
        window: str,
        address: str,
        keys: list[str] | None,
        deadline: float | None,
    ) -> None:
        got = await self._confirm_slot(fan, stream, window, address, keys, deadline, None)
        if got is not None:
            self._start_slot(fan, stream, window, deadline, got)

    def _start_slot(
        self,
        fan: _FanIn,
        stream: str,
        window: str,
        deadline: float | None,
        got: tuple[Any, str, list[str] | None, Any],
    ) -> None:
        sub, at, keys, first = got
        fan.start(lambda: self._read_slot(fan, stream, window, deadline, sub, at, keys, first))

    async def _confirm_slot(
        self,
        fan: _FanIn,
        stream: str,
        window: str,
        address: str,
        keys: list[str] | None,
        deadline: float | None,
        ended: MtaWindowsError | None,
    ) -> tuple[Any, str, list[str] | None, Any] | None:
        """As :meth:`WindowClient._confirm_slot`."""
        call = calls.subscribe(stream, window, keys or ())
        course = self._course(call, retry=True, groups=self._key_groups_of(stream, keys or ()))
        step = None if ended is None else calls.resume(course, ended)
        while not fan.stopped:
            if step is not None:
                await asyncio.sleep(step.pause)
                await self._refresh([stream], strict=False)
                at, keys, others = self._reslot(stream, address, keys, fan.covered)
                for other, ks in others.items():
                    await self._open_slot(fan, stream, window, other, ks, deadline)
                if at is None:
                    return None
                address = at
                call = calls.subscribe(stream, window, keys or ())
            assert isinstance(course, calls.GroupCourse)
            course.aim_at(address)
            try:
                sub = self._subscription(address, call, calls.left(deadline))
                fan.track(sub)
                try:
                    md = await sub.initial_metadata()
                    if any(k == SUBSCRIBED for k, _ in md or ()):
                        self.topology.answered(address)
                        return sub, address, keys, None
                    first = await sub.read()
                    return sub, address, keys, None if first is grpc.aio.EOF else first
                except grpc.RpcError as err:
                    sub.cancel()
                    fan.untrack(sub)
                    raise from_rpc_error(err, address) from None
            except MtaWindowsError as ex:
                step = calls.resume(course, ex)
        return None

    async def _read_slot(
        self,
        fan: _FanIn,
        stream: str,
        window: str,
        deadline: float | None,
        sub: Any,
        address: str,
        keys: list[str] | None,
        first: Any,
    ) -> None:
        """As :meth:`WindowClient._read_slot`."""
        try:
            if first is not None and not await fan.put(calls.event(first)):
                return
            while True:
                try:
                    async for m in sub:
                        if not await fan.put(calls.event(m)):
                            return
                    return
                except grpc.RpcError as err:
                    if fan.stopped or err.code() == grpc.StatusCode.CANCELLED:
                        return
                    ended = from_rpc_error(err, address)
                fan.untrack(sub)
                got = await self._confirm_slot(fan, stream, window, address, keys, deadline, ended)
                if got is None:
                    return
                sub, address, keys, first = got
                if first is not None and not await fan.put(calls.event(first)):
                    return
        finally:
            sub.cancel()

    # -- keyed streams
    async def list_keys(
        self,
        stream: str,
        *,
        prefix: str = "",
        limit: int = 0,
        page_token: str = "",
        timeout: float | None = None,
    ) -> KeyPage:
        """As :meth:`WindowClient.list_keys` (the members asked as tasks at once)."""
        if await self._group_holders(stream):
            return await self._list_keys_members(stream, prefix, limit, page_token, timeout)
        return await self._run(calls.list_keys(stream, prefix, limit, page_token), timeout)

    async def _list_keys_members(
        self, stream: str, prefix: str, limit: int, page_token: str, timeout: float | None
    ) -> KeyPage:
        """As :meth:`WindowClient._list_keys_members`."""
        call = calls.list_keys_part(stream, prefix, limit, page_token)
        course = self._course(call)
        pages: list[pb.ListKeysResponse] = []
        while True:
            addresses = self.topology.live()
            asks = [self._ask(a, call, timeout) for a in addresses]  # replies or errors
            outcomes: list[Any] = await asyncio.gather(*asks)
            pages, failure = self._sort_pages(addresses, outcomes)
            missing = missing_groups(pages, len(self._holders_now(stream)))
            if not missing:
                break
            # groups nobody answered for (moving): again after the routing's pause, until its
            # retry time runs out (then the error: never a page with keys left out)
            step = self._failed(course, failure or self._moving(stream, missing))
            await asyncio.sleep(step.pause)
            await self._refresh([stream], strict=False)
            if not self._holders_now(stream):
                return await self._run(calls.list_keys(stream, prefix, limit, page_token), timeout)
        keys, token = merge_key_pages(pages, limit)
        return KeyPage([convert.key_info_from_proto(k) for k in keys], token)

    async def iter_keys(
        self,
        stream: str,
        *,
        prefix: str = "",
        page_size: int = 1000,
        timeout: float | None = None,
    ) -> AsyncIterator[KeyInfo]:
        """As :meth:`WindowClient.iter_keys` (an async generator: ``async for``)."""
        token = ""
        while True:
            page = await self.list_keys(
                stream, prefix=prefix, limit=page_size, page_token=token, timeout=timeout
            )
            for k in page.keys:
                yield k
            if not page.next_page_token:
                return
            token = page.next_page_token

    async def get_key(self, stream: str, key: Key, *, timeout: float | None = None) -> KeyInfo:
        """As :meth:`WindowClient.get_key`."""
        call = calls.get_key(stream, key)
        return await self._run(call, timeout, await self._keyed_course(call, call.request.key))

    async def delete_key(self, stream: str, key: Key, *, timeout: float | None = None) -> None:
        """As :meth:`WindowClient.delete_key`."""
        call = calls.delete_key(stream, key)
        await self._run(call, timeout, await self._keyed_course(call, call.request.key))

    async def _subscribe(
        self, call: calls.Call[Any, Any], deadline: float | None, ended: MtaWindowsError | None
    ) -> tuple[Any, str, Any]:
        """As :meth:`WindowClient._subscribe`."""
        course = self._course(call, retry=self.topology.clustered)
        step = None if ended is None else calls.resume(course, ended)
        while True:
            if step is not None:
                await asyncio.sleep(step.pause)
            try:
                await self._ensure_map(course)
                address = course.address()
                sub = self._subscription(address, call, calls.left(deadline))
                try:
                    md = await sub.initial_metadata()
                    if any(k == SUBSCRIBED for k, _ in md or ()):
                        self.topology.answered(address)
                        return sub, address, None
                    first = await sub.read()  # refused, or a server without the header
                    return sub, address, None if first is grpc.aio.EOF else first
                except grpc.RpcError as err:
                    sub.cancel()
                    raise from_rpc_error(err, address) from None
            except MtaWindowsError as ex:
                step = calls.resume(course, ex)

    async def _follow(
        self,
        call: calls.Call[Any, Any],
        deadline: float | None,
        sub: Any,
        address: str,
        first: Any,
    ) -> AsyncGenerator[tuple[int, WindowResult], None]:
        try:
            if first is not None:
                yield calls.event(first)
            while True:
                try:
                    async for m in sub:
                        yield calls.event(m)
                    return
                except grpc.RpcError as err:
                    if err.code() == grpc.StatusCode.CANCELLED:  # we went away
                        return
                    ended = from_rpc_error(err, address)
                sub.cancel()
                sub, address, first = await self._subscribe(call, deadline, ended)
                if first is not None:
                    yield calls.event(first)
        finally:
            sub.cancel()


__all__ = ["AsyncWindowClient"]
