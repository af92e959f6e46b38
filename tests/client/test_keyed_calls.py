"""The SDK's keyed-stream calls without a real server: how each is described (request, retry,
routing), against a scripted cluster of real gRPC servers on loopback (:class:`KeyedCluster`:
members that answer ``GetClusterMap``, refuse a stream they do not own with ``NOT_OWNER``, and
serve ListKeys, GetKey, DeleteKey, keyed Query and Subscribe over shared state), with the
errors of the contract (``KEY_NOT_FOUND``, ``NOT_KEYED``, ``TOO_MANY_KEYS``) decoded into the
SDK's exception families. The real server's side: ``test_keyed_client.py``."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from mtawindows.client import (
    AsyncWindowClient,
    FailedPreconditionError,
    InvalidArgumentError,
    KeyInfo,
    KeyPage,
    NotFoundError,
    ResourceExhaustedError,
    UnavailableError,
    WindowClient,
    calls,
)
from mtawindows.v1 import windows_pb2 as pb
from mtawindows.v1 import windows_pb2_grpc as pb_grpc
from mtawindows.v1.reasons import DOMAIN, Reason

# --------------------------------------------------------------------------- the descriptions


def test_each_keyed_rpc_is_described_once() -> None:
    reads: list[calls.Call[Any, Any]] = [
        calls.list_keys("s", "p", 2, "tok"),
        calls.get_key("s", "k"),
        calls.query("s", "w", "k"),
    ]
    assert [c.method for c in reads] == ["ListKeys", "GetKey", "Query"]
    assert all(c.retry and c.stream == "s" for c in reads)  # read-only: resent after a failure
    delete = calls.delete_key("s", "k")
    assert (delete.method, delete.retry, delete.stream) == ("DeleteKey", False, "s")
    assert calls.list_keys("s", "p", 2, "tok").request == pb.ListKeysRequest(
        stream="s", prefix="p", limit=2, page_token="tok"
    )
    page = calls.list_keys("s").decode(
        pb.ListKeysResponse(
            keys=[pb.KeyInfo(key="a", group=3, rows_appended=2)], next_page_token="a"
        )
    )
    assert page == KeyPage([KeyInfo("a", group=3, rows_appended=2)], "a")
    info = calls.get_key("s", "k").decode(
        pb.KeyInfo(key="k", results=[pb.WindowResult(window="w", key="k", size=2)])
    )
    assert info.results["w"].key == "k" and info.results["w"].size == 2
    assert calls.delete_key("s", "k").decode(pb.DeleteKeyResponse()) is None
    _, result = calls.event(pb.SubscribeEvent(batch=4, result=pb.WindowResult(key="k")))
    assert result.key == "k"


def test_keys_go_on_the_wire_as_their_text() -> None:
    assert calls.query("s", "w").request.key == ""
    assert calls.query("s", "w", None).request.key == ""
    assert calls.query("s", "w", "web-1").request.key == "web-1"
    assert calls.query("s", "w", -12).request.key == "-12"
    assert calls.get_key("s", 7).request.key == "7"
    assert calls.delete_key("s", 7).request.key == "7"
    assert list(calls.subscribe("s", "w").request.keys) == []
    sub = calls.subscribe("s", "w", ["a", 10, "b"])
    assert (sub.method, sub.stream, list(sub.request.keys)) == ("Subscribe", "s", ["a", "10", "b"])
    assert list(calls.subscribe_request("s", "w", iter([1, 2])).keys) == ["1", "2"]
    for bad in (True, 1.5, b"k"):
        with pytest.raises(TypeError, match="a key is a str or an int"):
            calls.query("s", "w", bad)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            calls.get_key("s", bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"keys: expected a list of keys, got str 'ab'"):
        calls.subscribe("s", "w", "ab")  # would be the keys "a" and "b"


# --------------------------------------------------------------------------- a scripted cluster


def _abort(context: grpc.ServicerContext, code: grpc.StatusCode, reason: str, **md: str) -> None:
    info = error_details_pb2.ErrorInfo(reason=reason, domain=DOMAIN, metadata=md)
    detail = any_pb2.Any()
    detail.Pack(info)
    status = status_pb2.Status(code=code.value[0], message=f"scripted {reason}", details=[detail])
    context.abort_with_status(rpc_status.to_status(status))


KEYS = ("web-3", "db-1", "web-10", "cache-2", "api-7")  # created in this order
SORTED = sorted(KEYS)


class KeyedMember(pb_grpc.WindowServiceServicer):
    """One member of a :class:`KeyedCluster`: a real gRPC server on a loopback port."""

    def __init__(self, cluster: KeyedCluster) -> None:
        self.cluster = cluster
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        pb_grpc.add_WindowServiceServicer_to_server(self, self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.address = f"127.0.0.1:{self.port}"
        self.server.start()

    def _check(
        self, method: str, stream: str, request: Any, context: grpc.ServicerContext
    ) -> dict[str, int]:
        """The keys of ``stream`` (its owner's answer), or the refusal of the call here."""
        c = self.cluster
        with c.lock:
            c.seen.append((self.address, method, request))
            scripted = next((f for f in c.failures if f[0] == method), None)
            if scripted is not None:
                c.failures.remove(scripted)
        if c.owner != self.address:
            _abort(context, grpc.StatusCode.FAILED_PRECONDITION, Reason.NOT_OWNER,
                   stream=stream, owner=c.owner, owner_id=c.owner, token="7")  # fmt: skip
        if scripted is not None:
            _abort(context, scripted[1], scripted[2], stream=stream)
        if stream not in c.streams:
            _abort(context, grpc.StatusCode.NOT_FOUND, Reason.STREAM_NOT_FOUND, stream=stream)
        keys = c.streams[stream]
        keyed_call = method in ("ListKeys", "GetKey", "DeleteKey")
        if keys is None and (keyed_call or getattr(request, "key", "")):
            code = grpc.StatusCode.INVALID_ARGUMENT if method == "Query" else None
            _abort(context, code or grpc.StatusCode.FAILED_PRECONDITION, Reason.NOT_KEYED,
                   stream=stream)  # fmt: skip
        if keys is not None and method == "Query" and not request.key:
            _abort(context, grpc.StatusCode.FAILED_PRECONDITION, Reason.NOT_KEYED, stream=stream)
        key = getattr(request, "key", "")
        if keys is not None and key and key not in keys:
            _abort(context, grpc.StatusCode.NOT_FOUND, Reason.KEY_NOT_FOUND,
                   stream=stream, key=key)  # fmt: skip
        return keys or {}

    def GetClusterMap(self, request: Any, context: grpc.ServicerContext) -> pb.ClusterMap:
        c = self.cluster
        members = [pb.ClusterMember(id=m.address, address=m.address, incarnation="i1")
                   for m in c.members]  # fmt: skip
        owners = [pb.StreamOwner(stream=s, member=c.owner, address=c.owner, token=7)
                  for s in request.streams]  # fmt: skip
        return pb.ClusterMap(
            members=members, owners=owners, lease_ms=2000, view_age_ms=10, **{"self": self.address}
        )

    def ListKeys(self, request: Any, context: grpc.ServicerContext) -> pb.ListKeysResponse:
        keys = self._check("ListKeys", request.stream, request, context)
        limit = request.limit or 1000
        names = [k for k in sorted(keys) if k.startswith(request.prefix) and k > request.page_token]
        page = names[:limit]
        more = len(names) > limit
        return pb.ListKeysResponse(
            keys=[pb.KeyInfo(key=k, rows_appended=keys[k]) for k in page],
            next_page_token=page[-1] if more else "",
        )

    def GetKey(self, request: Any, context: grpc.ServicerContext) -> pb.KeyInfo:
        keys = self._check("GetKey", request.stream, request, context)
        n = keys[request.key]
        results = [pb.WindowResult(window="w", key=request.key, size=n)]
        return pb.KeyInfo(key=request.key, rows_appended=n, results=results)

    def DeleteKey(self, request: Any, context: grpc.ServicerContext) -> pb.DeleteKeyResponse:
        keys = self._check("DeleteKey", request.stream, request, context)
        with self.cluster.lock:
            del keys[request.key]
        return pb.DeleteKeyResponse()

    def Query(self, request: Any, context: grpc.ServicerContext) -> pb.WindowResult:
        keys = self._check("Query", request.stream, request, context)
        return pb.WindowResult(
            window=request.window, key=request.key, size=keys.get(request.key, 9)
        )

    def Subscribe(self, request: Any, context: grpc.ServicerContext) -> Iterator[pb.SubscribeEvent]:
        keys = self._check("Subscribe", request.stream, request, context)
        context.send_initial_metadata((("mtawindows-subscribed", "1"),))
        for i, k in enumerate(k for k in KEYS if not request.keys or k in request.keys):
            result = pb.WindowResult(window=request.window, key=k, size=keys[k])
            yield pb.SubscribeEvent(batch=i + 1, result=result)


class KeyedCluster:
    """``n`` :class:`KeyedMember` s: every stream is owned by the last one (``owner``); the
    keyed stream ``hosts`` (keys :data:`KEYS`, key -> rows), the unkeyed ``plain``; ``failures``:
    (method, code, reason) that the next such call fails with, once each; ``seen``: (address,
    method, request) of every call about a stream."""

    def __init__(self, n: int) -> None:
        self.lock = threading.RLock()
        self.streams: dict[str, dict[str, int] | None] = {
            "hosts": {k: i + 1 for i, k in enumerate(KEYS)},
            "plain": None,
        }
        self.failures: list[tuple[str, grpc.StatusCode, str]] = []
        self.seen: list[tuple[str, str, Any]] = []
        self.members = [KeyedMember(self) for _ in range(n)]
        self.owner = self.members[-1].address
        self.seed = self.members[0].address

    def served(self, method: str) -> list[Any]:
        """The requests of ``method`` the owner took."""
        with self.lock:
            return [r for a, m, r in self.seen if m == method and a == self.owner]

    def tries(self, method: str) -> int:
        with self.lock:
            return sum(1 for _, m, _ in self.seen if m == method)

    def stop(self) -> None:
        for m in self.members:
            m.server.stop(None)


@pytest.fixture
def cluster() -> Iterator[KeyedCluster]:
    c = KeyedCluster(2)
    yield c
    c.stop()


@pytest.fixture(autouse=True)
def _short_pauses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(calls, "backoff", lambda attempt: 0.001)


# --------------------------------------------------------------------------- the clients


def test_keyed_calls_go_to_the_streams_owner(cluster: KeyedCluster) -> None:
    """Seeded with a member that does not own the stream, the client lands every keyed call
    on the owner (the map, or a NOT_OWNER redirect), with the key's text."""
    with WindowClient(cluster.seed, timeout=10) as c:
        assert c.query("hosts", "w", key="db-1").key == "db-1"
        assert c.get_key("hosts", "api-7").rows_appended == 5
        assert [k.key for k in c.list_keys("hosts").keys] == SORTED
        c.delete_key("hosts", "cache-2")
    assert [r.key for r in cluster.served("Query")] == ["db-1"]
    assert [r.key for r in cluster.served("GetKey")] == ["api-7"]
    assert [r.stream for r in cluster.served("ListKeys")] == ["hosts"]
    assert [r.key for r in cluster.served("DeleteKey")] == ["cache-2"]
    assert "cache-2" not in (cluster.streams["hosts"] or {})


def test_list_keys_pages_and_iter_keys_reads_every_page(cluster: KeyedCluster) -> None:
    with WindowClient(cluster.seed, timeout=10) as c:
        first = c.list_keys("hosts", limit=2)
        assert isinstance(first, KeyPage)
        assert [k.key for k in first.keys] == SORTED[:2]
        assert first.next_page_token
        second = c.list_keys("hosts", limit=2, page_token=first.next_page_token)
        assert [k.key for k in second.keys] == SORTED[2:4]
        assert [k.rows_appended for k in second.keys] == [KEYS.index(k) + 1 for k in SORTED[2:4]]
        assert c.list_keys("hosts", prefix="web-").keys[1].key == "web-3"

        cluster.seen.clear()
        got = c.iter_keys("hosts", page_size=2)
        assert next(got).key == SORTED[0]
        assert len(cluster.served("ListKeys")) == 1  # a page is asked for when it is read
        assert [k.key for k in got] == SORTED[1:]
        pages = cluster.served("ListKeys")
        assert [(r.limit, r.page_token) for r in pages] == [
            (2, ""),
            (2, SORTED[1]),
            (2, SORTED[3]),
        ]
        assert [k.key for k in c.iter_keys("hosts", prefix="web-", page_size=1)] == [
            "web-10",
            "web-3",
        ]
        assert list(c.iter_keys("hosts", prefix="zzz")) == []


def test_reads_are_resent_after_a_failure_and_delete_key_is_not(cluster: KeyedCluster) -> None:
    unavailable = grpc.StatusCode.UNAVAILABLE
    with WindowClient(cluster.seed, timeout=10) as c:
        c.owner("hosts")  # the owner known: no redirect counted below
        for method in ("ListKeys", "GetKey"):
            cluster.failures.append((method, unavailable, Reason.STORE_UNAVAILABLE))
        assert len(c.list_keys("hosts").keys) == len(KEYS)
        assert c.get_key("hosts", "db-1").key == "db-1"
        assert (cluster.tries("ListKeys"), cluster.tries("GetKey")) == (2, 2)

        cluster.failures.append(("DeleteKey", unavailable, Reason.STORE_UNAVAILABLE))
        with pytest.raises(UnavailableError) as info:
            c.delete_key("hosts", "db-1")
        assert info.value.reason == Reason.STORE_UNAVAILABLE
        assert cluster.tries("DeleteKey") == 1  # not idempotent: one try
        assert "db-1" in (cluster.streams["hosts"] or {})


def test_keyed_refusals_decode_into_the_sdks_families(cluster: KeyedCluster) -> None:
    """KEY_NOT_FOUND a NotFoundError (as STREAM_NOT_FOUND), NOT_KEYED a
    FailedPreconditionError (an InvalidArgumentError for a key given to an unkeyed stream),
    TOO_MANY_KEYS a ResourceExhaustedError; none resent."""
    with WindowClient(cluster.seed, timeout=10) as c:
        for call in (
            lambda: c.get_key("hosts", "nope"),
            lambda: c.delete_key("hosts", "nope"),
            lambda: c.query("hosts", "w", key="nope"),
        ):
            with pytest.raises(NotFoundError) as missing:
                call()
            assert (missing.value.code, missing.value.reason) == ("NOT_FOUND", "KEY_NOT_FOUND")
            assert missing.value.metadata == {"stream": "hosts", "key": "nope"}
            assert missing.value.target == cluster.owner
        with pytest.raises(NotFoundError) as gone:
            c.list_keys("nope")
        assert gone.value.reason == Reason.STREAM_NOT_FOUND

        for call in (
            lambda: c.list_keys("plain"),
            lambda: c.get_key("plain", "a"),
            lambda: c.query("hosts", "w"),
        ):
            with pytest.raises(FailedPreconditionError) as unkeyed:
                call()
            assert unkeyed.value.reason == Reason.NOT_KEYED
        with pytest.raises(InvalidArgumentError) as keyed:
            c.query("plain", "w", key="a")
        assert keyed.value.reason == Reason.NOT_KEYED

        cluster.seen.clear()
        cluster.failures.append(
            ("ListKeys", grpc.StatusCode.RESOURCE_EXHAUSTED, Reason.TOO_MANY_KEYS)
        )
        with pytest.raises(ResourceExhaustedError) as full:
            c.list_keys("hosts")
        assert full.value.reason == Reason.TOO_MANY_KEYS
        assert cluster.tries("ListKeys") == 1


def test_subscribe_asks_for_its_keys_and_each_result_names_its_key(cluster: KeyedCluster) -> None:
    with WindowClient(cluster.seed, timeout=10) as c:
        got = [r.key for _, r in c.subscribe("hosts", "w", keys=["db-1", "api-7"], timeout=10)]
        assert got == ["db-1", "api-7"]
        every = [(b, r.key, r.size) for b, r in c.subscribe("hosts", "w", timeout=10)]
        assert every == [(i + 1, k, i + 1) for i, k in enumerate(KEYS)]
    asked = cluster.served("Subscribe")
    assert [list(r.keys) for r in asked] == [["db-1", "api-7"], []]


def test_the_async_client_makes_the_same_calls(cluster: KeyedCluster) -> None:
    async def go() -> None:
        async with AsyncWindowClient(cluster.seed, timeout=10) as c:
            assert (await c.query("hosts", "w", key="db-1")).key == "db-1"
            assert (await c.get_key("hosts", "web-3")).rows_appended == 1
            page = await c.list_keys("hosts", limit=2)
            assert [k.key for k in page.keys] == SORTED[:2] and page.next_page_token
            assert [k.key async for k in c.iter_keys("hosts", page_size=2)] == SORTED
            events = await c.subscribe("hosts", "w", keys=["web-10"], timeout=10)
            assert [r.key async for _, r in events] == ["web-10"]
            await c.delete_key("hosts", "web-3")
            with pytest.raises(NotFoundError) as info:
                await c.get_key("hosts", "web-3")
            assert info.value.reason == Reason.KEY_NOT_FOUND
            with pytest.raises(FailedPreconditionError):
                await c.list_keys("plain")
            cluster.failures.append(
                ("DeleteKey", grpc.StatusCode.UNAVAILABLE, Reason.STORE_UNAVAILABLE)
            )
            with pytest.raises(UnavailableError):
                await c.delete_key("hosts", "db-1")

    asyncio.run(go())
    pages = [r.page_token for r in cluster.served("ListKeys") if r.stream == "hosts"]
    assert pages == ["", "", SORTED[1], SORTED[3]]
    assert cluster.tries("DeleteKey") == 2  # web-3 once, db-1 once (not resent)
