"""Storage tiers of the MTA level queues (paper section 4.1.5, Fig. 3 and 4c).

Each level of an MTA window is a FIFO queue of *pairs* addressed by an **absolute position**
that never changes and is never reused, so keys in a remote store stay stable::

    level l:   [ head | cache ........ | middle (store) ........ | write buffer .... | tail ]
    position:   start   start+1 ...                                  ...   end-2       end-1
                local   local (read-ahead)  remote                    local (batched)  local

* the **head** (position ``start``) and the **tail** (position ``end - 1``) are local, mutable
  lists: the algorithms only ever modify these two pairs (Invariants 1-3);
* sealed pairs (no longer the tail) are immutable tuples: they go to a **write buffer** that is
  flushed to the store in blocks, and come back through a **head cache** that is refilled in
  runs when it runs low (synchronously on a miss);
* evicted positions are dropped from the store.

The algorithms see only the :class:`Level` interface (``head``, ``tail``, ``start``, ``end``,
``append``, ``peek``, ``drop_front``, ``truncate``) and never know which tier answers. Two
implementations:

* :class:`MemoryLevel`: everything local (the paper's "Mem." variants). Used when a window has
  ``store=None``.
* :class:`TieredLevel`: tail, head, cache and write buffer local, the middle in a
  :class:`PairStore`. :class:`MemoryStore` is the in-process store used to test the tiering;
  the Redis store implements the same protocol.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any, Protocol, runtime_checkable

from ..storage.protocol import Pair, PairStore, SealedPair, WouldBlock

__all__ = ["Level", "MemoryLevel", "TieredLevel"]


@runtime_checkable
class Level(Protocol):
    """One level queue, as the algorithms see it. A level over a store (:class:`TieredLevel`)
    adds what a window with a store calls besides: ``has_local``, ``peek_local`` and ``pin`` (reads planned
    ahead), ``flush`` and ``flush_if_full`` (its write buffer), ``audit`` (debug checks)."""

    index: int
    start: int
    end: int
    head: Pair
    tail: Pair

    def append(self, pair: Pair) -> None: ...

    def extend(self, pairs: list[Any]) -> None: ...

    def peek(self, pos: int) -> Sequence[Any]: ...

    def drop_front(self, new_start: int) -> None: ...

    def truncate(self, new_end: int) -> None: ...

    def discard(self) -> None: ...

    def local_pairs(self) -> int: ...


_SHIFT = 8
_BLOCK = 1 << _SHIFT  # pairs per block of a MemoryLevel
_MASK = _BLOCK - 1
_DRAIN = 4  # dead pairs freed per append: deallocation runs "in the background"


class MemoryLevel:
    """A level queue held entirely in local memory, in blocks of 256 pairs.

    ``drop_front`` only moves ``start`` (the paper's O(1) ``remove_pairs``). Freeing evicted
    pairs is O(k) work in CPython, so it never happens inside an eviction: dead blocks go to
    the window's ``graveyard`` and every ``append`` frees a few of their pairs, the way the
    paper leaves removed elements to a background garbage collector. A bulk eviction of a
    million items therefore costs O(log n), and memory returns at the pace of new inserts.
    """

    __slots__ = (
        "_b0",
        "_base",
        "_blocks",
        "_grave",
        "_last",
        "end",
        "head",
        "index",
        "start",
        "tail",
    )

    def __init__(
        self, index: int, start: int, first: Pair, graveyard: deque[list[Any]] | None = None
    ) -> None:
        self.index = index
        self.start = start
        self.end = start + 1
        self._base = start  # absolute position of _blocks[0][0] (blocks need no alignment)
        self._last: list[Any] = [first]  # the block appends go to: the last one, never full
        self._blocks: list[list[Any]] = [self._last]
        self._b0 = 0  # blocks before this one hold evicted pairs only
        self._grave: deque[list[Any]] = graveyard if graveyard is not None else deque()
        self.head = first
        self.tail = first

    def __len__(self) -> int:
        return self.end - self.start

    def extend(self, pairs: list[Any]) -> None:
        """``append`` of each pair in turn (as lists: a memory level changes its pairs)."""
        for p in pairs:
            self.append([p[0], p[1]])

    def append(self, pair: Pair) -> None:
        last = self._last
        last.append(pair)
        self.end += 1
        self.tail = pair
        if len(last) > _MASK:  # full: the next pair starts a new block
            self._last = last = []
            self._blocks.append(last)
        grave = self._grave
        if grave:
            dead = grave[-1]
            del dead[-_DRAIN:]
            if not dead:
                grave.pop()

    def peek(self, pos: int) -> Sequence[Any]:
        off = pos - self._base
        return self._blocks[off >> _SHIFT][off & _MASK]  # type: ignore[no-any-return]

    def drop_front(self, new_start: int) -> None:
        off = new_start - self._base
        self.start = new_start
        blocks = self._blocks
        b = off >> _SHIFT
        self.head = blocks[b][off & _MASK]
        if b > self._b0:
            self._b0 = b
            if b > 16 and b + b > len(blocks):
                self._grave.extend(blocks[:b])
                del blocks[:b]
                self._base += b << _SHIFT
                self._b0 = 0

    def truncate(self, new_end: int) -> None:
        off = new_end - self._base
        b, r = off >> _SHIFT, off & _MASK
        blocks = self._blocks
        del blocks[b + 1 :]
        del blocks[b][r:]  # r == 0 leaves block b empty, the one the next append fills
        self._last = blocks[b]
        self.end = new_end
        self.tail = self.peek(new_end - 1)  # type: ignore[assignment]
        if new_end - 1 == self.start:
            self.head = self.tail

    def discard(self) -> None:
        self._grave.extend(self._blocks)
        self._blocks = []
        self._last = []

    def local_pairs(self) -> int:
        return self.end - self.start


class TieredLevel:
    """A level queue whose middle lives in a :class:`PairStore` (paper Fig. 3).

    Local: the head pair, the tail pair, a write buffer of sealed pairs (flushed as one block of
    ``store.block_size`` pairs) and a head cache of up to ``store.cache_size`` pairs after the
    head. When the cache drops under ``store.refill_at`` a refill is requested in the
    background (``store.prefetch``); a read that the refill covers waits for it, any other read
    outside the local tiers is a counted synchronous miss. ``pin`` holds pairs fetched ahead of
    an eviction (the new heads of a bulk eviction, fetched in one round trip).

    Invariants: ``_wstart + len(_buf) == end - 1`` (the buffer holds exactly the sealed pairs
    not yet written); cached positions lie in ``(start, _wstart)``.
    """

    __slots__ = (
        "_buf",
        "_cache",
        "_cstart",
        "_pending",
        "_pinned",
        "_store",
        "_wstart",
        "end",
        "head",
        "index",
        "start",
        "tail",
    )

    def __init__(self, store: PairStore, index: int, start: int, first: Pair) -> None:
        self._store = store
        self.index = index
        self.start = start
        self.end = start + 1
        self.head = first
        self.tail = first
        self._buf: list[SealedPair] = []
        self._wstart = start
        self._cache: list[SealedPair] = []
        self._cstart = start + 1
        self._pending: tuple[int, int, Future[list[SealedPair]]] | None = None
        self._pinned: dict[int, SealedPair] = {}
        # Positions below `start` of an earlier incarnation of this level are dead.
        store.drop(index, start)

    @classmethod
    def restored(
        cls, store: PairStore, index: int, start: int, end: int, head: Pair, tail: Pair
    ) -> TieredLevel:
        """A level whose sealed pairs ``start .. end - 2`` are in the store (a checkpoint).
        Its head cache fills on first use, not here: reopening a window (a restart, a stream
        moving to another server) costs its local state only."""
        lv = cls(store, index, start, head)
        lv.end = end
        lv.tail = tail if end - 1 > start else head
        lv._wstart = end - 1
        return lv

    def __len__(self) -> int:
        return self.end - self.start

    def append(self, pair: Pair) -> None:
        tail = self.tail
        self._buf.append((tail[0], tail[1]))
        self.end += 1
        self.tail = pair
        if len(self._buf) >= self._store.block_size and not self._store.nonblocking:
            self.flush()

    def extend(self, pairs: list[Any]) -> None:
        """``append`` of each pair in turn (the tail and all but the last become sealed).
        Pairs may be tuples: sealed pairs are never changed, the new tail becomes a list."""
        if not pairs:
            return
        tail = self.tail
        buf = self._buf
        buf.append((tail[0], tail[1]))
        buf.extend(pairs[:-1] if pairs[0].__class__ is tuple else map(tuple, pairs[:-1]))
        self.end += len(pairs)
        last = pairs[-1]
        self.tail = [last[0], last[1]]
        if len(buf) >= self._store.block_size and not self._store.nonblocking:
            self.flush()

    def flush_if_full(self) -> None:
        """Flush a buffer that reached a block (held back while the store was non-blocking)."""
        if len(self._buf) >= self._store.block_size:
            self.flush()

    def flush(self) -> None:
        """Write the buffered sealed pairs (those not evicted yet) to the store as one block."""
        buf = self._buf
        if not buf:
            return
        skip = max(0, self.start - self._wstart)
        if skip < len(buf):
            self._store.write(self.index, self._wstart + skip, buf[skip:])
        self._wstart += len(buf)
        self._buf = []

    def _read(self, pos: int) -> SealedPair:
        """A sealed pair that is not the head or the tail: buffer, cache, else the store."""
        if pos >= self._wstart:
            return self._buf[pos - self._wstart]
        c = pos - self._cstart
        cache = self._cache
        if 0 <= c < len(cache):
            return cache[c]
        pinned = self._pinned.get(pos)
        if pinned is not None:
            return pinned
        store = self._store
        pending = self._pending
        if pending is not None and pending[0] <= pos < pending[1]:
            if store.nonblocking and not pending[2].done():
                raise WouldBlock
            self._absorb(wait=True)
            return self._read(pos)
        if store.nonblocking:
            raise WouldBlock
        store.stats.misses += 1
        return store.read(self.index, pos, pos + 1)[0]

    def has_local(self, pos: int, *, ready: bool = False) -> bool:
        """Whether ``pos`` can be read without a synchronous store read (with ``ready``:
        without waiting for a refill in flight either)."""
        if pos == self.start or pos >= self._wstart or pos in self._pinned:
            return True
        if 0 <= pos - self._cstart < len(self._cache):
            return True
        pending = self._pending
        return (
            pending is not None
            and pending[0] <= pos < pending[1]
            and (not ready or pending[2].done())
        )

    def peek_local(self, pos: int) -> Sequence[Any] | None:
        """The pair at ``pos`` when a local tier holds it (head, tail, write buffer, head
        cache, pinned, or a refill that has arrived), else None. Changes nothing: no refill
        is absorbed or waited for, no miss counted (a suffix query's reads, which leave the
        level as they found it)."""
        if pos == self.start:
            return self.head
        if pos == self.end - 1:
            return self.tail
        if pos >= self._wstart:
            return self._buf[pos - self._wstart]
        c = pos - self._cstart
        if 0 <= c < len(self._cache):
            return self._cache[c]
        pinned = self._pinned.get(pos)
        if pinned is not None:
            return pinned
        pending = self._pending
        if pending is not None and pending[0] <= pos < pending[1] and pending[2].done():
            fut = pending[2]
            if fut.exception() is None:
                return fut.result()[pos - pending[0]]
        return None

    def pin(self, pos: int, pair: SealedPair) -> None:
        self._pinned[pos] = pair

    def peek(self, pos: int) -> Sequence[Any]:
        if pos == self.start:
            return self.head
        if pos == self.end - 1:
            return self.tail
        return self._read(pos)

    def drop_front(self, new_start: int) -> None:
        old = self.start
        if new_start == self.end - 1:
            self.head = self.tail
        else:
            p = self._read(new_start)
            self.head = [p[0], p[1]]
        self.start = new_start
        if self._pinned:
            self._pinned = {}
        # forget cached positions <= new_start
        cut = new_start + 1 - self._cstart
        if cut > 0:
            if cut >= len(self._cache):
                self._cache = []
                self._cstart = new_start + 1
            else:
                del self._cache[:cut]
                self._cstart += cut
        if old < self._wstart:
            self._store.drop(self.index, min(new_start, self._wstart))
        self._maybe_refill()

    def _absorb(self, *, wait: bool) -> None:
        """Take the result of the background refill into the cache (when it is done)."""
        pending = self._pending
        if pending is None or not (wait or pending[2].done()):
            return
        self._pending = None
        begin, stop, fut = pending
        pairs = fut.result()
        cache = self._cache
        lo = max(begin, self.start + 1, self._cstart + len(cache) if cache else begin)
        stop = min(stop, self._wstart)
        if lo >= stop:
            return
        if not cache:
            self._cstart = lo
        elif lo != self._cstart + len(cache):
            return
        cache.extend(pairs[lo - begin : stop - begin])

    def _maybe_refill(self) -> None:
        if self._pending is not None:
            self._absorb(wait=False)
            if self._pending is not None:
                return
        store = self._store
        cache = self._cache
        if len(cache) >= store.refill_at:
            return
        begin = max(self._cstart + len(cache), self.start + 1)
        stop = min(self._wstart, begin + store.cache_size - len(cache))
        if begin >= stop:
            return
        if not cache:
            self._cstart = begin
        store.stats.refills += 1
        self._pending = (begin, stop, store.prefetch(self.index, begin, stop))
        self._absorb(wait=False)

    def truncate(self, new_end: int) -> None:
        tail_pos = new_end - 1
        if tail_pos == self.start:
            self.tail = self.head
        elif tail_pos >= self._wstart:
            p = self._buf[tail_pos - self._wstart]
            self.tail = [p[0], p[1]]
        else:
            p = self._read(tail_pos)
            self.tail = [p[0], p[1]]
        self.end = new_end
        if tail_pos >= self._wstart:
            del self._buf[tail_pos - self._wstart :]
        else:
            self._buf = []
            self._wstart = tail_pos
            pending = self._pending
            if pending is not None and pending[1] > tail_pos:
                self._pending = None  # it may cover positions that will be written again
        keep = tail_pos - self._cstart
        if keep < len(self._cache):
            del self._cache[max(keep, 0) :]
        self._pinned = {p: v for p, v in self._pinned.items() if p < tail_pos}

    def discard(self) -> None:
        self._store.drop(self.index, self.end)
        self._buf = []
        self._cache = []
        self._pending = None
        self._pinned = {}

    def audit(self) -> dict[int, SealedPair]:
        """For a debug checker, O(n): check the tiers' bookkeeping (``ValueError`` naming the
        fault) and return the sealed pairs the store holds for this level, by position (one
        read, not a counted miss); the head cache must agree with them."""
        if self._wstart + len(self._buf) != self.end - 1:
            msg = f"write buffer covers [{self._wstart}, +{len(self._buf)}) not up to the tail"
            raise ValueError(msg)
        lo, hi = self.start + 1, self._wstart
        if lo >= hi:
            return {}
        stored = dict(zip(range(lo, hi), self._store.read(self.index, lo, hi), strict=True))
        for i, c in enumerate(self._cache):
            pos = self._cstart + i
            if pos in stored and tuple(c) != tuple(stored[pos]):
                msg = f"cached pair {pos} differs from the store"
                raise ValueError(msg)
        return stored

    def local_pairs(self) -> int:
        """Pairs held in local memory: head, tail, buffer and cache."""
        return min(len(self), 2) + len(self._buf) + len(self._cache) + len(self._pinned)
