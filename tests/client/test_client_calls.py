"""The SDK's request layer: one description per RPC, and the one retry policy both clients
follow (retryable codes, tries, deadlines, typed errors naming the target), against a real gRPC
server on loopback that fails on script."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any

import grpc
import pyarrow as pa
import pytest

from mtawindows.client import (
    AsyncWindowClient,
    DeadlineExceededError,
    InvalidArgumentError,
    UnavailableError,
    WindowClient,
    calls,
)
from mtawindows.client.calls import append_request
from mtawindows.v1 import windows_pb2 as pb

TARGET = "127.0.0.1:1"


class ScriptedServer:
    """A real gRPC server on a loopback port that answers every WindowService method from a
    script: the next status codes to fail with (one per call, in order), then ``reply``. It
    records each call's method, deadline and metadata. It has no GetClusterMap (UNIMPLEMENTED,
    as an older server): the clients take it for a cluster of one."""

    def __init__(self) -> None:
        self.failures: list[grpc.StatusCode] = []
        self.reply: Any = None
        self.sent: list[tuple[str, float | None, dict[str, str]]] = []
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        service = pb.DESCRIPTOR.services_by_name["WindowService"]
        handlers = {
            m.name: grpc.unary_unary_rpc_method_handler(
                self._answer(m.name),
                request_deserializer=lambda b: b,
                response_serializer=lambda msg: msg.SerializeToString(),
            )
            for m in service.methods
            if not m.server_streaming and m.name != "GetClusterMap"
        }
        self.server.add_generic_rpc_handlers(
            [grpc.method_handlers_generic_handler(service.full_name, handlers)]
        )
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.target = f"127.0.0.1:{self.port}"
        self.server.start()

    def script(self, failures: list[grpc.StatusCode], reply: Any) -> None:
        self.failures, self.reply, self.sent = list(failures), reply, []

    def _answer(self, method: str) -> Callable[[bytes, grpc.ServicerContext], Any]:
        def answer(request: bytes, context: grpc.ServicerContext) -> Any:
            self.sent.append(
                (method, context.time_remaining(), dict(context.invocation_metadata()))
            )
            if self.failures:
                code = self.failures.pop(0)
                context.abort(code, f"scripted {code.name}")
            return self.reply

        return answer


@pytest.fixture(scope="module")
def scripted() -> Iterator[ScriptedServer]:
    s = ScriptedServer()
    yield s
    s.server.stop(None)


@pytest.fixture(autouse=True)
def _no_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(calls, "backoff", lambda attempt: 0.0)


def test_each_rpc_is_described_once() -> None:
    reads: list[calls.Call[Any, Any]] = [
        calls.list_streams(),
        calls.get_stream("s"),
        calls.get_window("s", "w"),
        calls.list_windows("s"),
        calls.query("s", "w"),
        calls.read_results("s", "w", 3, 10),
    ]
    assert all(c.retry for c in reads)
    assert [c.method for c in reads] == [
        "ListStreams",
        "GetStream",
        "GetWindow",
        "ListWindows",
        "Query",
        "ReadResults",
    ]
    assert not calls.delete_stream("s").retry and not calls.delete_window("s", "w").retry
    rows = {"ts": [1, 2], "x": [1.0, 2.0]}
    keyed = calls.append(append_request("s", rows, None, "p", 7, "final", ["w"]))
    assert keyed.retry and keyed.method == "Append"
    assert (keyed.request.producer_id, keyed.request.sequence) == ("p", 7)
    assert not calls.append(append_request("s", rows, None, None, None, "none", ())).retry
    got, latest = calls.read_results("s", "w", 0, 0).decode(
        pb.ReadResultsResponse(latest_sequence=9)
    )
    assert (got, latest) == ([], 9)


def test_append_request_encodes_every_row_shape() -> None:
    by_columns = append_request(
        "s", {"ts": [1, 2], "x": [1, 2]}, {"x": "DOUBLE"}, None, None, "none", ()
    )
    by_rows = append_request(
        "s", [{"ts": 1, "x": 1}, {"ts": 2, "x": 2}], {"x": "DOUBLE"}, None, None, "none", ()
    )
    assert by_columns == by_rows
    assert [c.name for c in by_columns.columns] == ["ts", "x"]
    arrow = append_request("s", pa.table({"ts": [1], "x": [1.0]}), None, None, None, "per_row", ())
    assert arrow.arrow_ipc and not arrow.columns and arrow.results == pb.PER_ROW
    with pytest.raises(ValueError, match="results: expected one of"):
        append_request("s", {"ts": [1]}, None, None, None, "all", ())


def test_blocking_client_retries_only_what_may_be_retried(scripted: ScriptedServer) -> None:
    target = scripted.target
    with WindowClient(target, timeout=7, retries=3, token="t0k") as c:
        scripted.script(
            [grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED],
            pb.ListStreamsResponse(),
        )
        assert c.list_streams() == []
        assert [m for m, _, _ in scripted.sent] == ["ListStreams"] * 3
        _, remaining, metadata = scripted.sent[0]
        assert remaining is not None and 5 < remaining < 7.5  # the client's 7 s deadline
        assert metadata["authorization"] == "Bearer t0k"

        scripted.script([grpc.StatusCode.UNAVAILABLE] * 3, pb.ListStreamsResponse())
        with pytest.raises(UnavailableError) as info:
            c.list_streams(timeout=2)
        assert info.value.target == target and len(scripted.sent) == 3
        assert scripted.sent[0][1] is not None and 1 < scripted.sent[0][1] < 2.5

        scripted.script([grpc.StatusCode.UNAVAILABLE], pb.DeleteStreamResponse())
        with pytest.raises(UnavailableError):
            c.delete_stream("s")  # not idempotent: one try
        assert len(scripted.sent) == 1

        scripted.script([grpc.StatusCode.INVALID_ARGUMENT], pb.ListStreamsResponse())
        with pytest.raises(InvalidArgumentError):
            c.list_streams()
        assert len(scripted.sent) == 1


def test_async_client_follows_the_same_policy(scripted: ScriptedServer) -> None:
    async def go() -> None:
        async with AsyncWindowClient(scripted.target, timeout=5, retries=2) as c:
            scripted.script([grpc.StatusCode.UNAVAILABLE], pb.ListStreamsResponse())
            assert await c.list_streams() == []
            assert len(scripted.sent) == 2
            scripted.script([grpc.StatusCode.DEADLINE_EXCEEDED] * 2, pb.WindowResult())
            with pytest.raises(DeadlineExceededError) as info:
                await c.query("s", "w")
            assert info.value.target == scripted.target and len(scripted.sent) == 2

    asyncio.run(go())


def test_bad_token_opens_no_channel() -> None:
    with pytest.raises(ValueError, match="token: expected a bearer token"):
        WindowClient(TARGET, token="has space")


def test_a_value_that_does_not_fit_its_column_is_named_before_any_call() -> None:
    schema = {"x": "DOUBLE", "n": "INT64"}
    for rows, where in (
        (
            {"ts": [1, 2], "x": [1.0, "abc"], "n": [1, 2]},
            "column 'x': expected DOUBLE values, got str 'abc' at row 1",
        ),
        ([{"ts": 1, "x": 1.0, "n": 2**70}], "column 'n': expected INT64 values, got int"),
    ):
        with pytest.raises(TypeError) as info:
            append_request("s", rows, schema, None, None, "none", ())
        assert where in str(info.value)
