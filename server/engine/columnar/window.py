"""A sliding window of built-in monoids over count and time ranges, fed and answered a batch
of columns at a time (:class:`ColumnarWindow`): no Python object per row.

Structure (stream slicing, as Scotty and Cutty do; the slices enter the MTA):

    head slice (partly evicted) | sealed slices ... (their aggregates: an Amortized MTA) | tail
         local, an offset          payloads in order; one MTA item per slice               local

Rows arrive as columns and are kept as columns. Every ``slice_rows`` rows the tail is sealed
into a slice: its aggregate (in the per-row engine's own form, but for sums of floats, kept as
the scans' double-double pairs and rounded only when a result leaves) goes into an
:class:`~mtawindows.server.engine.amta.AmortizedMTA` over slices, whose policy lets a prefix of
slices go when every slice of it starts before the window's new start: bulk eviction stays
O(log n) in slices. The slice a window's start falls inside leaves the tree and becomes the
head, read from an offset. The window's aggregate is ``head ⊕ tree ⊕ tail``.

A batch's per-row results come from array passes over the rows it can see: the window start
of every row (``searchsorted`` over timestamps, or arithmetic for a count), then for a row
whose range starts in the batch or the tail, a range query over them (ranges.py); for a row
whose range starts in an older slice, ``suffix(slices it reaches) ⊕ (the tree's aggregate of
the slices after them) ⊕ prefix(tail and batch up to the row)``. Only the slices the batch
evicts are read, so a batch costs O(its rows + a slice), whatever the window's length.

The answer is the per-row engine's (tests/engine/test_columnar_window.py drives both with the
same batches): exact for counts, extremes, first, last, arg-* and max-count; sums and means
from double-double scans (within an ulp of ``math.fsum``), variances from Chan's combine.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import math
import numbers
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from ...sentinels import NOTHING
from ...storage.protocol import CorruptDataError, StoreError
from ..amta import AmortizedMTA
from ..monoids import Count, Last, Max, Record
from ..policies import CountPolicy, TimeRangePolicy, _getter
from .kernels import FOREIGN, Comps, Kernel, SumKernel, _ints, kernel_for, one_form, search_sorted
from .ranges import range_aggregates, scan_all
from .slide import slide

__all__ = ["BatchResult", "ColumnarWindow", "Prepared", "columnar_refusal"]

SLICE_ROWS = 4096
# a stored window keeps the columns of this many of its oldest slices in memory (where its
# start moves through: a batch's evictions and per-row results read them), the rest in Redis
LOCAL_SLICES = 4
AHEAD_EXTRA = 16  # slices read ahead past the next batch's likely move (_ahead_slices)
MAX_PENDING = 64  # slice writes queued before sealing waits for the oldest (bounded memory)
SLIDE = True  # per-row results of Count, Max, Min, float Sum and Mean by Two-Stacks (slide.py)
CHUNK_ROWS = 1 << 16  # a larger batch is applied in chunks of this many rows (memory)
WRITE_SLICES = 32  # sealed slices written together (and at every checkpoint)
UNWRITTEN = "unwritten"  # a sealed slice's write not queued yet (_Slice.pending)
COUNTED = -1  # a member's Count the window does not have: its rows (Member.fields)
_INT64_MIN = int(np.iinfo(np.int64).min)
_INT64_MAX = int(np.iinfo(np.int64).max)


def columnar_refusal(monoid: Any, policy: Any) -> str | None:
    """Why a window of ``monoid`` under ``policy`` cannot take the columnar path (None: it
    can): every field a built-in monoid with a kernel, over a count or a time range."""
    fields = monoid.monoids if isinstance(monoid, Record) else (monoid,)
    for m in fields:
        if kernel_for(m) is None:
            return f"{type(m).__name__} has no columnar kernel"
        if not isinstance(m, Count) and getattr(m, "field", None) is None:
            return f"{type(m).__name__} reads whole rows, not a named column"
    if type(policy) not in (CountPolicy, TimeRangePolicy):
        return f"policy {type(policy).__name__} is not a count or a time range"
    if isinstance(policy, TimeRangePolicy) and not isinstance(policy.range, numbers.Real):
        return f"a time range of {type(policy.range).__name__} (integer timestamps take a number)"
    try:  # the field the policy reads, as the per-row engine binds it
        if isinstance(policy, TimeRangePolicy):
            _getter("TimeRangePolicy", monoid, policy.field, (Max, Last), "newest timestamp")
        else:
            _getter("CountPolicy", monoid, policy.field, (Count,), "item count")
    except (KeyError, TypeError, ValueError) as ex:
        return str(ex).strip("'\"")
    return None


@dataclass
class _Slice:
    start: int  # global position of its first row
    cols: dict[str, np.ndarray] | None  # None: in the store only (a stored window's)
    n: int  # its rows (a window of counts only reads no column)
    agg: Any = None  # its lifted aggregate (sealed slices)
    index: int = -1  # its number among the window's sealed slices (the store's key)
    newest: Any = None  # its newest timestamp (time windows' sealed slices)
    # the Future of its write to the store until it is known done; UNWRITTEN: not queued yet
    pending: Any = None
    # each field's suffix scan (its aggregate from any row: a start staying in the slice
    # over several batches reads it, O(1)), made when one reader (a member, or a query-time
    # range) reduces it from a row in it a second time; dropped with its columns (several
    # members passing it once each, batches apart, would pay a scan for nothing)
    suffix: list[Comps] | None = None
    reduced: int = 0
    reduced_by: Any = None

    @property
    def end(self) -> int:
        return self.start + self.n


@dataclass(eq=False)
class Member:
    """A window over some of a columnar window's fields under a count or time-range policy of
    its own, sharing the rows: its results are the window's rows from ``head_from`` on. The
    window's own policy is its member ``own``; :meth:`ColumnarWindow.attach` adds others (the
    window then keeps every row a member still holds)."""

    name: str
    monoid: Any
    policy: Any
    record: bool
    names: tuple[str, ...]
    # the window's kernel of each of its fields (COUNTED: a Count the window does not have,
    # the member's rows: a Count reads nothing)
    fields: list[int]
    count: int | None  # its policy: a count, or a time range (``range``)
    range: int
    ts_field: int | None  # which of its fields holds the newest timestamp (a time range)
    created: int  # global position of its first row
    head_from: int  # global position of its first row still in it
    evicted: int = 0
    total: Any = None  # its lifted aggregate, when known
    schema: pa.Schema | None = None  # of its last per-row results
    retired: bool = False  # (the window's own) holds no row: only members do (retire)

    @property
    def reads(self) -> frozenset[int]:
        """The window's fields it reads."""
        return frozenset(i for i in self.fields if i != COUNTED)

    def project(self, agg: Any, record: bool, rows: int) -> Any:
        """Its fields of an aggregate of ``rows`` rows of the window's fields (``record``:
        the window's is a Record)."""
        parts = agg if record else (agg,)
        got = tuple(rows if i == COUNTED else parts[i] for i in self.fields)
        return got if self.record else got[0]


class _View:
    """The rows before the tail a batch's per-row results read: ``parts`` (Y: from the
    member's start ``y0``, whole slices up to global position ``end``) and ``middle``, the
    aggregate (in the tree's form) of the slices between Y and the tail (None: none)."""

    def __init__(self, y0: int) -> None:
        self.y0 = y0
        self.end = y0
        self.parts: list[dict[str, np.ndarray]] = []
        self.middle: Any = None


@dataclass
class Prepared:
    """A batch checked and lifted by :meth:`ColumnarWindow.prepare`, for the window's next
    :meth:`~ColumnarWindow.apply` (``at``: the window's row count when prepared)."""

    cols: dict[str, np.ndarray]
    n: int
    lifted: list[Comps]
    ts: np.ndarray | None
    at: int


@dataclass
class BatchResult:
    """What a batch did: rows ``evicted``; with per-row results, ``rows`` (one column per
    field, one row per input row, in order) and ``sizes`` (the window's rows after each)."""

    evicted: int
    rows: pa.Table | None = None
    sizes: np.ndarray | None = None
    members: dict[str, BatchResult] = field(default_factory=dict)  # each member's (attach)


class _Joined(dict[str, np.ndarray]):
    """The columns of consecutive parts (dicts of equal-length columns), each joined into
    one array when first read (a member's per-row results read one or two of the columns)."""

    def __init__(self, parts: list[dict[str, np.ndarray]]) -> None:
        super().__init__()
        self.parts = [p for p in parts if p and len(next(iter(p.values()))) > 0]

    def __missing__(self, name: str) -> np.ndarray:
        if not self.parts:
            raise KeyError(name)
        got = self[name] = (
            self.parts[0][name]
            if len(self.parts) == 1
            else np.concatenate([p[name] for p in self.parts])
        )
        return got


class _Values:
    """Positions -> values for First, Last and arg-* keys: the rows a call sees, in order,
    and the values of the stored slices' aggregate (position ``FOREIGN``)."""

    def __init__(self, cols: dict[str, np.ndarray], foreign: dict[int, Any] | None = None) -> None:
        self.cols = cols
        self.foreign = foreign or {}

    def one(self, field: str | None, p: int, arg: Any = None) -> Any:
        if p == FOREIGN:
            return self.foreign[id(arg)]
        return _py(self.cols[field][p])  # type: ignore[index]

    def gather(self, field: str | None, pos: np.ndarray, k: Any) -> pa.Array:
        col = self.cols[field]  # type: ignore[index]
        if col.dtype.kind == "U":
            col = col.astype(object)
        out = (
            col[np.clip(pos, 0, max(0, len(col) - 1))]
            if len(col)
            else np.empty(len(pos), col.dtype)
        )
        foreign = pos == FOREIGN
        if foreign.any():
            out = out.astype(object) if out.dtype.kind != "O" else out.copy()
            out[foreign] = self.foreign[id(k)]
        return pa.array(out, mask=pos == -1)


class ColumnarWindow:
    """A window of ``monoid`` (a built-in, or a Record of built-ins, each reading a named
    column) under a :class:`CountPolicy` or :class:`TimeRangePolicy`, fed by :meth:`apply`."""

    def __init__(
        self,
        monoid: Any,
        policy: Any,
        *,
        slice_rows: int = SLICE_ROWS,
        store: Any = None,
        local_slices: int = LOCAL_SLICES,
    ) -> None:
        why = columnar_refusal(monoid, policy)
        if why is not None:
            msg = f"ColumnarWindow: {why}"
            raise TypeError(msg)
        self.monoid = monoid
        self.policy = policy
        self.record = isinstance(monoid, Record)
        fields = monoid.monoids if self.record else (monoid,)
        self.names = monoid.names if self.record else ("value",)
        self.kernels: list[Kernel] = [kernel_for(m) for m in fields]  # type: ignore[misc]
        self.reads = sorted({c for k in self.kernels for c in k.reads})
        # the window's own policy as a member; others share its rows (attach)
        self.own, self.ts_col = self._member("", monoid, policy, 0)
        if self.ts_col is not None and self.ts_col not in self.reads:
            self.reads.append(self.ts_col)
        self.slice_rows = int(slice_rows)
        self.members: dict[str, Member] = {}
        # the fields no policy reads any more (a retired window's that none of its members
        # has): not lifted, not checked (a value only they refused is no one's to refuse),
        # their slices' aggregates the identity
        self.dead: frozenset[int] = frozenset()
        self._stored_members: dict[str, Any] = {}  # the members of the last checkpoint loaded
        # the tree over slices: (the slice's aggregate, its start); a prefix of slices leaves
        # when every one starts before the window's start
        self._cut = 0
        # the slices' aggregates as the tree holds them (sums as double-double pairs)
        self._slice: Any = (
            Record(
                **{
                    name: k.slice_monoid(m)
                    for name, k, m in zip(self.names, self.kernels, fields, strict=True)
                }
            )
            if self.record
            else self.kernels[0].slice_monoid(monoid)
        )
        self.tree = AmortizedMTA(
            Record(agg=self._slice, start=Max()),
            lambda total, old: old[1] < self._cut,
        )
        self.slices: deque[_Slice] = deque()  # the tree's slices, oldest first
        self.head: _Slice | None = None
        # global position of the first row held (in the head, or not): the window's own first
        # row, or an older one a member still holds
        self.head_from = 0
        self.tail = _Slice(0, {c: np.empty(0) for c in self.reads}, 0)
        self.next = 0  # global position of the next row
        self.newest_ts: Any = None
        self._tail_aggs: dict[int, Any] = {}  # the tail's aggregates from offsets (_tail_total)
        # the Redis tier (a SliceStore: sealed slices written once, their columns dropped
        # from memory but for the ``local_slices`` oldest, where the window starts); None:
        # everything in memory
        self.store = store
        self.local_slices = max(1, int(local_slices))
        self.sealed = 0  # slices sealed so far (the next one's index)
        self._dropped: list[int] = []  # slices that left since the last checkpoint
        self._written: tuple[Any, Any] | None = None  # the last checkpoint: (what, its write)
        self.checkpoint_meta: dict[str, Any] | None = None  # the caller's, of the last load
        self._unloaded: BaseException | None = None  # why the last reload failed
        # the read ahead of the slices where the window starts next: (them, its Future)
        self._ahead: tuple[list[_Slice], concurrent.futures.Future[list[bytes]]] | None = None
        self.read_ahead = 0  # slices whose columns came from a read ahead
        self._moved = 0  # slices the last batch evicted (how many to read ahead)
        self._unwritten = 0  # slices sealed since the last write
        if store is not None:
            self._description = store.bind(monoid, policy, f"slices of {self.slice_rows}")
            self._load()

    # -- reading
    def __len__(self) -> int:
        return self.next - self.own.head_from

    @property
    def evicted(self) -> int:
        """Rows that left the window (its own policy's)."""
        return self.own.evicted

    def aggregate(self) -> Any:
        """The window's lifted aggregate, in the per-row engine's form."""
        return self._total_of(self.own)

    def _total_of(self, m: Member) -> Any:
        """Member ``m``'s lifted aggregate (known after a per-row batch, else reduced)."""
        if m.total is None:
            with np.errstate(all="ignore"):
                agg = self._aggregate_from(m.head_from, m)
                m.total = self._lifted(m, m.project(agg, self.record, self.next - m.head_from))
        return m.total

    def _lifted(self, m: Member, agg: Any) -> Any:
        """Member ``m``'s aggregate in the per-row engine's form, from the tree's form of its
        fields (sums rounded to one float)."""

        def one(i: int, a: Any) -> Any:
            return a if i == COUNTED else self.kernels[i].slice_to_lifted(a)

        if not m.record:
            return one(m.fields[0], agg)
        return tuple(one(i, a) for i, a in zip(m.fields, agg, strict=True))

    def _aggregate_from(self, s: int, by: Any = None) -> Any:
        """The aggregate (of the window's fields, in the tree's form) of its rows from global
        position ``s`` (at least the first held), for reader ``by`` (:meth:`_reduce`)."""
        if s >= self.next:
            return self._slice.identity
        if s > self.head_from:
            return self._suffix(s, by)
        combine = self._slice.combine
        total = self._slice.identity
        if self.head is not None:
            total = self._reduce(self.head, self.head_from - self.head.start, by)
        if len(self.tree):
            total = combine(total, self.tree.aggregate()[0])
        if self.tail.n:
            total = combine(total, self._tail_total(max(0, self.head_from - self.tail.start)))
        return total

    def query(self) -> Any:
        return self.monoid.lower(self.aggregate())

    def _reduce(self, sl: _Slice, offset: int, by: Any = None) -> Any:
        """The aggregate (in the tree's form) of ``sl``'s rows from ``offset``: of a sealed
        slice that reader ``by`` (a member, None for any other) asked more than once (its
        start staying in it), from its suffix scans."""
        n = sl.n - offset
        if n <= 0:
            return self._slice.identity
        if offset and sl is not self.tail:
            if sl.suffix is None:
                if sl.reduced_by is not by:
                    sl.reduced_by, sl.reduced = by, 0
                sl.reduced += 1
                if sl.reduced > 1:
                    whole = self._cols(sl)
                    sl.suffix = [
                        () if i in self.dead else scan_all(k, k.lift(whole, sl.n), reverse=True)
                        for i, k in enumerate(self.kernels)
                    ]
            if sl.suffix is not None:
                values = _Values(self._cols(sl))
                ids = self._identities()
                parts = [
                    ids[i] if i in self.dead or not c else k.to_slice(c, offset, values)
                    for i, (k, c) in enumerate(zip(self.kernels, sl.suffix, strict=True))
                ]
                return tuple(parts) if self.record else parts[0]
        cols = {c: v[offset:] for c, v in self._cols(sl).items()}
        values = _Values(cols)
        ids = self._identities()
        parts = [
            ids[i] if i in self.dead else k.to_slice(k.reduce(cols, n), 0, values)
            for i, k in enumerate(self.kernels)
        ]
        return tuple(parts) if self.record else parts[0]

    def aggregate_range(
        self,
        *,
        count: int | None = None,
        time_range: Any = None,
        field: str | None = None,
        member: str | None = None,
    ) -> tuple[Any, int]:
        """The lifted aggregate of a suffix of the window (of ``member``, by name) and its
        rows: the newest ``count``, or those a time range of ``time_range`` would keep (a
        time window's; ``field``: its record field of the newest timestamp). The slice where
        the suffix starts is reduced from there, the slices after it are a suffix of the
        tree (O(log n)), then the tail."""
        from ..suffix import RangeNotSupportedError, check_suffix

        m = self.own if member is None else self.members[member]
        q = check_suffix("ColumnarWindow.aggregate_range", count, time_range, field)
        n = self.next - m.head_from
        if q.count is not None:
            s = self.next - min(n, q.count)
        else:
            if m.count is not None or (field is not None and field != self._ts_name(m)):
                msg = (
                    "a columnar window answers time ranges over the timestamps its time-range "
                    "policy reads; ask a count"
                )
                raise RangeNotSupportedError(self.tree.algorithm, msg)
            if not isinstance(q.time_range, numbers.Real):
                msg = "a time range over integer timestamps is a number, not a timedelta"
                raise RangeNotSupportedError(self.tree.algorithm, msg)
            if not n:
                return m.monoid.identity, 0
            s = self._first_newer(self.newest_ts - math.ceil(q.time_range))
        if s <= m.head_from:
            return self._total_of(m), n
        if s >= self.next:
            return m.monoid.identity, 0
        with np.errstate(all="ignore"):
            agg = m.project(self._suffix(s), self.record, self.next - s)
            out = self._lifted(m, agg), self.next - s
        if self.store is not None:
            self._trim()  # a slice read for the suffix does not stay
        return out

    # -- members: windows sharing the rows
    def attach(self, name: str, monoid: Any, policy: Any) -> Member:
        """A member ``name``: ``monoid`` (each of its fields one of the window's) under
        ``policy`` (a count, or a time range over the window's timestamps), over the rows
        from now on, or from where the last checkpoint loaded had it. Its results:
        :meth:`member_aggregate`, ``apply``'s ``members``; it holds its rows in the window
        (the window keeps every row a member holds) until :meth:`detach`."""
        if not name or name in self.members:
            msg = f"ColumnarWindow.attach: member name {name!r} is empty or taken"
            raise ValueError(msg)
        why = columnar_refusal(monoid, policy)
        if why is not None:
            msg = f"ColumnarWindow.attach: {why}"
            raise TypeError(msg)
        m, ts_col = self._member(name, monoid, policy, self.next)
        if m.count is None and (self.ts_col is None or ts_col != self.ts_col):
            msg = (
                f"ColumnarWindow.attach: a time range over {ts_col!r}; the window's "
                f"timestamps are {self.ts_col!r}"
            )
            raise ValueError(msg)
        self._restore(m)
        self.members[name] = m
        self._refresh_dead()
        return m

    def fits(self, monoid: Any, policy: Any) -> str | None:
        """Why a member of ``monoid`` under ``policy`` cannot share this window's rows (None:
        it can be attached)."""
        why = columnar_refusal(monoid, policy)
        if why is not None:
            return why
        try:
            m, ts_col = self._member("?", monoid, policy, self.next)
        except (TypeError, ValueError) as ex:
            return str(ex)
        if m.count is None and (self.ts_col is None or ts_col != self.ts_col):
            return f"a time range over {ts_col!r}; the window's timestamps are {self.ts_col!r}"
        return None

    def retire(self) -> None:
        """The window's own policy holds no row from the next batch on (its members keep
        theirs): what is left of a window whose rows others share once it is deleted. Its
        fields none of them reads are no longer lifted nor checked (:attr:`dead`)."""
        self.own.retired = True
        self.own.total = None
        self._refresh_dead()

    def _refresh_dead(self) -> None:
        live = set() if self.own.retired else set(range(len(self.kernels)))
        for m in self.members.values():
            live |= m.reads
        self.dead = frozenset(range(len(self.kernels))) - live

    def _identities(self) -> tuple[Any, ...]:
        """Each field's identity in the tree's form."""
        ids = self._slice.identity
        return ids if self.record else (ids,)

    def _member(
        self, name: str, monoid: Any, policy: Any, created: int
    ) -> tuple[Member, str | None]:
        """Member ``name`` of ``monoid`` (each of its fields one of the window's) under a
        count or time-range ``policy`` (checked by :func:`columnar_refusal`), from global
        position ``created``; and the column of the timestamps it reads (None: a count)."""
        record = isinstance(monoid, Record)
        theirs = monoid.monoids if record else (monoid,)
        mine = self.monoid.monoids if self.record else (self.monoid,)
        fields = []
        for f in theirs:
            if f in mine:
                fields.append(mine.index(f))
            elif isinstance(f, Count):  # the member's rows: a Count reads nothing
                fields.append(COUNTED)
            else:
                msg = f"ColumnarWindow.attach: the window has no field {f!r} (it has {list(mine)})"
                raise ValueError(msg)
        count: int | None = None
        rng = 0
        ts_field: int | None = None
        ts_col = None
        if isinstance(policy, TimeRangePolicy):
            i = _getter("TimeRangePolicy", monoid, policy.field, (Max, Last), "newest timestamp")
            # the newest timestamp after a row is the row's own (timestamps never go back)
            ts_field = 0 if i is None else i
            ts_col = theirs[ts_field].field
            # ``newest - ts >= range`` over integer timestamps is ``newest - ts >= ceil(range)``
            r = policy.range
            rng = int(r) if isinstance(r, int) else math.ceil(r)
        else:
            _getter("CountPolicy", monoid, policy.field, (Count,), "item count")
            count = policy.size
        names = tuple(monoid.names) if record else ("value",)
        m = Member(
            name, monoid, policy, record, names, fields, count, rng, ts_field, created, created
        )
        return m, ts_col

    def _restore(self, m: Member) -> None:
        """Member ``m``'s position as the last checkpoint loaded has it; one it does not name
        (or names with another definition) starts at the window's next row."""
        stored = self._stored_members.get(m.name)
        if stored is not None and stored[3] == _describe(m.monoid, m.policy):
            m.created, m.head_from, m.evicted = (int(x) for x in stored[:3])
        else:
            m.created = m.head_from = self.next
            m.evicted = 0
        m.total = None

    def detach(self, name: str) -> None:
        """Member ``name`` leaves: its rows are no longer held for it (and a member attached
        under its name later starts anew, not where the last checkpoint loaded had it)."""
        del self.members[name]
        self._stored_members.pop(name, None)
        self._refresh_dead()

    def member_aggregate(self, name: str) -> Any:
        """Member ``name``'s lifted aggregate (its fields, in the per-row engine's form)."""
        return self._total_of(self.members[name])

    def member_size(self, name: str) -> int:
        return self.next - self.members[name].head_from

    def _views(self) -> list[Member]:
        return [self.own, *self.members.values()]

    def _ts_name(self, m: Member | None = None) -> str | None:
        m = self.own if m is None else m
        names = m.names if m.record else (None,)
        return names[m.ts_field] if m.ts_field is not None else None

    def _first_newer(
        self, bound: int, g0: int | None = None, ts: np.ndarray | None = None, since: int = 0
    ) -> int:
        """The global position of the first row newer than ``bound`` (``next`` if none) from
        global position ``since`` (at least the first held) on: of the window, or with ``ts``
        of the window and a batch from global position ``g0``. A bound below every int64 (a
        range of centuries, timestamps near the minimum) keeps every row."""
        since = max(since, self.head_from)
        if bound < _INT64_MIN:
            return since
        for base, last, t in self._parts_ts(self.next if g0 is None else g0, ts, since):
            if last > bound:
                if isinstance(t, _Slice):
                    t = self._cols(t)[self.ts_col][base - t.start :]  # type: ignore[index]
                return base + int(search_sorted(t, np.array([bound], dtype=np.int64))[0])
        return self.next if g0 is None or ts is None else g0 + len(ts)

    def _suffix(self, s: int, by: Any = None) -> Any:
        """The aggregate (in the tree's form) of the rows from global position ``s`` (inside
        the window), for reader ``by`` (:meth:`_reduce`)."""
        combine = self._slice.combine
        tail = self.tail
        if tail.n and s >= tail.start:
            return self._tail_total(s - tail.start)
        i = self._part_index(s)
        sl = next(self._held_from(s))
        total = self._reduce(sl, s - sl.start, by)
        later = self._held_count() - i - 1  # all in the tree (only the head is not)
        if later:
            total = combine(total, self.tree.aggregate_range(count=later)[0][0])
        if tail.n:
            total = combine(total, self._tail_total(max(0, self.head_from - tail.start)))
        return total

    def _tail_total(self, offset: int) -> Any:
        """:meth:`_reduce` of the tail from ``offset``, once per batch (the window and its
        members ask it alike)."""
        got = self._tail_aggs.get(offset)
        if got is None:
            got = self._tail_aggs[offset] = self._reduce(self.tail, offset)
        return got

    # the sealed slices held (the head, then the tree's), all of ``slice_rows`` rows in a row
    def _held_count(self) -> int:
        return len(self.slices) + (self.head is not None)

    def _part_index(self, p: int) -> int:
        """The index among the held slices of the one holding global position ``p`` (0 for a
        position before them)."""
        first = self.head if self.head is not None else (self.slices[0] if self.slices else None)
        if first is None:
            return 0
        return max(0, (p - first.start) // self.slice_rows)

    def _held_from(self, p: int) -> Iterator[_Slice]:
        """The held slices from the one holding global position ``p``, oldest first."""
        k = self._part_index(p)
        if self.head is None:
            return itertools.islice(self.slices, k, None)
        if k == 0:
            return itertools.chain((self.head,), self.slices)
        return itertools.islice(self.slices, k - 1, None)

    # -- writing
    def prepare(self, columns: dict[str, Any]) -> Prepared:
        """Check and lift a batch for :meth:`apply` without changing anything (the columns,
        every value, the timestamps' order): what a refused batch raises, it raises here
        (ValueError, TypeError, KeyError naming the row); the window must not change before
        the :meth:`apply` of what it returns."""
        if self._unloaded is not None:  # a reload failed: the state is not the store's
            raise self._unloaded
        if self.store is not None and self.store.failed is not None:
            raise self.store.failed  # a queued write failed: the owner reloads (reload())
        cols, n = self._columns(columns)
        if n == 0:
            return Prepared(cols, 0, [], None, self.next)
        for k in self.kernels:
            if isinstance(k, SumKernel):  # integer sums stay exact while they cannot overflow
                k.rows_bound = len(self) + n
        # validates every value first (of the fields a policy reads)
        lifted = [() if i in self.dead else k.lift(cols, n) for i, k in enumerate(self.kernels)]
        ts = None
        if self.ts_col is not None:
            self._check_order(cols[self.ts_col])
            ts = cols[self.ts_col] = _ints("ColumnarWindow: timestamps", cols[self.ts_col])
        return Prepared(cols, n, lifted, ts, self.next)

    def would_block(self, batch: Prepared) -> bool:
        """Whether :meth:`apply` of ``batch`` would wait for Redis: a sealed slice where a
        row's window start (the window's or a member's) may fall holds its columns only in
        the store, or the slice writes queued would pass :data:`MAX_PENDING`. Nothing is
        read; a few parts are looked at (from each start to the part where the last row's
        start falls)."""
        if self.store is None or batch.n == 0:
            return False
        seals = (self.tail.n + batch.n) // self.slice_rows
        if seals and self._pending() + seals > MAX_PENDING:
            return True
        last = batch.at + batch.n - 1
        for m in self._views():
            bound = None
            if m.count is None:
                assert batch.ts is not None
                if m.range > _INT64_MAX or int(batch.ts[-1]) < _INT64_MIN + m.range:
                    bound = _INT64_MIN  # every row stays: only the first part is read
                else:
                    bound = int(batch.ts[-1]) - m.range
            for sl in self._held_from(m.head_from):
                if (
                    sl.cols is None
                    and self._ahead is not None
                    and any(sl is a for a in self._ahead[0])
                ):
                    self._take_ahead(wait=False)  # the read ahead done: its columns now
                if sl.cols is None:
                    return True
                if (
                    (sl.newest > bound) if bound is not None else (sl.end > last - m.count + 1)  # type: ignore[operator]
                ):
                    break
        return False

    def _pending(self) -> int:
        return sum(sl.pending is not None for sl in self.slices)

    def apply(
        self,
        columns: dict[str, Any] | Prepared,
        *,
        per_row: bool = False,
        nonblocking: bool = False,
        member_rows: frozenset[str] | set[str] = frozenset(),
    ) -> BatchResult:
        """Append a batch (``columns``: name -> array, timestamps in order and not older
        than the window's newest; or what :meth:`prepare` made of them) and enforce the
        policy; with ``per_row``, the window's result after each row (``member_rows``: the
        members whose per-row results are wanted too; every member's in ``members``). All or
        nothing: a refused batch changes nothing. ``nonblocking``: the caller must not wait
        (the service's event loop); it asked :meth:`would_block` first, and nothing here
        waits for Redis then (the slices where the window starts next are read ahead in the
        background either way)."""
        batch = columns if isinstance(columns, Prepared) else self.prepare(columns)
        if batch.at != self.next:
            msg = "ColumnarWindow.apply: the window changed since the batch was prepared"
            raise RuntimeError(msg)
        if batch.n > CHUNK_ROWS and not nonblocking:
            return self._apply_chunks(batch, per_row, member_rows)
        cols, n, lifted, ts = batch.cols, batch.n, batch.lifted, batch.ts
        views = self._views()
        wants = [
            (m is self.own and per_row and not m.retired) or m.name in member_rows for m in views
        ]
        if n == 0:
            out = [
                BatchResult(
                    0,
                    self._table(m, [], 0) if want else None,
                    np.empty(0, np.int64) if want else None,
                )
                for m, want in zip(views, wants, strict=True)
            ]
            out[0].members = {m.name: r for m, r in zip(views[1:], out[1:], strict=True)}
            return out[0]
        g0 = self.next
        starts = [self._starts(m, ts, g0, n, want) for m, want in zip(views, wants, strict=True)]
        cut = max(self.head_from, min(int(st[-1]) for st in starts))
        with np.errstate(all="ignore"):
            # what each member's per-row results read of the rows before the tail: before
            # anything changes
            seen = [
                self._view(m, st, g0) if want else None
                for m, st, want in zip(views, starts, wants, strict=True)
            ]
            old_tail = self.tail
            tail_lifted: dict[int, Comps] = {}  # each field's of the tail: once for all views
            self._evict(cut)
            out = []
            totals = []
            for m, st, view in zip(views, starts, seen, strict=True):
                result = BatchResult(max(0, int(st[-1]) - m.head_from))
                total = None
                if view is not None:
                    result.rows, result.sizes, total = self._per_row(
                        m, cols, lifted, st, g0, n, old_tail, view, tail_lifted
                    )
                out.append(result)
                totals.append(total)
            self._append(cols, n, cut, ts)
        for m, st, result, total in zip(views, starts, out, totals, strict=True):
            m.head_from = max(m.head_from, int(st[-1]))
            m.evicted += result.evicted
            m.total = total  # the last row's result is its aggregate (None: not known)
        if self.store is not None:
            self._release()
        out[0].members = {m.name: r for m, r in zip(views[1:], out[1:], strict=True)}
        return out[0]

    def _apply_chunks(
        self, batch: Prepared, per_row: bool, member_rows: frozenset[str] | set[str]
    ) -> BatchResult:
        """A large batch (checked whole by :meth:`prepare`) as consecutive chunks of
        :data:`CHUNK_ROWS` rows: the same state and results as one call, with the scans'
        temporaries of a chunk at a time (a batch of 10^6 rows took hundreds of MB at once).
        A store failure midway leaves the window to reload its checkpoint, as in one call."""
        got: list[BatchResult] = []
        for a in range(0, batch.n, CHUNK_ROWS):
            b = min(batch.n, a + CHUNK_ROWS)
            part = Prepared(
                {c: v[a:b] for c, v in batch.cols.items()},
                b - a,
                [
                    _shift(tuple(c[a:b] for c in comps), k.pos_comp, -a)
                    for k, comps in zip(self.kernels, batch.lifted, strict=True)
                ],
                None if batch.ts is None else batch.ts[a:b],
                self.next,
            )
            got.append(self.apply(part, per_row=per_row, member_rows=member_rows))
        out = _joined(got, per_row)
        out.members = {
            name: _joined([g.members[name] for g in got], name in member_rows)
            for name in got[0].members
        }
        return out

    def _view(self, m: Member, starts: np.ndarray, g0: int) -> _View:
        """What member ``m``'s per-row results read of the rows before the tail, taken before
        anything changes: the parts its ranges start in, from its start (Y), and the
        aggregate of the slices after them (the tree's suffix: O(log n))."""
        x0 = self.tail.start if self.tail.n else g0
        view = _View(m.head_from)
        old = starts < x0
        if not old.any():
            return view
        smax = int(starts[old].max())
        reads: list[_Slice] = []
        after = 0  # the slices after Y (all in the tree)
        for sl in self._held_from(m.head_from):
            reads.append(sl)
            if sl.end > smax:
                after = self._held_count() - self._part_index(sl.start) - 1
                break
        self._fetch(reads)
        for sl in reads:
            off = max(0, m.head_from - sl.start)
            cols = self._cols(sl)
            view.parts.append({c: v[off:] for c, v in cols.items()} if off else cols)
            view.end = sl.end
        if after:
            view.middle = self.tree.aggregate_range(count=after)[0][0]
        return view

    def _columns(self, columns: dict[str, Any]) -> tuple[dict[str, np.ndarray], int]:
        """The columns the window reads, as 1-D arrays without nulls, and the batch's rows
        (every column given must hold as many)."""
        out = {}
        lens = {}
        for c, v in columns.items():
            if isinstance(v, pa.ChunkedArray | pa.Array):
                if v.null_count:
                    i = int(np.argmax(v.is_null().to_numpy(zero_copy_only=False)))
                    msg = f"ColumnarWindow: column {c!r} has {v.null_count} nulls (the first at row {i}); expected none"
                    raise ValueError(msg)
                v = v.to_numpy(zero_copy_only=False)
            elif isinstance(v, np.ma.MaskedArray):
                if np.ma.getmaskarray(v).any():
                    i = int(np.argmax(np.ma.getmaskarray(v)))
                    msg = f"ColumnarWindow: column {c!r} has masked values (the first at row {i}); expected none"
                    raise ValueError(msg)
                v = v.data
            a = np.asarray(v)
            if a.ndim != 1:
                msg = f"ColumnarWindow: column {c!r} must be one-dimensional, got shape {a.shape}"
                raise ValueError(msg)
            if a.dtype.kind not in "iufbUSOM":
                msg = f"ColumnarWindow: column {c!r} has values of type {a.dtype}, expected numbers or text"
                raise TypeError(msg)
            lens[c] = len(a)
            if c in self.reads:
                out[c] = a
        for c in self.reads:
            if c not in out:
                msg = f"ColumnarWindow: the batch has no column {c!r} (it has {sorted(columns)})"
                raise KeyError(msg)
        if len(set(lens.values())) > 1:
            msg = f"ColumnarWindow: columns of different lengths: {lens}"
            raise ValueError(msg)
        return out, next(iter(lens.values()), 0)

    def _check_order(self, ts: np.ndarray) -> None:
        if ts.dtype.kind not in "iu":
            msg = (
                f"ColumnarWindow: timestamps must be integers (as a stream's: ns since the "
                f"epoch), got {ts.dtype}"
            )
            raise TypeError(msg)
        back = np.flatnonzero(ts[1:] < ts[:-1])
        if len(back):
            i = int(back[0]) + 1
            msg = f"ColumnarWindow: timestamps go backwards at row {i}: {ts[i].item()!r} after {ts[i - 1].item()!r}"
            raise ValueError(msg)
        if self.newest_ts is not None and ts[0] < self.newest_ts:
            msg = f"ColumnarWindow: row 0 at {ts[0].item()!r} is older than the window's newest {self.newest_ts!r}"
            raise ValueError(msg)

    def _starts(
        self, m: Member, ts: np.ndarray | None, g0: int, n: int, per_row: bool
    ) -> np.ndarray:
        """The global position of member ``m``'s first row after each row of the batch
        (after the last only, without ``per_row``); a retired one holds none."""
        if m.retired:
            return np.full(n if per_row else 1, g0 + n, dtype=np.int64)
        if m.count is not None:
            if per_row:
                g = np.arange(g0, g0 + n, dtype=np.int64)
            else:
                g = np.array([g0 + n - 1], dtype=np.int64)
            return np.maximum(g - m.count + 1, m.head_from)
        assert ts is not None
        if not per_row:  # one bound: a scalar search (a small batch's cost is mostly this)
            if m.range > _INT64_MAX:  # as the rows' bounds below
                return np.array([m.head_from], dtype=np.int64)
            s = self._first_newer(int(ts[-1]) - m.range, g0, ts, since=m.head_from)
            return np.array([max(s, m.head_from)], dtype=np.int64)
        # rows older than ``newest - range`` leave; where that is below every int64 (a range
        # of centuries, timestamps near the minimum: a prefix of the rows) none does
        out = np.full(n, m.head_from, dtype=np.int64)
        if m.range <= _INT64_MAX:
            k = int(np.searchsorted(ts, _INT64_MIN + m.range))
            if k < n:
                out[k:] = self._starts_after(ts[k:] - m.range, g0, ts, m.head_from)
        return out

    def _starts_after(self, bound: np.ndarray, g0: int, ts: np.ndarray, since: int) -> np.ndarray:
        """For each of the (non-decreasing) ``bound``, the global position of the first row
        newer than it from ``since`` on (the batch ``ts`` from ``g0`` counted): the
        timestamps of the parts where they fall, joined, then one merge (kernels.py's
        :func:`search_sorted`)."""
        lo, hi = int(bound[0]), int(bound[-1])
        parts = []
        for part in self._parts_ts(g0, ts, since):
            if part[1] <= lo:
                continue  # every row of it is at most the first bound: before every start
            parts.append(part)
            if part[1] > hi:  # (the batch's newest is past every bound: range > 0)
                break
        self._fetch([t for _b, _last, t in parts])
        got = [
            self._cols(t)[self.ts_col][b - t.start :] if isinstance(t, _Slice) else t  # type: ignore[index]
            for b, _last, t in parts
        ]
        joined = got[0] if len(got) == 1 else np.concatenate(got)
        return parts[0][0] + search_sorted(joined, bound)

    def _parts_ts(
        self, g0: int, ts: np.ndarray | None, since: int = 0
    ) -> Iterator[tuple[int, Any, Any]]:
        """(global start, newest timestamp, timestamps) of the rows of the head, the slices,
        the tail and the batch that have any, from global position ``since`` (at least the
        first held), oldest first; a sealed slice's timestamps as the slice (read only when
        a start falls in it: they may be in the store)."""
        col = self.ts_col
        assert col is not None
        since = max(since, self.head_from)
        for sl in self._held_from(since):
            yield max(since, sl.start), sl.newest, sl
        off = max(0, since - self.tail.start)
        t = self.tail.cols[col][off:]  # type: ignore[index]
        if len(t):
            yield self.tail.start + off, t[-1], t
        if ts is not None and len(ts):
            yield g0, ts[-1], ts

    # -- per-row results
    def _per_row(
        self,
        m: Member,
        cols: dict[str, np.ndarray],
        lifted: list[Comps],
        starts: np.ndarray,
        g0: int,
        n: int,
        tail: _Slice,
        view: _View,
        tail_lifted: dict[int, Comps],
    ) -> tuple[pa.Table, np.ndarray, Any]:
        """Member ``m``'s per-row results of the batch (a table), its size after each row,
        and its lifted aggregate after the last (that row's result)."""
        m_agg = view.middle
        kernels = [(i, self.kernels[i if i != COUNTED else 0]) for i in m.fields]
        g = np.arange(g0, g0 + n, dtype=np.int64)
        empty = starts > g
        sizes = np.maximum(g - starts + 1, 0)
        x0 = tail.start if tail.n else g0
        old = starts < x0  # (a prefix of the rows: the starts never decrease)
        n_old = int(np.searchsorted(starts, x0))
        y0, y_end = view.y0, view.end
        ny = y_end - y0
        ycols = _Joined(view.parts)
        # the rows positions point into (First, Last, arg-* keys): Y then X
        positional = any(k.pos_comp is not None for i, k in kernels if i != COUNTED)
        nt = tail.n
        xcols = _concat([self._cols(tail), cols], self.reads) if nt and positional else cols
        zcols = (
            _concat([{c: ycols[c] for c in self.reads}, xcols], self.reads)
            if ny and positional
            else xcols
        )
        values = _Values(zcols)
        # a sliding window's ranges (Two-Stacks, slide.py) when its old starts are all in Y
        fast = SLIDE and (not n_old or bool(ny and starts[0] >= y0 and starts[n_old - 1] < y_end))
        arrays: list[pa.Array] = []
        lasts: list[Any] = []  # each field's lifted aggregate after the last row
        for j, (i, k) in enumerate(kernels):
            if i == COUNTED:  # a Count the window does not have: the rows in the range
                arrays.append(pa.array(sizes))
                lasts.append(int(sizes[n - 1]))
                continue
            if j == m.ts_field:
                newest = cols[self.ts_col]  # type: ignore[index]
                arrays.append(pa.array(newest))
                lasts.append(_py(newest[n - 1]))  # Max or Last of the timestamps: the newest
                continue
            tl = None
            if nt:
                tl = tail_lifted.get(i)
                if tl is None:
                    tl = tail_lifted[i] = k.lift(self._cols(tail), nt)
            if fast:
                comps = self._slid(
                    k,
                    i,
                    [lifted[i]] if tl is None else [tl, lifted[i]],
                    ycols,
                    view,
                    starts,
                    sizes,
                    n_old,
                    x0,
                )
                if comps is not None:
                    arrays.append(k.lower(comps, values))
                    lasts.append(k.to_lifted(comps, n - 1, values))
                    continue
            if tl is None:
                xc = lifted[i]
            else:
                tx = one_form(k, [tl, _shift(lifted[i], k.pos_comp, nt)])
                xc = tuple(np.concatenate(p) for p in zip(*tx, strict=True))
            if k.pos_comp is not None:
                xc = _shift(xc, k.pos_comp, ny)
            pieces: list[tuple[np.ndarray, Comps]] = []  # (rows, their results)
            ex = g - x0  # each row's position in X
            inx = ~old & ~empty
            if inx.any():
                pieces.append((inx, range_aggregates(k, xc, starts[inx] - x0, ex[inx])))
            if old.any():
                # a row whose range starts before X: (Y from its start) ⊕ M ⊕ (X to it), M
                # the slices between Y and X; M folds into X's first row (one scan of X
                # gives M ⊕ each prefix), so a row costs one combine
                s_old = starts[old]
                mc: Comps | None = None
                if m_agg is not None:
                    mf = self._field(m_agg, i)
                    mc = k.from_slice(mf)
                    if k.pos_comp is not None:
                        values.foreign[id(k)] = _foreign(k, mf)
                fx = scan_all(k, xc if mc is None else _fold_first(k, mc, xc))
                if len(s_old) == n:  # every row (a long window's batch): X's last n rows
                    fx_rows = tuple(c[len(c) - n :] for c in fx)
                else:
                    fx_rows = tuple(c[ex[old]] for c in fx)
                if ny:
                    ry = scan_all(k, _shift(k.lift(ycols, ny), k.pos_comp, 0), reverse=True)
                    ry_rows = tuple(c[np.minimum(s_old - y0, ny - 1)] for c in ry)
                    got = k.combine(ry_rows, fx_rows)
                    in_y = s_old < y_end
                    if not in_y.all():  # pragma: no cover - Y holds every old start
                        if mc is None:
                            msg = "a range starts after Y with no slices there"
                            raise AssertionError(msg)
                        got = tuple(np.where(in_y, a, b) for a, b in zip(got, fx_rows, strict=True))
                else:
                    assert mc is not None
                    got = fx_rows
                pieces.append((old, got))
            parts = one_form(k, [pc for _, pc in pieces])
            pieces = [(rows, pc) for (rows, _), pc in zip(pieces, parts, strict=True)]
            comps = _assemble(xc, pieces, n, k.pos_comp)
            arrays.append(k.lower(comps, values))
            lasts.append(k.to_lifted(comps, n - 1, values))
        table = self._table(m, arrays, n)
        if empty.any():
            table = self._patch_empty(m, table, empty)
        total = tuple(lasts) if m.record else lasts[0]
        return table, sizes, m.monoid.identity if empty[-1] else total

    def _slid(
        self,
        k: Kernel,
        i: int,
        xs: list[Comps],
        ycols: _Joined,
        view: _View,
        starts: np.ndarray,
        sizes: np.ndarray,
        n_old: int,
        x0: int,
    ) -> Comps | None:
        """Field ``i``'s per-row results by Two-Stacks over Y, M and X (:func:`slide`; X as
        ``xs``, the tail's lifted rows then the batch's), or None where the array path
        answers. Y and M only when some range starts before X."""
        if not n_old:
            return slide(k, xs, starts - x0, sizes)
        ny = view.end - view.y0
        # Y's parts lifted apart: slide() joins them with the rest in one copy
        parts = [k.lift(p, len(next(iter(p.values())))) for p in ycols.parts]
        if view.middle is not None:
            parts.append(k.from_slice(self._field(view.middle, i)))
        into = starts + (ny + (view.middle is not None) - x0)  # X's rows after Y and M
        into[:n_old] = starts[:n_old] - view.y0  # the old starts: in Y
        return slide(k, parts + xs, into, sizes)

    def _field(self, agg: Any, i: int) -> Any:
        return agg[i] if self.record else agg

    def _table(self, m: Member, arrays: list[pa.Array], n: int) -> pa.Table:
        if not arrays:  # an empty batch: the columns of the last results (null before any)
            if m.schema is not None:
                return m.schema.empty_table()
            arrays = [pa.array([], type=pa.null()) for _ in m.names]
        table = pa.Table.from_arrays(arrays, names=list(m.names))
        m.schema = table.schema
        return table

    def _patch_empty(self, m: Member, table: pa.Table, empty: np.ndarray) -> pa.Table:
        """Rows whose window is empty (a count of 0): the identity, lowered."""
        low = m.monoid.lower(m.monoid.identity)
        cols = []
        for name in m.names:
            v = low[name] if m.record else low
            col = table.column(name).to_pylist()
            for j in np.flatnonzero(empty):
                col[j] = v
            cols.append(pa.array(col))
        return pa.Table.from_arrays(cols, names=list(m.names))

    # -- state
    def _evict(self, cut: int) -> None:
        """Let the head and the slices go up to global position ``cut`` (the tail and the
        batch are trimmed by :meth:`_append`)."""
        self._moved = 0
        if cut <= self.head_from:
            return
        dropped = self._dropped
        before = len(dropped)
        if cut >= (self.tail.start if self.tail.n else self.next):
            if self.head is not None:
                dropped.append(self.head.index)
            dropped.extend(sl.index for sl in self.slices)
            self.tree.clear()
            self.slices.clear()
            self.head = None
            return
        if self.head is not None and cut >= self.head.end:
            dropped.append(self.head.index)
            self.head = None
        self._cut = cut
        k = self.tree.enforce()
        popped = [self.slices.popleft() for _ in range(k)]
        if popped and popped[-1].end > cut:
            self.head = popped.pop()
        dropped.extend(sl.index for sl in popped)
        self._moved = len(dropped) - before

    def _append(self, cols: dict[str, np.ndarray], n: int, cut: int, ts: np.ndarray | None) -> None:
        """The batch joins the tail; rows before ``cut`` leave it; full slices are sealed."""
        if self.tail.n:
            tail = _Slice(
                self.tail.start, _concat([self._cols(self.tail), cols], self.reads), self.tail.n + n
            )
        else:
            tail = _Slice(self.next, dict(cols), n)
        if cut > tail.start:
            drop = min(cut - tail.start, tail.n)
            tail = _Slice(
                tail.start + drop, {c: v[drop:] for c, v in self._cols(tail).items()}, tail.n - drop
            )
        self.tail = tail
        self.next += n
        if ts is not None:
            self.newest_ts = ts[-1].item()
        self.head_from = max(self.head_from, cut)
        self._seal()
        self._tail_aggs = {}

    def _seal(self) -> None:
        width = self.slice_rows
        t = self.tail
        if t.n < width:
            return
        k = t.n // width
        new = []
        for j in range(k):
            sl = _Slice(  # copies: a view would keep the whole batch's arrays alive
                t.start + j * width,
                {c: v[j * width : (j + 1) * width].copy() for c, v in self._cols(t).items()},
                width,
            )
            new.append(sl)
        rest = k * width
        self.tail = _Slice(
            t.start + rest, {c: v[rest:].copy() for c, v in self._cols(t).items()}, t.n - rest
        )
        for sl in new:
            sl.agg = self._reduce(sl, 0)
            sl.index = self.sealed
            self.sealed += 1
            if self.ts_col is not None:
                sl.newest = sl.cols[self.ts_col][-1].item()  # type: ignore[index]
        self.tree.load_lifted([(sl.agg, sl.start) for sl in new])
        self.slices.extend(new)
        if self.store is not None:  # written later, together (see _write)
            for sl in new:
                sl.pending = UNWRITTEN
            self._unwritten += len(new)
            if self._unwritten >= WRITE_SLICES:
                self._write()

    def _write(self) -> None:
        """Queue the write of the sealed slices not written yet (those still in the window),
        as one write, encoded on the store's thread. Slices are written in groups of
        :data:`WRITE_SLICES` and before each checkpoint (which names them): with Redis
        syncing its log to disk at every write (the embedded server's ``appendfsync
        always``), a write per batch cost a 10,000-row batch a third of its time. A slice
        that left the window before its write is never written."""
        assert self.store is not None
        todo = [
            sl for sl in (self.head, *self.slices) if sl is not None and sl.pending is UNWRITTEN
        ]
        self._unwritten = 0
        if not todo:
            return
        pack = self.store.codec.pack_values
        fut = self.store.put_slices(
            [(sl.index, (sl.start, sl.n, sl.newest, pack([sl.agg])), sl.cols) for sl in todo],
            _encode_buffer,
        )
        for sl in todo:
            sl.pending = fut

    # -- the Redis tier (a stored window's)
    def _cols(self, sl: _Slice) -> dict[str, np.ndarray]:
        """``sl``'s columns, read from the store when they are not in memory."""
        if sl.cols is None:
            self._fetch([sl])
        assert sl.cols is not None
        return sl.cols

    def _fetch(self, parts: list[Any]) -> None:
        """Read the columns of the sealed slices among ``parts`` that are only in the store:
        from the read ahead when it has them (waiting for it), the others in one round trip."""
        missing = [p for p in parts if isinstance(p, _Slice) and p.cols is None]
        if not missing:
            return
        assert self.store is not None
        if self._ahead is not None:
            self._take_ahead(wait=True)
            missing = [sl for sl in missing if sl.cols is None]
            if not missing:
                return
        blobs = self.store.read_slices([sl.index for sl in missing])
        for sl, blob in zip(missing, blobs, strict=True):
            sl.cols = _decode(blob, self.reads, sl.n)

    def _take_ahead(self, *, wait: bool) -> bool:
        """Give the slices of the read ahead their columns, once it is done (``wait``: wait
        for it). False: it is not done. A read ahead that failed gives nothing (the slices
        are read again where they are needed, and that read reports the error)."""
        assert self._ahead is not None
        slices, fut = self._ahead
        if not wait and not fut.done():
            return False
        self._ahead = None
        try:
            blobs = fut.result()
        except (StoreError, concurrent.futures.CancelledError):
            return True
        for sl, blob in zip(slices, blobs, strict=True):
            if sl.cols is None:
                sl.cols = _decode(blob, self.reads, sl.n)
                self.read_ahead += 1
        return True

    def _release(self) -> None:
        """After a batch: the columns of written slices past the oldest ``local_slices`` leave
        memory (the store has them); the oldest, where the window's start moves next, are
        read ahead in the background (one read at a time; :meth:`_fetch` takes it). Waits
        while more than :data:`MAX_PENDING` writes are queued. A failed write keeps its
        slice's columns; the next call raises it (:meth:`apply`)."""
        pending = [sl for sl in self.slices if sl.pending is not None]
        if len(pending) > MAX_PENDING:
            old = pending[: len(pending) - MAX_PENDING]
            if any(sl.pending is UNWRITTEN for sl in old):
                self._write()
            concurrent.futures.wait({sl.pending for sl in old})
        for sl in self.slices:
            fut = sl.pending
            if fut is not None and fut is not UNWRITTEN and fut.done():
                if fut.cancelled() or fut.exception() is not None:  # see store.failed
                    continue
                sl.pending = None
        self._trim()
        if self._ahead is not None and not self._take_ahead(wait=False):
            return  # the last read ahead is still on its way
        want = [sl for sl in self._hot(self._ahead_slices()).values() if sl.cols is None]
        if not want:
            return
        assert self.store is not None
        self._ahead = (want, self.store.prefetch_slices([sl.index for sl in want]))

    def _ahead_slices(self) -> int:
        """How many slices from each start are read ahead and kept: those the next two
        batches' starts likely move through (twice as many as the last batch's moved
        through: a read ahead then has a batch's time to arrive before its slices are
        needed; for the next batch only, a batch arriving while the read was on its way
        waited for it, a tenth of the batches of a 600 s window through gRPC), the second
        batch's at most :data:`AHEAD_EXTRA` (a batch that moved the start by a million rows
        keeps one batch's worth, not two), at least ``local_slices``."""
        step = self._moved + 1
        return max(self.local_slices, step + min(step, AHEAD_EXTRA))

    def _trim(self) -> None:
        """The columns of written slices leave memory but for those where a start (the
        window's, a member's) falls and the few after each (:meth:`_ahead_slices`)."""
        hot = self._hot(self._ahead_slices())
        for sl in self.slices:
            if sl.cols is not None and sl.pending is None and id(sl) not in hot:
                sl.cols = None
                sl.suffix = None

    def _hot(self, k: int) -> dict[int, _Slice]:
        """The slices where each start falls and the ``k`` - 1 after each, by id."""
        hot: dict[int, _Slice] = {}
        for m in self._views():
            for sl in itertools.islice(self._held_from(m.head_from), k):
                hot[id(sl)] = sl
        return hot

    def checkpoint(self, *, wait: bool = True, meta: dict[str, Any] | None = None) -> Any:
        """Make everything applied so far durable in the store (behind the slices' writes):
        positions, counters, the tail's rows and ``meta`` (plain data; it comes back as
        :attr:`checkpoint_meta` on load), with the deletion of the slices that left since the
        last checkpoint, atomically. Returns the write's Future (done when ``wait``)."""
        if self.store is None:
            msg = "ColumnarWindow.checkpoint: the window has no store"
            raise RuntimeError(msg)
        # an idle window's checkpoint is the one already written (or queued): not again
        # (it holds the tail's rows: up to a slice's worth of columns every flush interval)
        members = {
            m.name: [m.created, m.head_from, m.evicted, _describe(m.monoid, m.policy)]
            for m in self.members.values()
        }
        mark = (
            self.head_from,
            self.own.head_from,
            self.own.retired,
            self.next,
            self.sealed,
            self.evicted,
            members,
            meta,
        )
        last = self._written
        if not self._dropped and last is not None and last[0] == mark and self.store.failed is None:
            if wait:
                last[1].result()
            return last[1]
        self._write()  # the slices it names, before it (the store's thread keeps the order)
        tail = self.tail
        state = {
            "window": self._description,
            "head_from": self.head_from,
            "own_from": self.own.head_from,
            "own_retired": self.own.retired,
            "members": members,
            "next": self.next,
            "newest_ts": self.newest_ts,
            "evicted": self.evicted,
            "sealed": self.sealed,
            "head": -1 if self.head is None else self.head.index,
            "tail_start": tail.start,
            "tail_rows": tail.n,
            "tail": _encode(self._cols(tail)),
            "meta": meta,
        }
        fut = self.store.commit(state, self._dropped, wait=wait)
        self._dropped = []
        self._written = (mark, fut)
        return fut

    def _load(self) -> None:
        """The state of the store's last checkpoint (an empty window when it has none); the
        columns of the slices where the window starts are read, the others when needed."""
        assert self.store is not None
        state, headers = self.store.load()
        self._reset()
        if state is None:
            return
        if state.get("window") != self._description:
            msg = (
                f"ColumnarWindow: the stored window {self.store.window_id!r} was made as "
                f"{state.get('window')!r}; opening it as {self._description!r} would give "
                "wrong results"
            )
            raise ValueError(msg)
        sealed = int(state["sealed"])
        live = []
        for k in sorted(h for h in headers if h < sealed):  # later ones: sealed after it
            start, n, newest, agg = headers[k]
            sl = _Slice(start, None, n, self.store.codec.unpack_values(agg)[0], k, newest)
            live.append(sl)
        head = int(state["head"])
        if live and head >= 0:
            if live[0].index != head:
                msg = f"ColumnarWindow: slice {head} (the checkpoint's head) is not in the store"
                raise CorruptDataError(msg)
            self.head = live.pop(0)
        self.slices.extend(live)
        self.tree.load_lifted([(sl.agg, sl.start) for sl in live])
        self.head_from = int(state["head_from"])
        self.own.head_from = int(state.get("own_from", self.head_from))
        self.own.retired = bool(state.get("own_retired", False))
        self._refresh_dead()
        self._cut = self.head_from
        self.next = int(state["next"])
        self.newest_ts = state["newest_ts"]
        self.own.evicted = int(state["evicted"])
        self.sealed = sealed
        n = int(state["tail_rows"])
        self.tail = _Slice(int(state["tail_start"]), _decode(state["tail"], self.reads, n), n)
        meta = state.get("meta")
        self.checkpoint_meta = meta if isinstance(meta, dict) else None
        self._stored_members = dict(state.get("members") or {})
        self._restore_members()
        self._release()

    def _reset(self) -> None:
        self.tree.clear()
        self.slices.clear()
        self.head = None
        self.head_from = self.next = self.sealed = 0
        self._cut = 0
        self.tail = _Slice(0, {c: np.empty(0) for c in self.reads}, 0)
        self.newest_ts = None
        self.own.total = None
        self._tail_aggs = {}
        self._dropped = []
        self._written = None
        self._ahead = None
        self._unwritten = 0
        self.checkpoint_meta = None
        self.own.head_from = self.own.evicted = 0
        self._stored_members = {}
        self._restore_members()

    def _restore_members(self) -> None:
        for m in self.members.values():
            self._restore(m)

    def reload(self) -> None:
        """After a store failure: drop the queued writes and load the last checkpoint."""
        assert self.store is not None
        self.store.restart()
        try:
            self._load()
        except BaseException as ex:
            self._unloaded = ex  # every batch refused until a reload succeeds
            raise
        self._unloaded = None

    def close(self, *, wait: bool = True) -> None:
        if self.store is not None:
            self.store.close(wait=wait)

    def stats(self) -> dict[str, Any]:
        """Rows, slices (how many hold their columns in memory, how many are not written
        yet), counters, the store's."""
        held = [sl for sl in (self.head, *self.slices) if sl is not None]
        out: dict[str, Any] = {
            "size": len(self),
            "inserted": self.next,
            "evicted": self.evicted,
            "slices": len(held),
            "local_slices": sum(sl.cols is not None for sl in held),
            # sealed, their write not done yet (not queued, or queued and on its way)
            "unwritten_slices": sum(
                sl.pending is UNWRITTEN or (sl.pending is not None and not sl.pending.done())
                for sl in held
            ),
            "tail_rows": self.tail.n,
            "read_ahead": self.read_ahead,
        }
        if self.store is not None:
            out["store"] = self.store.stats.as_dict()
        return out


def _assemble(
    like: Comps, pieces: list[tuple[np.ndarray, Comps]], n: int, pos: int | None
) -> Comps:
    """The results of all ``n`` rows from the pieces computed for some of them, in the type
    they all fit (a column that was integers in older batches and floats in this one gives
    floats); rows of no piece (an empty window) hold zeros, and no position."""
    if len(pieces) == 1 and len(pieces[0][0]) == n and pieces[0][0].all():
        return pieces[0][1]  # one piece holds every row (the common case)
    out = []
    for j, c in enumerate(like):
        dtype = np.result_type(*(pc[j] for _, pc in pieces)) if pieces else c.dtype
        r = np.full(n, -1, dtype=dtype) if j == pos else np.zeros(n, dtype=dtype)
        for rows, pc in pieces:
            r[rows] = pc[j]
        out.append(r)
    return tuple(out)


def _describe(monoid: Any, policy: Any) -> str:
    """A member's definition as its checkpoint names it."""
    return f"{monoid!r} under {policy!r}"


def _joined(got: list[BatchResult], per_row: bool) -> BatchResult:
    """The results of consecutive chunks of a batch as one batch's."""
    evicted = sum(g.evicted for g in got)
    if not per_row:
        return BatchResult(evicted)
    # one chunk per part (no copy into one array: the results may be most of the memory)
    rows = pa.concat_tables([g.rows for g in got], promote_options="default")
    return BatchResult(evicted, rows, np.concatenate([g.sizes for g in got]))


def _fold_first(k: Kernel, m: Comps, xc: Comps) -> Comps:
    """``xc`` with its first row replaced by ``m ⊕ it``: a scan of it is ``m ⊕`` each prefix."""
    head = k.combine(m, tuple(c[:1] for c in xc))
    first, rest = one_form(k, [head, tuple(c[1:] for c in xc)])
    return tuple(
        np.concatenate([f, c.astype(np.result_type(f, c), copy=False)])
        for f, c in zip(first, rest, strict=True)
    )


def _py(x: Any) -> Any:
    """A numpy scalar as the Python value (an object column's element as it is)."""
    item = getattr(x, "item", None)
    return item() if item is not None else x


def _concat(parts: list[dict[str, np.ndarray]], names: list[str]) -> dict[str, np.ndarray]:
    parts = [p for p in parts if p and len(next(iter(p.values()))) > 0]
    if not parts:
        return {c: np.empty(0) for c in names}
    if len(parts) == 1:
        return parts[0]
    return {c: np.concatenate([p[c] for p in parts]) for c in names}


def _shift(comps: Comps, i: int | None, by: int) -> Comps:
    if i is None or by == 0 or not comps:  # (a dead field's: nothing)
        return comps
    c = comps[i]
    return (*comps[:i], np.where(c >= 0, c + by, c), *comps[i + 1 :])


def _foreign(k: Kernel, lifted: Any) -> Any:
    """The value a FOREIGN position of ``k`` stands for, from a lifted aggregate."""
    if k.pos_comp == 1:  # arg-*: (value, key)
        return lifted[1]
    return None if lifted is NOTHING else lifted


def _encode(cols: dict[str, np.ndarray]) -> bytes:
    """A slice's columns as one Arrow IPC stream (no pickle: read back from Redis)."""
    return bytes(_encode_buffer(cols).to_pybytes())


def _encode_buffer(cols: dict[str, np.ndarray]) -> pa.Buffer:
    """:func:`_encode` as the IPC writer's buffer (a slice's write sends it as it is)."""
    names = list(cols)
    batch = pa.RecordBatch.from_arrays([pa.array(cols[c]) for c in names], names=names)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as w:
        w.write_batch(batch)
    return sink.getvalue()


def _decode(data: bytes, names: list[str], n: int) -> dict[str, np.ndarray]:
    """Inverse of :func:`_encode`: the columns ``names`` of ``n`` rows (text as objects)."""
    try:
        table = pa.ipc.open_stream(data).read_all()
        table.validate(full=True)  # offsets in bounds, text UTF-8: before it is read
        cols = {c: np.array(table.column(c).to_numpy(zero_copy_only=False)) for c in names}
    except (pa.ArrowException, KeyError) as ex:
        msg = f"a stored slice is not readable ({type(ex).__name__}: {ex})"
        raise CorruptDataError(msg) from ex
    if names and any(len(v) != n for v in cols.values()):
        msg = f"a stored slice holds {table.num_rows} rows, its header says {n}"
        raise CorruptDataError(msg)
    return cols
