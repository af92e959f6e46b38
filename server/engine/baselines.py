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

from collections.abc import Iterable
from typing import Any

from ..sentinels import UNSET
from .monoids import Monoid
from .policies import bind_policy

__all__ = ["TwoStacks"]


class TwoStacks:
    algorithm = "TWOSTACKS"

    def __init__(self, monoid: Monoid, policy: Any) -> None:
        self.monoid = monoid
        self.policy = policy
        self._policy = bind_policy(policy, monoid)
        self._combine = monoid.combine
        self._identity = monoid.identity
        # front: list of (value, aggregate of value and everything newer in front); top = oldest
        self._front: list[tuple[Any, Any]] = []
        self._back: list[Any] = []
        self._back_agg: Any = monoid.identity
        self._total: Any = UNSET

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

    def query(self) -> Any:
        return self.monoid.lower(self.aggregate())

    def _item(self, k: int) -> Any:
        front = self._front
        if k < len(front):
            return front[-1 - k][0]
        return self._back[k - len(front)]

    def _plan(self) -> int:
        n = len(self)
        if n == 0:
            return 0
        total = self.aggregate()
        policy = self._policy
        combine = self._combine
        sub = self._item(0)
        if not policy(total, sub):
            return 0
        k = 1
        while k < n:
            cand = combine(sub, self._item(k))
            if not policy(total, cand):
                break
            sub = cand
            k += 1
        return k

    def _evict(self, k: int) -> None:
        front = self._front
        for _ in range(k):
            if not front:
                self._flip()
            front.pop()
        self._total = UNSET

    def enforce(self) -> int:
        k = self._plan()
        if k:
            self._evict(k)
        return k

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
