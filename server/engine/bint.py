"""B-Int, the base-interval aggregator of Arasu and Widom: the baseline ("AW") the Reactive
Aggregator paper (``001_*``, section 6 and related work) measures FlatFAT against, as the
FlatFIT paper (``000_*``, section 2.2) describes it.

Fact card: :data:`BIntAggregator.card`. Items have consecutive positions. A *base interval* of
level j is a dyadic range of positions ``[i 2^j, (i + 1) 2^j)``; B-Int keeps the aggregate of
every base interval that ends at or before the newest item, one circular array per level
(level j holds ``cap >> j`` of them, interval i in slot ``i mod (cap >> j)``; level 0 holds the
items themselves). An insert computes only the intervals that end with the new item, each from
its two halves one level down: one combine on average, log cap at most. An eviction moves the
start of the window and touches nothing. A query splits the window into the fewest base
intervals, at most two per level, and combines them oldest first: O(log n).

Invariants: every base interval inside the window holds the aggregate of its items, oldest
first; the others (reaching before the window's start, or not ended yet) are never read,
whatever they hold::

    window: positions 3 .. 12, cap = 16 (level j holds cap >> j intervals)
    level 3  [0 ........ 7] [8 ........ 15]      (neither inside the window)
    level 2  [0..3] [4..7]  [8..11] [12..15]
    level 1  [2,3] [4,5] [6,7] [8,9] [10,11]
    level 0  3 4 5 6 7 8 9 10 11 12
    query = 3 ⊕ [4..7] ⊕ [8..11] ⊕ 12             (4 base intervals)

Deviations from the papers, and why:

* Variable-sized windows: Arasu and Widom size the structure for a fixed maximum window (the
  Reactive Aggregator paper notes B-Int does not address variable-sized windows). Here the
  capacity doubles when an insert finds it full and halves (as often as needed) when
  under a quarter full, rebuilding the intervals inside the window in O(n), as FlatFAT resizes.
* The policy's search (the service's, not the papers') walks the base intervals of the window
  oldest first and descends the first one the prefix cannot take in full: O(log n).

Multi-query (Arasu and Widom's setting: many ranges over one structure): ``query_suffix(r)``,
the aggregate of the newest ``r`` items, combines the fewest base intervals making up the
positions ``end - r .. end - 1``, at most two per level, oldest first: O(log n).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from itertools import chain, islice
from typing import Any

from ..sentinels import UNSET
from .fifo import Aggregator, AggregatorWindow, FactCard
from .laws import approx_equal

__all__ = ["BInt", "BIntAggregator"]

_MIN_CAPACITY = 4


class BIntAggregator(Aggregator):
    card = FactCard(
        name="BINT",
        full_name="B-Int (base intervals)",
        paper="001: Tangwongsan, Hirzel, Schneider, Wu, 'General Incremental Sliding-Window "
        "Aggregation', PVLDB 8(7), 2015: its baseline AW, after Arasu and Widom, 'Resource "
        "sharing in continuous sliding-window aggregates', VLDB 2004 (described in 000, "
        "section 2.2)",
        ordering="FIFO (in order)",
        requires="a monoid: associative with an identity; no inverse, need not commute",
        time="insert O(1) amortized (the base intervals ending with it: one combine on "
        "average), O(log n) worst case; evict O(1); query O(log n) (at most two base "
        "intervals per level), and so is query_suffix(r) (the newest r items, multi-query); "
        "a resize O(n), O(1) amortized",
        space="2 cap aggregates over log2(cap) + 1 levels, cap a power of two with "
        "n <= cap <= max(4n, 4) (level 0 is the items)",
        bulk="evicting k items: O(1) (the window's start moves); the policy's prefix is "
        "found in O(log n) by descending the base intervals",
        storage="all in the process (checkpoints write every item)",
        deviations="variable-sized windows: the capacity doubles and halves with an O(n) "
        "rebuild (the papers' B-Int has a fixed maximum window); the policy's search "
        "descends the base intervals (not in the papers)",
    )
    answers_ranges = True  # query-time ranges (engine/suffix.py)

    def __init__(self, monoid: Any) -> None:
        super().__init__(monoid)
        self._rebuild(_MIN_CAPACITY, [])
        self._result: Any = UNSET  # query()'s answer until the next change

    def _rebuild(self, cap: int, items: list[Any]) -> None:
        """Levels for ``cap`` items holding ``items`` at positions 0 .. n - 1, with every base
        interval inside them."""
        n = len(items)
        identity = self.identity
        combine = self.combine
        levels = [[identity] * (cap >> j) for j in range(cap.bit_length())]
        levels[0][:n] = items
        for j in range(1, len(levels)):
            lower = levels[j - 1]
            level = levels[j]
            for i in range(n >> j):
                level[i] = combine(lower[2 * i], lower[2 * i + 1])
        self._cap = cap
        self._levels = levels
        self._start = 0  # position of the oldest item
        self._end = n  # position of the next item

    def __len__(self) -> int:
        return self._end - self._start

    def insert(self, u: Any) -> None:
        if self._end - self._start == self._cap:  # full: double
            self._rebuild(2 * self._cap, list(self.items()))
        p = self._end
        levels = self._levels
        s = p & (self._cap - 1)
        levels[0][s] = u
        j = 0
        while s & 1:  # the interval ending at p is a right half: its parent ends at p too
            lower = levels[j]
            j += 1
            s >>= 1
            levels[j][s] = self.combine(lower[2 * s], lower[2 * s + 1])
        self._end = p + 1
        self._result = UNSET

    def evict(self) -> None:
        self.evict_many(1)

    def evict_many(self, k: int) -> None:
        n = self._end - self._start - k
        cap = self._cap
        if n < cap >> 2 and cap > _MIN_CAPACITY:  # under a quarter full: halve
            while n < cap >> 2 and cap > _MIN_CAPACITY:
                cap >>= 1
            self._rebuild(cap, list(islice(self.items(), k, None)))
        else:
            self._start += k
        self._result = UNSET

    def _cover(self) -> Iterator[tuple[int, int]]:
        """The base intervals (level, index) making up the window, oldest first: the fewest,
        at most two per level."""
        left, right = self._start, self._end
        j = 0
        rights = []
        while left < right:
            if left & 1:
                yield j, left
                left += 1
            if right & 1:
                right -= 1
                rights.append((j, right))
            left >>= 1
            right >>= 1
            j += 1
        yield from reversed(rights)

    def query(self) -> Any:
        if self._result is UNSET:
            levels = self._levels
            cap = self._cap
            combine = self.combine
            acc: Any = UNSET
            for j, i in self._cover():
                v = levels[j][i & ((cap >> j) - 1)]
                acc = v if acc is UNSET else combine(acc, v)
            self._result = self.identity if acc is UNSET else acc
        return self._result

    def query_suffix(self, r: int) -> Any:
        """The aggregate of the newest ``r`` items, oldest first: the fewest base intervals
        making up positions ``end - r .. end - 1``, at most two per level, O(log n) (each is
        inside the window, so it holds its items' aggregate). ``r == n`` is :meth:`query`."""
        n = self._end - self._start
        if not 0 <= r <= n:
            msg = f"BIntAggregator.query_suffix: r = {r} is outside 0 .. len = {n}"
            raise ValueError(msg)
        if r == n:
            return self.query()
        levels = self._levels
        combine = self.combine
        mask = self._cap - 1  # level j's slots: mask >> j
        left, right = self._end - r, self._end
        j = 0
        acc: Any = UNSET  # the left side's intervals, oldest first
        tail: Any = UNSET  # the right side's, newest last
        while left < right:
            if left & 1:
                v = levels[j][left & (mask >> j)]
                acc = v if acc is UNSET else combine(acc, v)
                left += 1
            if right & 1:
                right -= 1
                v = levels[j][right & (mask >> j)]
                tail = v if tail is UNSET else combine(v, tail)
            left >>= 1
            right >>= 1
            j += 1
        if tail is UNSET:
            return self.identity if acc is UNSET else acc
        return tail if acc is UNSET else combine(acc, tail)

    def search(self, leaves: Callable[[Any], bool], extra: Sequence[Any] = ()) -> int:
        """The longest prefix that leaves: the window's base intervals oldest first, then a
        descent into the first one that cannot leave in full, O(log n); if the whole window
        leaves, ``extra`` one by one."""
        combine = self.combine
        levels = self._levels
        cap = self._cap
        acc: Any = UNSET
        for j, i in self._cover():
            v = levels[j][i & ((cap >> j) - 1)]
            cand = v if acc is UNSET else combine(acc, v)
            if not leaves(cand):
                while j:  # down to the first item that cannot leave
                    j -= 1
                    i *= 2
                    v = levels[j][i & ((cap >> j) - 1)]
                    cand = v if acc is UNSET else combine(acc, v)
                    if leaves(cand):
                        acc = cand
                        i += 1
                return i - self._start
            acc = cand
        k = self._end - self._start
        for u in extra:
            cand = u if acc is UNSET else combine(acc, u)
            if not leaves(cand):
                return k
            acc = cand
            k += 1
        return k

    def items(self) -> Iterator[Any]:
        base = self._levels[0]
        cap = self._cap
        start = self._start & (cap - 1)
        end = start + self._end - self._start
        if end <= cap:
            return iter(base[start:end])
        return chain(base[start:], base[: end - cap])

    def check(self) -> None:
        """Every base interval inside the window against its halves, then the answer against
        a fold."""
        levels = self._levels
        cap = self._cap
        for j in range(1, len(levels)):
            lower, level = levels[j - 1], levels[j]
            m, lm = (cap >> j) - 1, (cap >> (j - 1)) - 1
            for i in range(-(-self._start >> j), self._end >> j):
                want = self.combine(lower[(2 * i) & lm], lower[(2 * i + 1) & lm])
                if not approx_equal(level[i & m], want):
                    msg = (
                        f"B-Int: base interval {i} of level {j} holds {level[i & m]!r}, "
                        f"its halves give {want!r}"
                    )
                    raise AssertionError(msg)
        super().check()


class BInt(AggregatorWindow):
    """A window run by B-Int (``algorithm`` BINT)."""

    aggregator = BIntAggregator
