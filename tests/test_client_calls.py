"""The SDK's request layer (no server needed): one description per RPC, and the one retry
policy both clients follow (retryable codes, tries, typed errors naming the target)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
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
from mtawindows.client.sdk import append_request
from mtawindows.v1 import windows_pb2 as pb

TARGET = "127.0.0.1:1"


class FakeRpcError(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode) -> None:
        self._code = code

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return f"fake {self._code.name}"


class FakeStub:
    """Fails with ``failures`` (one per try, in order), then answers ``reply``."""

    def __init__(self, failures: list[grpc.StatusCode], reply: Any, *, aio: bool = False) -> None:
        self.failures = list(failures)
        self.reply = reply
        self.aio = aio
        self.sent: list[tuple[str, Any, float, Any]] = []

    def __getattr__(self, method: str) -> Callable[..., Any]:
        def send(request: Any, *, timeout: float, metadata: Any) -> Any:
            self.sent.append((method, request, timeout, metadata))
            if self.failures:
                raise FakeRpcError(self.failures.pop(0))
            return self.reply

        async def asend(request: Any, *, timeout: float, metadata: Any) -> Any:
            return send(request, timeout=timeout, metadata=metadata)

        return asend if self.aio else send


@pytest.fixture(autouse=True)
def _no_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(calls, "backoff", lambda attempt: 0.0)


def test_each_rpc_is_described_once() -> None:
    reads = [
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


def test_blocking_client_retries_only_what_may_be_retried() -> None:
    with WindowClient(TARGET, timeout=7, retries=3, token="t0k") as c:
        c.stub = FakeStub(
            [grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED],
            pb.ListStreamsResponse(),
        )
        assert c.list_streams() == []
        assert len(c.stub.sent) == 3
        assert c.stub.sent[0][2:] == (7, (("authorization", "Bearer t0k"),))

        c.stub = FakeStub([grpc.StatusCode.UNAVAILABLE] * 3, pb.ListStreamsResponse())
        with pytest.raises(UnavailableError) as info:
            c.list_streams(timeout=2)
        assert info.value.target == TARGET and len(c.stub.sent) == 3
        assert c.stub.sent[0][2] == 2

        c.stub = FakeStub([grpc.StatusCode.UNAVAILABLE], pb.DeleteStreamResponse())
        with pytest.raises(UnavailableError):
            c.delete_stream("s")  # not idempotent: one try
        assert len(c.stub.sent) == 1

        c.stub = FakeStub([grpc.StatusCode.INVALID_ARGUMENT], pb.ListStreamsResponse())
        with pytest.raises(InvalidArgumentError):
            c.list_streams()
        assert len(c.stub.sent) == 1


def test_async_client_follows_the_same_policy() -> None:
    async def go() -> None:
        async with AsyncWindowClient(TARGET, timeout=5, retries=2) as c:
            c.stub = FakeStub([grpc.StatusCode.UNAVAILABLE], pb.ListStreamsResponse(), aio=True)
            assert await c.list_streams() == []
            assert len(c.stub.sent) == 2
            c.stub = FakeStub([grpc.StatusCode.DEADLINE_EXCEEDED] * 2, None, aio=True)
            with pytest.raises(DeadlineExceededError) as info:
                await c.query("s", "w")
            assert info.value.target == TARGET and len(c.stub.sent) == 2

    asyncio.run(go())


def test_bad_token_opens_no_channel() -> None:
    with pytest.raises(ValueError, match="token: expected a bearer token"):
        WindowClient(TARGET, token="has space")
