"""The level machinery both MTA algorithms share: level queues addressed by absolute
position, and the structural operations on them (Algorithm 2's descent, removal of a prefix
of leaves, truncation, the leftmost branch, fetching pairs from a store ahead of use).

Invariants (paper Invariants 1-3), drawn for the AMTA forest of the paper's Fig. 4 after a
few evictions (``∅`` is the engine's :data:`~mtawindows.server.sentinels.EMPTY`, never the
monoid identity)::

    level 2   [<∅, 8>]                      <- top: exactly one pair, root of the leftmost tree
    level 1   [<∅, 3>, <3, 5>]  [<4, ∅>]    <- head may be <∅,*>; the tail is its own tree (AMTA)
    level 0   [<∅, 2>, <1, 2>, <1, 2>, <2, 2>]  [<1, 3>]
               head                               tail
    stack     [..., 5, 3]   result pair R = <R0, R1>: R0 = leftmost tree, R1 = the other trees

1. Only the head pair of a level may be ``<∅, *>`` and only the tail may be ``<*, ∅>``.
2. No pair is ``<∅, ∅>``.
3. (AMTA) The tail pair of every level is the root of its own tree; only sealed pairs have a
   parent. (LMTA) Every pair has a parent except the single pair of the top level.

Positions are absolute: leaf ``i`` is slot ``i & 1`` of pair ``i >> 1`` on level 0, and pair
``p`` of level ``l`` has its parent in slot ``p & 1`` of pair ``p >> 1`` on level ``l + 1``.
The element ``m`` of level ``l`` covers leaves ``[m << l, (m + 1) << l)``. Keys in a remote
store therefore never move, and bulk eviction is a pure function of the new first leaf.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from ..sentinels import EMPTY, UNSET
from ..storage.protocol import PairStore, WindowStore
from .levels import MemoryLevel, TieredLevel

__all__ = ["LevelForest"]


class LevelForest:
    """Level queues (bottom first) over the leaves ``[_first, _next)``, and the structural
    operations both algorithms run on them. Holds no results: the algorithms keep those
    (:meth:`_reset_results`, :meth:`_parent_of_last` are theirs)."""

    __slots__ = (
        "__weakref__",
        "_combine",
        "_first",
        "_grave",
        "_hook",
        "_identity",
        "_levels",
        "_next",
        "_origin",
        "_policy",
        "store",
    )

    SPECULATE_LEVELS = 3  # a descent miss also fetches what the next 3 levels may need

    def __init__(
        self,
        policy: Callable[[Any, Any], bool],
        combine: Callable[[Any, Any], Any],
        identity: Any,
        store: PairStore | None,
    ) -> None:
        self._policy = policy
        self._combine = combine
        self._identity = identity
        self.store = store
        # the store that keeps this window durable (it has attach, record, checkpoint...)
        self._hook: WindowStore | None = store if isinstance(store, WindowStore) else None
        self._levels: list[Any] = []
        self._grave: deque[list[Any]] = deque()  # evicted pairs freed a few per insert
        self._origin = 0  # absolute index of the first leaf ever (counters derive from it)
        self._first = 0  # absolute index of the oldest leaf in the window
        self._next = 0  # absolute index the next inserted leaf gets

    def __len__(self) -> int:
        return self._next - self._first

    @property
    def levels(self) -> int:
        return len(self._levels)

    def _new_level(self, index: int, pos: int, pair: list[Any]) -> Any:
        if self.store is None:
            return MemoryLevel(index, pos, pair, self._grave)
        return TieredLevel(self.store, index, pos, pair)

    def _pair_agg(self, p: Any) -> Any:
        a, b = p[0], p[1]
        if a is EMPTY:
            return b
        if b is EMPTY:
            return a
        return self._combine(a, b)

    def _clear(self) -> None:
        for lv in self._levels:
            lv.discard()
        self._levels = []
        self._first = self._next
        self._reset_results()

    def _descend(self, total: Any, top: int, g: int, sub: Any) -> int:
        """Algorithm 2's root-to-leaf search, read-only.

        From level ``top`` down to the leaves, test the element ``g >> l`` when it is the left
        element of a full pair (otherwise it equals its parent, already rejected); when the
        policy lets ``sub + element`` leave, move ``g`` past it. Returns the new first leaf.
        """
        levels = self._levels
        policy = self._policy
        combine = self._combine
        tiered = self._hook is not None
        for lvl in range(top, -1, -1):
            m = g >> lvl
            if m & 1:
                continue
            lv = levels[lvl]
            pos = m >> 1
            if tiered and pos != lv.start and not lv.has_local(pos):
                self._speculate(lvl, g)
            p = lv.head if pos == lv.start else lv.peek(pos)
            a = p[0]
            if a is EMPTY or p[1] is EMPTY:
                continue
            cand = a if sub is UNSET else combine(sub, a)
            if policy(total, cand):
                sub = cand
                g = (m + 1) << lvl
        return g

    def _speculate(self, lvl: int, g: int) -> None:
        """A miss in the descent at level ``lvl``: fetch that pair and every pair the next
        ``SPECULATE_LEVELS`` levels could need (both outcomes of each test), in one pipelined
        round trip, and pin them. About one round trip per four levels instead of one per
        level; what is not used is forgotten at the next eviction."""
        levels = self._levels
        points: dict[tuple[int, int], None] = {}
        gs = {g}
        for depth in range(lvl, max(-1, lvl - self.SPECULATE_LEVELS - 1), -1):
            lv = levels[depth]
            nxt = set()
            for x in gs:
                m = x >> depth
                nxt.add(x)
                if m & 1:
                    continue
                pos = m >> 1
                if lv.start < pos < lv.end - 1 and not lv.has_local(pos):
                    points[(depth, pos)] = None
                nxt.add((m + 1) << depth)
            gs = nxt
        self._pin_points(list(points))

    def _fetch_heads(self, g: int) -> None:
        """Before evicting every leaf before ``g`` from a store-backed window: fetch the new
        head pair of every level that is not local, all in one round trip, and pin them."""
        points = []
        for lvl, lv in enumerate(self._levels):
            pos = (g >> lvl) >> 1
            if lv.start < pos < lv.end - 1 and not lv.has_local(pos):
                points.append((lvl, pos))
        self._pin_points(points)

    def _pin_points(self, points: list[tuple[int, int]]) -> None:
        """Read the pairs at these (level, position) points in one round trip and pin them."""
        if points:
            levels = self._levels
            for (lvl, pos), pair in zip(points, self.store.read_points(points), strict=True):  # type: ignore[union-attr]
                levels[lvl].pin(pos, pair)

    def _recompute_leftmost_branch(self) -> None:
        """Bottom-up, each head's first element becomes the aggregate of the head below it."""
        levels = self._levels
        pair_agg = self._pair_agg
        for lvl in range(1, len(levels)):
            v = pair_agg(levels[lvl - 1].head)
            head = levels[lvl].head
            if head[0] is not EMPTY:
                head[0] = v
            else:
                head[1] = v

    def _drop_leaves(self, g: int) -> None:
        """Remove every leaf before ``g`` (and the elements above them): O(log n).

        The element of level ``l`` that holds leaf ``g`` is ``g >> l``; pairs before it go,
        and it becomes the head's right element when it is odd. Levels whose elements all
        lie before ``g`` go (they are always the top ones)."""
        levels = self._levels
        for lvl, lv in enumerate(levels):
            m = g >> lvl
            tail = lv.tail
            last = 2 * (lv.end - 1) + (0 if tail[1] is EMPTY else 1)
            if m > last:
                self._discard_from(lvl)
                break
            pos = m >> 1
            if pos > lv.start:
                lv.drop_front(pos)
            if m & 1:
                head = lv.head
                if head[0] is not EMPTY:
                    head[0] = EMPTY
        self._first = g

    def _has_element(self, lvl: int, m: int) -> bool:
        """Whether level ``lvl`` holds its element ``m``, without reading the store: the
        head and the tail pairs are local, and a pair between them is full (Invariant 1)."""
        levels = self._levels
        if lvl >= len(levels):
            return False
        lv = levels[lvl]
        pos = m >> 1
        if pos == lv.start:
            return lv.head[m & 1] is not EMPTY
        if pos == lv.end - 1:
            return lv.tail[m & 1] is not EMPTY
        return bool(lv.start < pos < lv.end - 1)

    def _fold(self, s: int, e: int) -> Any:
        """The aggregate of the leaves ``[s, e)`` (``_first <= s <= e <= _next``), oldest
        first, read-only: the leaves covered by the fewest elements the levels hold, each the
        highest aligned one inside ``[s, e)``. O(log n) combines (and store reads).

        Only elements whose leaves all lie in the window are read: those are exact in both
        algorithms (the stale or partial values live on the leftmost branch, over evicted
        leaves, and on LMTA's right spine, past ``_next``); AMTA's unsealed tails have no
        element above them, so the cover goes down into them."""
        combine = self._combine
        has = self._has_element
        levels = self._levels
        acc: Any = UNSET
        pos = s
        while pos < e:
            lvl = 0
            while True:
                up = lvl + 1
                if pos & ((1 << up) - 1) or pos + (1 << up) > e or not has(up, pos >> up):
                    break
                lvl = up
            lv = levels[lvl]
            m = pos >> lvl
            p = lv.head if (m >> 1) == lv.start else lv.peek(m >> 1)
            v = p[m & 1]
            acc = v if acc is UNSET else combine(acc, v)
            pos += 1 << lvl
        return self._identity if acc is UNSET else acc

    # ------------------------------------------------------------------ suffix queries
    def _cover(self, s: int, e: int) -> list[tuple[int, int]]:
        """The elements ``(level, m)`` that cover the leaves ``[s, e)`` oldest first, as
        :meth:`_fold` picks them (the highest aligned element inside the range that the levels
        hold), from local bookkeeping only: O(log n) of them. The highest aligned level that
        fits comes from the bits of the position and of what is left; it is lowered while the
        levels do not hold that element (a held element's children are held too)."""
        has = self._has_element
        out: list[tuple[int, int]] = []
        pos = s
        while pos < e:
            lvl = (e - pos).bit_length() - 1
            if pos:
                lvl = min(lvl, (pos & -pos).bit_length() - 1)
            while lvl and not has(lvl, pos >> lvl):
                lvl -= 1
            out.append((lvl, pos >> lvl))
            pos += 1 << lvl
        return out

    def _prefetch(self, elements: Any, got: dict[tuple[int, int], Any]) -> None:
        """Gather into ``got`` (by (level, position)) the pairs of ``elements`` ``(level, m)``
        of a window with a store: those a local tier holds as they are, the others read in one
        round trip. Nothing is pinned, cached or waited for: a suffix query leaves the levels
        as it found them. A window in memory gathers nothing (its levels are read directly)."""
        if self.store is None:
            return
        levels = self._levels
        remote: dict[tuple[int, int], None] = {}
        for lvl, m in elements:
            point = (lvl, m >> 1)
            if point in got or point in remote:
                continue
            lv = levels[lvl]
            if not lv.start <= point[1] < lv.end:
                continue  # a speculated position past the level: never read
            p = lv.peek_local(point[1])
            if p is None:
                remote[point] = None
            else:
                got[point] = p
        if remote:
            wanted = list(remote)
            got.update(zip(wanted, self.store.read_points(wanted), strict=True))

    def _element(self, lvl: int, m: int, got: dict[tuple[int, int], Any]) -> Any:
        """The element ``m`` of level ``lvl``: a window with a store takes it from the pairs
        :meth:`_prefetch` gathered (else gathers it now), one in memory from its level."""
        lv = self._levels[lvl]
        if self.store is None:
            pos = m >> 1
            return (lv.head if pos == lv.start else lv.peek(pos))[m & 1]
        p = got.get((lvl, m >> 1))
        if p is None:
            self._prefetch(((lvl, m),), got)
            p = got[(lvl, m >> 1)]
        return p[m & 1]

    def _suffix_fold(self, s: int, got: dict[tuple[int, int], Any]) -> Any:
        """The aggregate of the leaves ``[s, _next)``, oldest first, read-only: :meth:`_fold`
        with the non-local pairs read in one round trip."""
        cover = self._cover(s, self._next)
        self._prefetch(cover, got)
        combine = self._combine
        acc: Any = UNSET
        for lvl, m in cover:
            v = self._element(lvl, m, got)
            acc = v if acc is UNSET else combine(acc, v)
        return self._identity if acc is UNSET else acc

    def _suffix_start(
        self, total: Any, leaves: Callable[[Any, Any], bool], got: dict[tuple[int, int], Any]
    ) -> int:
        """The first leaf that stays when the longest prefix P with ``leaves(total, agg(P))``
        goes (a prefix-monotone rule, as a policy): the bulk eviction's search, read-only.

        The covering elements of the window are tested oldest first; inside the first that
        cannot leave whole, Algorithm 2's root-to-leaf descent (its left child, then the right
        one). Only elements inside the window are read, exact in both algorithms (no leftmost
        branch to refresh first, unlike :meth:`_descend`). O(log n) combines; the cover's
        pairs come in one round trip and the descent's ``SPECULATE_LEVELS`` + 1 levels a round
        trip."""
        cover = self._cover(self._first, self._next)
        self._prefetch(cover, got)
        combine = self._combine
        sub: Any = UNSET
        pos = self._first
        for lvl, m in cover:
            v = self._element(lvl, m, got)
            cand = v if sub is UNSET else combine(sub, v)
            if leaves(total, cand):
                sub = cand
                pos += 1 << lvl
                continue
            while lvl:  # down to the first leaf that stays
                lvl -= 1
                if self.store is not None and (lvl, pos >> (lvl + 1)) not in got:
                    self._prefetch(self._descent_points(lvl, pos), got)
                v = self._element(lvl, pos >> lvl, got)
                cand = v if sub is UNSET else combine(sub, v)
                if leaves(total, cand):
                    sub = cand
                    pos += 1 << lvl
            return pos
        return self._next

    def _descent_points(self, lvl: int, pos: int) -> list[tuple[int, int]]:
        """The elements a descent from level ``lvl`` at leaf ``pos`` may read on this level and
        the ``SPECULATE_LEVELS`` below it, both outcomes of each test (as :meth:`_speculate`)."""
        out = []
        gs = {pos}
        for depth in range(lvl, max(-1, lvl - self.SPECULATE_LEVELS - 1), -1):
            nxt = set()
            for x in gs:
                out.append((depth, x >> depth))
                nxt.add(x)
                nxt.add(x + (1 << depth))
            gs = {x for x in nxt if x < self._next}
        return out

    def _truncate_leaves(self, new_next: int) -> None:
        """Remove the leaves ``>= new_next`` (undo of inserts), structure only."""
        last_leaf = new_next - 1
        if last_leaf < self._first:
            self._clear()
            self._first = self._next = new_next
            return
        e = last_leaf
        for lvl, lv in enumerate(self._levels):
            if lvl:
                e = self._parent_of_last(e)
            head = lv.head
            first = 2 * lv.start + (1 if head[0] is EMPTY else 0)
            if e < first:
                self._discard_from(lvl)
                break
            end = (e >> 1) + 1
            if end < lv.end:
                lv.truncate(end)
            if not e & 1:
                lv.tail[1] = EMPTY
        self._next = new_next

    def _discard_from(self, lvl: int) -> None:
        """Remove the levels ``lvl`` and above."""
        levels = self._levels
        for gone in levels[lvl:]:
            gone.discard()
        del levels[lvl:]

    # ------------------------------------------------------------------ per algorithm
    def _parent_of_last(self, e: int) -> int:  # pragma: no cover - abstract
        """The element above ``e``, the last element of its level (undo of inserts)."""
        raise NotImplementedError

    def _reset_results(self) -> None:  # pragma: no cover - abstract
        """The algorithm's results for an empty window."""
        raise NotImplementedError
