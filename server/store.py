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
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "EMPTY",
    "Level",
    "MemoryLevel",
    "MemoryStore",
    "PairStore",
    "StoreStats",
    "TieredLevel",
]


class _Empty:
    """The engine's own marker for an empty slot of a pair (the paper's ∅).

    Never the monoid's identity: a lifted value may legitimately equal the identity (a sum of
    zeros), and it must still count as an item.
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return "∅"

    def __reduce__(self) -> str:
        return "EMPTY"


EMPTY: Any = _Empty()

Pair = list[Any]  # [e0, e1], local and mutable (head, tail)
SealedPair = tuple[Any, Any]  # immutable once sealed


class StoreStats:
    """Counters of one store (shared by its levels)."""

    __slots__ = ("misses", "pairs_read", "pairs_written", "reads", "refills", "writes")

    def __init__(self) -> None:
        self.reads = 0  # read round trips
        self.pairs_read = 0
        self.writes = 0  # write round trips (flushed blocks)
        self.pairs_written = 0
        self.misses = 0  # synchronous reads on the eviction path
        self.refills = 0  # cache refills

    def as_dict(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in self.__slots__}


@runtime_checkable
class PairStore(Protocol):
    """Where the middle of every level queue lives. Positions are absolute per level.

    A store instance holds one window. ``write`` may overwrite positions (after an undone
    insert); ``drop`` says positions ``< stop`` are evicted and will not be read again.
    """

    block_size: int
    cache_size: int
    refill_at: int
    stats: StoreStats

    def write(self, level: int, start: int, pairs: Sequence[SealedPair]) -> None: ...

    def read(self, level: int, start: int, stop: int) -> list[SealedPair]: ...

    def drop(self, level: int, stop: int) -> None: ...


class MemoryStore:
    """A :class:`PairStore` in process memory: the reference implementation, used to test the
    tiered levels (tiny block and cache sizes exercise every flush, refill and miss path)."""

    def __init__(
        self, *, block_size: int = 512, cache_size: int = 512, refill_at: int = 256
    ) -> None:
        for name, v, low in (
            ("block_size", block_size, 1),
            ("cache_size", cache_size, 1),
            ("refill_at", refill_at, 0),
        ):
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                msg = f"MemoryStore: {name} must be an int >= {low}, got {v!r}"
                raise ValueError(msg)
        if refill_at > cache_size:
            msg = f"MemoryStore: refill_at must be <= cache_size ({cache_size}), got {refill_at}"
            raise ValueError(msg)
        self.block_size = block_size
        self.cache_size = cache_size
        self.refill_at = refill_at
        self.stats = StoreStats()
        self._levels: dict[int, dict[int, SealedPair]] = {}
        self._low: dict[int, int] = {}

    def write(self, level: int, start: int, pairs: Sequence[SealedPair]) -> None:
        d = self._levels.setdefault(level, {})
        for i, p in enumerate(pairs):
            d[start + i] = (p[0], p[1])  # a copy, as a remote store would keep
        self._low.setdefault(level, start)
        self.stats.writes += 1
        self.stats.pairs_written += len(pairs)

    def read(self, level: int, start: int, stop: int) -> list[SealedPair]:
        d = self._levels.get(level, {})
        try:
            out = [d[p] for p in range(start, stop)]
        except KeyError as ex:
            msg = f"MemoryStore: level {level} has no pair at position {ex.args[0]}"
            raise LookupError(msg) from None
        self.stats.reads += 1
        self.stats.pairs_read += len(out)
        return out

    def drop(self, level: int, stop: int) -> None:
        d = self._levels.get(level)
        if not d:
            return
        low = self._low.get(level, stop)
        for p in range(low, stop):
            d.pop(p, None)
        self._low[level] = max(low, stop)

    def pair_count(self) -> int:
        """Pairs held (for tests: evicted positions must not linger)."""
        return sum(len(d) for d in self._levels.values())


@runtime_checkable
class Level(Protocol):
    """One level queue, as the algorithms see it."""

    index: int
    start: int
    end: int
    head: Pair
    tail: Pair

    def append(self, pair: Pair) -> None: ...

    def peek(self, pos: int) -> Sequence[Any]: ...

    def drop_front(self, new_start: int) -> None: ...

    def truncate(self, new_end: int) -> None: ...

    def discard(self) -> None: ...


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

    __slots__ = ("_b0", "_base", "_blocks", "_grave", "end", "head", "index", "start", "tail")

    def __init__(
        self, index: int, start: int, first: Pair, graveyard: deque[list[Any]] | None = None
    ) -> None:
        self.index = index
        self.start = start
        self.end = start + 1
        self._base = start - (start & _MASK)  # absolute position of _blocks[0][0]
        self._blocks: list[list[Any]] = [[EMPTY] * (start & _MASK) + [first]]
        self._b0 = 0  # blocks before this one hold evicted pairs only
        self._grave: deque[list[Any]] = graveyard if graveyard is not None else deque()
        self.head = first
        self.tail = first

    def __len__(self) -> int:
        return self.end - self.start

    def append(self, pair: Pair) -> None:
        off = self.end - self._base
        blocks = self._blocks
        if off & _MASK:
            blocks[off >> _SHIFT].append(pair)
        else:
            blocks.append([pair])
        self.end += 1
        self.tail = pair
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
        if r:
            del blocks[b + 1 :]
            del blocks[b][r:]
        else:
            del blocks[b:]
        self.end = new_end
        self.tail = self.peek(new_end - 1)  # type: ignore[assignment]
        if new_end - 1 == self.start:
            self.head = self.tail

    def discard(self) -> None:
        self._grave.extend(self._blocks)
        self._blocks = []

    def local_pairs(self) -> int:
        return self.end - self.start


class TieredLevel:
    """A level queue whose middle lives in a :class:`PairStore` (paper Fig. 3).

    Local: the head pair, the tail pair, a write buffer of sealed pairs (flushed as one block of
    ``store.block_size`` pairs) and a head cache of up to ``store.cache_size`` pairs after the
    head (refilled with one read when it drops under ``store.refill_at``; a read outside it is a
    counted miss).

    Invariants: ``_wstart + len(_buf) == end - 1`` (the buffer holds exactly the sealed pairs
    not yet written); cached positions lie in ``(start, _wstart)``.
    """

    __slots__ = (
        "_buf",
        "_cache",
        "_cstart",
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
        # Positions below `start` of an earlier incarnation of this level are dead.
        store.drop(index, start)

    def __len__(self) -> int:
        return self.end - self.start

    def append(self, pair: Pair) -> None:
        tail = self.tail
        self._buf.append((tail[0], tail[1]))
        self.end += 1
        self.tail = pair
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
        store = self._store
        store.stats.misses += 1
        return store.read(self.index, pos, pos + 1)[0]

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

    def _maybe_refill(self) -> None:
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
        cache.extend(store.read(self.index, begin, stop))
        store.stats.refills += 1

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
        keep = tail_pos - self._cstart
        if keep < len(self._cache):
            del self._cache[max(keep, 0) :]

    def discard(self) -> None:
        self._store.drop(self.index, self.end)
        self._buf = []
        self._cache = []

    def local_pairs(self) -> int:
        """Pairs held in local memory: head, tail, buffer and cache."""
        return min(len(self), 2) + len(self._buf) + len(self._cache)
