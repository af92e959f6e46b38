"""Subscribers that do not keep up (issue 13): each has a queue bounded in serialized bytes and
all of them share a server-wide budget; past either, a subscriber is cut with
RESOURCE_EXHAUSTED / SUBSCRIBER_TOO_SLOW, its memory and its slot come back at once, and
appends and the other subscribers never wait for it."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from mtawindows.client import (
    Aggregation,
    Field,
    MtaWindowsError,
    NotFoundError,
    Policy,
    ResourceExhaustedError,
    StreamSpec,
    UnavailableError,
    WindowClient,
    WindowSpec,
)
from mtawindows.client.errors import from_rpc_error
from mtawindows.server.service import Stream
from mtawindows.server.service.fanout import Fanout
from mtawindows.testing import LocalServer
from mtawindows.v1 import windows_pb2 as pb
from mtawindows.v1 import windows_pb2_grpc as pb_grpc

pytestmark = [pytest.mark.server, pytest.mark.redis]

KIB = 1024
# count, sum and the last row's text: a result is about as large as the text appended
AGGS = (Aggregation("n", "count"), Aggregation("s", "sum", "x"), Aggregation("t", "last", "tag"))
FIELDS = (Field("x", "DOUBLE"), Field("tag", "STRING"))
_ts = itertools.count(1)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")  # pragma: no cover


def rss_falls_below(pid: int, limit: float, within: float = 30.0) -> float:
    """The process's RSS once it is under ``limit`` MB, or the last one read after ``within``
    seconds: memory goes back to the system on the server's own schedule (a cancellation
    reaches it on another connection; the heap is trimmed on a helper thread)."""
    deadline = time.monotonic() + within
    while (rss := rss_mb(pid)) >= limit and time.monotonic() < deadline:
        time.sleep(0.1)
    return rss


def row(size: int) -> dict[str, list[Any]]:
    return {"ts": [next(_ts)], "x": [1.0], "tag": ["t" * size]}


class Stalled:
    """A Subscribe call that never reads, on its own connection with a fixed 64 KiB HTTP/2
    window (no BDP growth), so that it stalls after a few results; ``drain`` reads it later."""

    def __init__(self, target: str, stream: str, window: str) -> None:
        self.channel = grpc.insecure_channel(target, options=[("grpc.http2.bdp_probe", 0)])
        stub = pb_grpc.WindowServiceStub(self.channel)
        self.call = stub.Subscribe(pb.SubscribeRequest(stream=stream, window=window), timeout=90)
        self.call.initial_metadata()  # the server has registered it

    def drain(self) -> tuple[list[int], MtaWindowsError | None]:
        """Batches of the results it got, and how it ended (None: it did not)."""
        batches: list[int] = []
        try:
            batches.extend(ev.batch for ev in self.call)
        except grpc.RpcError as err:
            return batches, from_rpc_error(err)
        finally:
            self.channel.close()
        return batches, None

    def cancel(self) -> None:
        self.call.cancel()
        self.channel.close()


class Reader:
    """A subscriber that reads every result, on a thread, until it has ``n``."""

    def __init__(self, client: WindowClient, stream: str, window: str, n: int) -> None:
        self.batches: list[int] = []
        self.error: Exception | None = None
        self.it = client.subscribe(stream, window, timeout=90)
        self.thread = threading.Thread(target=self._run, args=(n,))
        self.thread.start()

    def _run(self, n: int) -> None:
        try:
            for batch, _ in self.it:
                self.batches.append(batch)
                if len(self.batches) == n:
                    return
        except Exception as ex:  # pragma: no cover - asserted by the test
            self.error = ex

    def join(self) -> list[int]:
        self.thread.join(90)
        assert not self.thread.is_alive() and self.error is None, self.error
        self.it.close()  # type: ignore[attr-defined]
        return self.batches


def make(
    client: WindowClient, stream: str, windows: tuple[str, ...] = ("w",), rows: int = 1000
) -> None:
    client.create_stream(StreamSpec(stream, FIELDS, wall_clock=False))
    for w in windows:
        client.create_window(WindowSpec(stream, w, AGGS, Policy.count(rows)))


def assert_too_slow(err: MtaWindowsError | None, limit: int, which: str) -> None:
    assert isinstance(err, ResourceExhaustedError), err
    assert err.reason == "SUBSCRIBER_TOO_SLOW"
    assert (err.metadata["limit"], err.metadata["limit_name"]) == (str(limit), which)
    assert int(err.metadata["queued_results"]) >= 1


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    args = ("--subscriber-queue-mb", str(64 / 1024), "--max-subscribers", "50")
    with LocalServer(tmp_path_factory.mktemp("subscribers"), *args) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server: LocalServer) -> Iterator[WindowClient]:
    with WindowClient(server.target, timeout=90) as c:
        yield c


# --------------------------------------------------------------------------- per subscriber


def test_over_the_limit_of_subscriptions_is_refused(  # first: no other subscriber lives
    server: LocalServer, client: WindowClient
) -> None:
    make(client, "c")
    held = [client.subscribe("c", "w", timeout=60) for _ in range(50)]
    try:
        with pytest.raises(ResourceExhaustedError) as info:
            next(client.subscribe("c", "w", timeout=60))  # refusals come with the first read
        assert info.value.reason == "TOO_MANY_SUBSCRIBERS"
        assert info.value.metadata["limit"] == "50"
    finally:
        for it in held:
            it.close()  # type: ignore[attr-defined]


def test_a_subscriber_that_never_reads_is_cut_while_a_reader_and_appends_go_on(
    server: LocalServer, client: WindowClient
) -> None:
    make(client, "a")
    n = 200  # 4 KiB results: 800 KiB, a dozen times what the stalled one may hold
    stalled = Stalled(server.target, "a", "w")
    reader = Reader(client, "a", "w", n)
    for _ in range(n):  # every append returns while one subscriber of the window stalls
        assert client.append("a", row(4 * KIB)).rows_applied == 1
    assert reader.join() == list(range(1, n + 1))  # the reader missed nothing
    got, err = stalled.drain()
    assert_too_slow(err, 64 * KIB, "subscriber_queue_bytes")
    assert err is not None and int(err.metadata["queued_bytes"]) > 48 * KIB  # about the limit
    assert got == list(range(1, len(got) + 1)) and len(got) < n  # in order, then cut
    assert server.health() == "SERVING"
    assert client.query("a", "w").values["n"] == n


def test_cut_subscribers_free_their_slots_and_appends_never_wait_for_them(
    server: LocalServer, client: WindowClient
) -> None:
    make(client, "b")
    stalled = [Stalled(server.target, "b", "w") for _ in range(40)]  # of 50 slots
    try:
        for _ in range(150):  # each returns while all 40 subscribers stall
            assert client.append("b", row(4 * KIB)).rows_applied == 1
        # the cut ones gave their slots back: 45 more fit under the limit of 50
        readers = [client.subscribe("b", "w", timeout=60) for _ in range(45)]
        client.append("b", row(16))
        for it in readers:
            batch, result = next(it)
            assert (batch, result.values["n"]) == (151, 151)
            it.close()  # type: ignore[attr-defined]
    finally:
        ends = [s.drain() for s in stalled]
    for got, err in ends:
        assert_too_slow(err, 64 * KIB, "subscriber_queue_bytes")
        assert got == list(range(1, len(got) + 1))


def test_deleting_a_window_or_stream_ends_its_subscriptions_at_once(
    server: LocalServer, client: WindowClient
) -> None:
    make(client, "d", ("w", "v"))
    client.append("d", row(16))
    on_w = client.subscribe("d", "w", timeout=60)
    on_v = client.subscribe("d", "v", timeout=60)
    client.delete_window("d", "w")  # no batch follows: the subscriber learns it anyway
    with pytest.raises(NotFoundError) as info:
        next(on_w)
    assert info.value.reason == "WINDOW_NOT_FOUND"
    client.delete_stream("d")
    with pytest.raises(NotFoundError) as info:
        next(on_v)
    assert info.value.reason == "WINDOW_NOT_FOUND"
    assert server.health() == "SERVING"


# --------------------------------------------------------------------------- server-wide


def test_past_the_servers_budget_the_subscribers_furthest_behind_are_cut(
    tmp_path: Path,
) -> None:
    args = ("--subscriber-queue-mb", "1", "--subscribers-memory-mb", str(128 / 1024))
    with LocalServer(tmp_path, *args) as srv, WindowClient(srv.target, timeout=90) as c:
        make(c, "s")
        n = 200
        stalled = [Stalled(srv.target, "s", "w") for _ in range(4)]  # 4 x 1 MiB > 128 KiB
        reader = Reader(c, "s", "w", n)
        for _ in range(n):
            assert c.append("s", row(4 * KIB)).rows_applied == 1
        assert reader.join() == list(range(1, n + 1))
        for s in stalled:
            got, err = s.drain()
            assert_too_slow(err, 128 * KIB, "subscribers_total_bytes")
            assert got == list(range(1, len(got) + 1)) and len(got) < n
        assert srv.health() == "SERVING"


def test_memory_of_stalled_subscribers_comes_back_when_cut_or_cancelled(tmp_path: Path) -> None:
    """Six stalled subscribers of six windows (no result shared) with 64 KiB results: the
    server holds their queues, then gives the memory back when they are cut, and again when
    six others are cancelled."""
    # windows of one row and one result kept: what grows is what the subscribers hold
    args = ("--subscriber-queue-mb", "8", "--subscribers-memory-mb", "512")
    args += ("--result-history", "1")
    windows = tuple(f"w{i}" for i in range(6))
    with LocalServer(tmp_path, *args) as srv, WindowClient(srv.target, timeout=90) as c:
        pid = srv.pid
        make(c, "m", windows, rows=1)
        for _ in range(5):
            c.append("m", row(64 * KIB))

        def fill(count: int) -> None:
            for _ in range(count):
                assert c.append("m", row(64 * KIB)).rows_applied == 1

        # cut: about 100 results of 64 KiB queued for each, then past 8 MiB
        rss0 = rss_mb(pid)
        stalled = [Stalled(srv.target, "m", w) for w in windows]
        fill(100)
        held = rss_mb(pid) - rss0
        assert held > 25  # 6 x ~6 MiB queued: the measure below can see a release
        fill(60)  # each queue passes 8 MiB: all six are cut
        released = rss_falls_below(pid, rss0 + held / 3) - rss0
        assert released < held / 3, (held, released)
        for s in stalled:
            assert_too_slow(s.drain()[1], 8 * 1024 * KIB, "subscriber_queue_bytes")

        # cancelled: the same, ended by the clients
        rss0 = rss_mb(pid)
        stalled = [Stalled(srv.target, "m", w) for w in windows]
        fill(100)
        held = rss_mb(pid) - rss0
        assert held > 25
        for s in stalled:
            s.cancel()
        released = rss_falls_below(pid, rss0 + held / 3) - rss0
        assert released < held / 3, (held, released)
        assert srv.health() == "SERVING"


# --------------------------------------------------------------------------- in process


def test_queue_accounting_holds_under_random_traffic() -> None:
    """The fan-out alone, on a real Stream: through random batches, reads, new subscribers,
    cancellations and cuts, each batch is serialized once per window, and the totals match
    the queues and stay within the limits."""

    async def run() -> None:
        rng = random.Random(7)
        stream = Stream(StreamSpec("r", FIELDS, wall_clock=False))
        fan = Fanout(queue_bytes=2000, total_bytes=5000)

        encoded = [0]

        def encode(window: int) -> Any:
            def serialize(batch: int, result: Any) -> bytes:
                encoded[0] += 1
                return bytes(100 + 60 * window)

            return serialize

        def held_exactly() -> dict[str, int]:
            feeds = list(fan.feeds.values())
            return {w: max(s.queued for s in ws) for f in feeds for w, ws in f.windows.items()}

        subs = []
        for batch in range(1, 400):
            if rng.random() < 0.3:  # a new subscriber of one of four windows
                w = rng.randrange(4)
                subs.append(fan.subscribe(stream, f"w{w}", encode(w)))
            results = {f"w{k}": object() for k in range(4)}
            encoded[0], windows = 0, sum(len(f.windows) for f in fan.feeds.values())
            for listener in list(stream.listeners):
                listener(batch, results)
            # one serialization per window with subscribers, however many they are
            assert encoded[0] == windows <= 4
            # right after a batch: what is held is exact, and within the server's limit
            assert {w: h for f in fan.feeds.values() for w, h in f.held.items()} == held_exactly()
            assert fan.held <= fan.total_bytes
            for s in subs:
                if s.ended is None and rng.random() < 0.4:
                    s.pop()
            if rng.random() < 0.05 and subs:
                fan.unsubscribe(rng.choice(subs))
            live = [s for s in subs if s.ended is None]
            assert fan.count == len(live)
            assert fan.queued == sum(s.queued for s in live)
            assert fan.held == sum(h for f in fan.feeds.values() for h in f.held.values())
            for w, top in held_exactly().items():  # reads since only lower the longest
                assert next(f for f in fan.feeds.values() if w in f.held).held[w] >= top
            for s in subs:
                assert s.queued == sum(map(len, s.queue)) <= fan.queue_bytes
                assert s.ended is None or (not s.queue and s.queued == 0)
        ends = [s.ended.metadata.get("limit_name") for s in subs if s.ended is not None]
        assert {"subscriber_queue_bytes", "subscribers_total_bytes"} <= set(ends)
        for s in subs:
            fan.unsubscribe(s)
        assert (fan.queued, fan.held, fan.count, fan.feeds, stream.listeners) == (0, 0, 0, {}, [])

    asyncio.run(run())


def test_a_graceful_stop_ends_subscriptions_instead_of_waiting_for_them(tmp_path: Path) -> None:
    """Subscribe never ends by itself: a SIGTERM used to wait the whole grace period for it.
    Now every subscriber gets UNAVAILABLE (SERVER_STOPPING) and the server exits promptly."""
    srv = LocalServer(tmp_path / "stop", "--grace", "120").start()
    try:
        with WindowClient(srv.target, timeout=60) as c:
            make(c, "g")
            c.append("g", row(8))
            sub = c.subscribe("g", "w", timeout=300)
            t0 = time.monotonic()
            assert srv.stop(timeout=100) == 0
            stopped_in = time.monotonic() - t0
            with pytest.raises(UnavailableError) as info:
                next(sub)
            assert info.value.reason == "SERVER_STOPPING"
            assert stopped_in < 100  # far under the grace period (not a timing claim)
    finally:
        srv.stop()


def test_a_subscription_made_after_the_stop_began_ends_at_once() -> None:
    """A Subscribe gRPC took as the stop began reaches its handler after the fanout ended
    every subscription: it must end too (SERVER_STOPPING), not hold the stop its grace."""

    async def run() -> None:
        stream = Stream(StreamSpec("r", FIELDS, wall_clock=False))
        fan = Fanout(queue_bytes=2000, total_bytes=5000)
        before = fan.subscribe(stream, "w", lambda batch, result: b"")
        fan.shutdown()
        after = fan.subscribe(stream, "w", lambda batch, result: b"")
        for sub in (before, after):
            assert sub.ended is not None and sub.ended.reason == "SERVER_STOPPING"
        assert (fan.count, fan.feeds, stream.listeners) == (0, {}, [])

    asyncio.run(run())


def _one_row_served(data: Path) -> LocalServer:
    """A server with a long grace (120 s) serving stream ``g`` (window ``w``) of one row."""
    srv = LocalServer(data, "--grace", "120").start()
    with WindowClient(srv.target, timeout=60) as c:
        make(c, "g")
        c.append("g", row(8))
    return srv


def test_a_graceful_stop_does_not_wait_for_calls_no_handler_of_ours_took(tmp_path: Path) -> None:
    """gRPC's graceful stop waits for every call it accepted: a health ``Watch`` (which never
    ends by itself) held a SIGTERM'd server, and its streams' leases, for the whole grace.
    The stop now waits for the calls the service's handlers took, then cancels the rest: the
    server exits promptly, the watcher sees NOT_SERVING and then the end of its call, and the
    rows acknowledged before are there after a restart."""
    srv = _one_row_served(tmp_path / "stop")
    try:
        with grpc.insecure_channel(srv.target) as ch:
            watch = health_pb2_grpc.HealthStub(ch).Watch(health_pb2.HealthCheckRequest())
            assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
            t0 = time.monotonic()
            assert srv.stop(timeout=100) == 0
            stopped_in = time.monotonic() - t0
            assert stopped_in < 100  # far under the grace period (not a timing claim)
            seen = []
            with pytest.raises(grpc.RpcError) as info:
                for update in watch:
                    seen.append(update.status)  # noqa: PERF401 (it raises part-way)
            assert seen == [health_pb2.HealthCheckResponse.NOT_SERVING]
            assert info.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
        assert "stop_unhandled_cancelled" in srv.log.read_text()
        srv.start()
        with WindowClient(srv.target, timeout=60) as c:
            assert c.query("g", "w")["n"] == 1
    finally:
        srv.stop()


def test_calls_cut_short_are_not_counted_in_flight_at_the_stop(tmp_path: Path) -> None:
    """The stop waits for the calls the handlers took (counted until each RPC ends): calls
    cancelled or past their deadline, at every stage, must leave the count, or every later
    stop would wait its whole grace again."""
    srv = _one_row_served(tmp_path / "cut")
    try:
        with grpc.insecure_channel(srv.target) as ch:
            stub = pb_grpc.WindowServiceStub(ch)
            rows = pb.AppendRequest(stream="g", results=pb.PER_ROW)
            cut = 0
            for i in range(200):
                future = stub.Append.future(rows, timeout=0.0005 * (i % 4 + 1))
                if i % 3 == 0:
                    future.cancel()
                with contextlib.suppress(grpc.RpcError, grpc.FutureCancelledError):
                    future.result()
                    continue
                cut += 1
                with contextlib.suppress(grpc.RpcError):
                    for _ in stub.Subscribe(
                        pb.SubscribeRequest(stream="g", window="w"), timeout=0.003
                    ):
                        pass
            assert cut > 0
        assert srv.stop(timeout=100) == 0
        log = srv.log.read_text()
        assert "stop_grace_over" not in log
        assert "stopped" in log
    finally:
        srv.stop()
