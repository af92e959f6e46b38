"""FlatFAT, the flat fixed-sized aggregator of the Reactive Aggregator (paper ``001_*``,
sections 4 and 5): a complete binary tree kept pointerless in one array, whose leaves are a
circular buffer of the window's lifted items.

Fact card: :data:`FlatFATAggregator.card`. The tree (section 4.3): ``tree[1]`` is the root,
node ``v`` has the children ``2v`` and ``2v + 1``, and the ``cap`` leaves ``tree[cap:2 * cap]``
(``cap`` a power of two) hold the items from ``front`` (the oldest) to ``back`` (the newest),
wrapping around the end of the array (section 5.1.1). As the Reactive Aggregator batches window
events until the window fires (section 5), an insert only writes its leaf and an eviction only
moves ``front``; the next query (or search) runs the change propagation of Algorithm 2 once over
every leaf changed since, level by level: O(m + m log(n/m)) combines for m changes.

The answer (section 5.1.2): the root when the buffer is in order; when it is *inverted* (the
live range wraps, ``back < front``) the root combines in physical order, which is not the
window's, and the answer is ``suffix(front) ⊕ prefix(back)``, O(log n) (Algorithm 3 and its
mirror).

Invariants: a node is *live* when a live item lies below it; every live node holds the aggregate
of the live items below it in physical order (left to right); a dead node holds whatever it held
and is never read. Whether a node is live is known from ``front`` and ``back`` alone (section
5.2's FIFO optimization: "the buffer's demarcation can be baked into the update algorithm"), so
no leaf is ever marked empty::

    cap = 8, front = 6, back = 2 (inverted): the window is a6 a7 a0 a1 a2
                          [1] = a0 a1 a2 a6 a7           (physical order: not the answer)
             [2] = a0 a1 a2               [3] = a6 a7
       [4] = a0 a1    [5] = a2      [6] dead       [7] = a6 a7
       a0      a1     a2     .      .      .       a6      a7        (leaves 8 .. 15)
    answer = suffix(6) ⊕ prefix(2) = (a6 ⊕ a7) ⊕ ([4] ⊕ a2)

Deviations from the paper, and why:

* Evictions are lazy: an evicted leaf is not overwritten with the paper's ⊥ and its path is not
  recomputed. Every node whose live items changed by evictions lies above the old or the new
  front, so the propagation recomputes those two paths only: a bulk eviction of k items costs
  O(log n) instead of O(k + k log(n/k)).
* A resize (section 5.1.1: double when an insert finds the buffer full, halve when under a
  quarter full) halves as often as a bulk eviction requires, in one rebuild.
* The policy's search (the service's, not the paper's) descends the tree: the nodes covering
  the window are tried oldest first, from the smallest up (a finger search from the oldest
  item), and the first one the prefix cannot take in full is descended to its leaf: O(log n).

Multi-query (Cutty's FlatFAT, as the FlatFIT and SlickDeque papers measure it):
``query_suffix(r)``, the aggregate of the newest ``r`` items, is a range query over the leaves
from ``front + n - r`` to ``back``: the fewest nodes covering them, at most two per level,
combined in order, O(log n) (two spans when the range wraps around the end of the array; the
pending changes are propagated first, as for :meth:`~FlatFATAggregator.query`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from itertools import chain, islice
from typing import Any

from ..sentinels import UNSET
from .fifo import Aggregator, AggregatorWindow, FactCard
from .laws import approx_equal

__all__ = ["FlatFAT", "FlatFATAggregator"]

_MIN_CAPACITY = 4


class FlatFATAggregator(Aggregator):
    card = FactCard(
        name="FLATFAT",
        full_name="FlatFAT (flat fixed-sized aggregator) of the Reactive Aggregator",
        paper="001: Tangwongsan, Hirzel, Schneider, Wu, 'General Incremental Sliding-Window "
        "Aggregation', PVLDB 8(7), 2015 (sections 4 and 5)",
        ordering="FIFO (in order)",
        requires="a monoid: associative with an identity; no inverse, need not commute",
        time="insert and evict O(1) (a leaf written, the front moved); the next query "
        "propagates the m changes since the last one in O(m + m log(n/m)), so O(log n) per "
        "insert and eviction, then answers in O(1) (the root) or O(log n) (an inverted buffer: "
        "suffix ⊕ prefix); query_suffix(r) (the newest r items, multi-query) O(log n), a "
        "range query of at most two nodes per level; a resize O(n), O(1) amortized",
        space="2 cap aggregates, cap a power of two with n <= cap <= max(4n, 4) (the leaves "
        "are the items)",
        bulk="evicting k items: O(1), then two O(log n) paths at the next query; the policy's "
        "prefix is found in O(log n) by descending the tree",
        storage="all in the process (checkpoints write every item)",
        deviations="evictions are lazy (no ⊥ written; the old and the new front's paths are "
        "recomputed, so a bulk eviction costs O(log n)); a bulk eviction halves the capacity "
        "as often as needed in one rebuild; the policy's search descends the tree (not in the "
        "paper)",
    )
    answers_ranges = True  # query-time ranges (engine/suffix.py)

    def __init__(self, monoid: Any) -> None:
        super().__init__(monoid)
        self._rebuild(_MIN_CAPACITY, [])
        self._result: Any = UNSET  # query()'s answer until the next change

    def _rebuild(self, cap: int, items: list[Any]) -> None:
        """A tree of ``cap`` leaves holding ``items`` from leaf 0 (Algorithm 1, new; a resize
        in section 5.1.1): only the nodes above a live leaf are computed."""
        n = len(items)
        tree = [self.identity] * (2 * cap)
        tree[cap : cap + n] = items
        if n:
            combine = self.combine
            lo, hi = cap, cap + n - 1  # the live nodes of a level
            while lo > 1:
                for p in range(lo >> 1, ((hi - 1) >> 1) + 1):
                    tree[p] = combine(tree[2 * p], tree[2 * p + 1])
                if not hi & 1:  # the last parent has a live left child only
                    tree[hi >> 1] = tree[hi]
                lo, hi = lo >> 1, hi >> 1
        self._cap = cap
        self._tree = tree
        self._front = 0  # the oldest item's leaf, 0-based
        self._n = n
        self._synced_front = 0  # front at the last propagation
        self._pending = 0  # items inserted since the last propagation (the newest ones)

    def __len__(self) -> int:
        return self._n

    def insert(self, u: Any) -> None:
        n = self._n
        if n == self._cap:  # full: double (section 5.1.1)
            self._rebuild(2 * n, list(self.items()))
        cap = self._cap
        self._tree[cap + ((self._front + n) & (cap - 1))] = u
        self._n = n + 1
        self._pending += 1
        self._result = UNSET

    def evict(self) -> None:
        self.evict_many(1)

    def evict_many(self, k: int) -> None:
        n = self._n - k
        cap = self._cap
        if n < cap >> 2 and cap > _MIN_CAPACITY:  # under a quarter full: halve (section 5.1.1)
            while n < cap >> 2 and cap > _MIN_CAPACITY:
                cap >>= 1
            self._rebuild(cap, list(islice(self.items(), k, None)))
        else:
            self._front = (self._front + k) & (cap - 1)
            self._n = n
        self._result = UNSET

    def _propagate(self) -> None:
        """Algorithm 2 over the leaves changed since the last call: the newest items inserted
        since, and the old and the new front (a live node whose live items changed by
        evictions lies above one of the two). If the monoid raises, the next call redoes it."""
        n = self._n
        cap = self._cap
        mask = cap - 1
        front = self._front
        back = (front + n - 1) & mask
        pending = self._pending
        old_front = self._synced_front
        if n and (pending or old_front != front):
            changed: set[int] = set()  # leaves, heap-numbered
            if pending:
                first = (back - min(pending, n) + 1) & mask
                if first <= back:
                    changed.update(range(cap + first, cap + back + 1))
                else:
                    changed.update(range(cap + first, 2 * cap))
                    changed.update(range(cap, cap + back + 1))
            if old_front != front:
                changed.update((cap + old_front, cap + front))
            self._recompute(changed, cap + front, cap + back)
        self._pending = 0
        self._synced_front = front

    def _recompute(self, nodes: set[int], fl: int, bl: int) -> None:
        """Recompute the ancestors of ``nodes``, level by level up to the root, each from its
        live children; ``fl`` and ``bl``: the front and back leaves' ancestors on the level of
        ``nodes``."""
        tree = self._tree
        combine = self.combine
        if bl < fl:  # inverted: a node is live when it is <= bl or >= fl
            while True:
                nodes = {c >> 1 for c in nodes}
                for p in nodes:
                    c = 2 * p
                    if c < bl or c >= fl or (c == bl and c + 1 == fl):
                        tree[p] = combine(tree[c], tree[c + 1])
                    elif c == bl:
                        tree[p] = tree[c]
                    elif c + 1 == fl:
                        tree[p] = tree[c + 1]
                if 1 in nodes:
                    return
                fl >>= 1
                bl >>= 1
        while True:  # in order: a node is live when it lies from fl to bl
            nodes = {c >> 1 for c in nodes}
            for p in nodes:
                c = 2 * p
                if fl <= c < bl:
                    tree[p] = combine(tree[c], tree[c + 1])
                elif c == bl:
                    tree[p] = tree[c]
                elif c + 1 == fl:
                    tree[p] = tree[c + 1]
            if 1 in nodes:
                return
            fl >>= 1
            bl >>= 1

    def _cover(self) -> Iterator[int]:
        """The nodes covering the window, oldest first: for an inverted buffer those of the
        suffix from ``front``, then those of the prefix to ``back``. All of them are live in
        full. At most two per level and span."""
        cap = self._cap
        front = self._front
        back = (front + self._n - 1) & (cap - 1)
        spans = ((front, back + 1),) if front <= back else ((front, cap), (0, back + 1))
        for lo, hi in spans:
            left, right = cap + lo, cap + hi
            rights = []
            while left < right:
                if left & 1:
                    yield left
                    left += 1
                if right & 1:
                    right -= 1
                    rights.append(right)
                left >>= 1
                right >>= 1
            yield from reversed(rights)

    def query(self) -> Any:
        result = self._result
        if result is UNSET:
            if not self._n:
                result = self.identity
            else:
                self._propagate()
                tree = self._tree
                if self._front + self._n <= self._cap:  # in order: the root
                    result = tree[1]
                else:  # inverted: suffix(front) ⊕ prefix(back), Algorithm 3 and its mirror
                    combine = self.combine
                    cap = self._cap
                    x = cap + self._front
                    suffix = tree[x]
                    while x > 1:
                        if not x & 1:
                            suffix = combine(suffix, tree[x + 1])
                        x >>= 1
                    x = cap + ((self._front + self._n - 1) & (cap - 1))
                    prefix = tree[x]
                    while x > 1:
                        if x & 1:
                            prefix = combine(tree[x - 1], prefix)
                        x >>= 1
                    result = combine(suffix, prefix)
            self._result = result
        return result

    def query_suffix(self, r: int) -> Any:
        """The aggregate of the newest ``r`` items, oldest first: a range query over the
        leaves from ``front + n - r`` to ``back``, O(log n). When that range wraps around the
        end of the array it is two spans, ``[lo, cap)`` then ``[0, back]``, each combined in
        physical (= window) order; a node inside a span has only live leaves below it, so it
        holds their aggregate. ``r == n`` is :meth:`query`."""
        n = self._n
        if not 0 <= r <= n:
            msg = f"FlatFATAggregator.query_suffix: r = {r} is outside 0 .. len = {n}"
            raise ValueError(msg)
        if r == n:
            return self.query()
        if not r:
            return self.identity
        if self._pending or self._synced_front != self._front:
            self._propagate()
        mask = self._cap - 1
        lo = (self._front + n - r) & mask
        hi = (self._front + n - 1) & mask  # the newest item's leaf
        if lo <= hi:
            return self._span(lo, hi + 1)
        return self.combine(self._span(lo, mask + 1), self._span(0, hi + 1))

    def _span(self, lo: int, hi: int) -> Any:
        """The aggregate of the leaves ``lo .. hi - 1`` (``lo < hi``, all live), left to right:
        the fewest nodes covering them, at most two per level, bottom up."""
        tree = self._tree
        combine = self.combine
        cap = self._cap
        left, right = cap + lo, cap + hi
        acc: Any = UNSET  # the left side's nodes, oldest first
        tail: Any = UNSET  # the right side's, newest last
        while left < right:
            if left & 1:
                acc = tree[left] if acc is UNSET else combine(acc, tree[left])
                left += 1
            if right & 1:
                right -= 1
                tail = tree[right] if tail is UNSET else combine(tree[right], tail)
            left >>= 1
            right >>= 1
        if tail is UNSET:
            return acc
        return tail if acc is UNSET else combine(acc, tail)

    def search(self, leaves: Callable[[Any], bool], extra: Sequence[Any] = ()) -> int:
        """The longest prefix that leaves: the covering nodes oldest first, then a descent
        into the first one that cannot leave in full, O(log n); if the whole window leaves,
        ``extra`` one by one."""
        combine = self.combine
        acc: Any = UNSET
        n = self._n
        if n:
            self._propagate()
            tree = self._tree
            cap = self._cap
            for v in self._cover():
                cand = tree[v] if acc is UNSET else combine(acc, tree[v])
                if not leaves(cand):
                    while v < cap:  # down to the first leaf that cannot leave
                        v *= 2
                        cand = tree[v] if acc is UNSET else combine(acc, tree[v])
                        if leaves(cand):
                            acc = cand
                            v += 1
                    return (v - cap - self._front) & (cap - 1)
                acc = cand
        k = n
        for u in extra:
            cand = u if acc is UNSET else combine(acc, u)
            if not leaves(cand):
                return k
            acc = cand
            k += 1
        return k

    def items(self) -> Iterator[Any]:
        tree = self._tree
        cap = self._cap
        start = cap + self._front
        end = start + self._n
        if end <= 2 * cap:
            return iter(tree[start:end])
        return chain(tree[start:], tree[cap : end - cap])

    def check(self) -> None:
        """Every live node against its live children, then the answer against a fold."""
        self._propagate()
        tree = self._tree
        cap = self._cap
        n = self._n
        fl = cap + self._front
        bl = cap + ((self._front + n - 1) & (cap - 1))
        inverted = bl < fl
        width = cap
        while n and width > 1:  # the parents of the nodes width .. 2 width - 1
            for p in range(width // 2, width):
                c = 2 * p
                live = [
                    x for x in (c, c + 1) if (x <= bl or x >= fl if inverted else fl <= x <= bl)
                ]
                if not live:
                    continue
                want = tree[live[0]] if len(live) == 1 else self.combine(tree[c], tree[c + 1])
                if not approx_equal(tree[p], want):
                    msg = f"FlatFAT: node {p} holds {tree[p]!r}, its live children give {want!r}"
                    raise AssertionError(msg)
            fl >>= 1
            bl >>= 1
            width //= 2
        super().check()


class FlatFAT(AggregatorWindow):
    """A window run by FlatFAT (``algorithm`` FLATFAT)."""

    aggregator = FlatFATAggregator
