"""TwoStacks: the classic amortized O(1) FIFO aggregator, the baseline MTA is measured against.

Fact card: Two-Stacks (folklore; see Tangwongsan, Hirzel, Schneider, "In-order sliding-window
aggregation in worst-case constant time", VLDB J. 2021). Ordering: FIFO. Operator: monoid, no
inverse. Insert O(1); evict O(1) amortized, O(n) worst (the flip); query O(1); no bulk eviction:
evicting k items costs O(k). Space O(n), all local.

Policy enforcement follows the paper's baselines (section 5): the oldest items are tested one
at a time with the same semantics as the MTA windows (longest prefix P with
``policy(total, agg(P))``), so the three engines give identical windows.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import chain
from typing import Any

from ..sentinels import UNSET
from .monoids import Monoid
from .prefix import PrefixWindow

__all__ = ["TwoStacks"]


class TwoStacks(PrefixWindow):
    algorithm = "TWOSTACKS"

    def __init__(self, monoid: Monoid, policy: Any) -> None:
        super().__init__(monoid, policy)
        self._combine = monoid.combine
        self._identity = monoid.identity
        # front: list of (value, aggregate of value and everything newer in front); top = oldest
        self._front: list[tuple[Any, Any]] = []
        self._back: list[Any] = []
        self._back_agg: Any = monoid.identity

    def __len__(self) -> int:
        return len(self._front) + len(self._back)

    def insert(self, x: Any) -> None:
        u = self.monoid.lift(x)
        self._back_agg = self._combine(self._back_agg, u)
        self._back.append(u)
        self._total = UNSET

    def _flip(self) -> None:
        combine = self._combine
        front = self._front
        acc: Any = UNSET
        back = self._back
        for i in range(len(back) - 1, -1, -1):  # newest first
            u = back[i]
            acc = u if acc is UNSET else combine(u, acc)
            front.append((u, acc))
        self._back = []
        self._back_agg = self._identity

    def aggregate(self) -> Any:
        total = self._total
        if total is UNSET:
            front = self._front
            total = self._combine(front[-1][1], self._back_agg) if front else self._back_agg
            self._total = total
        return total

    def _oldest_first(self) -> Iterator[Any]:
        return chain((v for v, _ in reversed(self._front)), self._back)

    def _evict(self, k: int) -> None:
        if not k:
            return
        front = self._front
        for _ in range(k):
            if not front:
                self._flip()
            front.pop()
        self._total = UNSET

    def push(self, x: Any) -> Any:
        self.insert(x)
        k = self._plan()
        if k:
            self._evict(k)
        return self.query()

    def extend(self, xs: Iterable[Any]) -> int:
        for x in xs:
            self.insert(x)
        return self.enforce()
