"""The blocking client :class:`WindowClient`: each call through the blocking stub, retried in a
loop that sleeps between tries (requests, replies, retry policy and errors: :mod:`.calls`)."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import Any, TypeVar

import grpc

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
from .batch_writer import BatchWriter
from .channel import DEFAULT_TARGET, credentials, open_channel
from .rows import Rows

T = TypeVar("T")


class WindowClient(ClientBase):
    """Blocking client of the window service.

    ``target`` is ``host:port``; ``token`` a bearer token; ``tls`` True (system roots) or a CA
    file; ``timeout`` the default deadline per call in seconds; ``retries`` attempts for
    idempotent calls; ``channel`` an open channel to use instead of one of its own."""

    def __init__(
        self,
        target: str = DEFAULT_TARGET,
        *,
        token: str | None = None,
        tls: bool | str | None = None,
        timeout: float = 30.0,
        retries: int = 5,
        channel: grpc.Channel | None = None,
    ) -> None:
        super().__init__(target, token, timeout, retries)
        creds = credentials(tls)
        self.channel = channel if channel is not None else open_channel(target, creds)
        self.stub = pb_grpc.WindowServiceStub(self.channel)

    def __enter__(self) -> WindowClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.channel.close()

    def _run(self, call: calls.Call[Any, T], timeout: float | None) -> T:
        for attempt in self._attempts(call):
            with attempt:
                return call.decode(self._send(call, timeout))
            time.sleep(attempt.pause)
        raise calls.unreachable()

    # -- streams
    def create_stream(self, spec: StreamSpec, *, timeout: float | None = None) -> StreamInfo:
        return self._run(calls.create_stream(spec), timeout)

    def delete_stream(self, name: str, *, timeout: float | None = None) -> None:
        self._forget_schema(name)
        self._run(calls.delete_stream(name), timeout)

    def list_streams(self, *, timeout: float | None = None) -> list[StreamInfo]:
        return self._run(calls.list_streams(), timeout)

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
        after the batch) or "per_row" (each window's result after every row, columnar)."""
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
    ) -> Iterator[tuple[int, WindowResult]]:
        """(batch number, result) after every batch applied to the stream from the moment this
        returns (the server confirms the subscription before it does). ``timeout`` bounds the
        whole subscription; close the iterator (or let it go) to cancel."""
        call = self._subscription(stream, window, timeout)
        with calls.typed_errors(self.target):  # errors come with the first read, in practice
            call.initial_metadata()
        return _follow(call, self.target)

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


def _follow(call: Any, target: str) -> Iterator[tuple[int, WindowResult]]:
    with calls.following(call, target):
        for m in call:
            yield calls.event(m)


__all__ = ["WindowClient"]
