"""The gRPC window service (grpc.aio): :class:`WindowServicer`, auth, health, reflection and
the ``serve`` entry point behind ``mtawindows serve``.

Each stream has an asyncio lock; its batches run on a worker thread under that lock, so a
stream waiting on Redis (a cache miss, a checkpoint) never blocks the event loop or the other
streams. Errors leave as rich ``google.rpc.Status`` (ErrorInfo + BadRequest).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import hmac
import logging
import os
import re
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import grpc
import redis
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from grpc_status import rpc_status

from mtawindows.v1 import convert
from mtawindows.v1 import windows_pb2 as pb
from mtawindows.v1 import windows_pb2_grpc as pb_grpc
from mtawindows.v1.types import AppendResult, SpecError, clip, show

from ..service.cel import CelError, CelLimits, check_limits
from ..service.fanout import Fanout
from ..service.inputs import MAX_COLUMNS, MAX_NAME, check_request, too_long
from ..service.registry import (
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
    new_error_id,
    store_failed,
)
from ..storage.embedded import DataDirLock, EmbeddedRedis, EmbeddedRedisError
from ..storage.protocol import StoreError, StoreUnavailableError
from .metrics import Metrics

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
    """A grpc.Status carrying google.rpc.Status with ErrorInfo (+ BadRequest).

    Bounded whatever the caller passes (:func:`_bounded`): the status travels in trailing
    metadata, and a client drops trailers past gRPC's metadata limit (8 KiB soft, 16 KiB
    hard) as a bare "Stream removed"."""
    message, violations, metadata = _bounded(message, violations, metadata)
    details = []
    info = any_pb2.Any()
    info.Pack(error_details_pb2.ErrorInfo(reason=reason, domain=DOMAIN, metadata=metadata))
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


# The largest error a client gets: about 5 KiB with base64, under the 8 KiB metadata limit.
STATUS_MESSAGE_CHARS = 1024
STATUS_VIOLATION_BYTES = 2048  # all field violations together
STATUS_METADATA_BYTES = 1536  # all ErrorInfo metadata together
STATUS_FIELD_CHARS = 128
STATUS_DESCRIPTION_CHARS = 300
STATUS_VALUE_CHARS = 256


def _ascii(text: str, limit: int) -> str:
    """``text`` with non-ASCII escaped (grpc-message percent-encodes each byte), cut to
    ``limit`` characters with its length given."""
    out: str = clip(str(text).encode("ascii", "backslashreplace").decode("ascii"), limit)
    return out


def _bounded(
    message: str,
    violations: list[tuple[str, str]] | None,
    metadata: Mapping[str, str] | None,
) -> tuple[str, list[tuple[str, str]], dict[str, str]]:
    """An error's parts cut to size: the message, as many violations as fit (the rest
    counted in the last one), as many metadata entries as fit."""
    message = _ascii(message, STATUS_MESSAGE_CHARS)
    out_v: list[tuple[str, str]] = []
    used = 0
    items = list(violations or ())
    for i, (f, d) in enumerate(items):
        f, d = _ascii(f, STATUS_FIELD_CHARS), _ascii(d, STATUS_DESCRIPTION_CHARS)
        if used + len(f) + len(d) > STATUS_VIOLATION_BYTES - 64:
            out_v.append(("", f"... {len(items) - i} more violations not shown"))
            break
        out_v.append((f, d))
        used += len(f) + len(d)
    out_m: dict[str, str] = {}
    used = 0
    for k, v in (metadata or {}).items():
        k, v = _ascii(k, 64), _ascii(v, STATUS_VALUE_CHARS)
        if used + len(k) + len(v) > STATUS_METADATA_BYTES:
            break
        out_m[k] = v
        used += len(k) + len(v)
    return message, out_v, out_m


def _error_status(ex: ServiceError) -> grpc.Status:
    return rich_status(ex.code, ex.reason, ex.message, ex.violations, ex.metadata)


def internal_status(error_id: str) -> grpc.Status:
    """What a client learns of an internal error: its id (the log has the rest)."""
    return rich_status(
        "INTERNAL", "INTERNAL", f"internal error, id {error_id}", metadata={"error_id": error_id}
    )


class _Logged(Exception):
    """Stands in for an exception in the log when its text is long: the original's type and
    clipped text, with its traceback (and its causes, likewise)."""


def loggable(ex: BaseException, depth: int = 0) -> BaseException:
    """``ex`` as it may be logged: itself when every message of its chain is short, else a
    stand-in chain whose texts are clipped to 2000 characters (tracebacks kept)."""

    def long(e: BaseException | None, d: int) -> bool:
        if e is None or d > 8:
            return False
        try:
            n = len(str(e))
        except Exception:  # a __str__ that raises: replace it
            return True
        return n > 2000 or long(e.__cause__, d + 1) or long(e.__context__, d + 1)

    if depth == 0 and not long(ex, 0):
        return ex
    try:
        text = str(ex)
    except Exception:
        text = "<unprintable>"
    sub = _Logged(f"{type(ex).__module__}.{type(ex).__qualname__}: {clip(text, 2000)}")
    sub = sub.with_traceback(ex.__traceback__)
    if depth < 8:
        if ex.__cause__ is not None:
            sub.__cause__ = loggable(ex.__cause__, depth + 1)
        elif ex.__context__ is not None:
            sub.__context__ = loggable(ex.__context__, depth + 1)
    sub.__suppress_context__ = ex.__suppress_context__
    return sub


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
                f"columns[{i}]: column {show(col.name)} given twice",
                [(f"columns[{i}]", f"duplicate column {show(col.name)}")],
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

    def bad_arrow(ex: Exception) -> ServiceError:
        return ServiceError(
            "INVALID_ARGUMENT",
            "BAD_ARROW",
            f"arrow_ipc: expected an Arrow IPC stream, could not read it: {clip(str(ex))}",
            [("arrow_ipc", "not an Arrow IPC stream")],
        )

    try:
        reader = pa.ipc.open_stream(pa.py_buffer(payload))
    except (pa.ArrowInvalid, pa.ArrowException, OSError) as ex:
        raise bad_arrow(ex) from None
    # the column names are checked as the protobuf columns' are, before the rows are read
    names = reader.schema.names
    if len(names) > MAX_COLUMNS:
        what = f"expected at most {MAX_COLUMNS} columns, got {len(names)}"
        raise ServiceError(
            "INVALID_ARGUMENT", "TOO_MANY_ITEMS", f"arrow_ipc: {what}", [("arrow_ipc", what)]
        )
    seen: set[str] = set()
    for i, name in enumerate(names):
        if len(name) > MAX_NAME:
            where = f"arrow_ipc.columns[{i}].name"
            raise too_long(where, name, MAX_NAME)
        if name in seen:
            raise ServiceError(
                "INVALID_ARGUMENT",
                "SCHEMA_MISMATCH",
                f"arrow_ipc.columns[{i}]: column {show(name)} given twice",
                [(f"arrow_ipc.columns[{i}]", f"duplicate column {show(name)}")],
            )
        seen.add(name)
    try:
        table = reader.read_all()
    except (pa.ArrowInvalid, pa.ArrowException, OSError) as ex:
        raise bad_arrow(ex) from None
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
        try:
            if pa.types.is_timestamp(t):
                ns = col.cast(pa.timestamp("ns")).cast(pa.int64())
                out[name] = ("TIMESTAMP", ns.to_pylist())
            elif pa.types.is_floating(t):
                out[name] = ("DOUBLE", col.cast(pa.float64()).to_pylist())
            elif pa.types.is_integer(t):
                out[name] = ("INT64", col.cast(pa.int64()).to_pylist())
            elif pa.types.is_string(t) or pa.types.is_large_string(t):
                out[name] = ("STRING", col.to_pylist())
            elif pa.types.is_boolean(t):
                out[name] = ("BOOL", col.to_pylist())
            else:
                what = clip(str(t), 100)
                raise ServiceError(
                    "INVALID_ARGUMENT",
                    "SCHEMA_MISMATCH",
                    f"columns[{name}]: Arrow type {what} is not supported; use float64, int64, "
                    "string, bool or timestamp",
                    [(f"columns[{name}]", f"arrow type {what}")],
                )
        except pa.ArrowInvalid as ex:  # a uint64 or a timestamp past int64 nanoseconds
            what = f"values out of the 64-bit range ({clip(str(ex), 100)})"
            raise ServiceError(
                "INVALID_ARGUMENT",
                "BAD_VALUES",
                f"columns[{name}]: {what}",
                [(f"columns[{name}]", what)],
            ) from None
    return out


def _spec(decode: Callable[[Any], T], message: Any, reason: str) -> T:
    """A definition from the wire; what the conversion refuses (an unknown enum number, an
    invalid duration, a wrong type: SpecError) becomes INVALID_ARGUMENT naming the field
    (``spec.<path>``), with the refusal's own reason or ``reason``."""
    try:
        return decode(message)
    except SpecError as ex:
        raise invalid(f"spec.{ex.field}", ex.description, ex.reason or reason) from None


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
            f"the request is not a valid {self.type_name} message: {clip(str(self.error))}",
        )


def _safe_parser(message: Any) -> Callable[[bytes], Any]:
    from google.protobuf.message import DecodeError

    def parse(data: bytes) -> Any:
        try:
            return message.FromString(data)
        except (DecodeError, ValueError) as ex:
            return Malformed(message.DESCRIPTOR.full_name, ex)

    return parse


def _passthrough(message: Any) -> Callable[[Any], bytes]:
    """``message``'s serializer, passing bytes through: Subscribe yields events serialized
    once for all the subscribers of a window."""
    serialize = message.SerializeToString

    def ser(m: Any) -> bytes:
        return m if isinstance(m, bytes) else serialize(m)

    return ser


def _event_bytes(tags: Any, batch: int, result: Any) -> bytes:
    """A serialized SubscribeEvent: ``result`` of a window (output types ``tags``) after
    ``batch``."""
    event = pb.SubscribeEvent(batch=batch, result=convert.result_to_proto(result, tags))
    return event.SerializeToString()  # type: ignore[no-any-return]


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
        fn = getattr(servicer, method.name)
        guard = _guard_stream if method.server_streaming else _guard_unary
        handlers[method.name] = make(
            guard(servicer, method.name, fn),
            request_deserializer=_safe_parser(request),
            response_serializer=_passthrough(response)
            if method.server_streaming
            else response.SerializeToString,
        )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service.full_name, handlers),)
    )


# Every handler runs behind a guard: the request is screened first (it parsed; its strings,
# lists and enums within limits: inputs.py), before any other work; and an exception that
# escapes the handler becomes INTERNAL with an error id, never grpcio's own answer (UNKNOWN
# with the exception's text).


def _guard_unary(servicer: WindowServicer, method: str, fn: Callable[..., Any]) -> Any:
    async def handle(request: Any, context: grpc.aio.ServicerContext) -> Any:
        await servicer.screen(method, request, context)
        try:
            return await fn(request, context)
        except (asyncio.CancelledError, grpc.aio.AbortError):
            raise
        except Exception as ex:  # outside _call: still INTERNAL with an id
            await servicer.internal(method, context, ex)

    return handle


def _guard_stream(servicer: WindowServicer, method: str, fn: Callable[..., Any]) -> Any:
    async def handle(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        await servicer.screen(method, request, context)
        events = fn(request, context)
        try:
            async for event in events:
                yield event
        except (asyncio.CancelledError, grpc.aio.AbortError, GeneratorExit):
            raise
        except Exception as ex:
            await servicer.internal(method, context, ex)
        finally:
            aclose = getattr(events, "aclose", None)
            if aclose is not None:  # the handler's own cleanup runs now, not at collection
                await aclose()

    return handle


# --------------------------------------------------------------------------- servicer


# Calls that read or change windows, or write definitions: they need the store. The others
# (GetStream, ListStreams, GetWindow, ListWindows, Subscribe) answer from memory.
NEEDS_STORE = frozenset(
    {
        "CreateStream",
        "DeleteStream",
        "CreateWindow",
        "DeleteWindow",
        "Append",
        "Query",
        "ReadResults",
    }
)


def store_unavailable_refusal(method: str, why: str) -> ServiceError:
    return ServiceError(
        "UNAVAILABLE",
        "STORE_UNAVAILABLE",
        f"{method}: {why}; retry later (appends with a producer_id and sequence are idempotent)",
    )


class WindowServicer(pb_grpc.WindowServiceServicer):
    def __init__(self, registry: Registry, metrics: Metrics, *, workers: int = 8) -> None:
        self.registry = registry
        self.metrics = metrics
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="mtaw-stream")
        self.locks: dict[str, asyncio.Lock] = {}
        limits = registry.limits
        self.fanout = Fanout(
            limits.subscriber_queue_bytes,
            limits.subscribers_total_bytes,
            on_cut=lambda e: self.metrics.errors.labels("Subscribe", e.code, e.reason).inc(),
        )
        # why the store cannot be used (set by the server's supervisor while the embedded
        # Redis is down): calls in NEEDS_STORE are refused as UNAVAILABLE meanwhile
        self.store_down: str | None = None

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
            if self.store_down is not None and method in NEEDS_STORE:
                raise store_unavailable_refusal(method, self.store_down)
            try:
                return await body()
            except (StoreError, redis.RedisError) as ex:  # the store failing is never INTERNAL
                raise store_failed(method, ex) from None
        except ServiceError as ex:
            await self.refuse(method, context, ex)
            raise  # pragma: no cover - abort raises
        except (asyncio.CancelledError, grpc.aio.AbortError):
            raise
        except Exception as ex:  # every other failure is INTERNAL, with an id
            await self.internal(method, context, ex)
            raise  # pragma: no cover
        finally:
            self.metrics.latency.labels(method).observe(time.perf_counter() - t0)

    async def screen(self, method: str, request: Any, context: grpc.aio.ServicerContext) -> None:
        """Refuse a request that did not parse or whose strings, lists or enums are out of
        bounds (inputs.py), before any other work."""
        try:
            if isinstance(request, Malformed):
                raise request.refusal()
            check_request(request)
        except ServiceError as ex:
            await self.refuse(method, context, ex)

    async def refuse(
        self, method: str, context: grpc.aio.ServicerContext, ex: ServiceError
    ) -> None:
        """Count, log (bounded) and send a refusal; raises (the call is aborted)."""
        self.metrics.errors.labels(method, ex.code, ex.reason).inc()
        log.info(
            "request refused",
            extra={
                "method": method,
                "code": ex.code,
                "reason": ex.reason,
                "detail": clip(ex.message, 1000),
            },
        )
        await context.abort_with_status(_error_status(ex))

    async def internal(
        self, method: str, context: grpc.aio.ServicerContext, ex: BaseException
    ) -> None:
        """An unexpected failure: logged with its traceback under a fresh error id; the
        client gets only ``internal error, id <id>`` (ErrorInfo INTERNAL, metadata
        ``error_id``), never the exception's text. Raises (the call is aborted)."""
        error_id = new_error_id()
        self.metrics.errors.labels(method, "INTERNAL", "INTERNAL").inc()
        log.error(
            "internal error, id %s, in %s",
            error_id,
            method,
            exc_info=loggable(ex),
            extra={"method": method, "error_id": error_id},
        )
        await context.abort_with_status(internal_status(error_id))

    # -- streams
    async def CreateStream(self, request: pb.CreateStreamRequest, context: Any) -> pb.StreamInfo:
        async def body() -> pb.StreamInfo:
            spec = _spec(convert.stream_spec_from_proto, request.spec, "INVALID_ARGUMENT")
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
            if request.spec.policy.WhichOneof("kind") is None:
                raise ServiceError(
                    "INVALID_ARGUMENT",
                    "INVALID_DEFINITION",
                    "spec.policy: expected one of count, time_range, bounded_sum, "
                    "max_sub_window, expression; got none",
                    [("spec.policy", "not set")],
                )
            spec = _spec(convert.window_spec_from_proto, request.spec, "INVALID_DEFINITION")
            if spec.policy.kind == "expression":  # before anything parses it
                await self.run(self._check_cel, spec.policy.cel)
            self.registry.stream(spec.stream)
            async with self.lock(spec.stream):
                info = await self.run(self.registry.create_window, spec)
            return convert.window_info_to_proto(info)

        return await self._call("CreateWindow", context, body, request)

    def _check_cel(self, text: str) -> None:
        """A new CEL policy within the size and nesting limits (on a worker thread)."""
        limits = self.registry.limits
        try:
            check_limits(text, CelLimits(limits.max_cel_bytes, limits.max_cel_depth))
        except CelError as ex:
            raise ServiceError(
                "INVALID_ARGUMENT",
                ex.code,
                f"spec.policy.expression.cel: {ex}",
                [("spec.policy.expression.cel", str(ex))],
                ex.metadata,
            ) from None

    async def DeleteWindow(self, request: pb.DeleteWindowRequest, context: Any) -> Any:
        async def body() -> pb.DeleteWindowResponse:
            self.registry.window(request.stream, request.name)
            async with self.lock(request.stream):
                await self.run(self.registry.delete_window, request.stream, request.name)
                self.fanout.window_deleted(request.stream, request.name)
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
                r = await self.run(self.registry.result, request.stream, request.window)
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

    async def Subscribe(self, request: pb.SubscribeRequest, context: Any) -> AsyncIterator[bytes]:
        """Results of every batch applied after the headers went out, through a queue bounded
        in bytes (``Limits.subscriber_queue_bytes``, ``subscribers_total_bytes``): a
        subscriber that falls that far behind is cut (RESOURCE_EXHAUSTED,
        SUBSCRIBER_TOO_SLOW). Events are serialized once per window and batch (fanout.py)."""
        try:
            if isinstance(request, Malformed):
                raise request.refusal()
            self.registry.window(request.stream, request.window)
            async with self.lock(request.stream):
                # again under the lock: the stream or window may have gone meanwhile
                stream = self.registry.stream(request.stream)
                window = self.registry.window(request.stream, request.window)
                limit = self.registry.limits.max_subscribers
                if self.fanout.count >= limit:
                    raise ServiceError(
                        "RESOURCE_EXHAUSTED",
                        "TOO_MANY_SUBSCRIBERS",
                        f"the server holds its limit of {limit} subscriptions",
                        metadata={"limit": str(limit)},
                    )
                sub = self.fanout.subscribe(
                    stream, request.window, functools.partial(_event_bytes, window.type_tags)
                )
        except ServiceError as ex:
            self.metrics.errors.labels("Subscribe", ex.code, ex.reason).inc()
            await context.abort_with_status(_error_status(ex))
            return
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
                ended = sub.ended
                if ended is not None:
                    if ended.reason != "UNSUBSCRIBED":
                        if ended.reason != "SUBSCRIBER_TOO_SLOW":  # counted when it was cut
                            self.metrics.errors.labels("Subscribe", ended.code, ended.reason).inc()
                        await context.abort_with_status(
                            rich_status(
                                ended.code, ended.reason, ended.message, metadata=ended.metadata
                            )
                        )
                    return
                await sub.wait()
        finally:
            self.fanout.unsubscribe(sub)

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


# A token: printable ASCII without whitespace (RFC 6750's b64token is a subset); a token
# with anything else could never arrive intact in a header, so it is refused at start-up.
TOKEN = re.compile(r"[\x21-\x7e]+")
# The header, exactly: the scheme (case-insensitive, as RFC 6750 / RFC 7235 allow), one
# space, the token; nothing before or after.
BEARER = re.compile(r"(?i:bearer) ([\x21-\x7e]+)")


def check_tokens(tokens: Iterable[str], source: str = "tokens") -> list[str]:
    """The tokens, checked: at least one, each a :data:`TOKEN`. ValueError naming ``source``
    and the token's position, never the token (a secret)."""
    out = list(tokens)
    if not out:
        msg = (
            f"{source}: expected at least one bearer token, got none; with no token every "
            "call would be refused (remove the setting to run without authentication)"
        )
        raise ValueError(msg)
    for i, t in enumerate(out, 1):
        if not isinstance(t, str) or not TOKEN.fullmatch(t):
            msg = (
                f"{source}: token {i} is not a bearer token: expected printable ASCII "
                "without spaces (RFC 6750), got "
                + (f"{len(t)} characters" if isinstance(t, str) else type(t).__name__)
            )
            raise ValueError(msg)
    return out


class TokenAuth(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Bearer-token auth: the call's one ``authorization`` header must be exactly
    ``Bearer <token>`` (scheme case-insensitive, one space, no other whitespace) with a token
    of ``tokens`` (compared in constant time against every one). The health service stays
    open (load balancers and orchestrators probe it). Fails closed: no tokens, or a token
    that could never match, is a ValueError here, so a server never starts open by mistake."""

    OPEN = ("/grpc.health.v1.Health/",)

    def __init__(self, tokens: Iterable[str]) -> None:
        self.tokens = [t.encode() for t in check_tokens(tokens, "TokenAuth")]

    def _ok(self, metadata: Any) -> bool:
        values = [v for k, v in metadata or () if k == "authorization"]
        if len(values) != 1 or not isinstance(values[0], str):
            return False  # none, or several (which one would a proxy have meant?)
        m = BEARER.fullmatch(values[0])
        if m is None:
            return False
        given = m.group(1).encode()
        ok = False
        for t in self.tokens:  # every one, so the time does not tell which matched
            ok |= hmac.compare_digest(given, t)
        return ok

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
    # SO_REUSEPORT (grpc's default on Linux) lets a second server bind the same port and take
    # half of the connections: off unless asked for, so a taken port is an error at start-up
    reuse_port: bool = False
    # the embedded Redis: restarts allowed within the window (then NOT_SERVING for good), and
    # seconds between checks of its process
    redis_restarts: int = 5
    redis_restart_window: float = 300.0
    supervise_interval: float = 0.2


def default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "mtawindows"


_SERVING = health_pb2.HealthCheckResponse.SERVING
_NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


class Server:
    """A running service: the gRPC server, its registry and (maybe) an embedded Redis.

    With the embedded Redis (no ``redis_url``) the server owns its data directory:

    - an exclusive lock on ``<data_dir>/lock``, taken before anything starts and held for the
      server's life: a second server on the directory stops at start-up, naming the holder;
    - the Redis process dies with the server, whatever kills it (``PR_SET_PDEATHSIG`` on
      Linux), and an orphan found on the directory at start-up is shut down (embedded.py);
    - a supervisor task watches the process. When it dies alone: health NOT_SERVING, calls
      that need the store refused as UNAVAILABLE (``STORE_UNAVAILABLE``), the process
      restarted on the same AOF (at most ``redis_restarts`` times per
      ``redis_restart_window`` seconds, with backoff), every Redis window marked to reload its
      durable state before its next call, health SERVING again. Past the limit it stays
      NOT_SERVING and logs why.

    The port is bound before the Redis starts, without SO_REUSEPORT unless ``reuse_port``.
    """

    def __init__(self, config: ServeConfig) -> None:
        self.config = config
        self.embedded: EmbeddedRedis | None = None
        self.lock: DataDirLock | None = None
        self.server: grpc.aio.Server | None = None
        self.health = health.aio.HealthServicer()
        self.port = 0
        self.registry: Registry | None = None
        self.servicer: WindowServicer | None = None
        self._restored = False
        self._stopping = False
        self._tasks: list[asyncio.Task[None]] = []
        self._restart: asyncio.Future[EmbeddedRedis] | None = None

    async def start(self) -> int:
        """Lock the data directory, bind the port, start the Redis, restore every window and
        serve; returns the port. A failure leaves nothing running (lock released)."""
        try:
            return await self._start()
        except BaseException:
            await self._abandon()
            raise

    async def _start(self) -> int:
        cfg = self.config
        # absolute: valkey runs with its own working directory (a relative path failed there)
        data = (Path(cfg.data_dir) if cfg.data_dir else default_data_dir()).absolute()
        if not cfg.redis_url:
            self.lock = DataDirLock(data, owner="mtawindows server").acquire()
        interceptors = [TokenAuth(cfg.tokens)] if cfg.tokens else []
        options = [
            ("grpc.max_receive_message_length", cfg.limits.max_message_bytes),
            ("grpc.max_send_message_length", cfg.limits.max_message_bytes),
            ("grpc.so_reuseport", 1 if cfg.reuse_port else 0),
        ]
        server = self.server = grpc.aio.server(interceptors=interceptors, options=options)
        self.port = self._bind(server)
        url = cfg.redis_url
        if not url:
            self.embedded = EmbeddedRedis(data / "redis")
            await asyncio.to_thread(self.embedded.start)
            url = self.embedded.url
        registry = self.registry = Registry(url, limits=cfg.limits)
        try:
            restored = await asyncio.to_thread(registry.restore)
        except (StoreError, redis.RedisError) as ex:
            msg = f"could not load the streams and windows from Redis: {ex}"
            raise OSError(msg) from ex
        self._restored = True
        servicer = self.servicer = WindowServicer(
            registry, Metrics(lambda: servicer.window_stats()), workers=cfg.workers
        )
        add_servicer(servicer, server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        reflection.enable_server_reflection(
            (
                SERVICE_NAME,
                health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
                reflection.SERVICE_NAME,
            ),
            server,
        )
        await server.start()
        if cfg.metrics_port:
            from prometheus_client import start_http_server

            start_http_server(
                cfg.metrics_port, addr=cfg.metrics_host, registry=servicer.metrics.registry
            )
        await self._set_health(_SERVING)
        self._tasks.append(asyncio.create_task(self._flush_loop()))
        if self.embedded is not None:
            self._tasks.append(asyncio.create_task(self._supervise()))
        log.info(
            "serving",
            extra={
                "address": f"{cfg.host}:{self.port}",
                "redis": url,
                "windows_restored": restored,
                "tls": bool(cfg.tls_cert),
                "auth": bool(cfg.tokens),
                "reuse_port": cfg.reuse_port,
            },
        )
        if cfg.port_file:
            Path(cfg.port_file).write_text(str(self.port))
        return self.port

    def _bind(self, server: grpc.aio.Server) -> int:
        cfg = self.config
        address = f"{cfg.host}:{cfg.port}"
        if cfg.tls_cert or cfg.tls_key:
            if not (cfg.tls_cert and cfg.tls_key):
                msg = "TLS needs both --tls-cert and --tls-key"
                raise ValueError(msg)
            creds = grpc.ssl_server_credentials(
                [(Path(cfg.tls_key).read_bytes(), Path(cfg.tls_cert).read_bytes())]
            )
        try:
            if cfg.tls_cert:
                port = server.add_secure_port(address, creds)
            else:
                port = server.add_insecure_port(address)
        except RuntimeError:  # grpcio >= 1.5x raises where older ones returned 0
            port = 0
        if port == 0:
            shared = "" if cfg.reuse_port else " (ports are not shared without --reuse-port)"
            msg = (
                f"could not listen on {address}: the port is taken (another server?) or the "
                f"address is not on this machine{shared}"
            )
            raise OSError(msg)
        return int(port)

    async def _set_health(self, status: Any) -> None:
        await self.health.set("", status)
        await self.health.set(SERVICE_NAME, status)

    async def _flush_loop(self) -> None:
        assert self.servicer is not None
        while True:
            await asyncio.sleep(self.config.flush_interval)
            if self.servicer.store_down is None:
                await self.servicer.flush_all()

    # -- supervision of the embedded Redis
    async def _supervise(self) -> None:
        emb = self.embedded
        assert emb is not None
        restarts: collections.deque[float] = collections.deque()
        while not self._stopping:
            await asyncio.sleep(self.config.supervise_interval)
            if emb.running or self._stopping:
                continue
            why = f"the embedded Redis (pid {emb.pid}) {emb.exit_reason()}"
            await self._store_down(why, "the embedded Redis is down; the server is restarting it")
            if not await self._restart_store(restarts, why):
                return

    async def _store_down(self, why: str, told: str) -> None:
        """NOT_SERVING; ``why`` goes to the log, ``told`` to refused callers."""
        assert self.servicer is not None
        self.servicer.store_down = told
        await self._set_health(_NOT_SERVING)
        log.error(
            "store down: NOT_SERVING until the embedded Redis is back",
            extra={"event": "store_down", "reason": why},
        )

    async def _restart_store(self, restarts: collections.deque[float], why: str) -> bool:
        """Restart the embedded Redis on its data directory (bounded, with backoff), then make
        every window reload its durable state and go back to SERVING. False: gave up."""
        cfg = self.config
        emb = self.embedded
        assert emb is not None and self.servicer is not None
        delay = 0.5
        while True:
            now = time.monotonic()
            while restarts and now - restarts[0] > cfg.redis_restart_window:
                restarts.popleft()
            if len(restarts) >= cfg.redis_restarts:
                self.servicer.store_down = (
                    "the embedded Redis is down and the server gave up restarting it (see its log)"
                )
                log.error(
                    "embedded Redis not restarted: NOT_SERVING until the server is restarted",
                    extra={
                        "event": "store_given_up",
                        "reason": f"{len(restarts)} restarts within "
                        f"{cfg.redis_restart_window:g}s; last: {why}",
                        "data_dir": str(emb.data_dir),
                    },
                )
                return False
            restarts.append(now)
            # shielded: a stop() during the restart waits for it instead of racing it
            self._restart = asyncio.ensure_future(asyncio.to_thread(emb.start))
            try:
                await asyncio.shield(self._restart)
                break
            except (EmbeddedRedisError, OSError) as ex:
                why = f"restart {len(restarts)} failed: {ex}"
                log.error(
                    "embedded Redis restart failed",
                    extra={"event": "store_restart_failed", "reason": why},
                )
            await asyncio.sleep(delay)
            delay = min(delay * 2, 10.0)
        await self._invalidate_windows()
        self.servicer.store_down = None
        await self._set_health(_SERVING)
        log.warning(
            "embedded Redis restarted: SERVING",
            extra={"event": "store_restarted", "pid": emb.pid, "restarts": len(restarts)},
        )
        return True

    async def _invalidate_windows(self) -> None:
        """After a restart Redis holds what its AOF kept: every Redis window reloads its
        durable state before its next call (under its stream's lock, so between calls)."""
        assert self.registry is not None and self.servicer is not None
        lost = StoreUnavailableError("the embedded Redis restarted: reload the durable state")
        for name, stream in list(self.registry.streams.items()):
            async with self.servicer.lock(name):
                for w in list(stream.windows.values()):
                    w.engine.invalidate(lost)

    # -- stop
    async def stop(self) -> None:
        """Graceful: NOT_SERVING, in-flight calls finish (grace), buffers flush, Redis stops."""
        log.info("shutting down")
        self._stopping = True
        await self.health.enter_graceful_shutdown()
        await self._cancel_tasks()
        if self.servicer is not None:
            self.servicer.fanout.shutdown()  # Subscribe calls never end by themselves
        if self.server is not None:
            await self.server.stop(self.config.grace)
        if self.registry is not None:
            await asyncio.to_thread(self.registry.close)
        if self.servicer is not None:
            self.servicer.pool.shutdown(wait=True)
        await self._release()
        log.info("stopped")

    async def _cancel_tasks(self) -> None:
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._restart is not None:  # a restart in flight ends before the Redis is stopped
            await asyncio.gather(self._restart, return_exceptions=True)

    async def _release(self) -> None:
        if self.embedded is not None:
            await asyncio.to_thread(self.embedded.stop)
        if self.lock is not None:
            self.lock.release()

    async def _abandon(self) -> None:
        """Undo a start that failed half-way: nothing keeps running, the lock is released."""
        self._stopping = True
        await self._cancel_tasks()
        if self.server is not None:
            with contextlib.suppress(Exception):
                await self.server.stop(None)
        if self.registry is not None:
            with contextlib.suppress(Exception):
                if self._restored:
                    await asyncio.to_thread(self.registry.close)
                else:
                    self.registry.redis.close()
        if self.servicer is not None:
            self.servicer.pool.shutdown(wait=False)
        await self._release()

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
