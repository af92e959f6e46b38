"""A TCP fault proxy for tests: :class:`FaultProxy`, a network partition on loopback.

Put a proxy between any client and any TCP server (a server and its Redis, a client and a
server: RESP, gRPC over HTTP/2, anything) and break the network between them on purpose,
while connections are open, in one direction or both::

    from mtawindows.testing import FaultProxy, LocalServer

    with (
        FaultProxy("127.0.0.1:6379") as proxy,                # or ("127.0.0.1", 6379)
        LocalServer(None, redis_url=f"redis://{proxy.address}/0") as srv,
    ):
        proxy.blackhole()       # the server's Redis goes silent: no error, no close
        ...                     # its calls time out, its leases run out
        proxy.heal()            # what both sides sent meanwhile arrives, late and in order
        proxy.delay(0.05, "down")          # every reply 50 ms late
        proxy.bandwidth(100_000, "up")     # requests at 100 kB/s
        proxy.reset()           # every connection RST, new ones RST until heal()
        proxy.stats()           # bytes forwarded / held / dropped per direction, connections

The upstream is ``"host:port"``, ``(host, port)`` or a unix socket, ``"unix:/path"`` (an
embedded Redis's ``unix:///path`` URL as it is). The proxy listens on 127.0.0.1 from its
construction (``listen_port``, default a free port: ``.port``, ``.address``; a given port
can be taken again after :meth:`~FaultProxy.close`, to stand in for a server restarted on its
address) and opens one upstream connection per accepted connection. Its I/O runs on an
asyncio loop in a daemon thread of its own; every method may be called from any thread and
returns once the change is in force (bytes read after it obey it). A context manager:
:meth:`~FaultProxy.close` on exit ends every connection and the thread (a proxy never
closed keeps its port and thread until the process exits).

Directions: ``"up"`` is client -> upstream, ``"down"`` upstream -> client, ``"both"`` (the
default of every method that takes one) both.

=========================  ==================================================================
``passthrough()``          forward as fast as the peers read: the initial mode (``pass`` is a
                           Python keyword). Also lifts delay and bandwidth, and heals.
``blackhole()``            a silent partition: every byte that arrives is read and held,
                           nothing is delivered, nothing is closed (a FIN or an RST from one
                           side is held too, in its place). A connection accepted meanwhile is
                           accepted and silent, and reaches the upstream only once ``up``
                           passes again (a cut network times out, it does not refuse).
``heal()``                 ends a ``blackhole``, ``drop`` or ``reset``: what was held is
                           delivered, late and in order; delay and bandwidth stay as set.
``drop()``                 as ``blackhole``, but what arrives is discarded (packets lost).
                           TCP cannot lose bytes in mid-stream and go on, so at ``heal()``
                           every connection that lost bytes (or a FIN) is reset instead (both
                           peers get an RST): the peers see silence, then a reset, as after a
                           partition long enough for TCP to give up. A connection that lost
                           nothing goes on.
``reset()``                every open connection closed abruptly (``SO_LINGER`` 0: both peers
                           get an RST, ``ECONNRESET``, held bytes are gone), and every new one
                           accepted and reset at once, until ``heal()``. No direction: a
                           connection is reset whole.
``delay(seconds)``         every chunk delivered ``seconds`` after it arrived (order kept; 0:
                           none). Bytes held by a blackhole longer than that go at heal.
``bandwidth(bytes_per_s)`` delivery throttled to that rate per connection (``None``:
                           unlimited), in slices of 50 ms' worth.
=========================  ==================================================================

Any of ``passthrough``/``blackhole``/``drop``/``heal`` also ends ``reset`` mode.

Buffers are bounded. While a direction passes, each connection holds at most ``buffer``
bytes (256 KiB) of it in the proxy and then stops reading, so a slow reader slows the writer
(backpressure, as TCP's window does; with a delay, a connection carries at most ``buffer``
bytes per ``delay``). While it is blackholed, each connection holds up to ``hold_limit``
bytes (64 MiB) of it, then stops reading: the sender's kernel buffers fill and it blocks,
which is still silence. ``drop`` holds nothing.

The ``fault_proxy`` fixture of :mod:`mtawindows.testing.pytest_plugin` is a
:class:`FaultProxyFactory`: ``fault_proxy(upstream, **options)`` starts one, all closed after
the test.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import math
import socket
import struct
import threading
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal, TypeVar

__all__ = ["Direction", "DirectionStats", "FaultProxy", "FaultProxyFactory", "FaultStats"]

Direction = Literal["up", "down", "both"]

HOST = "127.0.0.1"
CHUNK = 64 * 1024  # one read
BUFFER = 256 * 1024  # held per connection and direction while it passes (backpressure past it)
HOLD_LIMIT = 64 * 1024 * 1024  # held per connection and direction while blackholed
CONNECT_TIMEOUT = 10.0  # to open an upstream connection
CALL_TIMEOUT = 30.0  # for a method's change to be made on the proxy's loop
SLICE = 0.05  # a throttled direction sends at most this many seconds' worth at a time

_T = TypeVar("_T")


@dataclass(frozen=True)
class DirectionStats:
    """One direction of a :class:`FaultProxy`, over all its connections: the mode
    (``fault``: ``pass``, ``blackhole``, ``drop`` or ``reset``; ``delay`` seconds;
    ``bandwidth`` bytes/s or None), bytes ``forwarded`` (handed to the receiving socket) and
    ``dropped`` since the start, and bytes ``held`` in the proxy now."""

    fault: str
    delay: float
    bandwidth: float | None
    forwarded: int
    held: int
    dropped: int


@dataclass(frozen=True)
class FaultStats:
    """:meth:`FaultProxy.stats`: connections ``accepted`` since the start, ``open`` now and
    ``reset`` by the proxy; ``up`` and ``down``, each a :class:`DirectionStats`."""

    accepted: int
    open: int
    reset: int
    up: DirectionStats
    down: DirectionStats


class _Signal:
    """A broadcast on the loop: :meth:`wait` returns at the next :meth:`fire` (or timeout)."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def fire(self) -> None:
        self._event.set()
        self._event = asyncio.Event()

    async def wait(self, timeout: float | None = None) -> None:
        event = self._event
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await event.wait()


class _Shape:
    """One direction's mode, shared by every connection."""

    def __init__(self) -> None:
        self.fault: Literal["pass", "blackhole", "drop"] = "pass"
        self.delay = 0.0
        self.rate: float | None = None
        self.forwarded = 0
        self.dropped = 0


def _abort(writer: asyncio.StreamWriter | None, *, rst: bool) -> None:
    """Close ``writer``'s socket now, unsent bytes discarded; ``rst``: with an RST."""
    if writer is None:
        return
    if rst:
        sock = writer.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class _Pipe:
    """One direction of one connection: ``read`` fills ``queue`` from the source, ``write``
    empties it into the destination, each obeying the direction's :class:`_Shape`."""

    def __init__(self, link: _Link, shape: _Shape) -> None:
        self.link = link
        self.shape = shape
        self.signal = _Signal()
        # (arrival time, bytes), in arrival order; the last may be b"" (the source closed:
        # a FIN) or None (it failed: an RST)
        self.queue: collections.deque[tuple[float, bytes | None]] = collections.deque()
        self.held = 0
        self.lost = False  # drop discarded some of it: the stream is broken
        self.dst: asyncio.StreamWriter | None = None
        self.finished = False  # its EOF was delivered
        self._next_send = 0.0  # bandwidth: when the next slice may go

    def _room(self) -> bool:
        proxy = self.link.proxy
        fault = self.shape.fault
        if fault == "drop":  # what it reads goes nowhere
            return True
        return self.held < (proxy.hold_limit if fault == "blackhole" else proxy.buffer)

    async def read(self, src: asyncio.StreamReader) -> None:
        loop = asyncio.get_running_loop()
        link = self.link
        while True:
            while not (link.closed or self._room()):
                await self.signal.wait()
            if link.closed:
                return
            chunk: bytes | None
            try:
                chunk = await src.read(CHUNK)
            except OSError:
                chunk = None
            if link.is_closed():  # while it read
                return
            if self.shape.fault == "drop":
                self.lost = True
                if chunk:
                    self.shape.dropped += len(chunk)
                    continue
                return  # a FIN or an RST lost: the stream ends here
            self.queue.append((loop.time(), chunk))
            if chunk:
                self.held += len(chunk)
            self.signal.fire()
            if not chunk:
                return

    def _sendable(self) -> bool:
        return self.link.closed or (
            bool(self.queue)
            and self.dst is not None
            and self.shape.fault == "pass"
            and not self.link.proxy._refusing
        )

    async def write(self) -> None:
        loop = asyncio.get_running_loop()
        link = self.link
        while True:
            while not self._sendable():
                await self.signal.wait()
            if link.closed or self.dst is None:
                return
            arrival, item = self.queue[0]
            now = loop.time()
            shape = self.shape
            if now < arrival + shape.delay:  # wait, but wake at any change of mode
                await self.signal.wait(arrival + shape.delay - now)
                continue
            if item is None:  # an RST
                link.reset()
                return
            if not item:  # a FIN: a half-close
                self.queue.popleft()
                with contextlib.suppress(OSError):
                    if self.dst.can_write_eof():
                        self.dst.write_eof()
                self.finished = True
                link.signal.fire()
                return
            piece = item
            if shape.rate is not None:
                if now < self._next_send:
                    await self.signal.wait(self._next_send - now)
                    continue
                piece = item[: max(1, min(CHUNK, int(shape.rate * SLICE)))]
                self._next_send = max(now, self._next_send) + len(piece) / shape.rate
            if len(piece) == len(item):
                self.queue.popleft()
            else:
                self.queue[0] = (arrival, item[len(piece) :])
            self.held -= len(piece)
            self.signal.fire()  # room for the reader
            shape.forwarded += len(piece)
            try:
                self.dst.write(piece)
                await self.dst.drain()
            except (OSError, RuntimeError):  # the receiver is gone: so is the connection
                link.reset()
                return


class _Link:
    """One accepted connection and its upstream connection."""

    def __init__(
        self, proxy: FaultProxy, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.proxy = proxy
        self.client_reader = reader
        self.client_writer = writer
        self.upstream_writer: asyncio.StreamWriter | None = None
        self.up = _Pipe(self, proxy._shapes["up"])
        self.down = _Pipe(self, proxy._shapes["down"])
        self.down.dst = writer
        self.signal = _Signal()
        self.closed = False

    def pipes(self, direction: Direction) -> tuple[_Pipe, ...]:
        return {"up": (self.up,), "down": (self.down,), "both": (self.up, self.down)}[direction]

    def wake(self) -> None:
        self.up.signal.fire()
        self.down.signal.fire()
        self.signal.fire()

    def is_closed(self) -> bool:
        return self.closed

    def close(self, *, rst: bool) -> None:
        """End both sockets now (``rst``: both peers get an RST)."""
        if self.closed:
            return
        self.closed = True
        _abort(self.client_writer, rst=rst)
        _abort(self.upstream_writer, rst=rst)
        self.wake()

    def reset(self) -> None:
        if not self.closed:
            self.proxy._resets += 1
        self.close(rst=True)

    def finish(self) -> None:
        """Both ways closed by their peers: close both sockets once they sent what they have."""
        if self.closed:
            return
        self.closed = True
        self.client_writer.close()
        if self.upstream_writer is not None:
            self.upstream_writer.close()
        self.wake()

    async def run(self) -> None:
        tasks = [
            asyncio.create_task(self.up.read(self.client_reader)),
            asyncio.create_task(self.up.write()),
        ]
        try:
            # no connection reaches the upstream while the way up is cut
            while not (self.closed or self._may_connect()):
                await self.signal.wait()
            if self.closed:
                return
            try:
                reader, writer = await asyncio.wait_for(
                    self.proxy._open_upstream(), CONNECT_TIMEOUT
                )
            except (OSError, TimeoutError):
                self.reset()  # what a proxy can say for a refused upstream
                return
            self.upstream_writer = writer
            if self.is_closed():  # reset or closed while connecting
                _abort(writer, rst=True)
                return
            self.up.dst = writer
            tasks += [
                asyncio.create_task(self.down.read(reader)),
                asyncio.create_task(self.down.write()),
            ]
            self.wake()
            while not (self.closed or (self.up.finished and self.down.finished)):
                await self.signal.wait()
            self.finish()
        finally:
            self.close(rst=False)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def _may_connect(self) -> bool:
        return self.proxy._shapes["up"].fault == "pass" and not self.proxy._refusing


def _parse_upstream(upstream: str | tuple[str, int]) -> tuple[str, int] | str:
    """``(host, port)``, or the path of a unix socket."""
    if isinstance(upstream, tuple):
        host, port = upstream
        return str(host), int(port)
    if upstream.startswith("unix:"):
        path = upstream.removeprefix("unix:")
        return path[2:] if path.startswith("///") else path
    host, sep, port_text = upstream.rpartition(":")
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        msg = f"FaultProxy: upstream must be 'host:port' or 'unix:/path', got {upstream!r}"
        raise ValueError(msg)
    return host.removeprefix("[").removesuffix("]"), int(port_text)


def _directions(direction: Direction) -> tuple[Literal["up", "down"], ...]:
    if direction == "both":
        return ("up", "down")
    if direction in ("up", "down"):
        return (direction,)
    msg = f"FaultProxy: direction must be 'up', 'down' or 'both', got {direction!r}"
    raise ValueError(msg)


class FaultProxy:
    """A TCP proxy from ``127.0.0.1:<listen_port>`` (0: a free port) to ``upstream``
    (``"host:port"``, ``(host, port)`` or ``"unix:/path"``) whose network can be broken on
    demand. Listening when constructed; a context manager (:meth:`close` on exit). See the
    module docstring."""

    def __init__(
        self,
        upstream: str | tuple[str, int],
        *,
        listen_port: int = 0,
        buffer: int = BUFFER,
        hold_limit: int = HOLD_LIMIT,
    ) -> None:
        self._target = _parse_upstream(upstream)
        target = self._target
        self.upstream = f"unix:{target}" if isinstance(target, str) else f"{target[0]}:{target[1]}"
        if buffer < 1 or hold_limit < 1:
            msg = f"FaultProxy: buffer and hold_limit must be >= 1, got {buffer!r}, {hold_limit!r}"
            raise ValueError(msg)
        self.buffer = buffer
        self.hold_limit = hold_limit
        self._shapes = {"up": _Shape(), "down": _Shape()}
        self._refusing = False  # reset mode
        self._accepted = 0
        self._resets = 0
        self._links: set[_Link] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name=f"FaultProxy->{self.upstream}", daemon=True
        )
        self._thread.start()
        try:
            self._server = self._run(
                asyncio.start_server(self._accept, HOST, listen_port, limit=CHUNK)
            )
        except BaseException:
            self._stop_loop()
            raise
        self.port: int = self._server.sockets[0].getsockname()[1]

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"FaultProxy({self.address} -> {self.upstream}, {state})"

    @property
    def address(self) -> str:
        """``127.0.0.1:<port>``: what the client dials instead of the upstream."""
        return f"{HOST}:{self.port}"

    # ------------------------------------------------------------------ the modes
    def passthrough(self, direction: Direction = "both") -> None:
        """Forward as fast as possible: :meth:`heal`, no delay, no bandwidth limit."""
        self._fault("pass", direction, unshape=True)

    def blackhole(self, direction: Direction = "both") -> None:
        """Hold every byte that arrives, deliver nothing, close nothing (until :meth:`heal`)."""
        self._fault("blackhole", direction)

    def drop(self, direction: Direction = "both") -> None:
        """Discard every byte that arrives, close nothing; at :meth:`heal` the connections
        that lost bytes are reset."""
        self._fault("drop", direction)

    def heal(self, direction: Direction = "both") -> None:
        """End ``blackhole``/``drop`` on ``direction`` and ``reset`` mode: deliver what was
        held, late and in order; reset the connections that lost bytes."""
        self._fault("pass", direction)

    def reset(self) -> None:
        """RST every open connection (both peers get ``ECONNRESET``), and every new one until
        :meth:`heal` (or another mode)."""

        def change() -> None:
            self._refusing = True
            for link in list(self._links):
                link.reset()

        self._call(change)

    def delay(self, seconds: float, direction: Direction = "both") -> None:
        """Deliver every chunk ``seconds`` after it arrived (0: at once); order is kept."""
        if not (math.isfinite(seconds) and seconds >= 0):
            msg = f"FaultProxy.delay: seconds must be finite and >= 0, got {seconds!r}"
            raise ValueError(msg)
        names = _directions(direction)

        def change() -> None:
            for name in names:
                self._shapes[name].delay = float(seconds)
            self._wake()

        self._call(change)

    def bandwidth(self, bytes_per_second: float | None, direction: Direction = "both") -> None:
        """Deliver at most ``bytes_per_second`` per connection (None: unlimited)."""
        if bytes_per_second is not None and not (
            math.isfinite(bytes_per_second) and bytes_per_second > 0
        ):
            msg = f"FaultProxy.bandwidth: must be None or > 0, got {bytes_per_second!r}"
            raise ValueError(msg)
        names = _directions(direction)

        def change() -> None:
            for name in names:
                self._shapes[name].rate = (
                    None if bytes_per_second is None else float(bytes_per_second)
                )
            self._wake()

        self._call(change)

    def stats(self) -> FaultStats:
        """Connections and bytes so far, and each direction's mode."""

        def read() -> FaultStats:
            def one(name: Literal["up", "down"]) -> DirectionStats:
                shape = self._shapes[name]
                held = sum(p.held for link in self._links for p in link.pipes(name))
                fault = "reset" if self._refusing else shape.fault
                return DirectionStats(
                    fault, shape.delay, shape.rate, shape.forwarded, held, shape.dropped
                )

            return FaultStats(
                self._accepted, len(self._links), self._resets, one("up"), one("down")
            )

        return read() if self._closed else self._call(read)

    def _fault(
        self,
        fault: Literal["pass", "blackhole", "drop"],
        direction: Direction,
        *,
        unshape: bool = False,
    ) -> None:
        names = _directions(direction)

        def change() -> None:
            self._refusing = False
            for name in names:
                shape = self._shapes[name]
                shape.fault = fault
                if unshape:
                    shape.delay, shape.rate = 0.0, None
            if fault == "pass":  # a broken stream cannot go on
                for link in list(self._links):
                    if any(p.lost for p in link.pipes(direction)):
                        link.reset()
            self._wake()

        self._call(change)

    # ------------------------------------------------------------------ life cycle
    def close(self) -> None:
        """Close every connection (unsent bytes discarded) and the listening socket, and end
        the thread. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self._run(self._shutdown())
        finally:
            self._stop_loop()

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # ------------------------------------------------------------------ on the loop
    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._accepted += 1
        if self._refusing or self._closed:
            self._resets += 1
            _abort(writer, rst=True)
            return
        link = _Link(self, reader, writer)
        task = asyncio.current_task()
        self._links.add(link)
        if task is not None:
            self._tasks.add(task)
        try:
            await link.run()
        except Exception:  # a connection's failure ends that connection, never the proxy
            link.reset()
        finally:
            self._links.discard(link)
            if task is not None:
                self._tasks.discard(task)

    async def _open_upstream(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if isinstance(self._target, str):
            return await asyncio.open_unix_connection(self._target, limit=CHUNK)
        host, port = self._target
        return await asyncio.open_connection(host, port, limit=CHUNK)

    def _wake(self) -> None:
        for link in self._links:
            link.wake()

    async def _shutdown(self) -> None:
        self._server.close()
        for link in list(self._links):
            link.close(rst=False)
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=5.0)

    # ------------------------------------------------------------------ threads
    def _run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        """Run ``coro`` on the proxy's loop and answer its result."""
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return future.result(CALL_TIMEOUT)

    def _call(self, fn: Callable[[], _T]) -> _T:
        """Run ``fn`` on the proxy's loop (at once if this is its thread) and answer its
        result; ``RuntimeError`` once closed."""
        if self._closed:
            msg = f"{self!r}: closed"
            raise RuntimeError(msg)
        if threading.current_thread() is self._thread:
            return fn()
        future: concurrent.futures.Future[_T] = concurrent.futures.Future()

        def run() -> None:
            try:
                future.set_result(fn())
            except BaseException as ex:
                future.set_exception(ex)

        self._loop.call_soon_threadsafe(run)
        return future.result(CALL_TIMEOUT)

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(CALL_TIMEOUT)
        if not self._thread.is_alive():
            self._loop.close()


class FaultProxyFactory:
    """Starts :class:`FaultProxy` s (``factory(upstream, **options)``, started, returned) and
    closes them all at :meth:`close` (a context manager too): the ``fault_proxy`` fixture."""

    def __init__(self) -> None:
        self.proxies: list[FaultProxy] = []

    def __call__(self, upstream: str | tuple[str, int], **options: Any) -> FaultProxy:
        proxy = FaultProxy(upstream, **options)
        self.proxies.append(proxy)
        return proxy

    def __iter__(self) -> Iterator[FaultProxy]:
        return iter(self.proxies)

    def close(self) -> None:
        for proxy in reversed(self.proxies):
            proxy.close()

    def __enter__(self) -> FaultProxyFactory:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
