"""SlickDeque (paper ``003_*``): the invertible form (a running total, each evicted item
subtracted with its inverse) and the non-invertible form for selection operators such as max
(a deque of the items no newer item dominates; the answer is its front).

Fact card: :data:`SlickDequeAggregator.card`. A monoid whose every part (the monoid itself, or
each field of a :class:`~.monoids.Record`) is invertible or a selection runs here, each part in
its own form: a record of a count, a sum and a max keeps two running totals and one deque. The
non-invertible form's invariant: for neighbours ``a`` (older) and ``b`` in the deque,
``combine(a, b) is a`` (else ``a`` would have been dropped when ``b`` came), so by
associativity the fold of the deque, which equals the window's aggregate, is its front.

Multi-query (the paper's section 2.3 and Table 3): ``query_suffix(r)``, the aggregate of the
newest ``r`` items, as each form answers a query of range ``r``:

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

_COMPACT = 64  # a list drops its dead head once it is this long and half the list


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
    """A selection part: the positions and values no newer value dominates, oldest first, from
    ``head`` on (``pos`` and ``val``, parallel lists; the entries before ``head`` are gone)."""

    __slots__ = ("combine", "head", "identity", "pos", "val")

    def __init__(self, monoid: Any) -> None:
        self.combine = monoid.combine
        self.identity = monoid.identity
        self.pos: list[int] = []
        self.val: list[Any] = []
        self.head = 0

    def insert(self, pos: int, v: Any) -> None:
        val = self.val
        combine = self.combine
        head = self.head
        while len(val) > head:
            back = val[-1]
            r = combine(back, v)
            if r is v:
                val.pop()  # the newer value wins over it for as long as it stays
                self.pos.pop()
            elif r is back:
                break
            else:
                msg = (
                    f"SlickDeque: the monoid is declared a selection, but combine({back!r}, "
                    f"{v!r}) gave {r!r}, neither of them"
                )
                raise TypeError(msg)
        val.append(v)
        self.pos.append(pos)

    def evict(self, pos: int, v: Any, empty: bool) -> None:
        head = self.head
        positions = self.pos
        if len(positions) > head and positions[head] == pos:
            head += 1
            if head >= _COMPACT and 2 * head >= len(positions):
                del positions[:head]
                del self.val[:head]
                head = 0
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
        requires="each part of the monoid (it, or each field of a record) invertible (a "
        "group: count, sum, mean, variance, geometric mean) or a selection (max, min, "
        "arg-max, arg-min, first, last)",
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
        "registered range's total reads the item leaving it; the invertible form's float sums "
        "are not compensated (drift of one rounding per eviction; an empty window resets); "
        "the multi-query deque lookup is a binary search on positions (the paper traverses "
        "the deque once for all ranges, sorted)",
    )
    requires = frozenset({"inverse-or-selection"})

    def __init__(self, monoid: Any) -> None:
        super().__init__(monoid)
        self._buf: list[Any] = []  # the items from _head on, oldest first
        self._head = 0
        self._first = 0  # position of the oldest item
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
        return len(self._buf) - self._head

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
        buf = self._buf
        n = len(buf) - self._head  # before the insert
        pos = self._first + n
        if self._record:
            for part, v in zip(self._parts, u, strict=True):
                part.insert(pos, v)
        else:
            self._parts[0].insert(pos, u)
        buf.append(u)
        if self._ranges:
            # range r takes u in; once it is full, its oldest item (index n - r) leaves it
            base = self._head + n
            for k, part in self._running:
                ranged = part.ranged
                combine, inverse = part.combine, part.inverse
                if k is None:
                    for r in self._ranges:
                        if r <= n:
                            ranged[r] = combine(combine(inverse(buf[base - r]), ranged[r]), u)
                        else:
                            ranged[r] = combine(ranged[r], u)
                    continue
                v = u[k]
                for r in self._ranges:
                    t = ranged[r]
                    if r <= n:
                        t = combine(inverse(buf[base - r][k]), t)
                    ranged[r] = combine(t, v)

    def evict(self) -> None:
        buf = self._buf
        head = self._head
        u = buf[head]
        n = len(buf) - head  # before the eviction
        head += 1
        if head >= _COMPACT and 2 * head >= len(buf):
            del buf[:head]
            head = 0
        self._head = head
        pos = self._first
        self._first += 1
        empty = n == 1
        if self._record:
            for part, v in zip(self._parts, u, strict=True):
                part.evict(pos, v, empty)
        else:
            self._parts[0].evict(pos, u, empty)
        if self._ranges:
            # the oldest item was inside range r when the window held at most r items
            for k, part in self._running:
                ranged = part.ranged
                v = u if k is None else u[k]
                inv = part.inverse(v)
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
        n = len(self._buf) - self._head
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
        buf = self._buf
        for u in islice(buf, self._head, self._head + n - r):
            older = combine(older, u if k is None else u[k])
        return combine(part.inverse(older), part.total)

    def items(self) -> Iterator[Any]:
        return islice(self._buf, self._head, None)

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
