"""Two-Stacks: the classic amortized O(1) FIFO aggregator.

Fact card: :data:`TwoStacksAggregator.card`. Two stacks: the back takes inserts with a running
aggregate; the front holds the older items, each with the aggregate of itself and everything
newer in the front; when the front runs out, the back is flipped onto it (O(n) once, O(1)
amortized). ``query`` combines the front's top aggregate with the back's running one.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import chain
from typing import Any

from ..sentinels import UNSET
from .fifo import Aggregator, AggregatorWindow, FactCard

__all__ = ["TwoStacks", "TwoStacksAggregator"]


class TwoStacksAggregator(Aggregator):
    card = FactCard(
        name="TWO_STACKS",
        full_name="Two-Stacks",
        paper="folklore; as the baseline of 004 (Tangwongsan, Hirzel, Schneider, "
        "'In-order sliding-window aggregation in worst-case constant time', VLDB J. 2021)",
        ordering="FIFO (in order)",
        requires="a monoid: associative with an identity; no inverse, need not commute",
        time="insert O(1); evict O(1) amortized, O(n) worst case (the flip); query O(1)",
        space="2n aggregates (each front item with its suffix aggregate)",
        bulk="none: evicting k items costs O(k)",
        storage="all in the process (checkpoints write every item)",
        deviations="none in the algorithm; enforcement walks items oldest first, as all "
        "FIFO engines here",
    )

    def __init__(self, monoid: Any) -> None:
        super().__init__(monoid)
        # front: (value, aggregate of value and everything newer in front); top = oldest
        self._front: list[tuple[Any, Any]] = []
        self._back: list[Any] = []
        self._back_agg: Any = self.identity

    def __len__(self) -> int:
        return len(self._front) + len(self._back)

    def insert(self, u: Any) -> None:
        self._back_agg = self.combine(self._back_agg, u)
        self._back.append(u)

    def _flip(self) -> None:
        combine = self.combine
        front = self._front
        acc: Any = UNSET
        back = self._back
        for i in range(len(back) - 1, -1, -1):  # newest first
            u = back[i]
            acc = u if acc is UNSET else combine(u, acc)
            front.append((u, acc))
        self._back = []
        self._back_agg = self.identity

    def evict(self) -> None:
        if not self._front:
            self._flip()
        self._front.pop()

    def query(self) -> Any:
        front = self._front
        return self.combine(front[-1][1], self._back_agg) if front else self._back_agg

    def items(self) -> Iterator[Any]:
        return chain((v for v, _ in reversed(self._front)), self._back)


class TwoStacks(AggregatorWindow):
    """A window run by Two-Stacks (``algorithm`` TWO_STACKS)."""

    aggregator = TwoStacksAggregator
