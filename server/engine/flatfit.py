"""FlatFIT, "Flat and Fast Index Traverser" (paper ``000_*``, section 3): a circular array of
partial aggregates with a jump pointer per slot, compressed by every query, for amortized O(1).

Fact card: :data:`FlatFITAggregator.card`. Algorithm 1's two circular arrays: ``Partials[i]``
is the aggregate of the items from position ``i`` up to, not including, ``Pointers[i]``. A new
item gets ``Partials = item`` and ``Pointers = the next position``. A query follows the pointers
from the oldest position to the end of the window, pushing each position it visits on the
*Positions* stack; then pops them, newest first, combining each one's partial in front of the
running answer, and points each at the end with the answer as its partial: the next query
jumps over all of them. An eviction only moves the front: a partial covers positions from its
own, so every live one stays valid.

Invariants: for every live position ``i``, ``front <= i < Pointers[i] <= end`` and
``Partials[i] = item[i] ⊕ ... ⊕ item[Pointers[i] - 1]``::

    items      a    b    c    d    e    f      (positions 0 .. 5, end = 6)
    Pointers   6    4    4    4    6    6      (after a query at end = 4, then one at 6)
    Partials  a..f b..d c..d  d   e..f  f
    query: 0 -> 6, no combine; after evicting a: 1 -> 4 -> 6, one combine (b..d ⊕ e..f)

In the paper's single-query analysis (section 4.1) the walk of the whole window (*wReset*)
comes once per n + 1 slides and every other slide costs one or two combines: three per slide.

Deviations from the paper, and why:

* Variable size: the paper fixes the window (``wSize``); here the capacity doubles when an
  insert finds the arrays full and halves (as often as needed) when under a quarter full,
  as IBM's Dynamic FlatFIT does. Pointers are absolute positions (a slot is a position modulo
  the capacity), so a resize copies them unchanged and a full array is not ambiguous.
* The lifted items are kept in a third array: the paper overwrites ``Partials`` and keeps
  nothing else, but checkpoints and the policy's search read the items.
* Order: the pseudo-code's ``answer = answer ⊕ Partials[tempInd]`` puts the newer aggregate
  first, right only for a commutative operator; here it is ``Partials[tempInd] ⊕ answer``.
* The oldest position's partial is compressed too (the paper skips it: in a fixed window its
  slot is overwritten next; here it may stay).
* One item per partial: no shared plan, no partial aggregation technique (the service's
  windows take items one by one). The walk of the whole window goes through the Positions
  stack too (section 3.3's stackless *wReset* saves memory only).

Multi-query (section 3.2, Algorithm 1 lines 25-45, Example 3): ``query_suffix(r)`` answers a
query of range ``r`` over the same arrays, walking from position ``end - r`` (the paper's
``startInd = currInd - q.range``) to the end and compressing every position it visits, so the
queries of different ranges share the pointers: a walk that lands on a position an earlier walk
(of this slide or an older one) compressed jumps to the end in one combine. With every range
1 .. n asked each slide (the max-multi-query) each answer costs one combine (n - 1 per slide);
the paper 003 estimates 3 per query in general. The window itself is the largest range (the
paper's ``wSize``); the caller asks the ranges it wants after each slide (the shared plan's
``queriesToAnswer``), in any order. ``query()`` is ``query_suffix(len)``.
* Bulk eviction is O(1) (the front moves); the policy's prefix is found by walking the items
  (the default search, O(k + 1)): the pointers only jump towards the newest item.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from .fifo import Aggregator, AggregatorWindow, FactCard
from .laws import approx_equal

__all__ = ["FlatFIT", "FlatFITAggregator"]

_MIN_CAPACITY = 4


class FlatFITAggregator(Aggregator):
    card = FactCard(
        name="FLATFIT",
        full_name="FlatFIT (Flat and Fast Index Traverser)",
        paper="000: Shein, Chrysanthis, Labrinidis, 'FlatFIT: Accelerated Incremental "
        "Sliding-Window Aggregation For Real-Time Analytics', SSDBM 2017",
        ordering="FIFO (in order)",
        requires="a monoid: associative with an identity; no inverse, need not commute",
        time="insert O(1) (amortized over resizes); evict O(1); query O(1) amortized (path "
        "compression: three combines per slide in the paper's analysis), O(n) worst case (a "
        "walk of the whole window, wReset); query_suffix(r) (the newest r items, the paper's "
        "multi-query) walks from position end - r sharing the compressed pointers of every "
        "range: O(1) amortized per query asked every slide (one combine each with every range "
        "1 .. n), O(r) worst case",
        space="3 cap (partials, pointers, items; cap a power of two with n <= cap <= "
        "max(4n, 4)) plus the Positions stack of one query",
        bulk="evicting k items: O(1) (the front moves); the policy's prefix is walked item by "
        "item, O(k + 1)",
        storage="all in the process (checkpoints write every item)",
        deviations="variable size (capacity doubling and halving, absolute pointers); the items "
        "kept in a third array; partials combined older ⊕ newer (the pseudo-code reverses "
        "them); the oldest position compressed too; one item per partial (no shared plan: the "
        "caller asks its ranges with query_suffix after each slide)",
    )
    answers_ranges = True  # query-time ranges (engine/suffix.py)

    _cap: int
    _mask: int
    _items: list[Any]
    _partials: list[Any]
    _pointers: list[int]  # absolute positions

    def __init__(self, monoid: Any) -> None:
        super().__init__(monoid)
        self._front = 0  # position of the oldest item
        self._end = 0  # position of the next item
        self._resize(_MIN_CAPACITY)

    def _resize(self, cap: int) -> None:
        """Arrays of ``cap`` slots holding the live positions (slot = position mod cap)."""
        mask = cap - 1
        items = [self.identity] * cap
        partials = [self.identity] * cap
        pointers = [0] * cap
        if self._front < self._end:
            old_mask = self._cap - 1
            old_items, old_partials, old_pointers = self._items, self._partials, self._pointers
            for p in range(self._front, self._end):
                s, t = p & old_mask, p & mask
                items[t] = old_items[s]
                partials[t] = old_partials[s]
                pointers[t] = old_pointers[s]
        self._cap = cap
        self._mask = mask
        self._items = items
        self._partials = partials
        self._pointers = pointers

    def __len__(self) -> int:
        return self._end - self._front

    def insert(self, u: Any) -> None:
        end = self._end
        if end - self._front == self._cap:  # full: double
            self._resize(2 * self._cap)
        s = end & self._mask
        self._items[s] = u
        self._partials[s] = u
        self._pointers[s] = end + 1
        self._end = end + 1

    def evict(self) -> None:
        self.evict_many(1)

    def evict_many(self, k: int) -> None:
        self._front += k
        n = self._end - self._front
        cap = self._cap
        if n < cap >> 2 and cap > _MIN_CAPACITY:  # under a quarter full: halve
            while n < cap >> 2 and cap > _MIN_CAPACITY:
                cap >>= 1
            self._resize(cap)

    def query(self) -> Any:
        front, end = self._front, self._end
        if front == end:
            return self.identity
        mask = self._mask
        pointers = self._pointers
        partials = self._partials
        positions = []  # the Positions stack: every visited position but the newest
        i = front
        j = pointers[i & mask]
        while j != end:
            positions.append(i)
            i = j
            j = pointers[i & mask]
        answer = partials[i & mask]
        combine = self.combine
        while positions:
            s = positions.pop() & mask
            answer = combine(partials[s], answer)
            partials[s] = answer
            pointers[s] = end
        return answer

    def query_suffix(self, r: int) -> Any:
        """The aggregate of the newest ``r`` items, oldest first: Algorithm 1's answer to a
        query of range ``r`` (lines 26-44), the walk of :meth:`query` started at position
        ``end - r`` instead of the front. Every range shares the pointers: each walk points
        the positions it visits at ``end`` with their aggregate, so a later walk (of any
        range) that lands on one of them jumps to the end in one combine. Amortized O(1) per
        query with the ranges asked every slide (the paper: 3 combines per query; 1 with every
        range 1 .. n, the max-multi-query), O(r) worst case."""
        end = self._end
        n = end - self._front
        if not 0 <= r <= n:
            msg = f"FlatFITAggregator.query_suffix: r = {r} is outside 0 .. len = {n}"
            raise ValueError(msg)
        if not r:
            return self.identity
        mask = self._mask
        pointers = self._pointers
        partials = self._partials
        positions = []  # the Positions stack: every visited position but the newest
        i = end - r
        j = pointers[i & mask]
        while j != end:
            positions.append(i)
            i = j
            j = pointers[i & mask]
        answer = partials[i & mask]
        combine = self.combine
        while positions:
            s = positions.pop() & mask
            answer = combine(partials[s], answer)
            partials[s] = answer
            pointers[s] = end
        return answer

    def leaving_items(self, leaves: Callable[[Any], bool]) -> int:
        """A query-time range's boundary by bisecting the items, O(log n): for a time range
        ``leaves`` of a prefix equals ``leaves`` of its newest item (:meth:`Aggregator.
        leaving_items`), so it holds of the items up to the boundary and of none after. The
        pointers only jump towards the newest item: no descent over partials here."""
        items, mask = self._items, self._mask
        lo, hi = self._front, self._end
        while lo < hi:
            mid = (lo + hi) >> 1
            if leaves(items[mid & mask]):
                lo = mid + 1
            else:
                hi = mid
        return lo - self._front

    def items(self) -> Iterator[Any]:
        items = self._items
        mask = self._mask
        return (items[p & mask] for p in range(self._front, self._end))  # lazy: search stops early

    def check(self) -> None:
        """Every live pointer in range and its partial consistent with the items: with S(p)
        the aggregate of the items from p to the end, ``Partials[p] ⊕ S(Pointers[p]) = S(p)``;
        then the answer against a fold."""
        front, end, mask = self._front, self._end, self._mask
        combine = self.combine
        suffix = [self.identity] * (end - front + 1)  # S(front + i)
        for p in range(end - 1, front - 1, -1):
            suffix[p - front] = combine(self._items[p & mask], suffix[p - front + 1])
        for p in range(front, end):
            j = self._pointers[p & mask]
            if not p < j <= end:
                msg = f"FlatFIT: position {p} points to {j}, outside ({p}, {end}]"
                raise AssertionError(msg)
            got = combine(self._partials[p & mask], suffix[j - front])
            if not approx_equal(got, suffix[p - front]):
                msg = (
                    f"FlatFIT: position {p}'s partial (to {j}) gives {got!r} with the items "
                    f"after it, the items from {p} give {suffix[p - front]!r}"
                )
                raise AssertionError(msg)
        super().check()


class FlatFIT(AggregatorWindow):
    """A window run by FlatFIT (``algorithm`` FLATFIT)."""

    aggregator = FlatFITAggregator
