"""A keyed stream's small keys in columns (:class:`KeySlab`): no Python object per key.

The compact form of a key's window (window.py) holds the lifted items of the rows it still
reaches. For a stream whose every window is a built-in record lifted column by column
(``HostedWindow.lift_columns``), batch-safe, not hopping, under a count or a time range over
the stream's timestamps, those items are a function of the rows: the lift of the key's newest
``k`` rows, ``k`` by the window's policy (the newest ``N`` for a count; those newer than
``newest - range`` for a time range, as the engines' Algorithm 2 evicts them). So a key can
hold its rows instead, in columns: one **slot** per key in arrays shared by every key, its
newest rows (timestamps and each column a window reads, oldest first: as many as its
longest-reaching window holds, at most ``capacity``) and its counters. An append moves every
key it names in array passes: the rows scattered into their slots, each window's reach by one
comparison over the slots, the rows no window reaches shifted out. No aggregate is computed
here: anything that reads a key (a query, GetKey, ListKeys, results, subscribers, a batch the
slab does not take) makes it an object first (``KeyedStream._load_many``) by the same lift of
the same values, so every answer is the object form's.

A key whose windows would hold more than ``capacity`` rows leaves the slab for its object
form (then, past the compact threshold, the full MTA), and stays there.

Stored (table.py, the group's ``keys`` hash; integers and doubles little-endian)::

    [newest, rows, late, touched_ms, batches, {window: ["r", k]}, [ts bytes, {column: bytes}]]

``k``: the window's items are the lift of the key's newest ``k`` rows.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import msgpack  # type: ignore[import-untyped]
import numba
import numpy as np

from ...engine.columnar import ColumnarWindow, columnar_refusal
from ...storage.protocol import CorruptDataError

__all__ = ["Counters", "KeySlab", "Reach", "rows_of_record", "slab_plan"]

_INT64_MIN = int(np.iinfo(np.int64).min)
_INT64_MAX = int(np.iinfo(np.int64).max)
# numpy types of the schema's types a slab stores (little-endian in Redis)
_DTYPES = {"DOUBLE": np.dtype("<f8"), "INT64": np.dtype("<i8"), "TIMESTAMP": np.dtype("<i8")}
Counters = tuple[int, int, int, int, int]  # a key's newest, rows, late, touched, batches
# what a slot costs in memory besides its rows: counters and each window's evictions (7 x 8
# bytes), its entry in the key -> slot dict (~40), the slot's key and table (2 x 8)
SLOT_OVERHEAD = 112


class Reach:
    """How many of a key's newest rows one window holds: the newest ``count``, or those newer
    than ``newest - range`` (``range`` in the timestamps' unit, an int)."""

    __slots__ = ("count", "name", "range")

    def __init__(self, name: str, count: int | None, rng: int | None) -> None:
        self.name = name
        self.count = count
        self.range = rng

    def dropped(self, ts: np.ndarray, m: np.ndarray, newest: np.ndarray) -> np.ndarray:
        """Per slot (a row of ``ts``, its first ``m`` rows valid, oldest first): how many of
        its oldest rows this window lets go."""
        if self.count is not None:
            return np.asarray(np.maximum(m - self.count, 0), dtype=np.int64)
        rng = self.range
        assert rng is not None
        if rng > _INT64_MAX:  # longer than any two timestamps apart: nothing leaves
            return np.zeros(len(m), dtype=np.int64)
        low = newest < _INT64_MIN + rng  # no timestamp is old enough
        with np.errstate(over="ignore"):
            bound = np.where(low, _INT64_MIN, newest - rng)
        valid = np.arange(ts.shape[1])[None, :] < m[:, None]
        out = ((ts <= bound[:, None]) & valid).sum(axis=1)
        out[low] = 0
        return np.asarray(out, dtype=np.int64)


def slab_plan(
    timestamp_field: str, types: Mapping[str, str], windows: Mapping[str, Any]
) -> tuple[list[Reach], dict[str, np.dtype]] | str:
    """Each window's :class:`Reach` and the columns (name -> dtype, the timestamps first) a
    slab of the stream keeps; or why its keys cannot be in columns."""
    if not windows:
        return "the stream has no window"
    reaches: list[Reach] = []
    reads: set[str] = set()
    for name, w in windows.items():
        built = w.built
        if built.hop is not None:
            return f"window {name!r} hops"
        if not built.batch_safe:
            return f"window {name!r}'s policy is enforced row by row"
        if w.lift_columns is None:
            return f"window {name!r} lifts row by row"
        why = columnar_refusal(built.monoid, built.policy)
        if why is not None:
            return f"window {name!r}: {why}"
        try:
            cw = ColumnarWindow(built.monoid, built.policy)
        except (TypeError, ValueError) as ex:
            return f"window {name!r}: {ex}"
        if cw.own.count is not None:
            reaches.append(Reach(name, cw.own.count, None))
        else:
            if cw.ts_col != timestamp_field:
                return f"window {name!r}'s time range reads {cw.ts_col!r}, not the timestamps"
            reaches.append(Reach(name, None, cw.own.range))
        reads.update(cw.reads)
    reads.discard(timestamp_field)
    columns: dict[str, np.dtype] = {timestamp_field: _DTYPES["TIMESTAMP"]}
    for c in sorted(reads):
        dtype = _DTYPES.get(types.get(c, ""))
        if dtype is None:
            return f"column {c!r} is {types.get(c)}, not a number"
        columns[c] = dtype
    empty: dict[str, list[Any]] = {c: [] for c in columns}
    for name, w in windows.items():
        try:
            w.lift_columns(empty)
        except KeyError as ex:  # pragma: no cover - the kernels name every column read
            return f"window {name!r} lifts column {ex} the kernels do not read"
    return reaches, columns


class KeySlab:
    """The keys of one stream held in columns (see the module docstring). ``columns``:
    name -> dtype, the timestamps first. Not thread-safe: the stream's lock guards it."""

    ht_min = 1 << 12  # the key table's least size (a power of 2)

    def __init__(self, reaches: list[Reach], columns: dict[str, np.dtype], capacity: int) -> None:
        self.reaches = reaches
        # window name -> its label in a stored record (KeyState.record), set by the stream
        self.labels: Mapping[str, str] = {}
        self.columns = columns
        self.ts_name = next(iter(columns))
        self.capacity = int(capacity)
        self.slot: dict[str, int] = {}
        self.keys: list[str | None] = []
        self.tables: list[Any] = []  # each slot's GroupTable
        self.free: list[int] = []
        self.row_bytes = sum(d.itemsize for d in columns.values())
        self.slot_bytes = self.row_bytes * self.capacity + SLOT_OVERHEAD
        self.size = 0
        self.freed = 0  # slots freed ever: a slot read before a change may be stale after it
        self.n: np.ndarray
        self.newest: np.ndarray
        self.rows: np.ndarray
        self.late: np.ndarray
        self.touched: np.ndarray
        self.batches: np.ndarray
        self.group: np.ndarray
        # changed since a flush took it: the slab's keys are marked here, not in their
        # groups' dirty sets (a key those sets hold is changed too: written from here)
        self.dirty: np.ndarray
        # being written by a flush (set and cleared by it): it stays in memory until then
        self.inflight: np.ndarray
        # each key's name in UTF-8: bytes ``koff[s] .. koff[s] + klen[s]`` of ``_kpool``
        # (written once, when the key takes its slot; a flush writes names from there)
        self.koff: np.ndarray
        self.klen: np.ndarray
        # each slot's key by its UTF-8 bytes: an open-addressing table of slots (-1 empty,
        # -2 a key gone), probed by the names' FNV-1a hashes (``khash``, per slot): a batch's
        # key column found in one compiled pass over Arrow's string buffers (:meth:`find`)
        self.khash: np.ndarray
        self._ht = np.full(self.ht_min, -1, dtype=np.int32)
        self._ht_used = 0  # entries not empty (keys and gone keys)
        self._kpool = np.zeros(1 << 16, dtype=np.uint8)
        self._kused = 0  # bytes of the pool written
        self._kdead = 0  # of those, the names of keys gone (reclaimed by _compact_names)
        self.vals: dict[str, np.ndarray]
        # per window: the rows the key's last batch evicted from it (its results' ``evicted``)
        self.evicted: dict[str, np.ndarray]
        self._alloc(1024)

    def _alloc(self, size: int) -> None:
        """Room for ``size`` slots (the arrays copied over)."""
        old = self.size
        fresh = old == 0

        def grow(a: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
            out = np.zeros(shape, dtype=a.dtype)
            out[:old] = a[:old]
            return out

        z = np.zeros(0, dtype=np.int64)
        self.n = grow(z if fresh else self.n, (size,))  # rows held
        self.newest = grow(z if fresh else self.newest, (size,))
        self.rows = grow(z if fresh else self.rows, (size,))  # rows taken ever
        self.late = grow(z if fresh else self.late, (size,))
        self.touched = grow(z if fresh else self.touched, (size,))  # ms
        self.batches = grow(z if fresh else self.batches, (size,))
        self.group = grow(z if fresh else self.group, (size,))  # each slot's key group
        self.dirty = grow(np.zeros(0, dtype=bool) if fresh else self.dirty, (size,))
        self.inflight = grow(np.zeros(0, dtype=bool) if fresh else self.inflight, (size,))
        self.koff = grow(z if fresh else self.koff, (size,))
        self.klen = grow(z if fresh else self.klen, (size,))
        self.khash = grow(np.zeros(0, dtype=np.uint64) if fresh else self.khash, (size,))
        c = self.capacity
        self.vals = {
            n: grow(np.zeros((0, c), dtype=d) if fresh else self.vals[n], (size, c))
            for n, d in self.columns.items()
        }
        self.evicted = {
            r.name: grow(z if fresh else self.evicted[r.name], (size,)) for r in self.reaches
        }
        self.touched[old:] = _INT64_MAX  # free slots: the newest of all (see _free)
        self.keys += [None] * (size - old)
        self.tables += [None] * (size - old)
        self.free += range(size - 1, old - 1, -1)
        self.size = size

    def __contains__(self, key: object) -> bool:
        return key in self.slot

    def __len__(self) -> int:
        return len(self.slot)

    def table_of(self, key: str) -> Any:
        s = self.slot.get(key)
        return None if s is None else self.tables[s]

    def counters_of(self, key: str) -> Counters:
        """(newest, rows, late, touched, batches) of ``key``."""
        return self._counters(self.slot[key])

    def unwritten(self, s: int) -> bool:
        """Whether slot ``s``'s key changed since a flush took it, or is being written."""
        return bool(self.dirty[s] or self.inflight[s])

    def mark_held(self, slots: np.ndarray) -> None:
        """Mark changed those of ``slots`` that still hold a key (a write of theirs failed or
        never went: a slot freed since stays free)."""
        keys = self.keys
        self.dirty[[s for s in slots.tolist() if keys[s] is not None]] = True

    def add_late(self, key: str, n: int) -> None:
        s = self.slot[key]
        self.late[s] += n
        self.dirty[s] = True

    def _name(self, slots: np.ndarray, keys: Sequence[str]) -> None:
        """The UTF-8 names of ``keys`` (in :attr:`slot` already) into the pool and the
        table, for slots ``slots``."""
        encoded = [k.encode() for k in keys]
        lens = np.fromiter(map(len, encoded), np.int64, len(encoded))
        total = int(lens.sum())
        if self._kused + total > len(self._kpool):
            if self._kdead > self._kused // 2:
                self._compact_names()
            need = self._kused + total
            if need > len(self._kpool):
                pool = np.zeros(max(need, len(self._kpool) * 3 // 2), dtype=np.uint8)
                pool[: self._kused] = self._kpool[: self._kused]
                self._kpool = pool
        at = self._kused
        self._kpool[at : at + total] = np.frombuffer(b"".join(encoded), dtype=np.uint8)
        self.koff[slots] = at + np.cumsum(lens) - lens
        self.klen[slots] = lens
        self._kused = at + total
        self.khash[slots] = _hash_names(self._kpool, self.koff[slots], lens)
        if 5 * (self._ht_used + len(slots)) > 3 * len(self._ht):  # 60% full
            self._rehash()  # (the new keys with the others: they are in ``slot`` already)
        else:
            self._ht_used += _ht_put(self._ht, self.khash, np.asarray(slots, dtype=np.int64))

    def _rehash(self) -> None:
        """A new table of the keys held (:attr:`slot`), at most half full (the entries of
        keys gone dropped)."""
        size = self.ht_min
        while size < 2 * len(self.slot):
            size *= 2
        self._ht = np.full(size, -1, dtype=np.int32)
        held = np.fromiter(self.slot.values(), np.int64, len(self.slot))
        self._ht_used = _ht_put(self._ht, self.khash, held)

    def find(self, offsets: np.ndarray, data: np.ndarray) -> np.ndarray:
        """The slot of each key of a string column given as Arrow's buffers (key ``i``:
        ``data[offsets[i]:offsets[i+1]]``, UTF-8), -1 for a key not here."""
        return _ht_find(self._ht, self.khash, self._kpool, self.koff, self.klen, offsets, data)

    def _compact_names(self) -> None:
        """The pool holds the names of the keys held only (their slots' offsets moved)."""
        live = np.flatnonzero(self.klen[: self.size] > 0)
        pool, off = _gather_names(self._kpool, self.koff[live], self.klen[live])
        self._kpool = np.zeros(max(len(pool) * 2, 1 << 16), dtype=np.uint8)
        self._kpool[: len(pool)] = pool
        self.koff[live] = off
        self._kused = len(pool)
        self._kdead = 0

    def _take_slots(self, n: int) -> list[int]:
        if len(self.free) < n:
            self._alloc(max(self.size * 3 // 2, self.size + n))  # 1.5x: less idle room
        out = self.free[-n:]
        del self.free[-n:]
        out.reverse()
        return out

    # -- an append
    def add(self, keys: Sequence[str], tables: Sequence[Any]) -> np.ndarray:
        """New keys (not in the slab) into free slots, their counters zero, holding no row
        (key ``keys[i]`` of group table ``tables[i]``); their slots."""
        got = self._take_slots(len(keys))
        slot = self.slot
        for key, table, s in zip(keys, tables, got, strict=True):
            slot[key] = s
            self.keys[s] = key
            self.tables[s] = table
        new = np.asarray(got, dtype=np.int64)
        self._name(new, keys)
        self.dirty[new] = False
        for a in (self.n, self.newest, self.rows, self.late, self.touched, self.batches):
            a[new] = 0
        for a in self.evicted.values():
            a[new] = 0
        self.group[new] = [getattr(t, "group", -1) for t in tables]
        return new

    def apply(
        self,
        keys: Sequence[str],
        tables: Sequence[Any],
        idx: Sequence[Sequence[int]],
        columns: Mapping[str, np.ndarray],
        now_ms: int,
    ) -> list[tuple[int, Counters | None, dict[str, np.ndarray], dict[str, int], Any]]:
        """Rows ``idx[i]`` of the batch ``columns`` (name -> array, every column of
        :attr:`columns`) into key ``keys[i]`` (of group table ``tables[i]``; made when new), in
        order: :meth:`apply_slots` of their slots."""
        k = len(keys)
        slot = self.slot
        sl = np.fromiter((slot.get(key, -1) for key in keys), np.int64, k)
        fresh = sl < 0
        if fresh.any():
            at = np.flatnonzero(fresh).tolist()
            sl[fresh] = self.add([keys[i] for i in at], [tables[i] for i in at])
        counts = np.fromiter(map(len, idx), np.int64, k)
        flat = np.fromiter(itertools.chain.from_iterable(idx), np.int64, int(counts.sum()))
        return self.apply_slots(sl, counts, flat, columns, now_ms, fresh)

    def apply_slots(
        self,
        sl: np.ndarray,
        counts: np.ndarray,
        flat: np.ndarray,
        columns: Mapping[str, np.ndarray],
        now_ms: int,
        fresh: np.ndarray,
    ) -> list[tuple[int, Counters | None, dict[str, np.ndarray], dict[str, int], Any]]:
        """Rows of the batch ``columns`` (name -> array, every column of :attr:`columns`) into
        the keys of slots ``sl`` (distinct): slot ``sl[i]`` takes ``counts[i]`` rows, the next
        ones of ``flat`` (input rows, grouped by key in the order of ``sl``, each key's in
        order); ``fresh[i]``: the key is new (its slot from :meth:`add`). A key whose windows
        would then hold more than :attr:`capacity` rows takes nothing and leaves the slab:
        returned as (its position in ``sl``, its counters before the batch (None: it is new),
        the rows its windows hold after the batch, each window's rows the batch evicted, the
        key), for the caller to make it an object (and mark it changed: the slab's marks are
        of the keys it holds). The keys it keeps are marked changed (:attr:`dirty`)."""
        k = len(sl)
        total = len(flat)
        held = self.n[sl]
        m = held + counts
        c = self.capacity
        width = max(int(m.max()), c)
        at = np.repeat(np.arange(k), counts)
        pos = held[at] + (np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts))
        rows: dict[str, np.ndarray] = {}
        for name, store in self.vals.items():
            r = np.empty((k, width), dtype=store.dtype)
            r[:, :c] = store[sl]
            r[at, pos] = columns[name][flat]
            rows[name] = r
        ts = rows[self.ts_name]
        newest = ts[np.arange(k), m - 1]
        was = self.newest[sl]
        drop = m.copy()
        evicted: dict[str, np.ndarray] = {}
        for reach in self.reaches:
            d = reach.dropped(ts, m, newest)
            np.minimum(drop, d, out=drop)
            # the rows it held before the batch: of the key's ``held`` (none for a new key)
            evicted[reach.name] = d - reach.dropped(ts, held, was)
        keep = m - drop
        over = keep > c
        out: list[tuple[int, Counters | None, dict[str, np.ndarray], dict[str, int], Any]] = []
        if over.any():
            for i in np.flatnonzero(over).tolist():
                s = int(sl[i])
                before = None if fresh[i] else self._counters(s)
                lo, hi = int(drop[i]), int(m[i])
                out.append(
                    (
                        i,
                        before,
                        {n: r[i, lo:hi].copy() for n, r in rows.items()},
                        {n: int(e[i]) for n, e in evicted.items()},
                        self.keys[s],
                    )
                )
                self._free(s)
            ok = ~over
            sl, counts, drop, keep, newest = sl[ok], counts[ok], drop[ok], keep[ok], newest[ok]
            rows = {n: r[ok] for n, r in rows.items()}
            evicted = {n: e[ok] for n, e in evicted.items()}
        if len(sl):
            take = np.minimum(drop[:, None] + np.arange(c)[None, :], width - 1)
            for name, store in self.vals.items():
                store[sl] = np.take_along_axis(rows[name], take, axis=1)
            self.n[sl] = keep
            self.rows[sl] += counts
            self.newest[sl] = newest
            self.touched[sl] = now_ms
            self.batches[sl] += 1
            self.dirty[sl] = True
            for name, e in evicted.items():
                self.evicted[name][sl] = e
        return out

    def _counters(self, s: int) -> Counters:
        return (
            int(self.newest[s]),
            int(self.rows[s]),
            int(self.late[s]),
            int(self.touched[s]),
            int(self.batches[s]),
        )

    def _free(self, s: int) -> None:
        self.freed += 1
        key = self.keys[s]
        del self.slot[key]  # type: ignore[arg-type]
        self.keys[s] = None
        self.tables[s] = None
        self.touched[s] = _INT64_MAX  # never a candidate of KeyedStream._evict_slab
        self.dirty[s] = False
        self.inflight[s] = False  # (a flush writing it ends without it)
        _ht_drop(self._ht, self.khash, s)
        self._kdead += int(self.klen[s])
        self.klen[s] = 0
        self.free.append(s)

    def load(
        self,
        key: str,
        table: Any,
        counters: Counters,
        rows: Mapping[str, np.ndarray],
        keeps: Mapping[str, int],
    ) -> bool:
        """A stored key back into a slot (its counters, its rows by column): False, and
        nothing changes, when it does not fit (more rows than :attr:`capacity`, other
        columns, or windows whose reach over its rows is not ``keeps``, as stored)."""
        if set(rows) != set(self.columns) or key in self.slot:
            return False
        n = len(rows[self.ts_name])
        if n > self.capacity or any(len(a) != n for a in rows.values()):
            return False
        ts = np.zeros((1, max(n, 1)), dtype=np.int64)
        ts[0, :n] = rows[self.ts_name]
        got = self.keep_of(np.array([n]), ts)  # (no row: every reach 0, ts one column wide)
        if {name: int(a[0]) for name, a in got.items()} != dict(keeps):
            return False
        if n and int(ts[0, n - 1]) != counters[0]:
            return False
        s = self._take_slots(1)[0]
        self.slot[key] = s
        self.keys[s] = key
        self.tables[s] = table
        self.group[s] = getattr(table, "group", -1)
        self._name(np.array([s]), [key])
        self.dirty[s] = False
        for name, a in self.vals.items():
            a[s, :n] = rows[name]
        self.n[s] = n
        (self.newest[s], self.rows[s], self.late[s], self.touched[s], self.batches[s]) = counters
        for a in self.evicted.values():
            a[s] = 0  # not stored: 0 after a reload, as an object's
        return True

    # -- leaving the slab
    def peek(self, key: str) -> tuple[Counters, dict[str, np.ndarray], dict[str, int]]:
        """``key``'s counters (newest, rows, late, touched, batches), its rows by column, and
        each window's rows its last batch evicted."""
        s = self.slot[key]
        n = int(self.n[s])
        return (
            self._counters(s),
            {name: a[s, :n].copy() for name, a in self.vals.items()},
            {name: int(e[s]) for name, e in self.evicted.items()},
        )

    def take(self, key: str) -> tuple[Counters, dict[str, np.ndarray], dict[str, int]]:
        """:meth:`peek`, and ``key`` leaves the slab."""
        out = self.peek(key)
        self._free(self.slot[key])
        return out

    def remove(self, key: str) -> bool:
        s = self.slot.get(key)
        if s is None:
            return False
        self._free(s)
        return True

    def keep_of(self, n: np.ndarray, ts: np.ndarray) -> dict[str, np.ndarray]:
        """Each window's items per slot: how many of its ``n`` newest rows (``ts``: their
        timestamps, a row per slot) it holds."""
        newest = ts[np.arange(len(n)), np.maximum(n - 1, 0)]
        return {r.name: n - r.dropped(ts, n, newest) for r in self.reaches}

    def slots_of(self, keys: Sequence[str]) -> np.ndarray:
        return np.fromiter(map(self.slot.__getitem__, keys), np.int64, len(keys))

    def _gather(self, sl: np.ndarray, only: Any) -> _Gathered:
        """What :meth:`records` and :meth:`blobs` read of the keys of slots ``sl``, in array
        passes."""
        n = self.n[sl]
        blocks = {
            name: a[sl].astype(a.dtype.newbyteorder("<"), copy=False)
            for name, a in self.vals.items()
        }
        keeps = self.keep_of(n, blocks[self.ts_name])
        names = [r.name for r in self.reaches if only is None or r.name in only]
        counters = np.stack(
            [a[sl] for a in (self.newest, self.rows, self.late, self.touched, self.batches)]
        )
        kept = np.array([keeps[w] for w in names], dtype=np.int64).reshape(len(names), len(sl))
        return _Gathered(n, blocks, names, kept, counters)

    def records(self, keys: Sequence[str], only: Any = None) -> list[list[Any]]:
        """Each key's stored record (the module docstring); ``only``: of these windows (the
        others left out: a window deleted meanwhile, whose name a new one may take)."""
        if not keys:
            return []
        g = self._gather(self.slots_of(keys), only)
        c = self.capacity
        data = {name: b.tobytes() for name, b in g.blocks.items()}
        sizes = {name: b.dtype.itemsize for name, b in g.blocks.items()}
        ts_name = self.ts_name
        others = [name for name in self.vals if name != ts_name]
        out: list[list[Any]] = []
        counters = g.counters.tolist()
        kept = g.kept.tolist()
        labels = [self.labels.get(name, name) for name in g.names]
        for i, cnt in enumerate(g.n.tolist()):
            spans = {}
            for name in data:
                w = sizes[name]
                lo = i * c * w
                spans[name] = data[name][lo : lo + cnt * w]
            ws = {label: ["r", kept[j][i]] for j, label in enumerate(labels)}
            out.append(
                [
                    *(column[i] for column in counters),
                    ws,
                    [spans[ts_name], {o: spans[o] for o in others}],
                ]
            )
        return out

    def blobs(self, keys: Sequence[str], only: Any = None) -> list[bytes]:
        """:meth:`records` packed (msgpack, byte for byte ``packb``'s): :meth:`blobs_at`."""
        return self.blobs_at(self.slots_of(keys), only)

    def blobs_at(self, sl: np.ndarray, only: Any = None) -> list[bytes]:
        """The stored values of the keys of slots ``sl``, written for all of them at once by
        one compiled loop (:func:`_pack_records`: about 0.1 us a key, where joining each
        key's parts in Python took 4 us) into one buffer, then sliced."""
        if not len(sl):
            return []
        buf, at = self._packed(sl, only, resp=False)
        raw = buf.tobytes()
        return list(map(raw.__getitem__, map(slice, at[:-1].tolist(), at[1:].tolist())))

    def fields_at(self, sl: np.ndarray, only: Any = None) -> tuple[memoryview, np.ndarray]:
        """The keys of slots ``sl`` as the field-value pairs of an ``HSET`` of their names
        and stored values (:meth:`blobs_at`'s) in Redis's wire form (RESP bulk strings), and
        where each pair ends: the same compiled loop, no Python object a key
        (``server/storage/resp.py``)."""
        if not len(sl):
            return memoryview(b""), np.zeros(0, dtype=np.int64)
        buf, at = self._packed(sl, only, resp=True)
        return buf.data, at[1:]  # (no copy: the Packed arguments slice it)

    def _packed(self, sl: np.ndarray, only: Any, *, resp: bool) -> tuple[np.ndarray, np.ndarray]:
        """The stored values of the keys of slots ``sl`` end to end (``resp``: each after its
        key's name, both as RESP bulk strings), and where each starts (and the last ends).
        The rows are read in place, from the slab's columns."""
        sl = np.asarray(sl, dtype=np.int64)
        n = self.n[sl]
        keeps = self.keep_of(n, self.vals[self.ts_name][sl])
        names = [r.name for r in self.reaches if only is None or r.name in only]
        kept = np.array([keeps[w] for w in names], dtype=np.int64).reshape(len(names), len(sl))
        counters = np.stack(
            [a[sl] for a in (self.newest, self.rows, self.late, self.touched, self.batches)]
        )
        ts_name = self.ts_name
        others = [name for name in self.vals if name != ts_name]
        cols = [ts_name, *others]
        # each column's rows as bytes, little-endian (a view, on a little-endian machine)
        data = tuple(
            np.ascontiguousarray(self.vals[name], dtype=self.vals[name].dtype.newbyteorder("<"))
            .view(np.uint8)
            .reshape(self.size, -1)
            for name in cols
        )
        widths = np.array([self.vals[name].dtype.itemsize for name in cols], dtype=np.int64)
        if int(widths.max()) * self.capacity > 255:  # pragma: no cover - SLAB_ROWS x 8 < 256
            raise ValueError("a slab row's column spans more than a bin8")
        pack = msgpack.Packer(use_bin_type=True).pack
        ws_head = np.frombuffer(_map_header(len(names)), np.uint8)
        # each window's entry but its reach: its name, then ["r", (the reach: a fixint)]
        labels = self.labels  # (each window's label in a stored record: KeyState.record)
        win = [np.frombuffer(pack(labels.get(w, w)) + b"\x92\xa1r", np.uint8) for w in names]
        win_at = np.cumsum([0] + [len(a) for a in win]).astype(np.int64)
        col_head = [np.frombuffer(_map_header(len(others)), np.uint8)]
        col_head += [np.frombuffer(pack(name), np.uint8) for name in others]
        col_at = np.cumsum([0] + [len(a) for a in col_head]).astype(np.int64)
        buf, at = _pack_records(
            sl,
            n,
            counters,
            kept,
            ws_head,
            np.concatenate([np.zeros(0, np.uint8), *win]),
            win_at,
            np.concatenate(col_head),
            col_at,
            data,
            widths,
            resp,
            self._kpool,
            self.koff,
            self.klen,
        )
        return buf, at


@numba.njit(cache=True, nogil=True)
def _fnv(data: np.ndarray, lo: int, hi: int) -> np.uint64:
    """FNV-1a (64 bits) of ``data[lo:hi]``."""
    h = np.uint64(14695981039346656037)
    for i in range(lo, hi):
        h = (h ^ np.uint64(data[i])) * np.uint64(1099511628211)
    return h


@numba.njit(cache=True, nogil=True)
def _hash_names(pool: np.ndarray, koff: np.ndarray, klen: np.ndarray) -> np.ndarray:
    out = np.empty(klen.shape[0], dtype=np.uint64)
    for i in range(klen.shape[0]):
        out[i] = _fnv(pool, koff[i], koff[i] + klen[i])
    return out


@numba.njit(cache=True, nogil=True)
def _ht_put(ht: np.ndarray, khash: np.ndarray, slots: np.ndarray) -> int:
    """Slots ``slots`` into the table (by their keys' hashes); how many empty entries they
    took."""
    mask = np.uint64(ht.shape[0] - 1)
    took = 0
    for s in slots:
        j = khash[s] & mask
        while ht[j] >= 0:
            j = (j + np.uint64(1)) & mask
        if ht[j] == -1:
            took += 1
        ht[j] = s
    return took


@numba.njit(cache=True, nogil=True)
def _ht_drop(ht: np.ndarray, khash: np.ndarray, s: int) -> None:
    """Slot ``s`` out of the table (its entry marks a key gone: probes go on past it)."""
    mask = np.uint64(ht.shape[0] - 1)
    j = khash[s] & mask
    while ht[j] != -1:
        if ht[j] == s:
            ht[j] = -2
            return
        j = (j + np.uint64(1)) & mask


@numba.njit(cache=True, nogil=True)
def _ht_find(
    ht: np.ndarray,
    khash: np.ndarray,
    pool: np.ndarray,
    koff: np.ndarray,
    klen: np.ndarray,
    offsets: np.ndarray,
    data: np.ndarray,
) -> np.ndarray:
    """Each key ``data[offsets[i]:offsets[i+1]]``'s slot, -1 when none holds it."""
    n = offsets.shape[0] - 1
    out = np.empty(n, dtype=np.int64)
    mask = np.uint64(ht.shape[0] - 1)
    for i in range(n):
        lo = offsets[i]
        hi = offsets[i + 1]
        h = _fnv(data, lo, hi)
        j = h & mask
        found = -1
        while ht[j] != -1:
            s = ht[j]
            if s >= 0 and khash[s] == h and klen[s] == hi - lo:
                o = koff[s]
                same = True
                for q in range(hi - lo):
                    if pool[o + q] != data[lo + q]:
                        same = False
                        break
                if same:
                    found = s
                    break
            j = (j + np.uint64(1)) & mask
        out[i] = found
    return out


@numba.njit(cache=True, nogil=True)
def _gather_names(
    pool: np.ndarray, koff: np.ndarray, klen: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The names ``pool[koff[i]:koff[i]+klen[i]]`` end to end, and where each starts."""
    k = klen.shape[0]
    out = np.empty(klen.sum(), dtype=np.uint8)
    off = np.empty(k, dtype=np.int64)
    p = 0
    for i in range(k):
        off[i] = p
        o = koff[i]
        for q in range(klen[i]):
            out[p + q] = pool[o + q]
        p += klen[i]
    return out, off


@numba.njit(cache=True, nogil=True)
def _put_int(buf: np.ndarray, p: int, v: int) -> int:
    """msgpack's shortest form of int64 ``v`` at ``buf[p:]`` (as ``packb``); the next
    position."""
    if v >= 0:
        if v < 128:
            buf[p] = v
            return p + 1
        if v < 256:
            buf[p] = 0xCC
            size = 1
        elif v < 65536:
            buf[p] = 0xCD
            size = 2
        elif v < 4294967296:
            buf[p] = 0xCE
            size = 4
        else:
            buf[p] = 0xCF
            size = 8
    else:
        if v >= -32:
            buf[p] = v + 256
            return p + 1
        if v >= -128:
            buf[p] = 0xD0
            size = 1
        elif v >= -32768:
            buf[p] = 0xD1
            size = 2
        elif v >= -2147483648:
            buf[p] = 0xD2
            size = 4
        else:
            buf[p] = 0xD3
            size = 8
    for j in range(size):  # big-endian, two's complement
        buf[p + size - j] = (v >> (8 * j)) & 0xFF
    return p + 1 + size


@numba.njit(cache=True, nogil=True)
def _put_len(out: np.ndarray, p: int, n: int) -> int:
    """RESP's ``$<n>\\r\\n`` at ``out[p:]``; the next position."""
    out[p] = 36  # $
    p += 1
    digits = 1
    m = n
    while m >= 10:
        m //= 10
        digits += 1
    for j in range(digits):
        out[p + digits - 1 - j] = 48 + n % 10
        n //= 10
    p += digits
    out[p] = 13
    out[p + 1] = 10
    return p + 2


@numba.njit(cache=True, nogil=True, inline="always")
def _copy(dst: np.ndarray, p: int, src: np.ndarray, lo: int, n: int) -> int:
    """``src[lo:lo+n]`` to ``dst[p:]``; the next position."""
    for j in range(n):
        dst[p + j] = src[lo + j]
    return p + n


@numba.njit(cache=True, nogil=True)
def _pack_records(
    sl: np.ndarray,
    n: np.ndarray,
    counters: np.ndarray,
    kept: np.ndarray,
    ws_head: np.ndarray,
    win: np.ndarray,
    win_at: np.ndarray,
    col_head: np.ndarray,
    col_at: np.ndarray,
    data: Any,
    widths: np.ndarray,
    resp: bool,
    pool: np.ndarray,
    koff: np.ndarray,
    klen: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Each key's record (KeySlab's module docstring) as ``packb`` writes it, one after the
    other in one buffer; and where each starts (and the last ends). ``sl``: the keys' slots;
    ``n``: rows per key; ``counters``: (5, keys); ``kept``: (windows, keys), each < 128;
    ``ws_head``: the windows' map header; ``win[win_at[j]:win_at[j+1]]``: window ``j``'s
    name and ``["r",`` packed; ``col_head``: the other columns' map header, then each one's
    name packed (``col_at``); ``data``: per column (the timestamps first) its values' bytes,
    a row per slot. ``resp``: each record a RESP bulk string after its key's name as one
    (``pool[koff[s]:koff[s]+klen[s]]``); where each pair starts."""
    k = n.shape[0]
    n_win = win_at.shape[0] - 1
    n_col = widths.shape[0]
    fixed = 1 + 5 * 9 + ws_head.shape[0] + win.shape[0] + n_win + 1 + col_head.shape[0]
    size = fixed + 2 * n_col
    for c in range(n_col):
        size += data[c].shape[1]
    names = 0
    room = 3  # a value's RESP header: $, its length's digits, CRLF
    m = size
    while m > 0:
        m //= 10
        room += 1
    if resp:
        for i in range(k):
            names += klen[sl[i]]
        size += room + 25 + 4
    buf = np.empty(k * size + names, dtype=np.uint8)
    at = np.empty(k + 1, dtype=np.int64)
    p = 0
    head = 0
    for i in range(k):
        at[i] = p
        s = sl[i]
        if resp:  # the key's name, then room for its value's header
            p = _put_len(buf, p, klen[s])
            p = _copy(buf, p, pool, koff[s], klen[s])
            buf[p] = 13
            buf[p + 1] = 10
            p += 2
            head = p
            p += room
        start = p
        buf[p] = 0x97
        p += 1
        for j in range(5):
            p = _put_int(buf, p, counters[j, i])
        p = _copy(buf, p, ws_head, 0, ws_head.shape[0])
        for j in range(n_win):
            w = win_at[j + 1] - win_at[j]
            p = _copy(buf, p, win, win_at[j], w)
            buf[p] = kept[j, i]
            p += 1
        buf[p] = 0x92
        p += 1
        for c in range(n_col):
            if c > 0:  # a column after the timestamps: its name
                w = col_at[c + 1] - col_at[c]
                p = _copy(buf, p, col_head, col_at[c], w)
            size_c = n[i] * widths[c]
            buf[p] = 0xC4
            buf[p + 1] = size_c
            p += 2
            row = data[c][s]
            p = _copy(buf, p, row, 0, size_c)
            if c == 0:  # the other columns' map header
                w = col_at[1] - col_at[0]
                p = _copy(buf, p, col_head, col_at[0], w)
        if resp:  # the value's header, the value moved up to it, its end
            length = p - start
            q = _put_len(buf, head, length)
            if q < start:  # (forwards: q < start, the regions may overlap)
                for j in range(length):
                    buf[q + j] = buf[start + j]
            p = q + length
            buf[p] = 13
            buf[p + 1] = 10
            p += 2
    at[k] = p
    return buf[:p], at


class _Gathered(NamedTuple):
    """Keys read for their stored values: rows held, rows by column (a row per key, the
    slab's capacity wide, little-endian), the windows written, each one's reach per key, and
    the five counters per key (newest, rows, late, touched, batches): (windows, keys) and
    (5, keys) arrays."""

    n: np.ndarray
    blocks: dict[str, np.ndarray]
    names: list[str]
    kept: np.ndarray
    counters: np.ndarray


def _map_header(n: int) -> bytes:
    """msgpack's header of a map of ``n`` entries."""
    if n < 16:
        return (0x80 | n).to_bytes(1, "big")
    return b"\xde" + n.to_bytes(2, "big")


def rows_of_record(rows: Any, ts_name: str, types: Mapping[str, str]) -> dict[str, np.ndarray]:
    """The rows of a stored slab record (its last element) as arrays by column (``types``:
    the stream's field types, by name)."""
    try:
        ts, others = rows
        out = {ts_name: np.frombuffer(ts, dtype=_DTYPES["TIMESTAMP"])}
        for name, blob in dict(others).items():
            out[str(name)] = np.frombuffer(blob, dtype=_DTYPES[types[str(name)]])
    except (TypeError, ValueError, KeyError) as ex:
        msg = f"a key's stored rows are not valid ({type(ex).__name__}: {ex})"
        raise CorruptDataError(msg) from ex
    return out
