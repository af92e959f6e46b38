"""SlickDeque (paper ``003_*``): the invertible form (a running total, each evicted item
subtracted with its inverse) and the non-invertible form for selection operators such as max
(a deque of the items no newer item dominates; the answer is its front).

Fact card: :data:`SlickDequeAggregator.card`. A monoid whose every part (the monoid itself, or
each field of a :class:`~.monoids.Record`) is invertible or a selection runs here, each part in
its own form: a record of a count, a sum and a max keeps two running totals and one deque. The
non-invertible form's invariant: for neighbours ``a`` (older) and ``b`` in the deque,
``combine(a, b) is a`` (else ``a`` would have been dropped when ``b`` came), so by
associativity the fold of the deque, which equals the window's aggregate, is its front.

Multi-query (the paper's sections 2.2 and 4.1, Table 3): ``query_suffix(r)``, the aggregate of
the newest ``r`` items, as each form answers a query of range ``r``:

* a selection part keeps its deque with the items' sequential positions (a list and the
  offset of its head, the positions in a parallel list), and a range's answer is the first
  entry whose position lies inside it (the paper traverses the deque to the "correct
  (pre-calculated) sequential position"; here a binary search on the positions): O(log d)
  for a deque of d entries (d ~ ln n for random input). Whether an item stays in the deque
  depends on the newer items only, so the entries inside a range are the deque of that range
  alone, whose front is its aggregate.
* an invertible part keeps, as the paper's modified Panes, one running aggregate per
  *registered* range ("running aggregates for each unique range in a hashmap"):
  :meth:`SlickDequeAggregator.set_ranges` registers them in advance (the paper's planning
  stage), and each slide moves every one of them by two operations (the new item combined in,
  the item leaving the range subtracted with its inverse), so its answer is O(1). A range not
  registered is answered from the items held, O(min(r, n - r)) (a fold of the newest ``r``, or
  the total with the oldest ``n - r`` subtracted), and the whole window (``r == n``) from the
  running total.

Deviations from the paper, and why: the items are kept (a list and the offset of its head),
because the service's policies are tested on aggregates of prefixes, and a registered range's
running total reads the item leaving it; a record runs each field in the form it allows.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator
from itertools import islice
from typing import Any

from ..sentinels import UNSET
from .fifo import Aggregator, AggregatorWindow, FactCard
from .laws import approx_equal
from .monoids import Record

__all__ = ["SlickDeque", "SlickDequeAggregator"]

# a list drops the entries before its head (gone) once there are at least this many and as
# many as it kept at its last drop: amortized O(1) a removal
_COMPACT = 64


class _Running:
    """An invertible part: the running total, each evicted item subtracted in front; and one
    running total per registered range (``ranged``: range -> the aggregate of the newest
    min(range, n) items)."""

    __slots__ = ("combine", "identity", "inverse", "ranged", "total")

    def __init__(self, monoid: Any) -> None:
        self.combine = monoid.combine
        self.inverse = monoid.inverse
        self.identity = monoid.identity
        self.total = monoid.identity
        self.ranged: dict[int, Any] = {}

    def insert(self, pos: int, v: Any) -> None:
        self.total = self.combine(self.total, v)

    def evict(self, pos: int, v: Any, empty: bool) -> None:
        # an empty window starts again from the identity: no rounding left behind
        self.total = self.identity if empty else self.combine(self.inverse(v), self.total)

    def query(self) -> Any:
        return self.total


class _Dominant:
    """A selection part: the values no newer value dominates and their positions, oldest
    first, from index ``head`` on (``val`` and ``pos``, parallel lists: the positions are
    binary-searched by the multi-query; the entries before ``head`` are gone, dropped in
    bulk)."""

    __slots__ = ("combine", "compact_at", "head", "identity", "pos", "val")

    def __init__(self, monoid: Any) -> None:
        self.combine = monoid.combine
        self.identity = monoid.identity
        self.val: list[Any] = []
        self.pos: list[int] = []
        self.head = 0
        self.compact_at = _COMPACT

    def insert(self, pos: int, v: Any) -> None:
        val = self.val
        combine = self.combine
        head = self.head
        n = len(val)
        while n > head:
            back = val[n - 1]
            r = combine(back, v)
            if r is v:
                n -= 1  # the newer value wins over it for as long as it stays
            elif r is back:
                break
            else:
                msg = (
                    f"SlickDeque: the monoid is declared a selection, but combine({back!r}, "
                    f"{v!r}) gave {r!r}, neither of them"
                )
                raise TypeError(msg)
        if n < len(val):
            del val[n:]
            del self.pos[n:]
        val.append(v)
        self.pos.append(pos)

    def evict(self, pos: int, v: Any, empty: bool) -> None:
        head = self.head
        if self.pos[head] == pos:  # the newest item is always kept: pos[head] exists
            head += 1
            if head >= self.compact_at:  # drop the entries gone: amortized O(1)
                del self.val[:head]
                del self.pos[:head]
                head = 0
                self.compact_at = max(_COMPACT, len(self.val))
            self.head = head

    def query(self) -> Any:
        val = self.val
        return val[self.head] if len(val) > self.head else self.identity

    def since(self, start: int) -> Any:
        """The aggregate of the items from position ``start`` on (there is one): the first
        entry at or after it."""
        return self.val[bisect_left(self.pos, start, self.head)]


class SlickDequeAggregator(Aggregator):
    card = FactCard(
        name="SLICKDEQUE",
        full_name="SlickDeque (invertible and non-invertible)",
        paper="003: Shein, Chrysanthis, Labrinidis, 'SlickDeque: High Throughput and Low "
        "Latency Incremental Sliding-Window Aggregation', EDBT 2018",
        ordering="FIFO (in order)",
        requires="each part of the monoid (it, or each field of a record) exactly "
        "invertible (a count, a sum of INT64 values: taking a value back out leaves the exact "
        "total) or a selection (max, min, arg-max, arg-min, first, last); a float sum, mean "
        "or variance is refused: subtracting a large value that left takes the small ones' "
        "digits with it",
        time="insert O(1) amortized (a deque's pops), O(n) worst; evict O(1); query O(1) per "
        "part; with R ranges registered (set_ranges) insert and evict also move R running "
        "totals, O(R); query_suffix(r) (the newest r items, multi-query): a selection part "
        "O(log d) (binary search of the deque's positions, d entries), an invertible part O(1) "
        "for a registered range or r = n, else O(min(r, n - r)) from the items",
        space="the items (for the slide policy and checkpoints) plus one deque per selection "
        "part (at most n, typically O(log n) for random data) and one running total per "
        "registered range and invertible part",
        bulk="none: k evictions cost O(k) (O(k R) with R registered ranges)",
        storage="all in the process (checkpoints write every item)",
        deviations="a record runs each field in the form it allows (the paper: one operator "
        "per instance); the items are kept, because the service's policies are tested on "
        "aggregates of prefixes (the paper evicts by position or timestamp only) and a "
        "registered range's total reads the item leaving it; the invertible form runs exact "
        "inverses only (the paper subtracts floats too, whose error has no bound: 1e16 then "
        "1, 2, 3, with 1e16 leaving, would read 4, not 6); "
        "the multi-query deque lookup is a binary search on positions (the paper traverses "
        "the deque once for all ranges, sorted)",
    )
    requires = frozenset({"inverse-or-selection"})

    @staticmethod
    def refuse_monoid(monoid: Any) -> str | None:
        """Why ``monoid`` cannot run here (None: it can), naming the parts that are neither
        exactly invertible nor a selection."""
        parts = monoid.fields.items() if isinstance(monoid, Record) else (("", monoid),)
        bad = [
            f"{_label(name)} ({_kind(m)})" if name else _kind(m)
            for name, m in parts
            if not (getattr(m, "invertible", False) or getattr(m, "selection", False))
        ]
        if not bad:
            return None
        return (
            "runs outputs whose inverse is exact (count, a sum of INT64 values) or that "
            "select one value (max, min, first, last, argmax, argmin); these are neither: "
            f"{', '.join(bad)}. AMTA or DABA_LITE run any output"
        )

    def __init__(self, monoid: Any) -> None:
        super().__init__(monoid)
        # the items, positions _first .. _end - 1, at _buf[position - _base] (the items
        # before _first are gone, dropped in bulk once _compact_at of them piled up)
        self._buf: list[Any] = []
        self._base = 0
        self._first = 0
        self._end = 0
        self._compact_at = _COMPACT
        self._ranges: tuple[int, ...] = ()  # registered ranges, ascending
        if isinstance(monoid, Record):
            self._parts = [_part(m) for m in monoid.monoids]
            self._record = True
        else:
            self._parts = [_part(monoid)]
            self._record = False
        # the one part of a monoid that is not a record, by form (query_suffix's fast paths)
        one = None if self._record else self._parts[0]
        self._dominant = one if isinstance(one, _Dominant) else None
        self._invertible = one if isinstance(one, _Running) else None
        # the invertible parts, each with its field's index in a record's tuple (None: the item)
        self._running = [
            (k if self._record else None, p)
            for k, p in enumerate(self._parts)
            if isinstance(p, _Running)
        ]

    def __len__(self) -> int:
        return self._end - self._first

    def set_ranges(self, ranges: Iterable[int]) -> None:
        """Register the ranges (positive item counts) whose :meth:`query_suffix` the invertible
        parts answer in O(1), replacing any registered before: the paper's planning stage,
        one running total per unique range. Each is computed now from the items held, O(sum
        of the ranges); then every insert and evict moves each of them (two operations)."""
        rs = sorted(set(ranges))
        if rs and (rs[0] < 1 or not all(isinstance(r, int) for r in rs)):
            msg = f"SlickDequeAggregator.set_ranges: ranges must be positive ints, got {rs!r}"
            raise ValueError(msg)
        self._ranges = tuple(rs)
        n = len(self)
        for k, part in self._running:
            part.ranged = {r: self._fold(k, part, min(r, n)) for r in rs}

    @property
    def ranges(self) -> tuple[int, ...]:
        """The registered ranges, ascending (:meth:`set_ranges`)."""
        return self._ranges

    def _fold(self, k: int | None, part: _Running, r: int) -> Any:
        """The aggregate of the newest ``r`` items' field ``k`` (None: the items), a fold."""
        combine = part.combine
        acc = part.identity
        for u in islice(self._buf, len(self._buf) - r, None):
            acc = combine(acc, u if k is None else u[k])
        return acc

    def insert(self, u: Any) -> None:
        pos = self._end
        self._end = pos + 1
        if self._record:
            for part, v in zip(self._parts, u, strict=True):
                part.insert(pos, v)
        else:
            self._parts[0].insert(pos, u)
        self._buf.append(u)
        if self._ranges:
            self._slide_ranges(u, pos)

    def _slide_ranges(self, u: Any, pos: int) -> None:
        """Every registered range takes the item at ``pos`` in; once it is full, its oldest
        item (at ``pos - r``) leaves it: two operations (three calls: an inverse) a range."""
        buf = self._buf
        n = pos - self._first  # the items before this one
        at = pos - self._base  # u's index in buf
        for k, part in self._running:
            ranged = part.ranged
            combine, inverse = part.combine, part.inverse
            if k is None:
                for r in self._ranges:
                    if r <= n:
                        ranged[r] = combine(combine(inverse(buf[at - r]), ranged[r]), u)
                    else:
                        ranged[r] = combine(ranged[r], u)
                continue
            v = u[k]
            for r in self._ranges:
                t = ranged[r]
                if r <= n:
                    t = combine(inverse(buf[at - r][k]), t)
                ranged[r] = combine(t, v)

    def evict(self) -> None:
        pos = self._first
        i = pos - self._base
        u = self._buf[i]
        self._first = pos + 1
        empty = pos + 1 == self._end
        if i >= self._compact_at:  # drop the items gone: amortized O(1)
            del self._buf[: i + 1]
            self._base = pos + 1
            self._compact_at = max(_COMPACT, len(self._buf))
        if self._record:
            for part, v in zip(self._parts, u, strict=True):
                part.evict(pos, v, empty)
        else:
            self._parts[0].evict(pos, u, empty)
        if self._ranges:
            self._evict_ranges(u, self._end - pos, empty)

    def _evict_ranges(self, u: Any, n: int, empty: bool) -> None:
        """The oldest item ``u`` left a window of ``n`` items: it was inside range r when
        r >= n (the range held the whole window)."""
        for k, part in self._running:
            ranged = part.ranged
            inv = part.inverse(u if k is None else u[k])
            for r in self._ranges:
                if r >= n:
                    ranged[r] = part.identity if empty else part.combine(inv, ranged[r])

    def query(self) -> Any:
        if self._record:
            return tuple(p.query() for p in self._parts)
        return self._parts[0].query()

    def query_suffix(self, r: int) -> Any:
        """The aggregate of the newest ``r`` items: per part, a selection's first deque entry
        from position ``end - r`` (binary search), an invertible part's running total of
        range ``r`` (registered with :meth:`set_ranges`; else computed from the items, O(min(r,
        n - r))). ``r == n`` is :meth:`query`, ``r == 0`` the identity."""
        n = self._end - self._first
        if 0 < r < n:
            d = self._dominant
            if d is not None:
                return d.val[bisect_left(d.pos, self._first + n - r, d.head)]
            i = self._invertible
            if i is not None:
                got = i.ranged.get(r, UNSET)
                return got if got is not UNSET else self._running_suffix(None, i, r, n)
            start = self._first + n - r
            return tuple(
                p.since(start) if isinstance(p, _Dominant) else self._running_suffix(k, p, r, n)
                for k, p in enumerate(self._parts)
            )
        if r == n:
            return self.query()
        if not 0 <= r <= n:
            msg = f"SlickDequeAggregator.query_suffix: r = {r} is outside 0 .. len = {n}"
            raise ValueError(msg)
        return self.identity

    def _running_suffix(self, k: int | None, part: _Running, r: int, n: int) -> Any:
        """An invertible part's aggregate of the newest ``r`` items (0 < r < n)."""
        got = part.ranged.get(r, UNSET)
        if got is not UNSET:
            return got
        if 2 * r <= n:
            return self._fold(k, part, r)
        # the total with the oldest n - r items subtracted from the front
        combine = part.combine
        older = part.identity
        head = self._first - self._base
        for u in islice(self._buf, head, head + n - r):
            older = combine(older, u if k is None else u[k])
        return combine(part.inverse(older), part.total)

    def items(self) -> Iterator[Any]:
        return islice(self._buf, self._first - self._base, None)

    def check(self) -> None:
        """The answer against a fold, then every registered range's running total (and a
        selection's answer for it) against a fold of the newest items."""
        super().check()
        n = len(self)
        for r in self._ranges:
            if r > n:
                continue
            want = Aggregator.query_suffix(self, r)
            got = self.query_suffix(r)
            if not approx_equal(got, want, rel=1e-6, abs_tol=1e-6):
                msg = f"SlickDeque: range {r} gives {got!r}, a fold of its items {want!r}"
                raise AssertionError(msg)


def _label(name: str) -> str:
    """An output's name; a field the service adds for the policy (``__sum``) as such."""
    return f"the policy's own {name[2:]}" if name.startswith("__") else name


def _kind(m: Any) -> str:
    kind = type(m).__name__.lower()
    return "sum of DOUBLE values: a float inverse drifts" if kind == "sum" else kind


def _part(monoid: Any) -> _Running | _Dominant:
    if getattr(monoid, "invertible", False):
        return _Running(monoid)
    if getattr(monoid, "selection", False):
        return _Dominant(monoid)
    msg = f"SlickDeque: {type(monoid).__name__} is neither invertible nor a selection"
    raise TypeError(msg)


class SlickDeque(AggregatorWindow):
    """A window run by SlickDeque (``algorithm`` SLICKDEQUE)."""

    aggregator = SlickDequeAggregator
