"""Two-Stacks Lite (paper ``004_*``, section 4): Two-Stacks with one aggregate per item.

Fact card: :data:`TwoStacksLiteAggregator.card`. The paper's insight (from Hammer Slide):
Two-Stacks reads no value of the front stack and only the last aggregate of the back stack.
So the front ``l_F`` (items ``F .. B-1``) keeps, per item, the aggregate from it to the end of
the front; the back ``l_B`` (``B .. E-1``) keeps its items and one running aggregate ``aggB``.
``insert`` pushes and folds into ``aggB`` (one combine); ``evict`` pops the front, after a
*flip* when the front is empty: the back's suffix aggregates are computed newest first (O(n)
once, one combine per item, O(1) amortized) and ``aggB`` starts again from the identity.
``query`` is ``Π_F ⊗ aggB`` (one combine).

Invariants (``v_0 .. v_{n-1}`` the items, oldest first; ``B - F`` the front's length)::

    F                          B                          E
    |        front l_F         |         back l_B         |
    |  v_i .. v_{B-F-1} each   |      v_i (the items)     |   aggB = v_{B-F} .. v_{n-1}
       (a stack: top = v_0's)

Deviation: the service needs the items themselves (``items()`` feeds the slide policies and
the checkpoints), and the paper overwrites the front's items with their aggregates in place.
So the items stay in a deque of their own and the front's aggregates are a separate stack
(a list, top = oldest); ``B`` is implicit: the back is the items past the stack's length.
A bulk eviction that runs past the front flips only the items that stay.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from itertools import accumulate, islice
from typing import Any

from .fifo import Aggregator, AggregatorWindow, FactCard

__all__ = ["TwoStacksLite", "TwoStacksLiteAggregator"]


class TwoStacksLiteAggregator(Aggregator):
    card = FactCard(
        name="TWO_STACKS_LITE",
        full_name="Two-Stacks Lite",
        paper="004: Tangwongsan, Hirzel, Schneider, 'In-order sliding-window aggregation in "
        "worst-case constant time', VLDB J. 2021, section 4 (after Hammer Slide, "
        "Theodorakis et al. 2018)",
        ordering="FIFO (in order)",
        requires="a monoid: associative with an identity; no inverse, need not commute",
        time="insert O(1) (one combine); evict O(1) amortized (one combine), O(n) worst "
        "case (the flip); query O(1) (one combine)",
        space="the n items plus at most n + 1 aggregates (one per front item, and aggB); "
        "the paper's n + 1 in all, as it overwrites the front's items",
        bulk="evicting k items costs O(k); when they run past the front, only the items "
        "that stay are flipped",
        storage="all in the process (checkpoints write every item)",
        deviations="the items are kept in a deque of their own (items() feeds the policies "
        "and checkpoints; the paper overwrites the front's items with aggregates in place), "
        "so the front's aggregates are a separate stack and B is implicit; a bulk eviction "
        "flips only the items that stay; enforcement walks items oldest first, as all "
        "FIFO engines here",
    )

    def __init__(self, monoid: Any) -> None:
        super().__init__(monoid)
        self._items: deque[Any] = deque()  # every item, oldest first
        # front: for each front item, the aggregate from it to the front's end; top = oldest
        self._front: list[Any] = []
        self._agg_b: Any = self.identity  # aggB: the aggregate of the back

    def __len__(self) -> int:
        return len(self._items)

    def insert(self, u: Any) -> None:
        self._items.append(u)
        self._agg_b = self.combine(self._agg_b, u)

    def _flip(self, keep: int) -> None:
        """The back's ``keep`` newest items become the front (the front is empty)."""
        combine = self.combine
        newest_first = islice(reversed(self._items), keep)
        self._front.extend(accumulate(newest_first, lambda acc, u: combine(u, acc)))
        self._agg_b = self.identity

    def evict(self) -> None:
        front = self._front
        if not front:
            self._flip(len(self._items))
        front.pop()
        self._items.popleft()

    def evict_many(self, k: int) -> None:
        front = self._front
        items = self._items
        m = len(front)
        if k <= m:
            del front[m - k :]
        else:
            front.clear()
            self._flip(len(items) - k)
        popleft = items.popleft
        for _ in range(k):
            popleft()

    def query(self) -> Any:
        front = self._front
        return self.combine(front[-1], self._agg_b) if front else self._agg_b

    def items(self) -> Iterator[Any]:
        return iter(self._items)

    def check(self) -> None:
        """The paper's invariants (each front aggregate, aggB), then the fold of the items."""
        from .laws import approx_equal

        combine = self.combine
        items = list(self._items)
        front = self._front
        nf = len(front)
        if nf > len(items):
            msg = f"TwoStacksLite: {nf} front aggregates for {len(items)} items"
            raise AssertionError(msg)
        acc: Any = self.identity
        for i in range(nf - 1, -1, -1):  # front[nf - 1 - i] = v_i .. v_{B-F-1}
            acc = combine(items[i], acc)
            if not approx_equal(front[nf - 1 - i], acc):
                msg = f"TwoStacksLite: front item {i} holds {front[nf - 1 - i]!r}, not {acc!r}"
                raise AssertionError(msg)
        acc = self.identity
        for u in items[nf:]:
            acc = combine(acc, u)
        if not approx_equal(self._agg_b, acc):
            msg = f"TwoStacksLite: aggB is {self._agg_b!r}, the back's fold {acc!r}"
            raise AssertionError(msg)
        super().check()


class TwoStacksLite(AggregatorWindow):
    """A window run by Two-Stacks Lite (``algorithm`` TWO_STACKS_LITE)."""

    aggregator = TwoStacksLiteAggregator
