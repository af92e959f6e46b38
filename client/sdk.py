"""The Python SDK: :class:`WindowClient` (blocking) and :class:`AsyncWindowClient` (asyncio).

    from mtawindows.client import WindowClient, StreamSpec, Field, WindowSpec, Aggregation, Policy

    with WindowClient("localhost:50051") as c:
        c.create_stream(StreamSpec("cpu", (Field("load", "DOUBLE"),)))
        c.create_window(WindowSpec("cpu", "last_hour",
                                   (Aggregation("peak", "max", "load"), Aggregation("n", "count")),
                                   Policy.time_range(timedelta(hours=1))))
        c.append("cpu", {"ts": [t0, t1], "load": [0.5, 0.7]}, producer_id="agent-1", sequence=1)
        c.query("cpu", "last_hour").values   # {"peak": 0.7, "n": 2}

Rows go as a dict of columns, a list of row dicts, or a pyarrow Table/RecordBatch (sent as
Arrow IPC). Calls take ``timeout=`` (seconds; default from the client). Appends with a
``producer_id`` and ``sequence`` are idempotent, so they are retried on UNAVAILABLE and
DEADLINE_EXCEEDED (reads too); other appends are never retried. Failures raise the typed
exceptions of :mod:`mtawindows.client.errors`.
"""

from __future__ import annotations

import asyncio
import queue
import random
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import grpc

from mtawindows.v1 import windows_pb2 as pb
from mtawindows.v1 import windows_pb2_grpc as pb_grpc
from mtawindows.v1.types import (
    AppendResult,
    StreamInfo,
    StreamSpec,
    WindowInfo,
    WindowResult,
    WindowSpec,
)

from . import convert
from .errors import DeadlineExceededError, MtaWindowsError, UnavailableError, from_rpc_error

_RESULTS = {"none": pb.NONE, "final": pb.FINAL, "per_row": pb.PER_ROW}
_RETRYABLE = (UnavailableError, DeadlineExceededError)
DEFAULT_TARGET = "localhost:50051"


# --------------------------------------------------------------------------- shared encoding


def channel_options(max_message_bytes: int = 64 * 1024 * 1024) -> list[tuple[str, Any]]:
    return [
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.max_receive_message_length", max_message_bytes),
    ]


def credentials(tls: bool | str | None) -> grpc.ChannelCredentials | None:
    """``tls``: None/False = plaintext, True = system roots, a path = that CA bundle."""
    if not tls:
        return None
    if tls is True:
        return grpc.ssl_channel_credentials()
    return grpc.ssl_channel_credentials(root_certificates=Path(str(tls)).read_bytes())


def _column_kind(values: Sequence[Any]) -> str:
    for v in values:
        if isinstance(v, bool):
            return "BOOL"
        if isinstance(v, float):
            return "DOUBLE"
        if isinstance(v, int):
            continue  # ints may still hide a float further down
        if isinstance(v, str):
            return "STRING"
        if isinstance(v, datetime):
            return "TIMESTAMP"
    if any(isinstance(v, float) for v in values):  # pragma: no cover - caught above
        return "DOUBLE"
    return "INT64"


def encode_rows(
    rows: Any, schema: Mapping[str, str] | None = None
) -> tuple[list[pb.Column], bytes, int]:
    """Rows as typed protobuf columns, or as Arrow IPC bytes for pyarrow tables.

    ``schema`` (field -> type name, from the stream) picks each column's type; without it the
    type follows the values."""
    if hasattr(rows, "schema") and hasattr(rows, "num_rows"):  # pyarrow Table / RecordBatch
        import pyarrow as pa

        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, rows.schema) as writer:
            writer.write(rows)
        return [], sink.getvalue().to_pybytes(), int(rows.num_rows)
    if isinstance(rows, Mapping):
        columns = {str(k): list(v) for k, v in rows.items()}
    else:
        rows = list(rows)
        names: list[str] = []
        for r in rows:
            for k in r:
                if k not in names:
                    names.append(k)
        columns = {n: [r.get(n) for r in rows] for n in names}
    out = []
    n = 0
    for name, values in columns.items():
        n = max(n, len(values))
        kind = (schema or {}).get(name) or _column_kind(values)
        if kind == "TIMESTAMP" or any(isinstance(v, datetime) for v in values[:1]):
            kind = "TIMESTAMP"
            values = [convert.to_nanos(v) if isinstance(v, datetime) else v for v in values]
        if kind == "DOUBLE":
            values = [
                float(v) if isinstance(v, int) and not isinstance(v, bool) else v for v in values
            ]
        try:
            out.append(convert.column_to_proto(name, kind, values))
        except TypeError as ex:
            msg = f"column {name!r}: expected {kind} values: {ex}"
            raise TypeError(msg) from None
    return out, b"", n


def append_request(
    stream: str,
    rows: Any,
    schema: Mapping[str, str] | None,
    producer_id: str | None,
    sequence: int | None,
    results: str,
    windows: Sequence[str],
) -> pb.AppendRequest:
    mode = _RESULTS.get(results.lower())
    if mode is None:
        msg = f"results: expected one of {list(_RESULTS)}, got {results!r}"
        raise ValueError(msg)
    columns, arrow, _ = encode_rows(rows, schema)
    return pb.AppendRequest(
        stream=stream,
        columns=columns,
        arrow_ipc=arrow,
        producer_id=producer_id or "",
        sequence=sequence or 0,
        results=mode,
        windows=list(windows),
    )


def _schema_of(info: StreamInfo) -> dict[str, str]:
    s = {f.name: str(f.type) for f in info.spec.fields}
    s[info.spec.timestamp_field] = "TIMESTAMP"
    return s


def _auth_metadata(token: str | None) -> tuple[tuple[str, str], ...]:
    """The ``authorization`` header for ``token``; ValueError for a token the server could
    never accept (printable ASCII without spaces, RFC 6750), before any call."""
    if token is None or token == "":
        return ()
    if not isinstance(token, str) or not all(0x21 <= ord(c) <= 0x7E for c in token):
        msg = "token: expected a bearer token (printable ASCII without spaces), got " + (
            f"{len(token)} characters" if isinstance(token, str) else type(token).__name__
        )
        raise ValueError(msg)
    return (("authorization", f"Bearer {token}"),)


def _backoff(attempt: int) -> float:
    return float(min(2.0, 0.05 * 2**attempt) * (0.5 + random.random()))


# --------------------------------------------------------------------------- blocking client


class WindowClient:
    """Blocking client of the window service.

    ``target`` is ``host:port``; ``token`` a bearer token; ``tls`` True (system roots) or a CA
    file; ``timeout`` the default deadline per call in seconds; ``retries`` attempts for
    idempotent calls."""

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
        self.target = target
        self.metadata = _auth_metadata(token)  # first: a bad token opens no channel
        creds = credentials(tls)
        if channel is None:
            opts = channel_options()
            channel = (
                grpc.secure_channel(target, creds, opts)
                if creds is not None
                else grpc.insecure_channel(target, opts)
            )
        self.channel = channel
        self.stub = pb_grpc.WindowServiceStub(channel)
        self.timeout = timeout
        self.retries = retries
        self._schemas: dict[str, dict[str, str]] = {}

    def __enter__(self) -> WindowClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.channel.close()

    def _call(self, method: str, request: Any, *, timeout: float | None, retry: bool) -> Any:
        attempts = self.retries if retry else 1
        for attempt in range(attempts):
            try:
                return getattr(self.stub, method)(
                    request, timeout=timeout or self.timeout, metadata=self.metadata
                )
            except grpc.RpcError as err:
                ex = from_rpc_error(err, self.target)
                if isinstance(ex, _RETRYABLE) and attempt + 1 < attempts:
                    time.sleep(_backoff(attempt))
                    continue
                raise ex from None
        msg = "unreachable"
        raise AssertionError(msg)  # pragma: no cover

    # -- streams
    def create_stream(self, spec: StreamSpec, *, timeout: float | None = None) -> StreamInfo:
        m = self._call(
            "CreateStream",
            pb.CreateStreamRequest(spec=convert.stream_spec_to_proto(spec)),
            timeout=timeout,
            retry=False,
        )
        return convert.stream_info_from_proto(m)

    def delete_stream(self, name: str, *, timeout: float | None = None) -> None:
        self._schemas.pop(name, None)
        self._call("DeleteStream", pb.DeleteStreamRequest(name=name), timeout=timeout, retry=False)

    def list_streams(self, *, timeout: float | None = None) -> list[StreamInfo]:
        m = self._call("ListStreams", pb.ListStreamsRequest(), timeout=timeout, retry=True)
        return [convert.stream_info_from_proto(s) for s in m.streams]

    def get_stream(self, name: str, *, timeout: float | None = None) -> StreamInfo:
        m = self._call("GetStream", pb.GetStreamRequest(name=name), timeout=timeout, retry=True)
        return convert.stream_info_from_proto(m)

    # -- windows
    def create_window(self, spec: WindowSpec, *, timeout: float | None = None) -> WindowInfo:
        req = pb.CreateWindowRequest(spec=convert.window_spec_to_proto(spec))
        return convert.window_info_from_proto(
            self._call("CreateWindow", req, timeout=timeout, retry=False)
        )

    def delete_window(self, stream: str, name: str, *, timeout: float | None = None) -> None:
        req = pb.DeleteWindowRequest(stream=stream, name=name)
        self._call("DeleteWindow", req, timeout=timeout, retry=False)

    def get_window(self, stream: str, name: str, *, timeout: float | None = None) -> WindowInfo:
        req = pb.GetWindowRequest(stream=stream, name=name)
        return convert.window_info_from_proto(
            self._call("GetWindow", req, timeout=timeout, retry=True)
        )

    def list_windows(self, stream: str, *, timeout: float | None = None) -> list[WindowInfo]:
        m = self._call(
            "ListWindows", pb.ListWindowsRequest(stream=stream), timeout=timeout, retry=True
        )
        return [convert.window_info_from_proto(w) for w in m.windows]

    # -- data
    def schema(self, stream: str) -> dict[str, str]:
        """The stream's column types (cached): how :meth:`append` types the columns."""
        s = self._schemas.get(stream)
        if s is None:
            s = self._schemas[stream] = _schema_of(self.get_stream(stream))
        return s

    def append(
        self,
        stream: str,
        rows: Any,
        *,
        producer_id: str | None = None,
        sequence: int | None = None,
        results: str = "none",
        windows: Sequence[str] = (),
        timeout: float | None = None,
    ) -> AppendResult:
        """Append a batch atomically. ``results``: "none", "final" (each window's result
        after the batch) or "per_row" (each window's result after every row, columnar)."""
        req = append_request(
            stream, rows, self.schema(stream), producer_id, sequence, results, windows
        )
        m = self._call("Append", req, timeout=timeout, retry=bool(producer_id and sequence))
        return convert.append_result_from_proto(m)

    def query(self, stream: str, window: str, *, timeout: float | None = None) -> WindowResult:
        m = self._call(
            "Query", pb.QueryRequest(stream=stream, window=window), timeout=timeout, retry=True
        )
        return convert.result_from_proto(m)

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
        req = pb.ReadResultsRequest(
            stream=stream, window=window, after_sequence=after_sequence, limit=limit
        )
        m = self._call("ReadResults", req, timeout=timeout, retry=True)
        return [convert.result_from_proto(r) for r in m.results], m.latest_sequence

    def subscribe(
        self, stream: str, window: str, *, timeout: float | None = None
    ) -> Iterator[tuple[int, WindowResult]]:
        """(batch number, result) after every batch applied to the stream from the moment this
        returns (the server confirms the subscription before it does). ``timeout`` bounds the
        whole subscription; close the iterator (or let it go) to cancel."""
        call = self.stub.Subscribe(
            pb.SubscribeRequest(stream=stream, window=window),
            timeout=timeout,
            metadata=self.metadata,
        )
        try:
            call.initial_metadata()
        except grpc.RpcError as err:  # pragma: no cover - errors come with the first read
            raise from_rpc_error(err, self.target) from None
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
    try:
        for ev in call:
            yield ev.batch, convert.result_from_proto(ev.result)
    except grpc.RpcError as err:
        if err.code() == grpc.StatusCode.CANCELLED:
            return
        raise from_rpc_error(err, target) from None
    finally:
        call.cancel()


class BatchWriter:
    """Rows in, batches out, in order, from one background sender thread."""

    def __init__(
        self,
        client: WindowClient,
        stream: str,
        batch_rows: int,
        producer_id: str | None,
        start_sequence: int,
        max_pending: int,
    ) -> None:
        if batch_rows <= 0:
            msg = f"batch_rows must be > 0, got {batch_rows}"
            raise ValueError(msg)
        self.client = client
        self.stream = stream
        self.batch_rows = batch_rows
        self.producer_id = producer_id or f"writer-{uuid.uuid4().hex[:12]}"
        self.sequence = start_sequence
        self.rows: list[Mapping[str, Any]] = []
        self.sent_rows = 0
        self.batches = 0
        self.error: BaseException | None = None
        self._queue: queue.Queue[tuple[int, list[Mapping[str, Any]]] | None] = queue.Queue(
            maxsize=max(1, max_pending)
        )
        self._thread = threading.Thread(target=self._send_loop, daemon=True, name="mtaw-writer")
        self._thread.start()

    def _send_loop(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                seq, rows = item
                if self.error is None:
                    self.client.append(
                        self.stream, rows, producer_id=self.producer_id, sequence=seq
                    )
                    self.sent_rows += len(rows)
                    self.batches += 1
            except BaseException as ex:
                self.error = ex
            finally:
                self._queue.task_done()

    def _check(self) -> None:
        if self.error is not None:
            raise self.error

    def write(self, row: Mapping[str, Any]) -> None:
        self._check()
        self.rows.append(row)
        if len(self.rows) >= self.batch_rows:
            self._ship()

    def write_many(self, rows: Iterable[Mapping[str, Any]]) -> None:
        for r in rows:
            self.write(r)

    def _ship(self) -> None:
        rows, self.rows = self.rows, []
        self._queue.put((self.sequence, rows))  # blocks when max_pending wait: back-pressure
        self.sequence += 1

    def flush(self) -> None:
        """Send what is buffered and wait until every batch is acknowledged."""
        if self.rows:
            self._ship()
        self._queue.join()
        self._check()

    def close(self) -> None:
        try:
            if self.rows:
                self._ship()
        finally:
            self._queue.put(None)
            self._thread.join()
        self._check()

    def __enter__(self) -> BatchWriter:
        return self

    def __exit__(self, et: object, ev: object, tb: object) -> None:
        if et is None:
            self.close()
        else:
            self._queue.put(None)
            self._thread.join()


# --------------------------------------------------------------------------- asyncio client


class AsyncWindowClient:
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
        self.target = target
        self.metadata = _auth_metadata(token)
        creds = credentials(tls)
        opts = channel_options()
        self.channel = (
            grpc.aio.secure_channel(target, creds, opts)
            if creds is not None
            else grpc.aio.insecure_channel(target, opts)
        )
        self.stub = pb_grpc.WindowServiceStub(self.channel)
        self.timeout = timeout
        self.retries = retries
        self._schemas: dict[str, dict[str, str]] = {}

    async def __aenter__(self) -> AsyncWindowClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self.channel.close()

    async def _call(self, method: str, request: Any, *, timeout: float | None, retry: bool) -> Any:
        attempts = self.retries if retry else 1
        for attempt in range(attempts):
            try:
                return await getattr(self.stub, method)(
                    request, timeout=timeout or self.timeout, metadata=self.metadata
                )
            except grpc.RpcError as err:
                ex = from_rpc_error(err, self.target)
                if isinstance(ex, _RETRYABLE) and attempt + 1 < attempts:
                    await asyncio.sleep(_backoff(attempt))
                    continue
                raise ex from None
        msg = "unreachable"
        raise AssertionError(msg)  # pragma: no cover

    async def create_stream(self, spec: StreamSpec, *, timeout: float | None = None) -> StreamInfo:
        req = pb.CreateStreamRequest(spec=convert.stream_spec_to_proto(spec))
        m = await self._call("CreateStream", req, timeout=timeout, retry=False)
        return convert.stream_info_from_proto(m)

    async def delete_stream(self, name: str, *, timeout: float | None = None) -> None:
        self._schemas.pop(name, None)
        req = pb.DeleteStreamRequest(name=name)
        await self._call("DeleteStream", req, timeout=timeout, retry=False)

    async def list_streams(self, *, timeout: float | None = None) -> list[StreamInfo]:
        m = await self._call("ListStreams", pb.ListStreamsRequest(), timeout=timeout, retry=True)
        return [convert.stream_info_from_proto(s) for s in m.streams]

    async def get_stream(self, name: str, *, timeout: float | None = None) -> StreamInfo:
        req = pb.GetStreamRequest(name=name)
        return convert.stream_info_from_proto(
            await self._call("GetStream", req, timeout=timeout, retry=True)
        )

    async def create_window(self, spec: WindowSpec, *, timeout: float | None = None) -> WindowInfo:
        req = pb.CreateWindowRequest(spec=convert.window_spec_to_proto(spec))
        m = await self._call("CreateWindow", req, timeout=timeout, retry=False)
        return convert.window_info_from_proto(m)

    async def delete_window(self, stream: str, name: str, *, timeout: float | None = None) -> None:
        req = pb.DeleteWindowRequest(stream=stream, name=name)
        await self._call("DeleteWindow", req, timeout=timeout, retry=False)

    async def get_window(
        self, stream: str, name: str, *, timeout: float | None = None
    ) -> WindowInfo:
        req = pb.GetWindowRequest(stream=stream, name=name)
        m = await self._call("GetWindow", req, timeout=timeout, retry=True)
        return convert.window_info_from_proto(m)

    async def list_windows(self, stream: str, *, timeout: float | None = None) -> list[WindowInfo]:
        req = pb.ListWindowsRequest(stream=stream)
        m = await self._call("ListWindows", req, timeout=timeout, retry=True)
        return [convert.window_info_from_proto(w) for w in m.windows]

    async def schema(self, stream: str) -> dict[str, str]:
        s = self._schemas.get(stream)
        if s is None:
            s = self._schemas[stream] = _schema_of(await self.get_stream(stream))
        return s

    async def append(
        self,
        stream: str,
        rows: Any,
        *,
        producer_id: str | None = None,
        sequence: int | None = None,
        results: str = "none",
        windows: Sequence[str] = (),
        timeout: float | None = None,
    ) -> AppendResult:
        schema = await self.schema(stream)
        req = append_request(stream, rows, schema, producer_id, sequence, results, windows)
        m = await self._call("Append", req, timeout=timeout, retry=bool(producer_id and sequence))
        return convert.append_result_from_proto(m)

    async def query(
        self, stream: str, window: str, *, timeout: float | None = None
    ) -> WindowResult:
        req = pb.QueryRequest(stream=stream, window=window)
        return convert.result_from_proto(
            await self._call("Query", req, timeout=timeout, retry=True)
        )

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
        req = pb.ReadResultsRequest(
            stream=stream, window=window, after_sequence=after_sequence, limit=limit
        )
        m = await self._call("ReadResults", req, timeout=timeout, retry=True)
        return [convert.result_from_proto(r) for r in m.results], m.latest_sequence

    async def subscribe(
        self, stream: str, window: str, *, timeout: float | None = None
    ) -> AsyncIterator[tuple[int, WindowResult]]:
        """As :meth:`WindowClient.subscribe`: results of every batch applied from the moment
        the awaited call returns."""
        call = self.stub.Subscribe(
            pb.SubscribeRequest(stream=stream, window=window),
            timeout=timeout,
            metadata=self.metadata,
        )
        try:
            await call.initial_metadata()
        except grpc.RpcError as err:  # pragma: no cover - errors come with the first read
            raise from_rpc_error(err, self.target) from None
        return _afollow(call, self.target)


async def _afollow(call: Any, target: str) -> AsyncIterator[tuple[int, WindowResult]]:
    try:
        async for ev in call:
            yield ev.batch, convert.result_from_proto(ev.result)
    except grpc.RpcError as err:
        if err.code() == grpc.StatusCode.CANCELLED:
            return
        raise from_rpc_error(err, target) from None
    finally:
        call.cancel()


__all__ = ["AsyncWindowClient", "BatchWriter", "MtaWindowsError", "WindowClient"]
