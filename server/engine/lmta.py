"""Log MTA (paper section 4.1): one binary tree as a list of level queues.

Fact card (same shape as IBM's sliding-window-aggregators README):

==================  ==================================================
                    LogMTA
==================  ==================================================
ordering            FIFO (in order)
operator            monoid (associative + identity); no inverse, no
requirements        commutativity
insert              O(log n)
single eviction     O(log n)
bulk eviction       O(log n) for any count
query               O(1)
space               O(n), O(log n) local with a store
first appeared      Villalba, Berral, Carrera: "Constant-Time Sliding
                    Window Framework with Reduced Memory Footprint and
                    Efficient Bulk Evictions", TPDS 2019, 4.1
==================  ==================================================

Deviations from the paper of its own (the shared ones are in :mod:`.mta_window`), and why:

* **LMTA O(1) plans for k <= 1.** LMTA first tests the oldest leaf alone (when it may not
  leave, no prefix may, by prefix-monotonicity) and then the two oldest: the O(log n)
  descent only runs when at least two leaves leave.
"""

from __future__ import annotations

from typing import Any

from ..sentinels import EMPTY, UNSET
from .mta_window import MTAWindow

__all__ = ["LogMTA"]


class LogMTA(MTAWindow):
    """Log MTA (paper section 4.1): one binary tree as a list of level queues.

    Every element holds the exact aggregate of its subtree; the top level holds exactly one
    pair, whose aggregate is the window's. Insert O(log n), bulk eviction O(log n).
    """

    algorithm = "LMTA"
    __slots__ = ("_root",)

    # -- results
    def _reset_results(self) -> None:
        self._root: Any = self._identity
        self._total = self._identity

    def _window_aggregate(self) -> Any:
        return self._root

    def _snapshot_results(self, state: dict[str, Any], values: list[Any]) -> None:
        if self._levels:
            values.append(self._root)

    def _restore_results(self, state: dict[str, Any], values: Any) -> None:
        self._root = self._total = next(values)

    def _parent_of_last(self, e: int) -> int:
        return e >> 1  # every pair has a parent in Log MTA

    # -- insertion (Algorithm 1)
    def _insert_lifted(self, u: Any, r1: Any = UNSET) -> None:
        i = self._next
        levels = self._levels
        if not levels:
            levels.append(self._new_level(0, i >> 1, [EMPTY, u] if i & 1 else [u, EMPTY]))
            self._first = i
            self._next = i + 1
            self._root = self._total = u
            return
        self._next = i + 1
        self._total = UNSET
        lv = levels[0]
        if i & 1:
            lv.tail[1] = u
            new_elem = False
        else:
            lv.append([u, EMPTY])
            new_elem = True
        combine = self._combine
        lvl = 0
        top = len(levels) - 1
        while lvl < top:
            t = lv.tail
            a, b = t[0], t[1]
            v = a if b is EMPTY else (b if a is EMPTY else combine(a, b))
            m = lv.end - 1  # the tail's parent element on the level above
            lvl += 1
            lv = levels[lvl]
            if new_elem:
                if m & 1:
                    lv.tail[1] = v
                    new_elem = False
                else:
                    lv.append([v, EMPTY])
            else:
                lv.tail[m & 1] = v
        if len(lv) > 1:
            self._grow(lvl)
        self._root = self._pair_agg(levels[-1].head)
        self._total = self._root

    def _grow(self, lvl: int) -> None:
        """The top level got a second pair: add levels above until one pair remains."""
        levels = self._levels
        pair_agg = self._pair_agg
        while True:
            lv = levels[lvl]
            pairs: dict[int, list[Any]] = {}
            for pos in range(lv.start, lv.end):
                v = pair_agg(lv.peek(pos))
                pairs.setdefault(pos >> 1, [EMPTY, EMPTY])[pos & 1] = v
            keys = sorted(pairs)
            new = self._new_level(lvl + 1, keys[0], pairs[keys[0]])
            for k in keys[1:]:
                new.append(pairs[k])
            levels.append(new)
            lvl += 1
            if len(new) == 1:
                return

    def _after_truncate(self) -> None:
        """Recompute the right spine after an undo, drop degenerate top levels."""
        levels = self._levels
        for lvl in range(1, len(levels)):
            below = levels[lvl - 1]
            m = below.end - 1
            levels[lvl].tail[m & 1] = self._pair_agg(below.tail)
        self._normalize_top()
        self._root = self._pair_agg(levels[-1].head) if levels else self._identity
        self._total = self._root

    def _normalize_top(self) -> None:
        levels = self._levels
        while len(levels) >= 2 and len(levels[-2]) == 1:
            levels.pop().discard()

    # -- enforcement (Algorithm 2): plan, then commit
    def _plan(self) -> int:
        n = self._next - self._first
        if n == 0:
            return 0
        total = self._root
        policy = self._policy
        levels = self._levels
        f = self._first
        lv0 = levels[0]
        sub = lv0.head[f & 1]
        if not policy(total, sub):
            return 0
        if n == 1:
            return 1
        j = f + 1  # the second leaf: when it may not leave, k = 1 without the descent
        p = lv0.head if (j >> 1) == lv0.start else lv0.peek(j >> 1)
        if not policy(total, self._combine(sub, p[j & 1])):
            return 1
        g = self._descend(total, len(levels) - 1, f, UNSET)
        if g == self._next - 1 and policy(total, total):
            return n
        return g - f

    def _evict(self, k: int) -> None:
        self._bulk_evicted += k
        if k == len(self):
            self._clear()
            return
        self.bulk_evictions += 1
        self._drop_leaves(self._first + k)
        self._recompute_leftmost_branch()  # Algorithm 2, lines 21-27
        self._normalize_top()
        self._root = self._total = self._pair_agg(self._levels[-1].head)
