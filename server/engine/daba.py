"""DABA, the De-Amortized Banker's Aggregator (paper ``004_*``, section 5): FIFO aggregation
in worst-case O(1) combines per operation, for any monoid.

Fact card: :data:`DABAAggregator.card`. Where Two-Stacks reverses its back stack in one O(n)
loop when the front runs out, DABA *flips* earlier, when the front and the back have the
same length, and spreads the reversal over the following operations: each ``insert`` and
``evict`` ends with ``fixup``, one step of it and no loop. The items ``F .. E-1`` fall in
sublists between the paper's pointers ``F <= L <= R <= A <= B <= E``; each item holds its
value and an aggregate, oldest always on the left of a combine:

* ``front`` (``F .. L-1``, the left-most part of ``l_F = F .. B-1``): from it to ``B - 1``;
* ``l_L`` (``L .. R-1``): from it to ``R - 1``;  ``l_R`` (``R .. A-1``): from ``R`` to it;
* ``l_A`` (``A .. B-1``): from it to ``B - 1``;  ``l_B`` (``B .. E-1``): from ``B`` to it.

So ``query`` is ``Π_F ⊗ Π_B``: the aggregate of the first item and of the last. ``fixup`` has
four cases: *singleton* (the first item of an empty window becomes the front), *flip* (``L ==
B``: the front becomes ``l_L`` and the back ``l_R``; no aggregate changes), *shift* (``L ==
R``: the first item of ``l_A`` joins the front, unchanged) and *shrink* (the first item of
``l_L`` joins the front with ``Π_L ⊗ Π_R ⊗ Π_A``, the last of ``l_R`` joins ``l_A`` with
``val ⊗ Π_A``). A flip is always followed by as many shrinks, then as many shifts.

Invariants (``n`` items; ``v_i`` the ``i``-th oldest)::

    F            L            R            A            B            E
    |   front    |    l_L     |    l_R     |    l_A     |    l_B     |
    | v_i..v_B-1 | v_i..v_R-1 | v_R..v_i   | v_i..v_B-1 | v_B..v_i   |
    '------------------------ l_F ---------------------'
    n == 0, or |l_L| + |l_R| + |l_A| + 1 == |l_F| - |l_B| (that is |front| == |l_B| + 1)
    and |l_L| == |l_R|

Deviations. Python's deque has O(1) ends but O(n) indexing, and a list's front index needs an
O(n) compaction now and then; neither gives the paper's O(1) pointers (its chunked array). So
each sublist is a deque of its own: moving a pointer by one moves an item from the end of
one deque to the start of the next, and the pointer assignments of flip and singleton swap
whole deques: every step stays O(1) in the worst case. The values are read only in ``l_R``
(by shrink) and in ``l_B`` (which becomes ``l_R``): those two keep theirs beside their
aggregates, and every item is also kept, oldest first, in a deque of its own for ``items()``
(the slide policies, checkpoints). A combine with the identity (an empty ``l_A`` or ``l_B``)
is skipped, so each operation makes at most the paper's number of combines.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from .fifo import Aggregator, AggregatorWindow, FactCard

__all__ = ["DABA", "DABAAggregator"]


class DABAAggregator(Aggregator):
    card = FactCard(
        name="DABA",
        full_name="De-Amortized Banker's Aggregator",
        paper="004: Tangwongsan, Hirzel, Schneider, 'In-order sliding-window aggregation in "
        "worst-case constant time', VLDB J. 2021, section 5",
        ordering="FIFO (in order)",
        requires="a monoid: associative with an identity; no inverse, need not commute",
        time="worst case O(1): insert at most 4 combines (2.5 on average), evict at most 3 "
        "(1.5 on average), query 1; no flip loop (the reversal is spread over the operations)",
        space="2n partial aggregates (each item's value and aggregate, as the paper), and the "
        "items of l_R and l_B referenced once more (fewer than n/2)",
        bulk="none: evicting k items is k evictions, O(k) in the worst case",
        storage="all in the process (checkpoints write every item)",
        deviations="the deque with pointers F, L, R, A, B, E is one deque per sublist (Python "
        "has no O(1) pointer into a deque): a pointer step moves an item between neighbouring "
        "deques, flip and singleton swap deques; the items are also kept in a deque of their "
        "own for items() (policies, checkpoints); a combine with the identity is skipped; "
        "enforcement walks items oldest first, as all FIFO engines here",
    )

    def __init__(self, monoid: Any) -> None:
        super().__init__(monoid)
        self._items: deque[Any] = deque()  # every item, oldest first
        # the aggregates of each sublist (see the module docstring)
        self._front: deque[Any] = deque()
        self._left: deque[Any] = deque()
        self._right: deque[Any] = deque()
        self._accum: deque[Any] = deque()
        self._back: deque[Any] = deque()
        # the values of l_R and l_B, the only ones the algorithm reads
        self._right_vals: deque[Any] = deque()
        self._back_vals: deque[Any] = deque()

    def __len__(self) -> int:
        return len(self._items)

    def insert(self, u: Any) -> None:
        self._items.append(u)
        front = self._front
        if not front:  # the window was empty: singleton, B = A = R = L = E
            front.append(u)
            return
        back = self._back
        back.append(self.combine(back[-1], u) if back else u)
        self._back_vals.append(u)
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
            right = self._right
            right_vals = self._right_vals
        else:
            if accum:  # shift: A, R, L += 1
                front.append(accum.popleft())
                return
            # flip (L == B): L = F, A = B = E; the emptied deques are reused
            front, left = left, front
            right, right_vals = self._back, self._back_vals
            self._back, self._back_vals = self._right, self._right_vals
            self._front, self._left = front, left
            self._right, self._right_vals = right, right_vals
        # shrink: L += 1, A -= 1
        combine = self.combine
        pi_r = right.pop()
        val = right_vals.pop()
        if accum:
            pi_a = accum[0]
            front.append(combine(combine(left.popleft(), pi_r), pi_a))
            accum.appendleft(combine(val, pi_a))
        else:
            front.append(combine(left.popleft(), pi_r))
            accum.appendleft(val)

    def query(self) -> Any:
        front = self._front
        if not front:
            return self.identity
        back = self._back
        return self.combine(front[0], back[-1]) if back else front[0]

    def items(self) -> Iterator[Any]:
        return iter(self._items)

    def check(self) -> None:
        """The paper's size, values and partial aggregate invariants, then the fold."""
        items = list(self._items)
        nf, nl, nr, na, nb = map(
            len, (self._front, self._left, self._right, self._accum, self._back)
        )
        if nf + nl + nr + na + nb != len(items) or (items and (nf != nb + 1 or nl != nr)):
            msg = (
                f"DABA: sublists of {nf}, {nl}, {nr}, {na}, {nb} items for {len(items)} "
                "(want |front| = |l_B| + 1 and |l_L| = |l_R|)"
            )
            raise AssertionError(msg)
        combine = self.combine
        r, a, b = nf + nl, nf + nl + nr, nf + nl + nr + na
        expect_folds("DABA", "l_R values", list(self._right_vals), items[r:a])
        expect_folds("DABA", "l_B values", list(self._back_vals), items[b:])
        to_b = suffix_folds(combine, items[:b])
        expect_folds("DABA", "front", list(self._front), to_b[:nf])
        expect_folds("DABA", "l_L", list(self._left), suffix_folds(combine, items[nf:r]))
        expect_folds("DABA", "l_R", list(self._right), prefix_folds(combine, items[r:a]))
        expect_folds("DABA", "l_A", list(self._accum), to_b[a:])
        expect_folds("DABA", "l_B", list(self._back), prefix_folds(combine, items[b:]))
        super().check()


def prefix_folds(combine: Callable[[Any, Any], Any], values: Sequence[Any]) -> list[Any]:
    """For each value, the aggregate from the first value to it."""
    out: list[Any] = []
    for v in values:
        out.append(combine(out[-1], v) if out else v)
    return out


def suffix_folds(combine: Callable[[Any, Any], Any], values: Sequence[Any]) -> list[Any]:
    """For each value, the aggregate from it to the last value."""
    out: list[Any] = []
    for v in reversed(values):
        out.append(combine(v, out[-1]) if out else v)
    out.reverse()
    return out


def expect_folds(who: str, what: str, got: Sequence[Any], want: Sequence[Any]) -> None:
    """Raise AssertionError naming the first position where ``got`` differs from ``want``
    (floats up to rounding: the algorithm combines in another association)."""
    from .laws import approx_equal

    if len(got) != len(want):
        msg = f"{who}: {what} holds {len(got)} entries, want {len(want)}"
        raise AssertionError(msg)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        if not approx_equal(g, w):
            msg = f"{who}: {what}[{i}] holds {g!r}, want {w!r}"
            raise AssertionError(msg)


class DABA(AggregatorWindow):
    """A window run by DABA (``algorithm`` DABA)."""

    aggregator = DABAAggregator
