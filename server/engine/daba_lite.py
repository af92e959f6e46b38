"""DABA Lite (paper ``004_*``, section 6): DABA in n + 2 partial aggregates and fewer combines,
still worst-case O(1) per operation, for any monoid.

Fact card: :data:`DABALiteAggregator.card`. The insight: DABA reads no value of the sublists
aggregated towards their right end (the front, ``l_L``, ``l_A``) and only the last aggregate of
those aggregated from their left end (``l_R``, ``l_B``). So each item holds one thing, an
aggregate in the first kind and its value in the second, and two aggregates stand for the
second kind: ``aggRA`` (``l_R`` and ``l_A`` together, fixed from a flip to the next) and
``aggB`` (the back). The sublists, between the pointers ``F <= L <= R <= A <= B <= E``, and
``fixup``'s four cases (singleton, flip, shift, shrink) are DABA's (:mod:`.daba`); ``insert``
folds into ``aggB``, a flip hands ``aggB`` to ``aggRA``, and a shrink makes two combines
(``Π_L ⊗ aggRA`` for the item joining the front, ``val ⊗ Π_A`` for the one joining ``l_A``)
where DABA makes three. ``query`` is ``Π_F ⊗ aggB``.

Invariants (``n`` items; ``v_i`` the ``i``-th oldest)::

    F            L            R            A            B            E
    |   front    |    l_L     |    l_R     |    l_A     |    l_B     |
    | v_i..v_B-1 | v_i..v_R-1 |    v_i     | v_i..v_B-1 |    v_i     |
                              '--- aggRA = v_R..v_B-1 --'  aggB = v_B..v_E-1
    aggRA holds when L != R; n == 0, or |front| == |l_B| + 1 and |l_L| == |l_R|

Deviations, as DABA's: one deque per sublist instead of pointers into one deque (O(1) in the
worst case in Python), flip and singleton swapping deques; every item also kept, oldest first,
in a deque of its own for ``items()`` (the slide policies, checkpoints: the paper overwrites
the front's, ``l_L``'s and ``l_A``'s items with aggregates); a combine with the identity (an
empty ``l_A``, the first item of ``l_B``) is skipped.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Any

from .daba import expect_folds, prefix_folds, suffix_folds
from .fifo import Aggregator, AggregatorWindow, FactCard

__all__ = ["DABALite", "DABALiteAggregator"]


class DABALiteAggregator(Aggregator):
    card = FactCard(
        name="DABA_LITE",
        full_name="DABA Lite (De-Amortized Banker's Aggregator, Lite)",
        paper="004: Tangwongsan, Hirzel, Schneider, 'In-order sliding-window aggregation in "
        "worst-case constant time', VLDB J. 2021, section 6",
        ordering="FIFO (in order)",
        requires="a monoid: associative with an identity; no inverse, need not commute",
        time="worst case O(1): insert at most 3 combines (2 on average), evict at most 2 "
        "(1 on average), query 1; no flip loop (the reversal is spread over the operations)",
        space="n + 2 partial aggregates (an aggregate or a value per item, aggRA, aggB), and "
        "the n items kept once more for items()",
        bulk="none: evicting k items is k evictions, O(k) in the worst case",
        storage="all in the process (checkpoints write every item)",
        deviations="the deque with pointers F, L, R, A, B, E is one deque per sublist (Python "
        "has no O(1) pointer into a deque): a pointer step moves an entry between neighbouring "
        "deques, flip and singleton swap deques; the items are also kept in a deque of their "
        "own for items() (policies, checkpoints; the paper overwrites most of them with "
        "aggregates); a combine with the identity is skipped; enforcement walks items oldest "
        "first, as all FIFO engines here",
    )

    def __init__(self, monoid: Any) -> None:
        super().__init__(monoid)
        self._items: deque[Any] = deque()  # every item, oldest first
        # aggregates: of the front, l_L and l_A (see the module docstring)
        self._front: deque[Any] = deque()
        self._left: deque[Any] = deque()
        self._accum: deque[Any] = deque()
        # values: of l_R and l_B
        self._right_vals: deque[Any] = deque()
        self._back_vals: deque[Any] = deque()
        self._agg_ra: Any = self.identity  # aggRA
        self._agg_b: Any = self.identity  # aggB

    def __len__(self) -> int:
        return len(self._items)

    def insert(self, u: Any) -> None:
        self._items.append(u)
        front = self._front
        if not front:  # the window was empty: singleton, B = A = R = L = E
            front.append(u)
            return
        back_vals = self._back_vals
        self._agg_b = self.combine(self._agg_b, u) if back_vals else u
        back_vals.append(u)
        self._fixup()

    def evict(self) -> None:
        items = self._items
        items.popleft()
        self._front.popleft()
        if items:  # else every sublist is empty: the singleton case has nothing to do
            self._fixup()

    def _fixup(self) -> None:
        """One step of the incremental reversal: a shift, a shrink, or a flip then a shrink."""
        front = self._front
        left = self._left
        accum = self._accum
        if left:
            right_vals = self._right_vals
            agg_ra = self._agg_ra
        else:
            if accum:  # shift: A, R, L += 1 (aggRA is not read until the next flip)
                front.append(accum.popleft())
                return
            # flip (L == B): L = F, A = B = E; the emptied deques are reused
            front, left = left, front
            right_vals = self._back_vals
            self._back_vals = self._right_vals
            self._front, self._left, self._right_vals = front, left, right_vals
            self._agg_ra = agg_ra = self._agg_b
            self._agg_b = self.identity
        # shrink: L += 1, A -= 1 (l_R and l_A together keep their items: aggRA stays)
        combine = self.combine
        front.append(combine(left.popleft(), agg_ra))
        val = right_vals.pop()
        accum.appendleft(combine(val, accum[0]) if accum else val)

    def query(self) -> Any:
        front = self._front
        if not front:
            return self.identity
        return self.combine(front[0], self._agg_b) if self._back_vals else front[0]

    def items(self) -> Iterator[Any]:
        return iter(self._items)

    def check(self) -> None:
        """The paper's size and contents invariants, then the fold."""
        items = list(self._items)
        nf, nl, nr, na, nb = map(
            len, (self._front, self._left, self._right_vals, self._accum, self._back_vals)
        )
        if nf + nl + nr + na + nb != len(items) or (items and (nf != nb + 1 or nl != nr)):
            msg = (
                f"DABALite: sublists of {nf}, {nl}, {nr}, {na}, {nb} items for {len(items)} "
                "(want |front| = |l_B| + 1 and |l_L| = |l_R|)"
            )
            raise AssertionError(msg)
        combine = self.combine
        r, a, b = nf + nl, nf + nl + nr, nf + nl + nr + na
        to_b = suffix_folds(combine, items[:b])
        expect_folds("DABALite", "front", list(self._front), to_b[:nf])
        expect_folds("DABALite", "l_L", list(self._left), suffix_folds(combine, items[nf:r]))
        expect_folds("DABALite", "l_R", list(self._right_vals), items[r:a])
        expect_folds("DABALite", "l_A", list(self._accum), to_b[a:])
        expect_folds("DABALite", "l_B", list(self._back_vals), items[b:])
        if nl:
            expect_folds(
                "DABALite", "aggRA", [self._agg_ra], prefix_folds(combine, items[r:b])[-1:]
            )
        agg_b = prefix_folds(combine, items[b:])[-1:] or [self.identity]
        expect_folds("DABALite", "aggB", [self._agg_b], agg_b)
        super().check()


class DABALite(AggregatorWindow):
    """A window run by DABA Lite (``algorithm`` DABA_LITE)."""

    aggregator = DABALiteAggregator
