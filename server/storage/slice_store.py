"""A columnar window's Redis tier (:class:`SliceStore`): its sealed slices' rows, written
once, and a checkpoint of what it holds in the process.

A :class:`~mtawindows.server.engine.columnar.ColumnarWindow` keeps its rows in slices of a few
thousand (stream slicing); a sealed slice never changes until it leaves the window whole. So
each sealed slice is written to Redis once, as one value (its columns as one Arrow IPC
stream), with a header (its first row's position, its rows, its newest timestamp, its lifted
aggregate) in one hash, and the process keeps only the columns it reads: the slices where the
window starts (eviction reads them) and the tail of unsealed rows. The tree over the slices'
aggregates stays in the process (one item per slice: a 10^7-row window holds 2,442)::

    {tag}:s:<k>     string  slice k's columns (Arrow IPC), written once
    {tag}:sidx      hash    k -> [start, rows, newest timestamp, aggregate]: every live slice
    {tag}:cckpt     string  the checkpoint: positions, counters, the tail's rows, the caller's meta

``{tag}`` is the window's (:class:`~.keys.WindowKeys`): a service window shares its stream's
hash tag, so its stream's fence guards every write.

**Order and atomicity.** Every write runs on the store's writer thread in submission order
(as the pair store's blocks): a slice is in Redis before any checkpoint that counts it. A
checkpoint is one atomic (fenced) write: its state, and the deletion of the slices that left
the window since the last one. A slice is deleted only with the checkpoint that no longer
needs it, so a window reloaded from any checkpoint finds every slice it names. Slices sealed
after the last checkpoint (a crash before the next) are not counted by it: a reload ignores
them, and sealing them again overwrites them. Reads need no order with the writes (a window
reads a slice only once its write completed, and a written slice never changes): a read
ahead runs on the process's read-ahead threads, not behind the window's queued writes.

**Failures** are the pair store's: a failed write makes the window reload its last
checkpoint (:class:`~.protocol.StoreUnavailableError`, :class:`~.fencing.FencedError` once a
newer owner holds the stream).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from .codecs import codec_for, packb, unpackb
from .connect import pipeline_on_key_node
from .fencing import Op, check_reply, fenced, fenced_together
from .protocol import CorruptDataError, StoreError
from .redis_store import RedisStore, _describe
from .resp import bulk_view

__all__ = ["READ_AHEAD_THREADS", "SLICE_FORMAT", "SliceHeader", "SliceStore"]

SLICE_FORMAT = "c1"
READ_AHEAD_THREADS = 4  # the process's threads reading slices ahead, for every window

_readers: ThreadPoolExecutor | None = None
_readers_lock = threading.Lock()


def _read_ahead_pool() -> ThreadPoolExecutor:
    """The threads every window's reads ahead run on (made on first use)."""
    global _readers
    with _readers_lock:
        if _readers is None:
            _readers = ThreadPoolExecutor(READ_AHEAD_THREADS, thread_name_prefix="mtaw-read-ahead")
        return _readers


# (start, rows, newest timestamp or None, the aggregate's packed bytes)
SliceHeader = tuple[int, int, Any, bytes]


class SliceStore(RedisStore):
    """The Redis tier of one columnar window (see the module docstring). Its connection,
    writer thread, fence, errors and counters are a :class:`RedisStore`'s; its data are
    slices and one checkpoint, not level pairs."""

    def bind(self, monoid: Any, policy: Any, layout: str) -> str:
        """Take the window's monoid (its codec packs the slices' aggregates) and policy; the
        window's description (saved with every checkpoint, checked on load: a stored window
        opened with another definition would give wrong results)."""
        if self.codec is None:
            self.codec = codec_for(monoid)
        return f"{_describe(monoid)} | {_describe(policy)} | {layout}"

    def slice_key(self, k: int) -> str:
        return f"{self.keys.tag}:s:{k}"

    @property
    def index_key(self) -> str:
        return f"{self.keys.tag}:sidx"

    @property
    def checkpoint_key(self) -> str:
        return f"{self.keys.tag}:cckpt"

    # -- writing (the writer thread, in order)
    def put_slices(
        self, slices: Sequence[tuple[int, SliceHeader, Any]], encode: Callable[[Any], Any]
    ) -> Future[None]:
        """Queue the writes of ``slices`` (``(k, header, columns)``; ``encode(columns)`` gives
        the value, bytes or a buffer, on the writer thread: the columns must not change) as
        one atomic write, one round trip: the slices a batch sealed go together. A value is
        sent from its buffer as it is (:func:`~.resp.bulk_view`: not copied into the
        command first)."""
        items = [(k, packb(list(header)), cols) for k, header, cols in slices]

        def write() -> None:
            ops: list[Op] = []
            fields: list[Any] = []
            size = 0
            for k, head, cols in items:
                value = encode(cols)
                ops.append(("SET", self.slice_key(k), (bulk_view(value),)))
                fields += [k, head]
                size += memoryview(value).nbytes + len(head)
            ops.append(("HSET", self.index_key, tuple(fields)))
            self._write_slices(ops)
            st = self.stats
            st.round_trips += 1
            st.bytes_written += size

        self.stats.writes += 1
        return self._submit(f"write slice(s) {[k for k, _, _ in items]}", write, write=True)

    def _write_slices(self, ops: list[Op]) -> None:
        """``ops`` (a group of slices, megabytes) as one fenced write: an optimistic
        transaction when the stream is fenced (:func:`fenced_together`: ``WATCH`` the fence,
        ``MULTI``/``EXEC``; the fence script copies every argument into Lua and back, which
        took Redis 8-16 ms for a group of 32 slices and held the reads ahead behind it), the
        script when the fence did not hold this writer's token (it says whether a newer owner
        holds the stream: :class:`~.fencing.FencedError`, nothing written)."""
        fence = self.fence
        if fence is None or not fence.active:
            fenced(self._client, fence, ops)
            return
        pipe = pipeline_on_key_node(self._client, self.index_key)
        got = fenced_together(pipe, [(fence, ops)])
        if got is None:
            fenced(self._client, fence, ops)
        elif isinstance(got[0], BaseException):
            raise check_reply(got[0], fence)

    def commit(
        self, state: dict[str, Any], dropped: Sequence[int], *, wait: bool = True
    ) -> Future[None]:
        """Queue a checkpoint (``state``: plain data and bytes) and the deletion of the slices
        ``dropped`` (they left the window since the last one) as one atomic write, behind
        every slice write queued before it; with ``wait``, return once Redis has it."""
        blob = packb({**state, "format": SLICE_FORMAT})
        gone = list(dropped)

        def write() -> None:
            ops: list[Op] = [("SET", self.checkpoint_key, (blob,))]
            if gone:
                ops.append(("HDEL", self.index_key, tuple(gone)))
                ops.extend(("UNLINK", self.slice_key(k), ()) for k in gone)
            fenced(self._client, self.fence, ops)
            st = self.stats
            st.round_trips += 1
            st.bytes_written += len(blob)
            st.blocks_deleted += len(gone)

        if self._failed is not None:
            raise self._failed
        fut = self._submit("write a checkpoint", write, write=True)
        self.stats.checkpoints += 1
        if wait:
            try:
                self._wait(fut)
            except StoreError as ex:  # skipped after a slice's write failed: that failure
                raise (self._failed or ex) from None
        return fut

    # -- reading
    def read_slices(self, ks: Sequence[int]) -> list[bytes]:
        """Slices ``ks``' columns, in one round trip, on the caller's thread (each must be
        written: the caller reads only slices whose write completed)."""
        return self._direct(f"read {len(ks)} slice(s)", lambda: self._read(list(ks)))

    def prefetch_slices(self, ks: Sequence[int]) -> Future[list[bytes]]:
        """:meth:`read_slices` in the background: a read ahead, whose result the window takes
        when it needs the slices. On the process's read-ahead threads, not behind the
        window's queued writes (see the module docstring: queued behind them, a read ahead
        waited for a group of slices' write, ~8 ms, and the batch that needed it waited too:
        a tenth of the batches of a 600 s window reading its start back). Its failure fails
        no write (the window reads the slices itself then, and sees the error)."""
        doing = f"read {len(ks)} slice(s) ahead"
        return _read_ahead_pool().submit(self._run, doing, False, self._read, list(ks))

    def _read(self, ks: list[int]) -> list[bytes]:
        pipe = self._client.pipeline(transaction=False)
        for k in ks:
            pipe.get(self.slice_key(k))
        got = list(pipe.execute())
        st = self.stats
        st.round_trips += 1
        st.reads += 1
        st.misses += len(ks)
        missing = [k for k, v in zip(ks, got, strict=True) if v is None]
        if missing:
            msg = (
                f"window {self.window_id!r}: slice(s) {missing} are not in Redis at "
                f"{self.slice_key(missing[0])!r}, but the window holds them"
            )
            raise CorruptDataError(msg)
        st.bytes_read += sum(len(v) for v in got)
        return got

    def load(self) -> tuple[dict[str, Any] | None, dict[int, SliceHeader]]:
        """The last checkpoint (None: none was written) and every slice header in Redis (the
        checkpoint's, and any sealed after it)."""

        def go() -> tuple[Any, Any]:
            pipe = self._client.pipeline(transaction=True)
            pipe.get(self.checkpoint_key)
            pipe.hgetall(self.index_key)
            ckpt, index = pipe.execute()
            return ckpt, index

        ckpt, index = self._direct("load the checkpoint and the slices' index", go)
        self.stats.round_trips += 1
        try:
            state = None
            if ckpt is not None:
                state = unpackb(ckpt)
                if not isinstance(state, dict) or state.get("format") != SLICE_FORMAT:
                    msg = f"not a columnar window's checkpoint of format {SLICE_FORMAT!r}"
                    raise CorruptDataError(msg)
            headers: dict[int, SliceHeader] = {}
            for k, v in index.items():
                start, n, newest, agg = unpackb(v)
                headers[int(k)] = (int(start), int(n), newest, bytes(agg))
        except (CorruptDataError, KeyError, TypeError, ValueError) as ex:
            msg = f"window {self.window_id!r}: its columnar checkpoint or slice index is not valid ({ex})"
            raise CorruptDataError(msg) from ex
        self.stats.bytes_read += len(ckpt or b"")
        return state, headers

    @property
    def failed(self) -> Any:
        """The failure of a queued write (a StoreError), or None."""
        return self._failed
