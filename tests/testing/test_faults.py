"""The kit's :class:`FaultProxy`, against real peers: a plain-socket echo server for the
semantics of each mode, a real Redis (redis-py) and a real ``mtawindows serve`` (gRPC over
HTTP/2) through it, and a server whose Redis is behind it.

Timing asserts are one-sided and generous (at least half the delay; well under ten times
it): they say the mode acts, not how precisely."""

from __future__ import annotations

import contextlib
import socket
import socketserver
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import grpc
import pytest
import redis
from grpc_health.v1 import health_pb2, health_pb2_grpc
from redis.backoff import NoBackoff
from redis.retry import Retry

from mtawindows.client import Aggregation, Field, Policy, StreamSpec, WindowClient, WindowSpec
from mtawindows.server.storage import EmbeddedRedis
from mtawindows.testing import FaultProxy, FaultProxyFactory, LocalServer, free_port

SILENCE = 0.3  # how long "nothing arrives" is watched


# --------------------------------------------------------------------------- an echo server


class EchoServer(socketserver.ThreadingTCPServer):
    """Echoes every byte back on the connection it came on; half-closes after the client
    did. Counts the connections it accepted and the bytes it received."""

    daemon_threads = True
    allow_reuse_address = True
    block_on_close = False

    def __init__(self) -> None:
        self.connections = 0
        self.received = 0
        super().__init__(("127.0.0.1", 0), EchoHandler)

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.server_address[:2]
        return str(host), int(port)


class EchoHandler(socketserver.BaseRequestHandler):
    server: EchoServer

    def handle(self) -> None:
        self.server.connections += 1
        sock: socket.socket = self.request
        with contextlib.suppress(OSError):
            while data := sock.recv(65536):
                self.server.received += len(data)
                sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)


@pytest.fixture
def echo() -> Iterator[EchoServer]:
    server = EchoServer()
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def dial(proxy: FaultProxy, timeout: float = 5.0) -> socket.socket:
    return socket.create_connection(("127.0.0.1", proxy.port), timeout=timeout)


def recv_exactly(sock: socket.socket, n: int, timeout: float = 10.0) -> bytes:
    sock.settimeout(timeout)
    got = bytearray()
    while len(got) < n:
        data = sock.recv(n - len(got))
        if not data:
            raise AssertionError(f"EOF after {len(got)} of {n} bytes")
        got += data
    return bytes(got)


def silent(sock: socket.socket, wait: float = SILENCE) -> bool:
    """Nothing arrives (no byte, no EOF, no reset) within ``wait`` seconds."""
    sock.settimeout(wait)
    try:
        sock.recv(1)
    except TimeoutError:
        return True
    return False


def reset_on_dial(proxy: FaultProxy) -> None:
    """A new connection is reset: at once (the connect itself, if the RST comes first) or at
    its first read."""
    with pytest.raises(ConnectionResetError), dial(proxy) as s:
        s.settimeout(10)
        s.recv(1)


def wait_until(pred: Callable[[], Any], what: str, timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (got := pred()):
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {what}")
        time.sleep(0.02)
    return got


# --------------------------------------------------------------------------- pass


def test_passes_both_ways_and_closes_what_it_opened(
    echo: EchoServer, fault_proxy: FaultProxyFactory
) -> None:
    proxy = fault_proxy(echo.address)
    assert proxy.address == f"127.0.0.1:{proxy.port}" and proxy.port > 0
    assert proxy.upstream == "{}:{}".format(*echo.address)
    with dial(proxy) as s:
        s.sendall(b"hello")
        assert recv_exactly(s, 5) == b"hello"
        s.shutdown(socket.SHUT_WR)  # a half-close travels through, and the answer's EOF back
        assert s.recv(1) == b""
    stats = wait_until(lambda: (st := proxy.stats()).open == 0 and st, "the connection closed")
    assert (stats.accepted, stats.reset) == (1, 0)
    assert (stats.up.forwarded, stats.down.forwarded) == (5, 5)
    assert stats.up.fault == stats.down.fault == "pass"
    with dial(proxy) as s:  # close() ends the connections it still has
        s.sendall(b"x")
        assert recv_exactly(s, 1) == b"x"
        proxy.close()
        s.settimeout(5)
        with contextlib.suppress(ConnectionResetError):
            assert s.recv(1) == b""
    proxy.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        proxy.blackhole()
    assert proxy.stats().accepted == 2  # still readable
    with pytest.raises(ConnectionRefusedError):
        dial(proxy)


def test_a_large_transfer_passes_in_order_with_bounded_buffers(
    echo: EchoServer, fault_proxy: FaultProxyFactory
) -> None:
    proxy = fault_proxy(echo.address, buffer=16 * 1024)
    payload = bytes(range(256)) * (8 * 1024)  # 2 MiB
    with dial(proxy) as s:
        got: list[bytes] = []
        reader = threading.Thread(target=lambda: got.append(recv_exactly(s, len(payload))))
        reader.start()
        s.sendall(payload)
        reader.join(30)
        assert got == [payload]


# --------------------------------------------------------------------------- blackhole


def test_blackhole_holds_silently_then_heal_delivers_late_and_in_order(
    echo: EchoServer, fault_proxy: FaultProxyFactory
) -> None:
    proxy = fault_proxy(echo.address)
    with dial(proxy) as s:
        s.sendall(b"before ")
        assert recv_exactly(s, 7) == b"before "
        proxy.blackhole()
        for part in (b"one ", b"two ", b"three"):
            s.sendall(part)
        assert silent(s)  # no answer, no EOF, no reset: silence
        stats = wait_until(lambda: (st := proxy.stats()).up.held == 13 and st, "13 bytes held")
        assert stats.up.fault == "blackhole" and stats.up.forwarded == 7
        assert echo.received == 7  # nothing reached the upstream
        proxy.heal()
        assert recv_exactly(s, 13) == b"one two three"
        assert proxy.stats().up.held == 0


def test_a_one_way_blackhole_lets_the_other_way_through(
    echo: EchoServer, fault_proxy: FaultProxyFactory
) -> None:
    proxy = fault_proxy(echo.address)
    with dial(proxy) as s:
        s.sendall(b"warm")
        assert recv_exactly(s, 4) == b"warm"
        proxy.blackhole("down")  # requests arrive, answers are held
        s.sendall(b"ping")
        wait_until(lambda: echo.received == 8, "the request reached the upstream")
        assert silent(s)
        assert wait_until(lambda: proxy.stats().down.held == 4, "the answer held")
        proxy.heal("down")
        assert recv_exactly(s, 4) == b"ping"


def test_a_connection_accepted_during_a_blackhole_is_silent_until_heal(
    echo: EchoServer, fault_proxy: FaultProxyFactory
) -> None:
    proxy = fault_proxy(echo.address)
    proxy.blackhole()
    with dial(proxy) as s:  # accepted: a cut network times out, it does not refuse
        s.sendall(b"early")
        assert silent(s)
        assert echo.connections == 0  # nothing reached the upstream, not even the connect
        proxy.heal()
        assert recv_exactly(s, 5) == b"early"
        assert echo.connections == 1


def test_a_fin_sent_during_a_blackhole_is_held_in_its_place(
    echo: EchoServer, fault_proxy: FaultProxyFactory
) -> None:
    proxy = fault_proxy(echo.address)
    with dial(proxy) as s:
        proxy.blackhole()
        s.sendall(b"last words")
        s.shutdown(socket.SHUT_WR)
        assert silent(s)
        proxy.heal()
        assert recv_exactly(s, 10) == b"last words"
        assert s.recv(1) == b""  # the echo server saw the FIN after the bytes, and answered


def test_a_blackhole_holds_up_to_its_limit_then_the_sender_blocks(
    echo: EchoServer, fault_proxy: FaultProxyFactory
) -> None:
    limit = 256 * 1024
    proxy = fault_proxy(echo.address, hold_limit=limit)
    pattern = bytes(range(251))  # a period prime to every chunk size: order shows
    with dial(proxy) as s:
        proxy.blackhole("up")
        s.setblocking(False)
        sent = 0
        deadline = time.monotonic() + 10
        idle_since = time.monotonic()
        while time.monotonic() - idle_since < 0.5:  # until nothing more is taken for 0.5 s
            assert time.monotonic() < deadline, "the sender never blocked"
            block = (pattern * 300)[sent % 251 :][:65536]
            try:
                n = s.send(block)
            except BlockingIOError:
                time.sleep(0.01)
                continue
            sent += n
            idle_since = time.monotonic()
        held = proxy.stats().up.held
        assert limit <= held <= limit + 64 * 1024  # one read past the limit at most
        assert sent > held  # the rest waits in the kernels' buffers: the sender blocked
        s.setblocking(True)
        proxy.heal()
        expected = (pattern * (sent // 251 + 1))[:sent]
        assert recv_exactly(s, sent, timeout=30) == expected


# --------------------------------------------------------------------------- drop


def test_drop_discards_then_heal_resets_the_connections_that_lost_bytes(
    echo: EchoServer, fault_proxy: FaultProxyFactory
) -> None:
    proxy = fault_proxy(echo.address)
    with dial(proxy) as quiet, dial(proxy) as s:
        for c in (quiet, s):
            c.sendall(b"hi")
            assert recv_exactly(c, 2) == b"hi"
        proxy.drop()
        s.sendall(b"lost bytes")
        assert silent(s)
        stats = wait_until(lambda: (st := proxy.stats()).up.dropped == 10 and st, "10 dropped")
        assert stats.up.held == 0 and echo.received == 4
        proxy.heal()
        s.settimeout(5)
        with pytest.raises(ConnectionResetError):  # a stream with a hole cannot go on
            s.recv(1)
        quiet.sendall(b"still here")  # it lost nothing: it goes on
        assert recv_exactly(quiet, 10) == b"still here"
    assert proxy.stats().reset == 1


# --------------------------------------------------------------------------- reset


def test_reset_gives_econnreset_and_resets_new_connections_until_heal(
    echo: EchoServer, fault_proxy: FaultProxyFactory
) -> None:
    proxy = fault_proxy(echo.address)
    with dial(proxy) as s:
        s.sendall(b"hi")
        assert recv_exactly(s, 2) == b"hi"
        proxy.reset()
        s.settimeout(5)
        with pytest.raises(ConnectionResetError):
            s.recv(1)
    assert proxy.stats().up.fault == "reset"
    reset_on_dial(proxy)  # accepted, then reset
    proxy.heal()
    with dial(proxy) as s:
        s.sendall(b"back")
        assert recv_exactly(s, 4) == b"back"
    assert proxy.stats().reset == 2


def test_an_upstream_that_refuses_resets_the_client(fault_proxy: FaultProxyFactory) -> None:
    proxy = fault_proxy(("127.0.0.1", free_port()))
    reset_on_dial(proxy)


# --------------------------------------------------------------------------- delay, bandwidth


def test_delay_adds_at_least_the_delay_and_keeps_the_order(
    echo: EchoServer, fault_proxy: FaultProxyFactory
) -> None:
    proxy = fault_proxy(echo.address)
    with dial(proxy) as s:
        proxy.delay(0.3, "up")
        t0 = time.monotonic()
        for i in range(5):
            s.sendall(b"%d" % i)
        assert recv_exactly(s, 5) == b"01234"
        elapsed = time.monotonic() - t0
        assert 0.15 <= elapsed < 3.0
        proxy.delay(0.2)  # both ways: a round trip pays it twice
        t0 = time.monotonic()
        s.sendall(b"x")
        assert recv_exactly(s, 1) == b"x"
        assert 0.2 <= time.monotonic() - t0 < 4.0
        assert proxy.stats().down.delay == 0.2
        proxy.passthrough()
        t0 = time.monotonic()
        s.sendall(b"y")
        assert recv_exactly(s, 1) == b"y"
        assert time.monotonic() - t0 < 0.3  # not the 0.4 s of a delayed round trip


def test_bandwidth_throttles_roughly_to_the_rate(
    echo: EchoServer, fault_proxy: FaultProxyFactory
) -> None:
    proxy = fault_proxy(echo.address)
    payload = b"z" * 100_000
    with dial(proxy) as s:
        proxy.bandwidth(200_000, "up")  # 100 kB at 200 kB/s: 0.5 s
        t0 = time.monotonic()
        s.sendall(payload)
        assert recv_exactly(s, len(payload)) == payload
        elapsed = time.monotonic() - t0
        assert 0.25 <= elapsed < 5.0
        proxy.bandwidth(None)
        t0 = time.monotonic()
        s.sendall(payload)
        assert recv_exactly(s, len(payload)) == payload
        assert time.monotonic() - t0 < elapsed


# --------------------------------------------------------------------------- the API


def test_arguments_are_checked(echo: EchoServer) -> None:
    for bad in ("no-port", "host:", ":80", "host:99999", "host:http"):
        with pytest.raises(ValueError, match="upstream"):
            FaultProxy(bad)
    with FaultProxy(echo.address) as proxy:
        with pytest.raises(ValueError, match="direction"):
            proxy.blackhole("sideways")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="seconds"):
            proxy.delay(-1)
        with pytest.raises(ValueError, match="bandwidth"):
            proxy.bandwidth(0)
        taken = proxy.port
        with pytest.raises(OSError):
            FaultProxy(echo.address, listen_port=taken)
    with FaultProxy(echo.address, listen_port=taken) as again:  # the port is free again
        assert again.port == taken
    assert FaultProxy("unix:///tmp/x.sock").upstream == "unix:/tmp/x.sock"


def test_a_factory_closes_every_proxy_it_started(echo: EchoServer) -> None:
    with FaultProxyFactory() as factory:
        ports = [factory(echo.address).port, factory(f"127.0.0.1:{echo.address[1]}").port]
        assert len(set(ports)) == 2
    for port in ports:
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5).close()


# --------------------------------------------------------------------------- real peers


def upstream_of(url: str) -> str:
    """The proxy's upstream for a Redis URL (``redis://host:port/db`` or ``unix://path``)."""
    parts = urlsplit(url)
    if parts.scheme == "unix":
        return f"unix:{parts.path}"
    return f"{parts.hostname}:{parts.port or 6379}"


@pytest.mark.redis
def test_redis_through_the_proxy(redis_url: str, fault_proxy: FaultProxyFactory) -> None:
    proxy = fault_proxy(upstream_of(redis_url))
    r = redis.Redis(
        host="127.0.0.1",
        port=proxy.port,
        socket_timeout=0.5,
        socket_connect_timeout=0.5,
        retry=Retry(NoBackoff(), 0),
    )
    try:
        assert r.ping()
        proxy.blackhole()
        t0 = time.monotonic()
        with pytest.raises(redis.exceptions.TimeoutError):
            r.ping()
        assert time.monotonic() - t0 >= 0.4
        proxy.heal()
        assert r.ping()  # a new connection (redis-py dropped the one that timed out)
        proxy.delay(0.2, "down")
        t0 = time.monotonic()
        assert r.ping()
        assert time.monotonic() - t0 >= 0.1
    finally:
        r.close()


@pytest.mark.server
@pytest.mark.redis
def test_grpc_through_the_proxy(
    mtawindows_server: LocalServer, fault_proxy: FaultProxyFactory
) -> None:
    proxy = fault_proxy(mtawindows_server.target)
    with grpc.insecure_channel(proxy.address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        request = health_pb2.HealthCheckRequest(service="")
        serving = health_pb2.HealthCheckResponse.SERVING
        assert health.Check(request, timeout=10).status == serving
        proxy.blackhole()
        with pytest.raises(grpc.RpcError) as info:
            health.Check(request, timeout=0.5)
        assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        proxy.heal()
        assert health.Check(request, timeout=10).status == serving
        assert mtawindows_server.health(channel=channel) == "SERVING"


@pytest.mark.server
@pytest.mark.redis
def test_a_server_whose_redis_is_blackholed_stops_serving_and_comes_back(
    fault_proxy: FaultProxyFactory,
) -> None:
    """``serve --redis-url redis://<proxy>``: its PING watchdog (1 s) sees the silence."""
    with EmbeddedRedis() as store:
        proxy = fault_proxy(upstream_of(store.url))
        with LocalServer(
            None, "--redis-ping-timeout-ms", "1000", redis_url=f"redis://{proxy.address}/0"
        ) as srv:
            aggs = (Aggregation("n", "count"),)
            with WindowClient(srv.target, timeout=20) as c:
                c.create_stream(StreamSpec("m", (Field("x"),), wall_clock=False))
                c.create_window(WindowSpec("m", "w", aggs, Policy.count(100)))
                c.append("m", {"ts": [1], "x": [1.0]}, producer_id="p", sequence=1)
                proxy.blackhole()
                wait_until(lambda: srv.health() == "NOT_SERVING", "NOT_SERVING", timeout=20)
                proxy.heal()
                srv.wait_serving(timeout=30)
                c.append("m", {"ts": [2], "x": [2.0]}, producer_id="p", sequence=2)
                assert c.query("m", "w")["n"] == 2
            assert proxy.stats().accepted >= 1
