"""Subscriber fan-out: each applied batch's window results go to the subscribers of those
windows, serialized once, through a queue per subscriber bounded in bytes.

A stream with subscribers has one listener, its :class:`Feed`. After every batch the stream
calls it (on the event loop, or on the worker thread that applied the batch, under the
stream's lock); the feed serializes the batch's result once per window that has subscribers,
then hands the bytes to the event loop (directly, or with one ``call_soon_threadsafe`` per
batch), where :meth:`Fanout.deliver` appends a reference to the same bytes to each
subscriber's queue and wakes the subscribers that wait. Nothing on that path awaits a
subscriber, so an append costs the same whether its subscribers read or not: one
serialization per window and a few operations per subscriber.

Two limits bound what the queues can hold, both counted in serialized bytes:

- ``queue_bytes`` per subscriber: a subscriber whose next result would take its queue past it
  is cut (a subscriber with an empty queue always takes one result, however large);
- ``total_bytes`` over the server: what all queues hold, each result counted once however
  many queues it waits in (the queues of one window are suffixes of one sequence of results,
  so together they hold what the longest holds). Past it, the longest queues are cut until the
  rest fit. So a thousand subscribers of one window that lag together cost one queue, not a
  thousand, and are cut only by their own limit.

A cut subscription's queue is dropped at once (its bytes are freed unless another subscriber
still has them queued; once 16 MiB were dropped, ``malloc_trim`` hands the free pages back to
the system on a helper thread), it leaves its feed, and its reader ends the call with
RESOURCE_EXHAUSTED / ``SUBSCRIBER_TOO_SLOW`` once it runs (a client that stopped reading sees
the status after the messages the transport already holds for it).

Waiting subscribers are woken a slice at a time (``WAKE_SLICE`` per turn of the loop), so an
append that arrives while a thousand readers write waits for a slice of them, not all.

Invariants (all on the event loop):
    Fanout.queued == sum(s.queued for every live subscription s)
    s.queued == sum(len(b) for b in s.queue)
    Fanout.held == sum(f.held[w] for every feed f and window w of it)
    f.held[w] >= max(s.queued for the live subscriptions s of w)  (== after w's last batch)
    s.ended is not None  =>  s.queue is empty and s is in no feed
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import heapq
import logging
import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mtawindows.v1.reasons import Reason

log = logging.getLogger("mtawindows.server")

Encode = Callable[[int, Any], bytes]  # (batch, window result) -> a serialized event
# bytes dropped with ended queues before the heap is trimmed, after a delay that gathers a
# burst of cuts or cancellations into one trim; the tail of a burst (past TRIM_TAIL) is
# trimmed after that
TRIM_AFTER = 16 * 1024 * 1024
TRIM_TAIL = 1024 * 1024
TRIM_DELAY = 0.5
WAKE_SLICE = 64  # waiting subscribers woken per turn of the event loop


def _malloc_trim() -> Callable[[], None] | None:
    """glibc's ``malloc_trim(0)``: free pages of every arena back to the system (freed queues
    are many mid-sized chunks that glibc would otherwise keep). None elsewhere."""
    try:
        trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    except OSError:  # pragma: no cover - no C library to load
        return None
    if trim is None:  # pragma: no cover - not glibc
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int

    def give_back() -> None:
        trim(0)

    return give_back


@dataclass(frozen=True)
class Ending:
    """Why a subscription ended: a gRPC status code, an ErrorInfo reason, a message and the
    ErrorInfo metadata."""

    code: str
    reason: str
    message: str
    metadata: Mapping[str, str] = field(default_factory=dict)


def _mib(n: int) -> str:
    return f"{n / (1024 * 1024):.1f} MiB"


class Subscription:
    """One subscriber's queue of serialized events, oldest first."""

    __slots__ = ("ended", "feed", "keys", "queue", "queued", "waiter", "waking", "window")

    def __init__(self, feed: Feed, window: str, keys: frozenset[str] | None = None) -> None:
        self.feed = feed
        self.window = window
        self.keys = keys  # a keyed stream's keys it follows (None: every key)
        self.queue: deque[bytes] = deque()
        self.queued = 0  # bytes in queue
        self.ended: Ending | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.waking = False  # in the fan-out's queue of subscribers to wake

    def pop(self) -> bytes | None:
        """The oldest queued event, or None when there is none (see :attr:`ended`)."""
        if not self.queue:
            return None
        data = self.queue.popleft()
        n = len(data)
        self.queued -= n
        self.feed.fanout.queued -= n
        return data

    async def wait(self) -> None:
        """Until an event is queued or the subscription ends."""
        if self.queue or self.ended is not None:
            return
        waiter = self.waiter = asyncio.get_running_loop().create_future()
        try:
            await waiter
        finally:
            self.waiter = None

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class Feed:
    """The listener of one stream with subscribers: window name -> its subscriptions, and
    how to serialize that window's results."""

    def __init__(self, fanout: Fanout, name: str, stream: Any) -> None:
        self.fanout = fanout
        self.name = name
        self.stream = stream
        self.windows: dict[str, dict[Subscription, None]] = {}
        self.encoders: dict[str, Encode] = {}
        # per window, the bytes its queues hold: each queue is a suffix of the window's
        # recent results, so that is the longest one (as of the window's last batch)
        self.held: dict[str, int] = {}

    def __call__(self, batch: int, results: Mapping[str, Any]) -> None:
        """The stream's listener: on the thread that applied ``batch`` (the loop or a worker),
        under the stream's lock. Serializes once per window with subscribers; never raises into
        the append."""
        fanout = self.fanout
        events: dict[str, Any] | None = None
        if batch >= 0:
            events = {}
            try:  # (a snapshot: the loop may add or drop subscribers meanwhile)
                for wname, encode in list(self.encoders.items()):
                    result = results.get(wname)
                    if isinstance(result, list):  # a keyed stream's: one per key changed
                        events[wname] = [(r.key, encode(batch, r)) for r in result]
                    else:
                        events[wname] = None if result is None else encode(batch, result)
            except Exception:  # pragma: no cover - a bug in encoding must not fail the append
                log.exception("could not encode results for subscribers", extra={"batch": batch})
                return
        if threading.get_ident() == fanout.loop_thread:
            fanout.deliver(self, batch, events)
        else:
            assert fanout.loop is not None  # set by the first subscribe
            with contextlib.suppress(RuntimeError):  # the loop closed: the server is gone
                fanout.loop.call_soon_threadsafe(fanout.deliver, self, batch, events)


class Fanout:
    """Every subscription of a server, their feeds and the byte limits over their queues."""

    def __init__(
        self,
        queue_bytes: int,
        total_bytes: int,
        on_cut: Callable[[Ending], None] | None = None,
    ) -> None:
        if queue_bytes <= 0 or total_bytes <= 0:
            msg = (
                f"subscriber queue limits must be > 0 bytes, got queue_bytes={queue_bytes}, "
                f"total_bytes={total_bytes}"
            )
            raise ValueError(msg)
        self.queue_bytes = queue_bytes
        self.total_bytes = total_bytes
        self.queued = 0  # bytes over all queues (a result shared by k queues counts k times)
        self.held = 0  # bytes the queues hold, each result once: sum of the feeds' held
        self.count = 0  # live subscriptions
        self.cut = 0  # subscriptions cut for being too slow, since start
        self.on_cut = on_cut  # told at the cut (the reader may learn of it much later)
        self.feeds: dict[str, Feed] = {}
        self.loop: asyncio.AbstractEventLoop | None = None
        self.loop_thread = -1
        self.dropped = 0  # bytes dropped with ended queues since the last trim
        self._to_wake: deque[Subscription] = deque()  # waiting subscribers with news
        self._waking = False  # _wake_some is scheduled
        self._trim = _malloc_trim()
        self._trimming = False
        self.closed: Ending | None = None  # set by shutdown(): later subscriptions end at once

    # -- on the event loop
    def subscribe(
        self, stream: Any, window: str, encode: Encode, keys: frozenset[str] | None = None
    ) -> Subscription:
        """Add a subscriber of ``window``; call under the stream's lock so that it sees every
        batch applied after this returns and none before."""
        if self.loop is None:
            self.loop = asyncio.get_running_loop()
            self.loop_thread = threading.get_ident()
        name = stream.spec.name
        feed = self.feeds.get(name)
        if feed is not None and feed.stream is not stream:  # a stream deleted and re-created
            self._end_feed(feed)
            feed = None
        if feed is None:
            feed = self.feeds[name] = Feed(self, name, stream)
            stream.listeners.append(feed)
        sub = Subscription(feed, window, keys)
        feed.windows.setdefault(window, {})[sub] = None
        feed.encoders.setdefault(window, encode)
        self.count += 1
        if self.closed is not None:  # a call taken as the server began to stop
            self._end(sub, self.closed)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        """The subscriber went away: drop its queue (idempotent)."""
        self._end(sub, None)

    def window_deleted(self, stream: str, window: str) -> None:
        """End the subscriptions of a deleted window (NOT_FOUND)."""
        feed = self.feeds.get(stream)
        subs = feed.windows.get(window) if feed is not None else None
        for sub in list(subs or ()):
            self._end(sub, _gone(stream, window))

    def stream_moved(self, stream: str, ending: Ending) -> None:
        """End the subscriptions of a stream this server no longer owns with ``ending`` (the
        new owner's address): subscribers resubscribe there and catch up with ReadResults."""
        feed = self.feeds.get(stream)
        for subs in list(feed.windows.values()) if feed is not None else ():
            for sub in list(subs):
                self._end(sub, ending)

    def shutdown(self) -> None:
        """The server is stopping: end every subscription (UNAVAILABLE, ``SERVER_STOPPING``)
        so that a graceful stop does not wait its whole grace period for calls that never end
        by themselves, and end any subscription made after (a call gRPC took as the stop
        began). Subscribers reconnect elsewhere or later, and catch up by sequence."""
        ending = self.closed = Ending(
            "UNAVAILABLE",
            Reason.SERVER_STOPPING,
            "the server is stopping; subscribe again and catch up with ReadResults",
        )
        for feed in list(self.feeds.values()):
            for subs in list(feed.windows.values()):
                for sub in list(subs):
                    self._end(sub, ending)

    def deliver(self, feed: Feed, batch: int, events: Mapping[str, Any] | None) -> None:
        """Queue one batch's events (None: the stream was deleted). O(subscribers of the
        batch's stream), never awaits; cuts whoever goes over a limit."""
        if events is None:
            self._end_feed(feed)
            return
        limit = self.queue_bytes
        over: list[Subscription] = []
        wake = self._to_wake
        added = 0
        for wname, data in events.items():
            subs = feed.windows.get(wname)
            if not subs:
                continue
            if data is None:  # the window is gone from the stream
                for sub in list(subs):
                    self._end(sub, _gone(feed.name, wname))
                continue
            keyed = isinstance(data, list)  # a keyed stream's: (key, event) per key changed
            size = 0 if keyed else len(data)
            top = 0
            for sub in subs:
                queued = sub.queued
                if keyed:
                    mine = [b for k, b in data if sub.keys is None or k in sub.keys]
                    if not mine:
                        continue
                    size = sum(map(len, mine))
                if queued and queued + size > limit:
                    over.append(sub)
                    continue
                if keyed:
                    sub.queue.extend(mine)
                else:
                    sub.queue.append(data)
                sub.queued = queued = queued + size
                added += size
                if queued > top:
                    top = queued
                if sub.waiter is not None and not sub.waking:
                    sub.waking = True
                    wake.append(sub)
            self.held += top - feed.held.get(wname, 0)
            feed.held[wname] = top
        self.queued += added
        if wake and not self._waking:
            self._waking = True
            assert self.loop is not None
            self.loop.call_soon(self._wake_some)
        for sub in over:
            self._end(sub, self._too_slow(sub, batch, limit, "subscriber_queue_bytes"))
        if self.held > self.total_bytes:
            self._shed(batch)

    # -- internals
    def _wake_some(self) -> None:
        """Wake the next WAKE_SLICE waiting subscribers, then let the loop turn: with a
        thousand readers, an append arriving meanwhile waits for a slice of their writes,
        not for all of them."""
        wake = self._to_wake
        for _ in range(min(WAKE_SLICE, len(wake))):
            sub = wake.popleft()
            sub.waking = False
            sub._wake()
        if wake:
            assert self.loop is not None
            self.loop.call_soon(self._wake_some)
        else:
            self._waking = False

    def _shed(self, batch: int) -> None:
        """Over the total: cut the longest queues until what the rest hold fits. Cutting a
        window's longest queue frees what only it held: down to the window's next longest."""
        per_window: list[list[Subscription]] = []
        for feed in self.feeds.values():
            for wname, subs in feed.windows.items():
                ranked = sorted(subs, key=lambda s: s.queued)  # longest last
                top = ranked[-1].queued if ranked else 0  # exact again: readers read since
                self.held += top - feed.held.get(wname, 0)
                feed.held[wname] = top
                if top:
                    per_window.append(ranked)
        heap = [(-ranked[-1].queued, i) for i, ranked in enumerate(per_window)]
        heapq.heapify(heap)
        while self.held > self.total_bytes and heap:
            _, i = heapq.heappop(heap)
            ranked = per_window[i]
            sub = ranked.pop()
            feed, wname = sub.feed, sub.window
            self._end(sub, self._too_slow(sub, batch, self.total_bytes, "subscribers_total_bytes"))
            if wname in feed.held:  # others of the window remain: it holds their longest
                top = ranked[-1].queued if ranked else 0
                self.held += top - feed.held[wname]
                feed.held[wname] = top
                if top:
                    heapq.heappush(heap, (-top, i))

    def _too_slow(self, sub: Subscription, batch: int, limit: int, which: str) -> Ending:
        behind = len(sub.queue) + (1 if which == "subscriber_queue_bytes" else 0)
        oldest = max(1, batch - behind + 1)
        where = f"{sub.feed.name}/{sub.window}"
        if which == "subscriber_queue_bytes":
            what = f"its queue limit of {_mib(limit)} per subscriber"
        else:
            what = (
                f"the server's limit of {_mib(limit)} held for all subscribers together "
                "(each result counted once; this subscriber was the furthest behind)"
            )
        message = (
            f"subscriber of {where} fell {behind} results ({_mib(sub.queued)}) behind: batches "
            f"{oldest}..{batch} were not read, past {what}; read faster, or resubscribe and "
            "catch up with ReadResults"
        )
        return Ending(
            "RESOURCE_EXHAUSTED",
            Reason.SUBSCRIBER_TOO_SLOW,
            message,
            {
                "limit": str(limit),
                "limit_name": which,
                "queued_bytes": str(sub.queued),
                "queued_results": str(behind),
                "stream": sub.feed.name,
                "window": sub.window,
            },
        )

    def _end(self, sub: Subscription, why: Ending | None) -> None:
        if sub.ended is not None:
            return
        sub.ended = why or Ending("CANCELLED", Reason.UNSUBSCRIBED, "the subscriber went away")
        if why is not None and why.reason == Reason.SUBSCRIBER_TOO_SLOW:
            self.cut += 1
            log.warning(
                "subscriber cut",
                extra={"detail": why.message, "stream": sub.feed.name, "window": sub.window},
            )
            if self.on_cut is not None:
                self.on_cut(why)
        self.queued -= sub.queued
        self.dropped += sub.queued
        sub.queue.clear()
        sub.queued = 0
        self.count -= 1
        if self.dropped >= TRIM_AFTER:
            self._give_back()
        feed = sub.feed
        subs = feed.windows.get(sub.window)
        if subs is not None:
            subs.pop(sub, None)
            if not subs:
                del feed.windows[sub.window]
                feed.encoders.pop(sub.window, None)
                self.held -= feed.held.pop(sub.window, 0)
        if not feed.windows and self.feeds.get(feed.name) is feed:
            del self.feeds[feed.name]
            with contextlib.suppress(ValueError):
                feed.stream.listeners.remove(feed)
        sub._wake()

    def _give_back(self) -> None:
        """Trim the heap soon, on a helper thread, one trim at a time: without it the process
        keeps the pages of the dropped queues."""
        if self._trim is None or self._trimming or self.loop is None:
            return
        self._trimming = True
        loop = self.loop

        def start() -> None:
            self.dropped = 0
            assert self._trim is not None
            loop.run_in_executor(None, self._trim).add_done_callback(done)

        def done(_: Any) -> None:
            self._trimming = False
            if self.dropped >= TRIM_TAIL:  # dropped while it ran: the rest of the burst
                self._give_back()

        loop.call_later(TRIM_DELAY, start)

    def _end_feed(self, feed: Feed) -> None:
        """The feed's stream was deleted: end every subscription of it."""
        for wname, subs in list(feed.windows.items()):
            for sub in list(subs):
                self._end(sub, _gone(feed.name, wname, stream_deleted=True))


def _gone(stream: str, window: str, *, stream_deleted: bool = False) -> Ending:
    what = f"stream {stream!r}" if stream_deleted else f"window {stream}/{window}"
    return Ending(
        "NOT_FOUND",
        Reason.WINDOW_NOT_FOUND,
        f"{what} was deleted while subscribed to {stream}/{window}",
        {"stream": stream, "window": window},
    )
