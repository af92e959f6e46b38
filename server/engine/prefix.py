"""What the windows that keep every item share (the naive oracle and the TwoStacks baseline):
enforcement by testing prefixes oldest first, one item at a time, with the MTA windows'
policy semantics (the longest prefix P with ``policy(total, agg(P))``), so that every engine
gives identical windows."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

from ..sentinels import UNSET
from .monoids import Monoid
from .policies import bind_policy

__all__ = ["PrefixWindow"]


class PrefixWindow:
    """Base of the windows that hold their lifted items: subclasses give ``aggregate``,
    ``_oldest_first`` and ``_evict``; this gives ``query``, the prefix search and ``enforce``."""

    algorithm: ClassVar[str] = ""

    def __init__(self, monoid: Monoid, policy: Any) -> None:
        self.monoid = monoid
        self.policy = policy
        self._policy = bind_policy(policy, monoid)
        self._total: Any = UNSET  # the window's lifted aggregate, UNSET until asked

    def __len__(self) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    def aggregate(self) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def _oldest_first(self) -> Iterator[Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _evict(self, k: int) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def query(self) -> Any:
        return self.monoid.lower(self.aggregate())

    def _plan(self) -> int:
        """How many of the oldest items the policy lets go (changes nothing)."""
        if not len(self):
            return 0
        total = self.aggregate()
        combine = self.monoid.combine
        policy = self._policy
        sub: Any = UNSET
        k = 0
        for u in self._oldest_first():
            cand = u if sub is UNSET else combine(sub, u)
            if not policy(total, cand):
                break
            sub = cand
            k += 1
        return k

    def enforce(self) -> int:
        k = self._plan()
        self._evict(k)
        return k
