"""The blocking client :class:`WindowClient`: each call through the blocking stub of the server
its stream lives on, in a loop that follows redirects and sleeps between tries (requests,
replies, retry policy and errors: :mod:`.calls`; the cluster: :mod:`.cluster_map`). A keyed
stream whose key groups are held apart on a cluster (:mod:`.key_groups`) has its appends split
and sent to the holders at once (a thread each, from a pool the client owns), its ListKeys
asked of every member at once, and its subscriptions opened at every holder, each read by a
thread into one iterator."""

from __future__ import annotations

import itertools
import queue
import threading
import time
import weakref
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from functools import partial
from typing import Any, TypeVar

import grpc

from mtawindows.v1 import convert
from mtawindows.v1 import windows_pb2 as pb
from mtawindows.v1.keepalive import KEEPALIVE_MS
from mtawindows.v1.types import (
    AppendResult,
    KeyInfo,
    StreamInfo,
    StreamSpec,
    WindowInfo,
    WindowResult,
    WindowSpec,
)

from . import calls
from .base import SUBSCRIBED, ClientBase
from .batch_writer import BatchWriter
from .calls import Key, KeyPage
from .channel import DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_TARGET, credentials, open_channel
from .cluster_map import ClusterMap
from .errors import MtaWindowsError, NotOwnerError, from_rpc_error
from .key_groups import KeyedAppend, Pending, merge_key_pages, missing_groups
from .pipeline import (
    BatchFeed,
    alone,
    at_batch,
    batches_call,
    check_arguments,
    resendable,
    timed_out,
)
from .rows import Rows

T = TypeVar("T")
MAX_PART_THREADS = 32  # threads sending the parts of split appends and ListKeys fan-outs
_END = object()  # a merged subscription's queue: a member's subscription ended


def _raising(ex: BaseException) -> Iterator[pb.AppendRequest]:
    """A source of batches that raises ``ex`` when the next batch is asked for."""
    yield from ()  # (nothing: a generator that raises at its first step)
    raise ex


class _Watchdog:
    """Cancels an AppendBatches call whose oldest unanswered batch was sent over ``limit``
    seconds ago (a server alive but stuck; a dead one fails the call by keepalive)."""

    def __init__(self, rpc: Any, feed: BatchFeed, limit: float) -> None:
        self.rpc = rpc
        self.feed = feed
        self.limit = limit
        self.expired = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="mtaw-batches")
        self._thread.start()

    def _run(self) -> None:
        step = min(1.0, self.limit / 4)
        while not self._stop.wait(step):
            oldest = self.feed.oldest()
            if oldest is not None and time.monotonic() - oldest > self.limit:
                self.expired = True
                self.rpc.cancel()
                return

    def stop(self) -> None:
        self._stop.set()


class _FanIn:
    """The subscriptions at several members of one :meth:`WindowClient.subscribe`: their
    events in one bounded queue (the readers wait while it is full), the calls open (all
    cancelled at :meth:`close`), the readers running, the members subscribed to every key."""

    def __init__(self, maxsize: int = 1024) -> None:
        self.queue: queue.Queue[Any] = queue.Queue(maxsize)
        self.stopped = threading.Event()
        self.lock = threading.Lock()
        self.calls: set[Any] = set()
        self.active = 0
        self.covered: set[str] = set()

    def put(self, item: Any) -> bool:
        """Queue ``item`` (waits while the queue is full); False once closed."""
        while not self.stopped.is_set():
            try:
                self.queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def track(self, call: Any) -> None:
        with self.lock:
            self.calls.add(call)
        if self.stopped.is_set():
            call.cancel()

    def untrack(self, call: Any) -> None:
        with self.lock:
            self.calls.discard(call)

    def start(self, target: Callable[[], None]) -> None:
        """Run a reader of one member's subscription."""
        with self.lock:
            self.active += 1
        threading.Thread(target=self._run, args=(target,), daemon=True, name="mtaw-sub").start()

    def _run(self, target: Callable[[], None]) -> None:
        try:
            target()
        except BaseException as ex:  # the merged iterator raises it
            self.put(ex)
        finally:
            with self.lock:
                self.active -= 1
            self.put(_END)

    def close(self) -> None:
        self.stopped.set()
        with self.lock:
            calls = list(self.calls)
        for c in calls:
            c.cancel()


class WindowClient(ClientBase):
    """Blocking client of the window service: one server, or a cluster of them.

    ``target``: the seeds, ``host:port``, ``"a:1,b:2"`` or a list of those: any servers of the
    cluster (one is enough; several survive one being down). The client learns the cluster's
    members from them (``GetClusterMap``) and sends each call about a stream to the server
    that owns it, following ``NOT_OWNER`` redirects and waiting out ``STREAM_MOVING``; an
    older server without cluster support is a cluster of one. ``token`` a bearer token;
    ``tls`` True (system roots) or a CA file; ``timeout`` the default deadline per try in
    seconds; ``channel`` an open channel to the first seed to use instead of one of its own.

    Retries (see :class:`~mtawindows.client.calls.Course`): ``retries`` tries at most per
    call (default: no count in a cluster; 5 on a server alone); ``retry_time`` the budget of
    one call in a cluster, in seconds from its first try: no new try starts after it
    (default 10: a failover is the lease, 2 s by default, then the new owner opening the
    stream; measured, a stream whose owner is cut off answers again 2-3 s later). Only reads
    and appends with a ``producer_id`` and ``sequence`` are sent again after their server
    failed or timed out (the same key every time: the new owner acknowledges a batch the
    old one applied as a duplicate); any call is resent after a ``NOT_OWNER``,
    ``STREAM_MOVING`` or ``MEMBER_ISOLATED`` (nothing was done). A server that fails a call
    (UNAVAILABLE for any reason, a timeout) is a suspect for a while: the map is asked of
    another member, and a stream whose owner this client cannot reach is reached through
    another member, which forwards the call (:mod:`.cluster_map`). An idempotent try that
    waits on a server looks at the map every half lease (from another member) and is given
    up once the map says the stream left that server. Every channel pings its server every
    ``keepalive_ms`` (default 1,000): a silent connection fails its calls in about twice that
    (:mod:`.channel`); on a link slower than a large request needs, raise it (the ping waits
    behind the request's bytes: a 16 MB append over 2 MB/s needs more than 8,000).
    ``refresh_interval``: the cluster map's longest life in seconds. ``address_map``: where
    this client dials a member's advertised address, ``{"10.0.0.5:50051": "localhost:15051"}``
    (a tunnel, a NAT, a proxy); the map and the errors keep the advertised address.
    ``max_message_bytes`` (default 64 MiB, the
    server's default too): the largest request sent and reply taken; a larger request
    raises :class:`~mtawindows.client.errors.MessageTooLargeError` (its size and the limit)
    before it is sent, and one over the server's own limit gets the same error from it."""

    def __init__(
        self,
        target: str | Sequence[str] = DEFAULT_TARGET,
        *,
        token: str | None = None,
        tls: bool | str | None = None,
        timeout: float = 30.0,
        retries: int | None = None,
        channel: grpc.Channel | None = None,
        retry_time: float = 10.0,
        refresh_interval: float = 30.0,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        address_map: Mapping[str, str] | None = None,
        keepalive_ms: int = KEEPALIVE_MS,
    ) -> None:
        super().__init__(
            target,
            token,
            timeout,
            retries,
            retry_time,
            refresh_interval,
            max_message_bytes,
            address_map,
            keepalive_ms,
        )
        self._creds = credentials(tls)
        first = self.seeds[0]
        self.channel = channel if channel is not None else self._open(first)
        self.stub = self._adopt(first, self.channel)  # the first seed's: raw calls
        self._executor: ThreadPoolExecutor | None = None

    def _open(self, address: str) -> grpc.Channel:
        return open_channel(
            self._dial(address), self._creds, self.max_message_bytes, self.keepalive_ms
        )

    def __enter__(self) -> WindowClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False)
        for channel in self._take_channels():
            channel.close()

    # -- the way of a call
    def _try(
        self,
        address: str,
        call: calls.Call[Any, T],
        timeout: float | None,
        course: calls.Course | None = None,
    ) -> T:
        """One try at ``address`` (forwarded, or watched, as ``course`` says); a failure
        raises typed, naming the server that answered."""
        try:
            if self._watched(course):
                assert course is not None
                reply = self._watch(address, call, timeout, course)
            else:
                forward = course is not None and course.forward
                reply = self._send(address, call, timeout, forward)
        except grpc.RpcError as err:
            raise from_rpc_error(err, address) from None
        self.topology.answered(address)
        return call.decode(reply)

    def _watch(
        self, address: str, call: calls.Call[Any, T], timeout: float | None, course: calls.Course
    ) -> Any:
        """The reply of an idempotent try at ``address``, looking at the map (asked of
        another member) every :meth:`_patience` seconds while it waits: given up (cancelled,
        :meth:`Course.abandoned`) once the stream left the server it means to reach."""
        began = time.monotonic()
        future = self._send(address, call, timeout, course.forward, future=True)
        patience = self._patience()
        try:
            while True:
                try:
                    return future.result(timeout=patience)
                except grpc.FutureTimeoutError:
                    pass
                if self._moved_away(course, address):
                    raise course.abandoned(time.monotonic() - began)
        finally:
            future.cancel()  # a no-op once it ended

    def _moved_away(self, course: calls.Course, address: str) -> bool:
        """Whether a fresh map (asked of a member other than ``address`` and the server the
        try means to reach) says the stream left that server (:meth:`Course.gone`)."""
        try:
            fresh = self._refresh([course.stream], strict=False, avoid=(address, course.aim))
        except MtaWindowsError:  # the map says nothing now (a stream deleted meanwhile...)
            return False
        return fresh and course.gone()

    def _run(
        self, call: calls.Call[Any, T], timeout: float | None, course: calls.Course | None = None
    ) -> T:
        course = course or self._course(call)
        while True:
            try:
                self._ensure_map(course)
                return self._try(course.address(), call, timeout, course)
            except MtaWindowsError as ex:
                step = self._failed(course, ex)  # raises when the call ends here
            time.sleep(step.pause)

    def _fan(self, tasks: Sequence[Callable[[], T]]) -> list[T]:
        """Run ``tasks`` at once (the first in this thread, the others in the client's
        pool) and return what each returned, in order."""
        if len(tasks) == 1:
            return [tasks[0]()]
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(MAX_PART_THREADS, "mtaw-part")
            executor = self._executor
        futures = [executor.submit(t) for t in tasks[1:]]
        first = tasks[0]()
        return [first, *(f.result() for f in futures)]

    def _ask(
        self, address: str, call: calls.Call[Any, T], timeout: float | None, course: Any = None
    ) -> T | MtaWindowsError:
        """One try at ``address``: its reply, or its error (returned, not raised)."""
        try:
            return self._try(address, call, timeout, course)
        except MtaWindowsError as ex:
            return ex

    def _group_holders(self, stream: str, force: bool = False) -> tuple[str, ...]:
        """The holders of ``stream``'s key groups, asked of the map first when due (a
        failure to get it leaves them unknown: the call goes to the stream's owner, where
        the routing's retries wait it out); () when not routed by group."""
        if self._members_due():
            self._refresh(strict=False)
        if self._holders_due(stream, force):
            self._refresh([stream], strict=False)
        return self._holders_now(stream)

    def _ensure_map(self, course: calls.Course) -> None:
        if course.lookup or self.topology.needs_refresh():
            lookup = self._lookup(course)
            course.lookup = False
            self._refresh(lookup, strict=not self.topology.known)

    def _refresh(
        self, streams: Sequence[str] = (), *, strict: bool = True, avoid: Sequence[str] = ()
    ) -> bool:
        """Ask the candidates (but ``avoid``; the suspects last) for the map and the owners
        of ``streams`` until one answers a fresh one (a stale one, from a member cut off from
        the cluster, is passed over: taken only if no other comes); raises when none answers
        and ``strict`` (else the map held stays). Whether a fresh map was learnt."""
        req = self._map_request(streams)
        tried: list[str] = []
        last: MtaWindowsError | None = None
        stale: tuple[pb.ClusterMap, str] | None = None
        for address in self.topology.candidates(avoid):
            tried.append(address)
            try:
                reply = self._stub(address).GetClusterMap(
                    req, timeout=self._map_timeout(), metadata=self.metadata
                )
            except grpc.RpcError as err:
                last = self._map_failure(err, address)
                if last is None:
                    return True
                continue
            if self._stale_map(reply, address):
                stale = stale or (reply, address)
                continue
            self.topology.learn(reply, address)
            return True
        return self._no_fresh_map(tried, last, stale, strict)

    # -- the cluster
    def cluster_map(self) -> ClusterMap:
        """The cluster as a member sees it now (asked of the members and seeds in turn;
        UnavailableError when none answers): the live members and the lease time. An older
        server without cluster support is a cluster of one (``lease_ms`` 0)."""
        self._refresh()
        return self._cluster_map()

    def owner(self, stream: str) -> str:
        """The address calls about ``stream`` go to: its owner, asked of the cluster now;
        while it has none (it is moving), where placement puts it among the live members.
        NotFoundError (``STREAM_NOT_FOUND``) at once when no member knows the stream."""
        self._refresh([stream])
        return self.topology.cached_owner(stream) or self.topology.route(stream)

    # -- streams
    def create_stream(self, spec: StreamSpec, *, timeout: float | None = None) -> StreamInfo:
        return self._run(calls.create_stream(spec), timeout)

    def delete_stream(self, name: str, *, timeout: float | None = None) -> None:
        self._forget_schema(name)
        self._run(calls.delete_stream(name), timeout)

    def list_streams(self, *, timeout: float | None = None) -> list[StreamInfo]:
        """Every stream of the cluster: each live member lists those it owns (sorted by name
        when there are several members)."""
        call = calls.list_streams()
        course = self._course(call)
        while True:
            try:
                self._ensure_map(course)
                lists = [self._try(a, call, timeout) for a in self.topology.member_addresses()]
                return calls.merge_streams(lists)
            except MtaWindowsError as ex:
                step = course.failed(ex)
            time.sleep(step.pause)

    def get_stream(self, name: str, *, timeout: float | None = None) -> StreamInfo:
        return self._run(calls.get_stream(name), timeout)

    # -- windows
    def create_window(self, spec: WindowSpec, *, timeout: float | None = None) -> WindowInfo:
        return self._run(calls.create_window(spec), timeout)

    def delete_window(self, stream: str, name: str, *, timeout: float | None = None) -> None:
        self._run(calls.delete_window(stream, name), timeout)

    def get_window(self, stream: str, name: str, *, timeout: float | None = None) -> WindowInfo:
        return self._run(calls.get_window(stream, name), timeout)

    def list_windows(self, stream: str, *, timeout: float | None = None) -> list[WindowInfo]:
        return self._run(calls.list_windows(stream), timeout)

    # -- data
    def schema(self, stream: str) -> dict[str, str]:
        """The stream's column types (cached): how :meth:`append` types the columns."""
        s = self._schemas.get(stream)
        if s is None:
            s = self._learn_stream(self.get_stream(stream))
        return s

    def append(
        self,
        stream: str,
        rows: Rows,
        *,
        producer_id: str | None = None,
        sequence: int | None = None,
        results: str = "none",
        windows: Sequence[str] = (),
        arrow: bool = False,
        timeout: float | None = None,
    ) -> AppendResult:
        """Append a batch atomically. ``results``: "none", "final" (each window's result
        after the batch) or "per_row" (each window's result after every row, columnar:
        ``row_results[window][column]`` lists; with ``arrow=True`` instead
        ``row_tables[window]``, a ``pyarrow.Table`` per window: a column per output, struct
        outputs as struct columns, null where the window was empty, then ``_size`` (the
        window's size after the row) and ``_row`` (the row of ``rows`` it follows), sent as
        Arrow IPC: no value becomes a Python object on the way).
        With ``producer_id`` and ``sequence`` the append is idempotent: retried (across a
        failover too) with the same key, applied once.

        A keyed stream whose key groups are held by several members of a cluster: the rows
        are split by the holder of each row's key group and the parts sent at once, each
        with the same ``producer_id`` and ``sequence`` (idempotency is kept per group); the
        answer is merged as one server would give it (:func:`.key_groups.merge_append`:
        per-row results in the input's order). Atomic per holder only: a part refused for
        its rows fails the call while the others may be applied; send it again with the
        same key to apply the rest (without a key, a retry applies the applied parts twice).
        A part refused because its groups moved (``NOT_OWNER``, ``STREAM_MOVING``) is sent
        again alone, split by a fresh map."""
        schema = self.schema(stream)
        req = calls.append_request(
            stream, rows, schema, producer_id, sequence, results, windows, arrow
        )
        return self._append_request(req, timeout)

    def _append_request(self, req: pb.AppendRequest, timeout: float | None) -> AppendResult:
        key_field = self._key_field(req.stream)
        if key_field:
            return self._append_keyed(req, key_field, timeout)
        return self._run(calls.append(req), timeout)

    def append_batches(
        self,
        stream: str,
        batches: Iterable[Rows],
        *,
        producer_id: str | None = None,
        start_sequence: int = 1,
        results: str = "none",
        windows: Sequence[str] = (),
        arrow: bool = False,
        in_flight: int = 4,
        timeout: float | None = None,
    ) -> Iterator[AppendResult]:
        """Append ``batches`` in order, pipelined over one ``AppendBatches`` call: the next
        batches are encoded and sent while the server applies one (at most ``in_flight``
        unanswered), and the answers come back in order. Returns an iterator of each batch's
        :class:`AppendResult`, as :meth:`append` returns it (``results``, ``windows``,
        ``arrow`` as there); the batches are pulled from ``batches`` as the pipeline has
        room (a generator may make them as it goes). Each batch is atomic, as an Append.

        With ``producer_id`` the batches carry sequences ``start_sequence``,
        ``start_sequence + 1``, ... and are idempotent: after a call cut while batches were
        unanswered (a failover, a server's stop, the network) those are sent again and
        applied once (an answer then says ``duplicate`` for one applied before the cut).
        Without it, a batch refused because its stream is elsewhere or its server stopping
        (nothing of it applied) is sent again too; a call cut otherwise raises, and the
        answers yielded before say which batches were applied (the ones after may or may
        not have been). A batch refused for itself raises its error after the answers of the
        batches before it (none after it is applied); ``metadata["batch"]`` is its index in
        ``batches``. ``timeout``: seconds each batch's answer may take from its send
        (default: the client's). A keyed stream whose key groups are held apart on a
        cluster, and a batch over 4 MB of Arrow, go as :meth:`append` sends them, in
        turn."""
        check_arguments(results, arrow, in_flight, producer_id, start_sequence)
        return self._append_batches(
            stream, iter(batches), producer_id, start_sequence, results, windows, arrow,
            in_flight, timeout,
        )  # fmt: skip

    def _append_batches(
        self,
        stream: str,
        batches: Iterator[Rows],
        producer_id: str | None,
        start_sequence: int,
        results: str,
        windows: Sequence[str],
        arrow: bool,
        in_flight: int,
        timeout: float | None,
    ) -> Generator[AppendResult, None, None]:
        schema = self.schema(stream)
        first = start_sequence if producer_id else None

        def requests() -> Iterator[pb.AppendRequest]:
            for i, rows in enumerate(batches):
                seq = first + i if first is not None else None
                req = calls.append_request(
                    stream, rows, schema, producer_id, seq, results, windows, arrow
                )
                if not alone(req):  # (one that goes alone is checked as append checks it)
                    self._check_size("AppendBatches", req)
                yield req

        source: Iterator[pb.AppendRequest] = requests()
        if self._key_field(stream) and len(self._group_holders(stream)) > 1:
            for i, req in enumerate(source):  # held apart: each batch split by holder
                try:
                    yield self._append_request(req, timeout)
                except MtaWindowsError as ex:
                    raise at_batch(ex, i) from None
            return
        done = 0  # batches answered
        idempotent = bool(producer_id)
        while True:
            feed = BatchFeed(source, in_flight, alone)
            ended = yield from self._pipeline(stream, feed, timeout)
            done += feed.answers
            if ended is not None and not resendable(ended, feed.unanswered(), idempotent):
                feed.stop()  # not waiting for a batch the feed may be pulling (it may block)
                raise at_batch(ended, done)
            left = feed.close()  # the batches sent and unanswered, or held back, in order
            if not left:
                if feed.error is not None:  # a batch that did not encode: at its turn
                    raise at_batch(feed.error, done)
                if ended is None:
                    return
                # the call failed before a batch was sent: the next goes by Append
                try:
                    left = list(itertools.islice(source, 1))
                except Exception as ex:  # the next batch did not encode
                    raise at_batch(ex, done) from None
                if not left:
                    return
            if feed.error is not None:  # raised after the batches left before it
                source = _raising(feed.error)
            # the first batch left goes through Append (which follows the cluster, waits out
            # a move, sends a large batch in pieces, and gives up as an Append would), the
            # rest over a new call
            try:
                yield self._append_request(left[0], timeout)
            except MtaWindowsError as ex:
                raise at_batch(ex, done) from None
            done += 1
            source = itertools.chain(left[1:], source)

    def _pipeline(
        self, stream: str, feed: BatchFeed, timeout: float | None
    ) -> Generator[AppendResult, None, MtaWindowsError | None]:
        """One AppendBatches call at the stream's server: each answer yielded as it comes;
        returns how the call ended (None: every batch sent was answered) and leaves in
        ``feed`` what was not answered. A batch unanswered ``timeout`` seconds after its send
        cancels the call (DEADLINE_EXCEEDED)."""
        course = self._course(batches_call(stream))
        try:
            self._ensure_map(course)
        except MtaWindowsError as ex:
            return ex
        address = course.address()
        rpc = self._stub(address).AppendBatches(iter(feed), metadata=self.metadata)
        watch = _Watchdog(rpc, feed, timeout or self.timeout)
        try:
            for reply in rpc:
                feed.answer()
                yield convert.append_result_from_proto(reply)
        except grpc.RpcError as err:
            if watch.expired:
                return timed_out(address, watch.limit)
            return from_rpc_error(err, address)
        finally:
            watch.stop()
            rpc.cancel()  # a no-op once it ended; else (the caller left) it ends here
        self.topology.answered(address)
        return None

    def _append_keyed(
        self, req: pb.AppendRequest, key_field: str, timeout: float | None
    ) -> AppendResult:
        """An Append to a keyed stream: split by group holder where they are held apart,
        else whole to the stream's owner; a whole one refused for a group (the groups came
        to be held apart meanwhile) is split by a fresh map."""
        again = False
        while True:
            self._group_holders(req.stream, force=again)
            plan = KeyedAppend(
                req, key_field, self.topology, retries=self.retries, retry_time=self.retry_time
            )
            if plan.start():
                return self._drive(plan, timeout)
            call = calls.append(req)
            course = self._course(call)
            course.follow_groups = again
            try:
                return self._run(call, timeout, course)
            except NotOwnerError as ex:
                if again or calls.named_group(ex) is None:
                    raise
            again = True

    def _drive(self, plan: KeyedAppend, timeout: float | None) -> AppendResult:
        """Send the parts of a split Append at once, round after round until each is
        answered (:class:`~.key_groups.KeyedAppend`), and merge the answers."""
        try:
            while plan.pending:
                outcomes = self._fan([partial(self._send_part, p, timeout) for p in plan.pending])
                pause = plan.settle(outcomes)
                if plan.pending:
                    time.sleep(pause)
                    self._refresh([plan.stream], strict=False)
                    plan.resplit()
        except MtaWindowsError as ex:
            self._gone(ex, plan.stream)
            raise
        return convert.append_result_from_proto(plan.result())

    def _send_part(self, p: Pending, timeout: float | None) -> Any:
        p.course.aim_at(p.part.address)
        return self._ask(p.part.address, p.course.call, timeout, p.course)

    def query(
        self,
        stream: str,
        window: str,
        *,
        key: Key | None = None,
        range: timedelta | None = None,
        count: int | None = None,
        timeout: float | None = None,
    ) -> WindowResult:
        """The window's result; of a keyed stream, ``key``'s (a str, or an int of an INT64 key
        field): required there (FailedPreconditionError ``NOT_KEYED`` without it), refused
        elsewhere. NotFoundError ``KEY_NOT_FOUND`` for a key the stream does not hold. On a
        cluster holding the key groups apart, asked of the holder of the key's group.

        Query-time ranges: with ``range`` (a timedelta: the rows newer than the newest minus
        it, as a time-range policy counts them) or ``count`` (the newest rows), the result over
        that suffix of the window, ``size`` its rows (a range or count longer than the window:
        the whole window). Answered in O(log n) by AMTA, LMTA, FLATFAT, BINT and FLATFIT;
        FailedPreconditionError ``RANGE_NOT_SUPPORTED`` for the other algorithms, a hopping
        window, or a time range on a window whose aggregates hold no timestamp."""
        call = calls.query(stream, window, key, range, count)
        return self._run(call, timeout, self._keyed_course(call, call.request.key))

    def compute(
        self,
        stream: str,
        rows: Any,
        *,
        windows: Sequence[str] = (),
        key_column: str | None = None,
        context_rows: int = 0,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Per-row results of ``stream``'s windows over ``rows`` (a pyarrow Table or
        RecordBatch, or a pandas DataFrame) without storing anything: the results an Append
        with PER_ROW results of the same rows into a fresh copy of the stream would give, each
        key's rows (``key_column``, default the stream's key field; none: all rows one window)
        one window starting empty. A key's rows must be together and in timestamp order.
        Returns window name -> ``pyarrow.Table``: one column per output, ``_size`` and
        ``_row`` (the row of ``rows``). ``windows``: which (default every one). The first
        ``context_rows`` rows (all of the first key) only fill its window: no results for
        them. Windows of built-in monoids over a count or a time range (else
        FailedPreconditionError ``NOT_COLUMNAR``)."""
        call = calls.compute(stream, rows, windows, key_column, context_rows)
        return self._run(call, timeout)

    def _keyed_course(self, call: calls.Call[Any, Any], key: str) -> calls.Course | None:
        """The course of a call about one key: to its group's holder where the stream's
        groups are held apart (None: to the stream's owner)."""
        if not key:
            return None
        self._group_holders(call.stream)
        return self._key_course(call, key)

    def read_results(
        self,
        stream: str,
        window: str,
        *,
        after_sequence: int = 0,
        limit: int = 0,
        timeout: float | None = None,
    ) -> tuple[list[WindowResult], int]:
        """Results of a window with a sequence above ``after_sequence``, oldest first (at most
        ``limit``; 0 = the server's default), and the window's latest sequence."""
        return self._run(calls.read_results(stream, window, after_sequence, limit), timeout)

    def subscribe(
        self,
        stream: str,
        window: str,
        *,
        keys: Iterable[Key] = (),
        timeout: float | None = None,
    ) -> Generator[tuple[int, WindowResult], None, None]:
        """(batch number, result) after every batch applied to the stream from the moment this
        returns (the stream's owner confirms the subscription before it does). ``timeout``
        bounds the whole subscription; close the iterator (or let it go) to cancel. On a keyed
        stream each result is one key's (``result.key``): of ``keys`` only, when given (else
        of every key).

        When the stream moves to another server (``NOT_OWNER``, ``STREAM_MOVING``; in a
        cluster, also its server failing), the iterator subscribes again at the new owner
        by itself: the results of the batches applied in between are not seen (the batch
        numbers are per server); :meth:`read_results` catches up on them by sequence.

        A keyed stream whose key groups are held apart on a cluster: the iterator subscribes
        at every member holding a group of ``keys`` (each to its keys), or at every live
        member (no ``keys``), and yields their events as they come (one thread reads each;
        the batch numbers are each member's own, and events of different members are in no
        particular order). When a member's subscription ends because a group moved
        (``NOT_OWNER``, ``STREAM_MOVING``, the member failing), the map is asked again and
        the keys of those groups are subscribed to at their holders now: as for a moved
        stream, the events of the batches applied in between are missed."""
        call = calls.subscribe(stream, window, keys)
        deadline = None if timeout is None else time.monotonic() + timeout
        if call.request.keys and self._group_holders(stream):  # a keyed stream's keys
            return self._subscribe_groups(call, deadline)
        sub, address, first = self._subscribe(call, deadline, None)
        if not call.request.keys and self._held_apart(stream, sub):
            return self._subscribe_groups(call, deadline, (sub, address, first))
        return self._follow(call, deadline, sub, address, first)

    def _held_apart(self, stream: str, sub: Any) -> bool:
        """After a subscription to every key (or an unkeyed stream's) is confirmed at the
        stream's owner: whether the stream is keyed with its groups held apart (its keying
        cached with its schema: one GetStream per stream). When that cannot be told, the
        subscription goes on as it is."""
        if not self.topology.clustered:
            return False
        try:
            self.schema(stream)
            return bool(self._key_field(stream)) and bool(self._group_holders(stream))
        except MtaWindowsError:
            return False
        except BaseException:
            sub.cancel()
            raise

    # -- a subscription at every holder
    def _subscribe_groups(
        self,
        call: calls.Call[Any, Any],
        deadline: float | None,
        given: tuple[Any, str, Any] | None = None,
    ) -> Generator[tuple[int, WindowResult], None, None]:
        """Subscribe at every holder (each confirmed before this returns), then merge."""
        req = call.request
        fan = _FanIn()
        slots = self._fan_slots(fan, req, deadline, given)
        try:
            for address, ks in slots.items():
                self._open_slot(fan, req.stream, req.window, address, ks, deadline)
        except BaseException:
            fan.close()
            raise
        merged = self._merged(fan)
        weakref.finalize(merged, fan.close)  # let go before its first event: closed too
        return merged

    def _merged(self, fan: _FanIn) -> Generator[tuple[int, WindowResult], None, None]:
        try:
            while True:
                item = fan.queue.get()
                if item is _END:
                    if fan.active == 0:
                        return
                    continue
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            fan.close()

    def _open_slot(
        self,
        fan: _FanIn,
        stream: str,
        window: str,
        address: str,
        keys: list[str] | None,
        deadline: float | None,
    ) -> None:
        """Subscribe at ``address`` to ``keys`` (None: every key), confirmed, then read it
        in a thread of its own."""
        got = self._confirm_slot(fan, stream, window, address, keys, deadline, None)
        if got is not None:
            self._start_slot(fan, stream, window, deadline, got)

    def _start_slot(
        self,
        fan: _FanIn,
        stream: str,
        window: str,
        deadline: float | None,
        got: tuple[Any, str, list[str] | None, Any],
    ) -> None:
        fan.start(partial(self._read_slot, fan, stream, window, deadline, *got))

    def _confirm_slot(
        self,
        fan: _FanIn,
        stream: str,
        window: str,
        address: str,
        keys: list[str] | None,
        deadline: float | None,
        ended: MtaWindowsError | None,
    ) -> tuple[Any, str, list[str] | None, Any] | None:
        """A confirmed subscription at a member to ``keys`` (the call, its address, its keys,
        an event read ahead or None). After ``ended`` (how the last one there ended), or a
        failed try: wait as the routing says, ask the map again, and go where the keys'
        groups are held now (other members' keys open subscriptions of their own). None
        when it ends: closed, or every key's at a member gone from the map."""
        call = calls.subscribe(stream, window, keys or ())
        course = self._course(call, retry=True, groups=self._key_groups_of(stream, keys or ()))
        step = None if ended is None else calls.resume(course, ended)
        while not fan.stopped.is_set():
            if step is not None:
                if fan.stopped.wait(step.pause):
                    return None
                self._refresh([stream], strict=False)
                with fan.lock:
                    at, keys, others = self._reslot(stream, address, keys, fan.covered)
                for other, ks in others.items():
                    self._open_slot(fan, stream, window, other, ks, deadline)
                if at is None:
                    return None
                address = at
                call = calls.subscribe(stream, window, keys or ())
            assert isinstance(course, calls.GroupCourse)
            course.aim_at(address)
            try:
                sub = self._subscription(address, call, calls.left(deadline))
                fan.track(sub)
                try:
                    if any(k == SUBSCRIBED for k, _ in sub.initial_metadata() or ()):
                        self.topology.answered(address)
                        return sub, address, keys, None
                    return sub, address, keys, next(sub, None)
                except grpc.RpcError as err:
                    sub.cancel()
                    fan.untrack(sub)
                    raise from_rpc_error(err, address) from None
            except MtaWindowsError as ex:
                step = calls.resume(course, ex)
        return None

    def _read_slot(
        self,
        fan: _FanIn,
        stream: str,
        window: str,
        deadline: float | None,
        sub: Any,
        address: str,
        keys: list[str] | None,
        first: Any,
    ) -> None:
        """Read one member's subscription into the merged queue; when it ends for a move,
        subscribe again (:meth:`_confirm_slot`) and read on."""
        try:
            if first is not None and not fan.put(calls.event(first)):
                return
            while True:
                try:
                    for m in sub:
                        if not fan.put(calls.event(m)):
                            return
                    return
                except grpc.RpcError as err:
                    if fan.stopped.is_set() or err.code() == grpc.StatusCode.CANCELLED:
                        return
                    ended = from_rpc_error(err, address)
                fan.untrack(sub)
                got = self._confirm_slot(fan, stream, window, address, keys, deadline, ended)
                if got is None:
                    return
                sub, address, keys, first = got
                if first is not None and not fan.put(calls.event(first)):
                    return
        finally:
            sub.cancel()

    def _subscribe(
        self, call: calls.Call[Any, Any], deadline: float | None, ended: MtaWindowsError | None
    ) -> tuple[Any, str, Any]:
        """A confirmed subscription (the call, its address, an event read ahead or None);
        after ``ended`` (how the last one ended) unless that ends the subscription."""
        course = self._course(call, retry=self.topology.clustered)
        step = None if ended is None else calls.resume(course, ended)
        while True:
            if step is not None:
                time.sleep(step.pause)
            try:
                self._ensure_map(course)
                address = course.address()
                sub = self._subscription(address, call, calls.left(deadline))
                try:
                    if any(k == SUBSCRIBED for k, _ in sub.initial_metadata() or ()):
                        self.topology.answered(address)
                        return sub, address, None
                    return sub, address, next(sub, None)  # refused, or a server without
                except grpc.RpcError as err:  # the header: the first event tells
                    sub.cancel()
                    raise from_rpc_error(err, address) from None
            except MtaWindowsError as ex:
                step = calls.resume(course, ex)

    def _follow(
        self,
        call: calls.Call[Any, Any],
        deadline: float | None,
        sub: Any,
        address: str,
        first: Any,
    ) -> Generator[tuple[int, WindowResult], None, None]:
        try:
            if first is not None:
                yield calls.event(first)
            while True:
                try:
                    for m in sub:
                        yield calls.event(m)
                    return
                except grpc.RpcError as err:
                    if err.code() == grpc.StatusCode.CANCELLED:  # we went away
                        return
                    ended = from_rpc_error(err, address)
                sub.cancel()
                sub, address, first = self._subscribe(call, deadline, ended)
                if first is not None:
                    yield calls.event(first)
        finally:
            sub.cancel()

    # -- keyed streams
    def list_keys(
        self,
        stream: str,
        *,
        prefix: str = "",
        limit: int = 0,
        page_token: str = "",
        timeout: float | None = None,
    ) -> KeyPage:
        """One page of a keyed stream's keys, in key order (their text, bytewise): those
        starting with ``prefix``, at most ``limit`` (0: the server's default, 1000) after
        ``page_token`` (the last page's ``next_page_token``; "" from the start). Each
        :class:`~mtawindows.v1.types.KeyInfo` has its counters, no results;
        ``next_page_token`` is "" after the last page. FailedPreconditionError ``NOT_KEYED``
        on an unkeyed stream.

        On a cluster holding the key groups apart, every live member is asked at once (each
        answers the keys of the groups it holds, and which) and the pages are merged in key
        order (:func:`.key_groups.merge_key_pages`; ``limit`` 0 is 1000). When some groups
        were answered by no member (they move), the map is asked again and the members
        again, after the routing's pause, until the retry time runs out: then the error
        (STREAM_MOVING naming the groups, or the member's that failed to answer) is raised,
        never a page with a moving group's keys left out."""
        if self._group_holders(stream):
            return self._list_keys_members(stream, prefix, limit, page_token, timeout)
        return self._run(calls.list_keys(stream, prefix, limit, page_token), timeout)

    def _list_keys_members(
        self, stream: str, prefix: str, limit: int, page_token: str, timeout: float | None
    ) -> KeyPage:
        call = calls.list_keys_part(stream, prefix, limit, page_token)
        course = self._course(call)
        pages: list[pb.ListKeysResponse] = []
        while True:
            addresses = self.topology.live()
            outcomes = self._fan([partial(self._ask, a, call, timeout) for a in addresses])
            pages, failure = self._sort_pages(addresses, outcomes)
            missing = missing_groups(pages, len(self._holders_now(stream)))
            if not missing:
                break
            # groups nobody answered for (moving): again after the routing's pause, until its
            # retry time runs out (then the error: never a page with keys left out)
            step = self._failed(course, failure or self._moving(stream, missing))
            time.sleep(step.pause)
            self._refresh([stream], strict=False)
            if not self._holders_now(stream):  # no longer held apart: ask the owner
                return self._run(calls.list_keys(stream, prefix, limit, page_token), timeout)
        keys, token = merge_key_pages(pages, limit)
        return KeyPage([convert.key_info_from_proto(k) for k in keys], token)

    def iter_keys(
        self,
        stream: str,
        *,
        prefix: str = "",
        page_size: int = 1000,
        timeout: float | None = None,
    ) -> Iterator[KeyInfo]:
        """Every key of a keyed stream starting with ``prefix``, in key order: :meth:`list_keys`
        page after page of ``page_size`` (``timeout``: per page), as they are read."""
        token = ""
        while True:
            page = self.list_keys(
                stream, prefix=prefix, limit=page_size, page_token=token, timeout=timeout
            )
            yield from page.keys
            if not page.next_page_token:
                return
            token = page.next_page_token

    def get_key(self, stream: str, key: Key, *, timeout: float | None = None) -> KeyInfo:
        """One key of a keyed stream: its counters and each window's result for it
        (``results``, by window name). NotFoundError ``KEY_NOT_FOUND`` when the stream does
        not hold it. On a cluster holding the key groups apart, asked of the holder of the
        key's group."""
        call = calls.get_key(stream, key)
        return self._run(call, timeout, self._keyed_course(call, call.request.key))

    def delete_key(self, stream: str, key: Key, *, timeout: float | None = None) -> None:
        """Drop a key and its state in every window (a later row creates it again). Not
        idempotent: not sent again after its server failed or timed out (NotFoundError
        ``KEY_NOT_FOUND`` when the key is gone). On a cluster holding the key groups apart,
        sent to the holder of the key's group."""
        call = calls.delete_key(stream, key)
        self._run(call, timeout, self._keyed_course(call, call.request.key))

    def writer(
        self,
        stream: str,
        *,
        batch_rows: int = 10_000,
        producer_id: str | None = None,
        start_sequence: int = 1,
        max_pending: int = 4,
    ) -> BatchWriter:
        """A batching writer: rows go out in batches of ``batch_rows`` with increasing
        sequence numbers (idempotent, so retried); at most ``max_pending`` batches wait for
        the sender before :meth:`BatchWriter.write` blocks (back-pressure)."""
        return BatchWriter(self, stream, batch_rows, producer_id, start_sequence, max_pending)


__all__ = ["WindowClient"]
