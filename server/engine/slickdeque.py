"""SlickDeque (paper ``003_*``): the invertible form (a running total, each evicted item
subtracted with its inverse) and the non-invertible form for selection operators such as max
(a deque of the items no newer item dominates; the answer is its front).

Fact card: :data:`SlickDequeAggregator.card`. A monoid whose every part (the monoid itself, or
each field of a :class:`~.monoids.Record`) is invertible or a selection runs here, each part in
its own form: a record of a count, a sum and a max keeps two running totals and one deque. The
non-invertible form's invariant: for neighbours ``a`` (older) and ``b`` in the deque,
``combine(a, b) is a`` (else ``a`` would have been dropped when ``b`` came), so by
associativity the fold of the deque, which equals the window's aggregate, is its front.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Any

from .fifo import Aggregator, AggregatorWindow, FactCard
from .monoids import Record

__all__ = ["SlickDeque", "SlickDequeAggregator"]


class _Running:
    """An invertible part: the running total; an evicted item is subtracted in front."""

    __slots__ = ("combine", "identity", "inverse", "total")

    def __init__(self, monoid: Any) -> None:
        self.combine = monoid.combine
        self.inverse = monoid.inverse
        self.identity = monoid.identity
        self.total = monoid.identity

    def insert(self, pos: int, v: Any) -> None:
        self.total = self.combine(self.total, v)

    def evict(self, pos: int, v: Any, empty: bool) -> None:
        # an empty window starts again from the identity: no rounding left behind
        self.total = self.identity if empty else self.combine(self.inverse(v), self.total)

    def query(self) -> Any:
        return self.total


class _Dominant:
    """A selection part: the (position, value) pairs no newer value dominates, oldest first."""

    __slots__ = ("combine", "identity", "kept")

    def __init__(self, monoid: Any) -> None:
        self.combine = monoid.combine
        self.identity = monoid.identity
        self.kept: deque[tuple[int, Any]] = deque()

    def insert(self, pos: int, v: Any) -> None:
        kept = self.kept
        combine = self.combine
        while kept:
            back = kept[-1][1]
            r = combine(back, v)
            if r is v:
                kept.pop()  # the newer value wins over it for as long as it stays
            elif r is back:
                break
            else:
                msg = (
                    f"SlickDeque: the monoid is declared a selection, but combine({back!r}, "
                    f"{v!r}) gave {r!r}, neither of them"
                )
                raise TypeError(msg)
        kept.append((pos, v))

    def evict(self, pos: int, v: Any, empty: bool) -> None:
        kept = self.kept
        if kept and kept[0][0] == pos:
            kept.popleft()

    def query(self) -> Any:
        kept = self.kept
        return kept[0][1] if kept else self.identity


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
        time="insert O(1) amortized (a deque's pops), O(n) worst; evict O(1); query O(1) per part",
        space="the items (for the slide policy and checkpoints) plus one deque per selection "
        "part (at most n, typically O(log n) for random data)",
        bulk="none: k evictions cost O(k)",
        storage="all in the process (checkpoints write every item)",
        deviations="a record runs each field in the form it allows (the paper: one operator "
        "per instance); the items are kept, because the service's policies are tested on "
        "aggregates of prefixes (the paper evicts by position or timestamp only); the "
        "invertible form's float sums are not compensated (drift of one rounding per "
        "eviction; an empty window resets)",
    )
    requires = frozenset({"inverse-or-selection"})

    def __init__(self, monoid: Any) -> None:
        super().__init__(monoid)
        self._items: deque[Any] = deque()
        self._first = 0  # position of the oldest item
        if isinstance(monoid, Record):
            self._parts = [_part(m) for m in monoid.monoids]
            self._record = True
        else:
            self._parts = [_part(monoid)]
            self._record = False

    def __len__(self) -> int:
        return len(self._items)

    def insert(self, u: Any) -> None:
        pos = self._first + len(self._items)
        if self._record:
            for part, v in zip(self._parts, u, strict=True):
                part.insert(pos, v)
        else:
            self._parts[0].insert(pos, u)
        self._items.append(u)

    def evict(self) -> None:
        u = self._items.popleft()
        pos = self._first
        self._first += 1
        empty = not self._items
        if self._record:
            for part, v in zip(self._parts, u, strict=True):
                part.evict(pos, v, empty)
        else:
            self._parts[0].evict(pos, u, empty)

    def query(self) -> Any:
        if self._record:
            return tuple(p.query() for p in self._parts)
        return self._parts[0].query()

    def items(self) -> Iterator[Any]:
        return iter(self._items)


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
