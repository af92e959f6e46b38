"""The asyncio client :class:`AsyncWindowClient`: the same calls as :class:`WindowClient`, each
through the grpc.aio stub and awaited (requests, replies, retry policy and errors:
:mod:`.calls`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any, TypeVar

from mtawindows.v1 import windows_pb2_grpc as pb_grpc
from mtawindows.v1.types import (
    AppendResult,
    StreamInfo,
    StreamSpec,
    WindowInfo,
    WindowResult,
    WindowSpec,
)

from . import calls
from .base import ClientBase
from .channel import DEFAULT_TARGET, credentials, open_aio_channel
from .rows import Rows

T = TypeVar("T")


class AsyncWindowClient(ClientBase):
    """The asyncio twin of :class:`WindowClient` (grpc.aio); same methods, awaitable."""

    def __init__(
        self,
        target: str = DEFAULT_TARGET,
        *,
        token: str | None = None,
        tls: bool | str | None = None,
        timeout: float = 30.0,
        retries: int = 5,
    ) -> None:
        super().__init__(target, token, timeout, retries)
        self.channel = open_aio_channel(target, credentials(tls))
        self.stub = pb_grpc.WindowServiceStub(self.channel)

    async def __aenter__(self) -> AsyncWindowClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self.channel.close()

    async def _run(self, call: calls.Call[Any, T], timeout: float | None) -> T:
        for attempt in self._attempts(call):
            with attempt:
                return call.decode(await self._send(call, timeout))
            await asyncio.sleep(attempt.pause)
        raise calls.unreachable()

    async def create_stream(self, spec: StreamSpec, *, timeout: float | None = None) -> StreamInfo:
        return await self._run(calls.create_stream(spec), timeout)

    async def delete_stream(self, name: str, *, timeout: float | None = None) -> None:
        self._forget_schema(name)
        await self._run(calls.delete_stream(name), timeout)

    async def list_streams(self, *, timeout: float | None = None) -> list[StreamInfo]:
        return await self._run(calls.list_streams(), timeout)

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
    ) -> AsyncIterator[tuple[int, WindowResult]]:
        """As :meth:`WindowClient.subscribe`: results of every batch applied from the moment
        the awaited call returns."""
        call = self._subscription(stream, window, timeout)
        with calls.typed_errors(self.target):  # errors come with the first read, in practice
            await call.initial_metadata()
        return _follow(call, self.target)


async def _follow(call: Any, target: str) -> AsyncIterator[tuple[int, WindowResult]]:
    with calls.following(call, target):
        async for m in call:
            yield calls.event(m)


__all__ = ["AsyncWindowClient"]
