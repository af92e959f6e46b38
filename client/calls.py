"""The request layer both clients share: one :class:`Call` per RPC, the retry policy, the errors.

A :class:`Call` says everything about one RPC but the sending: the service method, the request,
how to decode the reply, and whether the call may be retried (reads, and appends with an
idempotency key). :class:`~mtawindows.client.WindowClient` sends it through the blocking stub
and :class:`~mtawindows.client.AsyncWindowClient` through the grpc.aio stub, each in the same
loop over :func:`attempts`: a failure leaves an :class:`Attempt` as the typed exception of
:mod:`mtawindows.client.errors` (naming the server's target), or, when UNAVAILABLE or
DEADLINE_EXCEEDED and tries are left, waits a jittered exponential :func:`backoff` and goes again.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Generic, Protocol, TypeVar

import grpc
from google.protobuf.message import Message

from mtawindows.v1 import convert
from mtawindows.v1 import windows_pb2 as pb
from mtawindows.v1.types import (
    AppendResult,
    StreamInfo,
    StreamSpec,
    WindowInfo,
    WindowResult,
    WindowSpec,
)

from .errors import DeadlineExceededError, UnavailableError, from_rpc_error
from .rows import Rows, encode_rows

R = TypeVar("R")  # the reply message
T = TypeVar("T")  # what the client returns

RESULTS = {"none": pb.NONE, "final": pb.FINAL, "per_row": pb.PER_ROW}
RETRYABLE = (UnavailableError, DeadlineExceededError)


@dataclass(frozen=True)
class Call(Generic[R, T]):
    """One RPC: ``method`` of the WindowService with ``request``; ``decode`` turns the reply
    into what the client returns; ``retry``: safe to send again after UNAVAILABLE or
    DEADLINE_EXCEEDED (the server applies it at most once)."""

    method: str
    request: Message
    decode: Callable[[R], T]
    retry: bool


# --------------------------------------------------------------------------- one per RPC


def _nothing(_: object) -> None:
    return None


def create_stream(spec: StreamSpec) -> Call[pb.StreamInfo, StreamInfo]:
    req = pb.CreateStreamRequest(spec=convert.stream_spec_to_proto(spec))
    return Call("CreateStream", req, convert.stream_info_from_proto, retry=False)


def delete_stream(name: str) -> Call[pb.DeleteStreamResponse, None]:
    return Call("DeleteStream", pb.DeleteStreamRequest(name=name), _nothing, retry=False)


def list_streams() -> Call[pb.ListStreamsResponse, list[StreamInfo]]:
    def decode(m: pb.ListStreamsResponse) -> list[StreamInfo]:
        return [convert.stream_info_from_proto(s) for s in m.streams]

    return Call("ListStreams", pb.ListStreamsRequest(), decode, retry=True)


def get_stream(name: str) -> Call[pb.StreamInfo, StreamInfo]:
    req = pb.GetStreamRequest(name=name)
    return Call("GetStream", req, convert.stream_info_from_proto, retry=True)


def create_window(spec: WindowSpec) -> Call[pb.WindowInfo, WindowInfo]:
    req = pb.CreateWindowRequest(spec=convert.window_spec_to_proto(spec))
    return Call("CreateWindow", req, convert.window_info_from_proto, retry=False)


def delete_window(stream: str, name: str) -> Call[pb.DeleteWindowResponse, None]:
    req = pb.DeleteWindowRequest(stream=stream, name=name)
    return Call("DeleteWindow", req, _nothing, retry=False)


def get_window(stream: str, name: str) -> Call[pb.WindowInfo, WindowInfo]:
    req = pb.GetWindowRequest(stream=stream, name=name)
    return Call("GetWindow", req, convert.window_info_from_proto, retry=True)


def list_windows(stream: str) -> Call[pb.ListWindowsResponse, list[WindowInfo]]:
    def decode(m: pb.ListWindowsResponse) -> list[WindowInfo]:
        return [convert.window_info_from_proto(w) for w in m.windows]

    return Call("ListWindows", pb.ListWindowsRequest(stream=stream), decode, retry=True)


def append_request(
    stream: str,
    rows: Rows,
    schema: Mapping[str, str] | None,
    producer_id: str | None,
    sequence: int | None,
    results: str,
    windows: Sequence[str],
) -> pb.AppendRequest:
    """The AppendRequest of ``rows`` (see :func:`~mtawindows.client.rows.encode_rows`);
    ``results`` is "none", "final" or "per_row" (ValueError otherwise)."""
    mode = RESULTS.get(results.lower())
    if mode is None:
        msg = f"results: expected one of {list(RESULTS)}, got {results!r}"
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


def append(request: pb.AppendRequest) -> Call[pb.AppendResponse, AppendResult]:
    """An Append (built by :func:`append_request`); retried only with an idempotency key
    (``producer_id`` and ``sequence``)."""
    retry = bool(request.producer_id and request.sequence)
    return Call("Append", request, convert.append_result_from_proto, retry=retry)


def query(stream: str, window: str) -> Call[pb.WindowResult, WindowResult]:
    req = pb.QueryRequest(stream=stream, window=window)
    return Call("Query", req, convert.result_from_proto, retry=True)


def read_results(
    stream: str, window: str, after_sequence: int, limit: int
) -> Call[pb.ReadResultsResponse, tuple[list[WindowResult], int]]:
    def decode(m: pb.ReadResultsResponse) -> tuple[list[WindowResult], int]:
        return [convert.result_from_proto(r) for r in m.results], m.latest_sequence

    req = pb.ReadResultsRequest(
        stream=stream, window=window, after_sequence=after_sequence, limit=limit
    )
    return Call("ReadResults", req, decode, retry=True)


def subscribe_request(stream: str, window: str) -> pb.SubscribeRequest:
    """The request of the Subscribe stream (a server stream: sent once, never retried)."""
    return pb.SubscribeRequest(stream=stream, window=window)


def event(m: pb.SubscribeEvent) -> tuple[int, WindowResult]:
    """A Subscribe event as (batch number, result)."""
    return m.batch, convert.result_from_proto(m.result)


def schema_of(info: StreamInfo) -> dict[str, str]:
    """A stream's column types by name, the timestamp field included (how appends type rows)."""
    s = {f.name: str(f.type) for f in info.spec.fields}
    s[info.spec.timestamp_field] = "TIMESTAMP"
    return s


# --------------------------------------------------------------------------- retries, errors


def backoff(attempt: int) -> float:
    """Seconds to wait after failed try ``attempt`` (from 0): 50 ms doubling up to 2 s, times a
    random 0.5 to 1.5."""
    return float(min(2.0, 0.05 * 2**attempt) * (0.5 + random.random()))


class Attempt:
    """One try of a call, as ``with attempt: return send(...)``. A gRPC failure leaves the block
    as the typed exception, unless it is retryable and tries are left: then the block is left
    quietly and the caller waits :attr:`pause` before the next try."""

    def __init__(self, target: str, number: int, last: bool) -> None:
        self.target = target
        self.number = number
        self.last = last

    @property
    def pause(self) -> float:
        return backoff(self.number)

    def __enter__(self) -> Attempt:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> bool:
        if not isinstance(ev, grpc.RpcError):
            return False
        ex = from_rpc_error(ev, self.target)
        if isinstance(ex, RETRYABLE) and not self.last:
            return True
        raise ex from None


def attempts(target: str, tries: int) -> Iterator[Attempt]:
    """The tries of one call to ``target`` (at most ``tries``)."""
    for n in range(tries):
        yield Attempt(target, n, last=n + 1 == tries)


def unreachable() -> AssertionError:
    """What a retry loop raises after its last :class:`Attempt` (which never lets one pass)."""
    return AssertionError("unreachable")


@contextmanager
def typed_errors(target: str) -> Iterator[None]:
    """A gRPC failure inside the block raises as the typed exception naming ``target``."""
    try:
        yield
    except grpc.RpcError as err:
        raise from_rpc_error(err, target) from None


class Cancellable(Protocol):
    def cancel(self) -> bool: ...


@contextmanager
def following(call: Cancellable, target: str) -> Iterator[None]:
    """Around the reading of a subscription: CANCELLED (the client went away) ends it quietly,
    other failures raise typed; the call is cancelled however the reading stops."""
    try:
        yield
    except grpc.RpcError as err:
        if err.code() != grpc.StatusCode.CANCELLED:
            raise from_rpc_error(err, target) from None
    finally:
        call.cancel()


__all__ = [
    "RESULTS",
    "RETRYABLE",
    "Attempt",
    "Call",
    "append",
    "append_request",
    "attempts",
    "backoff",
    "create_stream",
    "create_window",
    "delete_stream",
    "delete_window",
    "event",
    "following",
    "get_stream",
    "get_window",
    "list_streams",
    "list_windows",
    "query",
    "read_results",
    "schema_of",
    "subscribe_request",
    "typed_errors",
    "unreachable",
]
