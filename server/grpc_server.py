"""The gRPC window service (grpc.aio): :class:`WindowServicer`, auth, health, reflection and
the ``serve`` entry point behind ``mtawindows serve``.

Each stream has an asyncio lock; its batches run on a worker thread under that lock, so a
stream waiting on Redis (a cache miss, a checkpoint) never blocks the event loop or the other
streams. Errors leave as rich ``google.rpc.Status`` (ErrorInfo + BadRequest).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hmac
import logging
import os
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from grpc_status import rpc_status

from mtawindows.client import convert
from mtawindows.client.proto import windows_pb2 as pb
from mtawindows.client.proto import windows_pb2_grpc as pb_grpc
from mtawindows.client.types import AppendResult

from .metrics import Metrics
from .service import (
    FINAL,
    NONE,
    PER_ROW,
    Batch,
    Deferred,
    Limits,
    Registry,
    ServiceError,
    Stream,
    batch_too_large,
    invalid,
)

log = logging.getLogger("mtawindows.server")
DOMAIN = "mtawindows.dev"
SERVICE_NAME = pb.DESCRIPTOR.services_by_name["WindowService"].full_name
_MODES = {pb.RESULT_MODE_UNSPECIFIED: NONE, pb.NONE: NONE, pb.FINAL: FINAL, pb.PER_ROW: PER_ROW}
T = TypeVar("T")


def rich_status(
    code: str,
    reason: str,
    message: str,
    violations: list[tuple[str, str]] | None = None,
    metadata: Mapping[str, str] | None = None,
) -> grpc.Status:
    """A grpc.Status carrying google.rpc.Status with ErrorInfo (+ BadRequest)."""
    details = []
    info = any_pb2.Any()
    info.Pack(
        error_details_pb2.ErrorInfo(reason=reason, domain=DOMAIN, metadata=dict(metadata or {}))
    )
    details.append(info)
    if violations:
        bad = any_pb2.Any()
        bad.Pack(
            error_details_pb2.BadRequest(
                field_violations=[
                    error_details_pb2.BadRequest.FieldViolation(field=f, description=d)
                    for f, d in violations
                ]
            )
        )
        details.append(bad)
    status = status_pb2.Status(code=code_pb2.Code.Value(code), message=message, details=details)
    return rpc_status.to_status(status)


def _error_status(ex: ServiceError) -> grpc.Status:
    return rich_status(ex.code, ex.reason, ex.message, ex.violations, ex.metadata)


# --------------------------------------------------------------------------- decoding


def columns_of(request: pb.AppendRequest, max_rows: int) -> dict[str, tuple[str, list[Any]]]:
    """The request's columns as (type name, values), from protobuf columns or Arrow IPC."""
    if request.arrow_ipc and request.columns:
        raise ServiceError(
            "INVALID_ARGUMENT",
            "AMBIGUOUS_BATCH",
            "give the rows either as columns or as arrow_ipc, not both",
            [("arrow_ipc", "set together with columns")],
        )
    if request.arrow_ipc:
        return arrow_columns(request.arrow_ipc, max_rows)
    out: dict[str, tuple[str, list[Any]]] = {}
    for i, col in enumerate(request.columns):
        if col.name in out:
            raise ServiceError(
                "INVALID_ARGUMENT",
                "SCHEMA_MISMATCH",
                f"columns[{i}]: column {col.name!r} given twice",
                [(f"columns[{i}]", f"duplicate column {col.name!r}")],
            )
        if col.nulls:
            raise ServiceError(
                "INVALID_ARGUMENT",
                "BAD_VALUES",
                f"columns[{col.name}]: null values are not allowed in a batch",
                [(f"columns[{col.name}]", "nulls set")],
            )
        kind = col.WhichOneof("data")
        if kind is None or kind == "values":
            raise ServiceError(
                "INVALID_ARGUMENT",
                "SCHEMA_MISMATCH",
                f"columns[{col.name}]: expected typed values (doubles, ints, strings, bools or "
                f"timestamps), got {kind or 'none'}",
                [(f"columns[{col.name}]", "no typed values")],
            )
        data = getattr(col, kind).values
        if len(data) > max_rows:
            raise batch_too_large(len(data), max_rows)
        out[col.name] = (convert.COLUMN_KINDS[kind].value, list(data))
    return out


def arrow_columns(payload: bytes, max_rows: int) -> dict[str, tuple[str, list[Any]]]:
    import pyarrow as pa

    try:
        table = pa.ipc.open_stream(pa.py_buffer(payload)).read_all()
    except (pa.ArrowInvalid, pa.ArrowException, OSError) as ex:
        raise ServiceError(
            "INVALID_ARGUMENT",
            "BAD_ARROW",
            f"arrow_ipc: expected an Arrow IPC stream, could not read it: {ex}",
            [("arrow_ipc", "not an Arrow IPC stream")],
        ) from None
    if table.num_rows > max_rows:
        raise batch_too_large(table.num_rows, max_rows)
    out: dict[str, tuple[str, list[Any]]] = {}
    for name, col in zip(table.column_names, table.columns, strict=True):
        t = col.type
        if col.null_count:
            raise ServiceError(
                "INVALID_ARGUMENT",
                "BAD_VALUES",
                f"columns[{name}]: null values are not allowed in a batch",
                [(f"columns[{name}]", f"{col.null_count} nulls")],
            )
        if pa.types.is_timestamp(t):
            out[name] = ("TIMESTAMP", col.cast(pa.timestamp("ns")).cast(pa.int64()).to_pylist())
        elif pa.types.is_floating(t):
            out[name] = ("DOUBLE", col.cast(pa.float64()).to_pylist())
        elif pa.types.is_integer(t):
            out[name] = ("INT64", col.cast(pa.int64()).to_pylist())
        elif pa.types.is_string(t) or pa.types.is_large_string(t):
            out[name] = ("STRING", col.to_pylist())
        elif pa.types.is_boolean(t):
            out[name] = ("BOOL", col.to_pylist())
        else:
            raise ServiceError(
                "INVALID_ARGUMENT",
                "SCHEMA_MISMATCH",
                f"columns[{name}]: Arrow type {t} is not supported; use float64, int64, "
                "string, bool or timestamp",
                [(f"columns[{name}]", f"arrow type {t}")],
            )
    return out


def _rows_hint(request: pb.AppendRequest) -> int:
    """Rows in a columnar request, from its first column (the decode checks them all)."""
    if not request.columns:
        return 0
    col = request.columns[0]
    kind = col.WhichOneof("data")
    return len(getattr(col, kind).values) if kind else 0


# --------------------------------------------------------------------------- registration


class Malformed:
    """What a request that does not parse becomes: the handler refuses it as
    INVALID_ARGUMENT (grpcio alone would answer UNKNOWN)."""

    def __init__(self, type_name: str, error: Exception) -> None:
        self.type_name = type_name
        self.error = error

    def refusal(self) -> ServiceError:
        return ServiceError(
            "INVALID_ARGUMENT",
            "MALFORMED_REQUEST",
            f"the request is not a valid {self.type_name} message: {self.error}",
        )


def _safe_parser(message: Any) -> Callable[[bytes], Any]:
    from google.protobuf.message import DecodeError

    def parse(data: bytes) -> Any:
        try:
            return message.FromString(data)
        except (DecodeError, ValueError) as ex:
            return Malformed(message.DESCRIPTOR.full_name, ex)

    return parse


def add_servicer(servicer: WindowServicer, server: grpc.aio.Server) -> None:
    """Register the WindowService with parsers that turn malformed bytes into a refusal."""
    service = pb.DESCRIPTOR.services_by_name["WindowService"]
    handlers = {}
    for method in service.methods:
        request = getattr(pb, method.input_type.name)
        response = getattr(pb, method.output_type.name)
        make = (
            grpc.unary_stream_rpc_method_handler
            if method.server_streaming
            else grpc.unary_unary_rpc_method_handler
        )
        handlers[method.name] = make(
            getattr(servicer, method.name),
            request_deserializer=_safe_parser(request),
            response_serializer=response.SerializeToString,
        )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service.full_name, handlers),)
    )


# --------------------------------------------------------------------------- servicer


class WindowServicer(pb_grpc.WindowServiceServicer):  # type: ignore[misc]
    def __init__(self, registry: Registry, metrics: Metrics, *, workers: int = 8) -> None:
        self.registry = registry
        self.metrics = metrics
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="mtaw-stream")
        self.locks: dict[str, asyncio.Lock] = {}
        self.subscribers = 0

    def lock(self, stream: str) -> asyncio.Lock:
        lk = self.locks.get(stream)
        if lk is None:
            lk = self.locks[stream] = asyncio.Lock()
        return lk

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.pool, fn, *args)

    async def _call(
        self,
        method: str,
        context: grpc.aio.ServicerContext,
        body: Callable[[], Awaitable[T]],
        request: Any = None,
    ) -> T:
        t0 = time.perf_counter()
        try:
            if isinstance(request, Malformed):
                raise request.refusal()
            return await body()
        except ServiceError as ex:
            self.metrics.errors.labels(method, ex.code, ex.reason).inc()
            log.info(
                "request refused",
                extra={
                    "method": method,
                    "code": ex.code,
                    "reason": ex.reason,
                    "detail": ex.message,
                },
            )
            await context.abort_with_status(_error_status(ex))
            raise  # pragma: no cover - abort raises
        except (asyncio.CancelledError, grpc.aio.AbortError):
            raise
        except Exception as ex:
            self.metrics.errors.labels(method, "INTERNAL", "INTERNAL").inc()
            log.exception("internal error", extra={"method": method})
            await context.abort_with_status(
                rich_status(
                    "INTERNAL", "INTERNAL", f"{method}: internal error: {type(ex).__name__}: {ex}"
                )
            )
            raise  # pragma: no cover
        finally:
            self.metrics.latency.labels(method).observe(time.perf_counter() - t0)

    # -- streams
    async def CreateStream(self, request: pb.CreateStreamRequest, context: Any) -> pb.StreamInfo:
        async def body() -> pb.StreamInfo:
            spec = convert.stream_spec_from_proto(request.spec)
            info = await self.run(self.registry.create_stream, spec)
            return convert.stream_info_to_proto(info)

        return await self._call("CreateStream", context, body, request)

    async def DeleteStream(self, request: pb.DeleteStreamRequest, context: Any) -> Any:
        async def body() -> pb.DeleteStreamResponse:
            self.registry.stream(request.name)
            async with self.lock(request.name):
                stream = self.registry.stream(request.name)
                await self.run(self.registry.delete_stream, request.name)
                for listener in list(stream.listeners):
                    listener(-1, {})
            self.locks.pop(request.name, None)
            return pb.DeleteStreamResponse()

        return await self._call("DeleteStream", context, body, request)

    async def ListStreams(self, request: pb.ListStreamsRequest, context: Any) -> Any:
        async def body() -> pb.ListStreamsResponse:
            infos = [s.info() for s in list(self.registry.streams.values())]
            return pb.ListStreamsResponse(streams=[convert.stream_info_to_proto(i) for i in infos])

        return await self._call("ListStreams", context, body, request)

    async def GetStream(self, request: pb.GetStreamRequest, context: Any) -> pb.StreamInfo:
        async def body() -> pb.StreamInfo:
            return convert.stream_info_to_proto(self.registry.stream(request.name).info())

        return await self._call("GetStream", context, body, request)

    # -- windows
    async def CreateWindow(self, request: pb.CreateWindowRequest, context: Any) -> pb.WindowInfo:
        async def body() -> pb.WindowInfo:
            spec = convert.window_spec_from_proto(request.spec)
            if request.spec.policy.WhichOneof("kind") is None:
                raise ServiceError(
                    "INVALID_ARGUMENT",
                    "INVALID_DEFINITION",
                    "spec.policy: expected one of count, time_range, bounded_sum, "
                    "max_sub_window, expression; got none",
                    [("spec.policy", "not set")],
                )
            self.registry.stream(spec.stream)
            async with self.lock(spec.stream):
                info = await self.run(self.registry.create_window, spec)
            return convert.window_info_to_proto(info)

        return await self._call("CreateWindow", context, body, request)

    async def DeleteWindow(self, request: pb.DeleteWindowRequest, context: Any) -> Any:
        async def body() -> pb.DeleteWindowResponse:
            self.registry.window(request.stream, request.name)
            async with self.lock(request.stream):
                await self.run(self.registry.delete_window, request.stream, request.name)
            return pb.DeleteWindowResponse()

        return await self._call("DeleteWindow", context, body, request)

    async def GetWindow(self, request: pb.GetWindowRequest, context: Any) -> pb.WindowInfo:
        async def body() -> pb.WindowInfo:
            s = self.registry.stream(request.stream)
            w = self.registry.window(request.stream, request.name)
            return convert.window_info_to_proto(w.info(s.state.rows_late))

        return await self._call("GetWindow", context, body, request)

    async def ListWindows(self, request: pb.ListWindowsRequest, context: Any) -> Any:
        async def body() -> pb.ListWindowsResponse:
            s = self.registry.stream(request.stream)
            infos = [w.info(s.state.rows_late) for w in list(s.windows.values())]
            return pb.ListWindowsResponse(windows=[convert.window_info_to_proto(i) for i in infos])

        return await self._call("ListWindows", context, body, request)

    # -- data
    async def Append(self, request: pb.AppendRequest, context: Any) -> pb.AppendResponse:
        async def body() -> pb.AppendResponse:
            stream = self.registry.stream(request.stream)
            mode = _MODES.get(request.results)
            if mode is None:
                raise ServiceError(
                    "INVALID_ARGUMENT",
                    "BAD_RESULT_MODE",
                    f"results: expected NONE, FINAL or PER_ROW, got {request.results}",
                    [("results", f"unknown value {request.results}")],
                )
            async with self.lock(request.stream):
                if not request.arrow_ipc and stream.inline_ok(_rows_hint(request), mode):
                    # small batch: on the loop unless a window would wait for Redis
                    try:
                        return self._append(stream, request, mode, nonblocking=True)
                    except Deferred as d:
                        self.metrics.deferred.labels(stream.spec.name).inc()
                        return await self.run(self._resume, stream, d.batch)
                return await self.run(self._append, stream, request, mode)

        return await self._call("Append", context, body, request)

    def _append(
        self, stream: Stream, request: pb.AppendRequest, mode: str, *, nonblocking: bool = False
    ) -> pb.AppendResponse:
        limit = self.registry.limits.max_batch_rows
        columns = columns_of(request, limit)
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
            ),
        )

    def _resume(self, stream: Stream, batch: Batch) -> pb.AppendResponse:
        return self._respond(stream, lambda: stream.resume(batch))

    def _respond(self, stream: Stream, apply: Callable[[], AppendResult]) -> pb.AppendResponse:
        """Run ``apply`` (an append or a resumed one), count its outcome, build the answer."""
        name = stream.spec.name
        try:
            res = apply()
        except ServiceError as ex:
            self.metrics.batches.labels(name, ex.reason.lower()).inc()
            raise
        self.metrics.batches.labels(name, "duplicate" if res.duplicate else "applied").inc()
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
        for wname, cols in res.row_results.items():
            sizes = cols.pop("__size")[1]
            out.row_results.append(
                pb.WindowRowResults(
                    window=wname,
                    columns=[convert.column_to_proto(c, t, vs) for c, (t, vs) in cols.items()],
                    sizes=pb.Int64List(values=sizes),
                )
            )
        return out

    async def Query(self, request: pb.QueryRequest, context: Any) -> pb.WindowResult:
        async def body() -> pb.WindowResult:
            w = self.registry.window(request.stream, request.window)
            async with self.lock(request.stream):
                r = await self.run(w.result)
            return convert.result_to_proto(r, w.type_tags)

        return await self._call("Query", context, body, request)

    async def ReadResults(self, request: pb.ReadResultsRequest, context: Any) -> Any:
        async def body() -> pb.ReadResultsResponse:
            if request.after_sequence < 0 or request.limit < 0:
                raise invalid(
                    "after_sequence" if request.after_sequence < 0 else "limit",
                    f"expected a number >= 0, got after_sequence={request.after_sequence}, "
                    f"limit={request.limit}",
                )
            w = self.registry.window(request.stream, request.window)
            limit = min(request.limit or 1000, 10_000)
            async with self.lock(request.stream):
                got = await self.run(w.results_after, request.after_sequence, limit)
                latest = w.sequence
            return pb.ReadResultsResponse(
                results=[convert.result_to_proto(r, w.type_tags) for r in got],
                latest_sequence=latest,
            )

        return await self._call("ReadResults", context, body, request)

    async def Subscribe(
        self, request: pb.SubscribeRequest, context: Any
    ) -> AsyncIterator[pb.SubscribeEvent]:
        try:
            if isinstance(request, Malformed):
                raise request.refusal()
            stream = self.registry.stream(request.stream)
            window = self.registry.window(request.stream, request.window)
            if self.subscribers >= self.registry.limits.max_subscribers:
                raise ServiceError(
                    "RESOURCE_EXHAUSTED",
                    "TOO_MANY_SUBSCRIBERS",
                    f"the server holds its limit of {self.registry.limits.max_subscribers} "
                    "subscriptions",
                )
        except ServiceError as ex:
            self.metrics.errors.labels("Subscribe", ex.code, ex.reason).inc()
            await context.abort_with_status(_error_status(ex))
            return
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[pb.SubscribeEvent | None] = asyncio.Queue(maxsize=10_000)
        overflow = False
        wname = request.window
        tags = window.type_tags

        def put(event: pb.SubscribeEvent | None) -> None:
            nonlocal overflow
            try:
                queue.put_nowait(event)
            except asyncio.QueueFull:
                overflow = True

        def listener(batch: int, results: Mapping[str, Any]) -> None:
            if batch < 0 or wname not in results:
                loop.call_soon_threadsafe(put, None)
                return
            event = pb.SubscribeEvent(
                batch=batch, result=convert.result_to_proto(results[wname], tags)
            )
            loop.call_soon_threadsafe(put, event)

        async with self.lock(request.stream):
            stream.listeners.append(listener)
        self.subscribers += 1
        # headers go out once the listener is in place: a client that waits for them knows
        # it will see every batch applied from then on
        await context.send_initial_metadata((("mtawindows-subscribed", "1"),))
        try:
            while True:
                event = await queue.get()
                if overflow:
                    await context.abort_with_status(
                        rich_status(
                            "RESOURCE_EXHAUSTED",
                            "SUBSCRIBER_TOO_SLOW",
                            "the subscriber fell 10000 results behind; resubscribe",
                        )
                    )
                    return
                if event is None or wname not in stream.windows:
                    await context.abort_with_status(
                        rich_status(
                            "NOT_FOUND",
                            "WINDOW_NOT_FOUND",
                            f"window {request.stream}/{wname} was deleted",
                        )
                    )
                    return
                yield event
        finally:
            self.subscribers -= 1
            with contextlib.suppress(ValueError):
                stream.listeners.remove(listener)

    # -- durability
    async def flush_all(self) -> None:
        for name, stream in list(self.registry.streams.items()):
            async with self.lock(name):
                try:
                    await self.run(functools.partial(self.registry.flush, stream, wait=False))
                except Exception:
                    log.exception("periodic flush failed", extra={"stream": name})

    def window_stats(self) -> Iterator[tuple[str, str, dict[str, int]]]:
        for sname, s in list(self.registry.streams.items()):
            for wname, w in list(s.windows.items()):
                try:
                    yield sname, wname, w.stats(s.state.rows_late)
                except Exception:  # pragma: no cover - a window mid-change: skip this scrape
                    continue


# --------------------------------------------------------------------------- auth


class TokenAuth(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Bearer-token auth: ``authorization: Bearer <token>`` must match one of ``tokens``.
    The health service stays open (load balancers and orchestrators probe it)."""

    OPEN = ("/grpc.health.v1.Health/",)

    def __init__(self, tokens: set[str]) -> None:
        self.tokens = [t.encode() for t in tokens if t]

    def _ok(self, metadata: Any) -> bool:
        for key, value in metadata or ():
            if key == "authorization" and isinstance(value, str) and value.startswith("Bearer "):
                given = value[7:].strip().encode()
                return any(hmac.compare_digest(given, t) for t in self.tokens)
        return False

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        method = details.method or ""
        if method.startswith(self.OPEN) or self._ok(details.invocation_metadata):
            return await continuation(details)
        handler = await continuation(details)
        status = rich_status(
            "UNAUTHENTICATED",
            "UNAUTHENTICATED",
            "missing or invalid bearer token: send metadata authorization: Bearer <token>",
        )

        async def deny(request: Any, context: grpc.aio.ServicerContext) -> Any:
            await context.abort_with_status(status)

        async def deny_stream(request: Any, context: grpc.aio.ServicerContext) -> Any:
            await context.abort_with_status(status)
            yield  # pragma: no cover

        if handler is None:
            return handler
        deser = handler.request_deserializer
        ser = handler.response_serializer
        if handler.unary_stream:
            return grpc.unary_stream_rpc_method_handler(deny_stream, deser, ser)
        return grpc.unary_unary_rpc_method_handler(deny, deser, ser)


# --------------------------------------------------------------------------- serve


@dataclass
class ServeConfig:
    host: str = "127.0.0.1"
    port: int = 50051
    redis_url: str | None = None
    data_dir: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    tokens: set[str] = field(default_factory=set)
    metrics_port: int = 0
    metrics_host: str = "127.0.0.1"
    flush_interval: float = 1.0
    grace: float = 10.0
    workers: int = 8
    limits: Limits = field(default_factory=Limits)
    port_file: str | None = None  # write the bound port here once serving (tests, port 0)


def default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "mtawindows"


class Server:
    """A running service: the gRPC server, its registry and (maybe) an embedded Redis."""

    def __init__(self, config: ServeConfig) -> None:
        self.config = config
        self.embedded: Any = None
        self.server: grpc.aio.Server | None = None
        self.health = health.aio.HealthServicer()
        self.port = 0
        self._stopping: asyncio.Event | None = None

    async def start(self) -> int:
        cfg = self.config
        url = cfg.redis_url
        if not url:
            from .embedded import EmbeddedRedis

            data = Path(cfg.data_dir) if cfg.data_dir else default_data_dir()
            self.embedded = EmbeddedRedis(data / "redis")
            await asyncio.to_thread(self.embedded.start)
            url = self.embedded.url
        self.registry = Registry(url, limits=cfg.limits)
        restored = await asyncio.to_thread(self.registry.restore)
        self.servicer = WindowServicer(
            self.registry, Metrics(lambda: self.servicer.window_stats()), workers=cfg.workers
        )
        interceptors = [TokenAuth(cfg.tokens)] if cfg.tokens else []
        options = [
            ("grpc.max_receive_message_length", cfg.limits.max_message_bytes),
            ("grpc.max_send_message_length", cfg.limits.max_message_bytes),
        ]
        server = grpc.aio.server(interceptors=interceptors, options=options)
        add_servicer(self.servicer, server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        reflection.enable_server_reflection(
            (
                SERVICE_NAME,
                health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
                reflection.SERVICE_NAME,
            ),
            server,
        )
        address = f"{cfg.host}:{cfg.port}"
        if cfg.tls_cert or cfg.tls_key:
            if not (cfg.tls_cert and cfg.tls_key):
                msg = "TLS needs both --tls-cert and --tls-key"
                raise ValueError(msg)
            creds = grpc.ssl_server_credentials(
                [(Path(cfg.tls_key).read_bytes(), Path(cfg.tls_cert).read_bytes())]
            )
            self.port = server.add_secure_port(address, creds)
        else:
            self.port = server.add_insecure_port(address)
        if self.port == 0:
            msg = f"could not bind {address}"
            raise OSError(msg)
        await server.start()
        self.server = server
        if cfg.metrics_port:
            from prometheus_client import start_http_server

            start_http_server(
                cfg.metrics_port, addr=cfg.metrics_host, registry=self.servicer.metrics.registry
            )
        await self.health.set("", health_pb2.HealthCheckResponse.SERVING)
        await self.health.set(SERVICE_NAME, health_pb2.HealthCheckResponse.SERVING)
        self._flusher = asyncio.create_task(self._flush_loop())
        log.info(
            "serving",
            extra={
                "address": f"{cfg.host}:{self.port}",
                "redis": url,
                "windows_restored": restored,
                "tls": bool(cfg.tls_cert),
                "auth": bool(cfg.tokens),
            },
        )
        if cfg.port_file:
            Path(cfg.port_file).write_text(str(self.port))
        return self.port

    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.flush_interval)
            await self.servicer.flush_all()

    async def stop(self) -> None:
        """Graceful: NOT_SERVING, in-flight calls finish (grace), buffers flush, Redis stops."""
        log.info("shutting down")
        await self.health.enter_graceful_shutdown()
        self._flusher.cancel()
        if self.server is not None:
            await self.server.stop(self.config.grace)
        await asyncio.to_thread(self.registry.close)
        self.servicer.pool.shutdown(wait=True)
        if self.embedded is not None:
            await asyncio.to_thread(self.embedded.stop)
        log.info("stopped")

    async def serve_forever(self) -> None:
        await self.start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await self.stop()


def serve(config: ServeConfig) -> None:
    asyncio.run(Server(config).serve_forever())
