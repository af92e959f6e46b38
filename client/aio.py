"""The asyncio client :class:`AsyncWindowClient`: the same calls as :class:`WindowClient`, each
through the grpc.aio stub of the server its stream lives on and awaited (requests, replies,
retry policy and errors: :mod:`.calls`; the cluster: :mod:`.cluster_map`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Mapping, Sequence
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
from .channel import DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_TARGET, credentials, open_aio_channel
from .cluster_map import ClusterMap
from .errors import MtaWindowsError, from_rpc_error
from .rows import Rows

T = TypeVar("T")


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
        self.channel = self._open(first)
        self.stub = self._adopt(first, self.channel)  # the first seed's: raw calls

    def _open(self, address: str) -> grpc.aio.Channel:
        return open_aio_channel(self._dial(address), self._creds, self.max_message_bytes)

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

    async def _run(self, call: calls.Call[Any, T], timeout: float | None) -> T:
        course = self._course(call)
        while True:
            try:
                await self._ensure_map(course)
                return await self._try(course.address(), call, timeout, course)
            except MtaWindowsError as ex:
                step = course.failed(ex)  # raises when the call ends here
            await asyncio.sleep(step.pause)

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
            s = self._schemas[stream] = calls.schema_of(await self.get_stream(stream))
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
        timeout: float | None = None,
    ) -> AppendResult:
        """As :meth:`WindowClient.append`."""
        schema = await self.schema(stream)
        req = calls.append_request(stream, rows, schema, producer_id, sequence, results, windows)
        return await self._run(calls.append(req), timeout)

    async def query(
        self, stream: str, window: str, *, timeout: float | None = None
    ) -> WindowResult:
        return await self._run(calls.query(stream, window), timeout)

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
        self, stream: str, window: str, *, timeout: float | None = None
    ) -> AsyncGenerator[tuple[int, WindowResult], None]:
        """As :meth:`WindowClient.subscribe`: results of every batch applied from the moment
        the awaited call returns, following the stream when it moves."""
        call = calls.subscribe(stream, window)
        deadline = None if timeout is None else time.monotonic() + timeout
        sub, address, first = await self._subscribe(call, deadline, None)
        return self._follow(call, deadline, sub, address, first)

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
