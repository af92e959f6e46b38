"""NaiveWindow: recompute from scratch. The oracle of the tests and the paper's *Naive* baseline.

Same API as the MTA windows. ``query`` folds the whole window (O(n), cached until the window
changes); enforcement tests prefixes oldest first, one item at a time, with the same policy
semantics (the longest prefix P with ``policy(total, agg(P))``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any

from ..sentinels import UNSET
from .monoids import Monoid
from .prefix import PrefixWindow

__all__ = ["NaiveWindow"]


class NaiveWindow(PrefixWindow):
    algorithm = "NAIVE"

    def __init__(self, monoid: Monoid, policy: Any) -> None:
        super().__init__(monoid, policy)
        self._items: deque[Any] = deque()
        self.inserted = 0
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._items)

    def items(self) -> list[Any]:
        """The lifted items in the window, oldest first."""
        return list(self._items)

    def aggregate(self) -> Any:
        if self._total is UNSET:
            acc = self.monoid.identity
            combine = self.monoid.combine
            for u in self._items:
                acc = combine(acc, u)
            self._total = acc
        return self._total

    def insert(self, x: Any) -> None:
        u = self.monoid.lift(x)
        self.monoid.combine(self.aggregate(), u)  # refuse what the monoid cannot combine
        self._items.append(u)
        self._total = UNSET
        self.inserted += 1

    def _oldest_first(self) -> Iterator[Any]:
        return iter(self._items)

    def _evict(self, k: int) -> None:
        for _ in range(k):
            self._items.popleft()
        if k:
            self._total = UNSET
            self.evicted += k

    def push(self, x: Any) -> Any:
        self.insert(x)
        try:
            k = self._plan()
        except BaseException:
            self._items.pop()
            self._total = UNSET
            self.inserted -= 1
            raise
        self._evict(k)
        return self.query()

    def extend(self, xs: Iterable[Any]) -> int:
        lift = self.monoid.lift
        combine = self.monoid.combine
        lifted = [lift(x) for x in xs]
        acc = self.aggregate()
        for u in lifted:
            acc = combine(acc, u)
        self._items.extend(lifted)
        self._total = UNSET
        try:
            k = self._plan()
        except BaseException:
            for _ in lifted:
                self._items.pop()
            self._total = UNSET
            raise
        self.inserted += len(lifted)
        self._evict(k)
        return k

    def clear(self) -> None:
        self.evicted += len(self._items)
        self._items.clear()
        self._total = UNSET

    def stats(self) -> dict[str, Any]:
        return {
            "algorithm": self.algorithm,
            "size": len(self),
            "inserted": self.inserted,
            "evicted": self.evicted,
        }
