"""Amortized MTA (paper section 4.2): a forest, the result pair R and the stack.

Fact card (same shape as IBM's sliding-window-aggregators README):

==================  ==================================================
                    AmortizedMTA
==================  ==================================================
ordering            FIFO (in order)
operator            monoid (associative + identity); no inverse, no
requirements        commutativity
insert              O(1) amortized, O(log n) worst
single eviction     O(1) amortized, O(log n) worst
bulk eviction       O(log n) for any count
query               O(1)
space               O(n), O(log n) local with a store
first appeared      Villalba, Berral, Carrera: "Constant-Time Sliding
                    Window Framework with Reduced Memory Footprint and
                    Efficient Bulk Evictions", TPDS 2019, 4.2
==================  ==================================================

Deviations from the paper of its own (the shared ones are in :mod:`.mta_window`), and why:

* **AMTA R0 on tree removal.** When single evictions remove the whole leftmost tree, the
  paper's Algorithm 6 recomputes R1 only; R0 and the stack must then describe the next tree,
  so both halves of R are recomputed.
* **One recomputation per operation** (section 5.2): an insert that merges trees and an
  eviction that removes the leftmost tree only *request* it; the operation runs it once at its
  end. Meanwhile the plan takes the total by associativity (previous total + new items), the
  bulk search reads the leftmost tree's aggregate from the refreshed leftmost branch, and
  evictions use the structural (bulk) removal.
* **AMTA bulk eviction** (section 4.2.4) tests the forest's trees whole, from the oldest, and
  descends (Algorithm 2) into the first one that may not leave, after refreshing the stale
  values of the leftmost branch. The switch happens after ``bulk_factor * log2(n)`` leaves
  passed the policy one by one.
"""

from __future__ import annotations

from typing import Any

from ..sentinels import EMPTY, UNSET
from ..storage.protocol import PairStore
from .monoids import Monoid
from .mta_window import MTAWindow

__all__ = ["AmortizedMTA"]


class AmortizedMTA(MTAWindow):
    """Amortized MTA (paper section 4.2): a forest, the result pair R and the stack.

    Insert and single eviction O(1) amortized, O(log n) worst case; bulk eviction O(log n).
    ``bulk_factor`` scales the number of one-by-one evictions (``bulk_factor * log2 n``)
    after which enforcement switches to bulk eviction (section 4.2.4).
    """

    algorithm = "AMTA"
    __slots__ = ("_dirty", "_r0", "_r1", "_stack", "bulk_factor")

    def __init__(
        self,
        monoid: Monoid,
        policy: Any,
        *,
        store: PairStore | None = None,
        debug: bool = False,
        bulk_factor: int = 1,
    ) -> None:
        if isinstance(bulk_factor, bool) or not isinstance(bulk_factor, int) or bulk_factor < 1:
            msg = f"AmortizedMTA: bulk_factor must be an int >= 1, got {bulk_factor!r}"
            raise ValueError(msg)
        self.bulk_factor = bulk_factor
        super().__init__(monoid, policy, store=store, debug=debug)

    # -- results
    def _reset_results(self) -> None:
        self._r0: Any = self._identity  # the leftmost tree
        self._r1: Any = self._identity  # every other tree
        self._stack: list[Any] = []  # suffixes of the leftmost tree, top = R0 minus its head
        self._dirty = False  # R0, R1 and the stack wait for a recomputation (section 5.2)
        self._total = self._identity

    def _window_aggregate(self) -> Any:
        return self._combine(self._r0, self._r1)

    def _snapshot_results(self, state: dict[str, Any], values: list[Any]) -> None:
        if self._levels:
            values.extend((self._r0, self._r1, *self._stack))
            state["stack"] = len(self._stack)

    def _restore_results(self, state: dict[str, Any], values: Any) -> None:
        self._r0 = next(values)
        self._r1 = next(values)
        self._stack = [next(values) for _ in range(int(state["stack"]))]
        self._total = UNSET

    def _parent_of_last(self, e: int) -> int:
        return (e >> 1) - 1  # only sealed pairs (not the tail) have a parent

    def _recompute(self) -> None:
        """compute_left_result (Algorithm 4) and compute_right_result (Algorithm 5)."""
        self.recomputes += 1
        levels = self._levels
        combine = self._combine
        stack: list[Any] = []
        top: Any = UNSET
        for lvl in range(len(levels) - 1, -1, -1):
            p = levels[lvl].head
            if p[0] is not EMPTY and p[1] is not EMPTY:
                top = p[1] if top is UNSET else combine(p[1], top)
                stack.append(top)
        h0 = levels[0].head
        leaf = h0[1] if h0[0] is EMPTY else h0[0]
        r0 = leaf if top is UNSET else combine(leaf, top)
        r1: Any = UNSET
        for lvl in range(len(levels) - 1):
            v = self._pair_agg(levels[lvl].tail)
            r1 = v if r1 is UNSET else combine(v, r1)
        self._stack = stack
        self._r0 = r0
        self._r1 = self._identity if r1 is UNSET else r1
        self._total = UNSET
        self._dirty = False

    def _settle(self) -> None:
        if self._dirty:
            try:
                self._recompute()
            except BaseException as ex:
                self._raise_midway(ex, "recomputing its result pair")

    # -- insertion (Algorithm 3)
    def _insert_lifted(self, u: Any, r1: Any = UNSET) -> None:
        if r1 is UNSET:
            r1 = self._combine(self._r1, u)  # the first contact of u with the window: may refuse it
        i = self._next
        levels = self._levels
        self._total = UNSET
        if not levels:
            levels.append(self._new_level(0, i >> 1, [EMPTY, u] if i & 1 else [u, EMPTY]))
            self._first = i
            self._next = i + 1
            self._r0 = self._total = u
            self._r1 = self._identity
            self._stack = []
            return
        self._next = i + 1
        lv = levels[0]
        if i & 1:
            lv.tail[1] = u
            if len(levels) == 1:  # the leftmost tree grew: R must be recomputed
                self._dirty = True
            else:
                self._r1 = r1
            return
        self._r1 = r1
        combine = self._combine
        pair: list[Any] = [u, EMPTY]
        lvl = 0
        while True:
            t = lv.tail
            a, b = t[0], t[1]
            v = a if b is EMPTY else (b if a is EMPTY else combine(a, b))
            lv.append(pair)
            m = lv.end - 2  # the sealed pair's parent element on the level above
            lvl += 1
            if lvl == len(levels):
                levels.append(self._new_level(lvl, m >> 1, [EMPTY, v] if m & 1 else [v, EMPTY]))
                return
            lv = levels[lvl]
            if m & 1:
                lv.tail[1] = v
                if lvl == len(levels) - 1:  # the leftmost tree absorbed its neighbour
                    self._dirty = True
                return
            pair = [v, EMPTY]

    def _after_truncate(self) -> None:
        if self._levels:
            self._recompute()
        else:
            self._reset_results()

    def _fold_batch(self, us: list[Any]) -> Any:
        """Left fold of lifted items (the batch's own aggregate)."""
        combine = self._combine
        acc = us[0]
        for u in us[1:]:
            acc = combine(acc, u)
        return acc

    BULK_INSERT_MIN = 64  # batches at least this long are placed level by level

    def _insert_many(self, us: list[Any]) -> None:
        """Algorithm 3 for a batch: an item that lands in an open leaf pair is placed inline.
        Long batches are placed level by level (:meth:`_insert_bulk`)."""
        if len(us) >= self.BULK_INSERT_MIN and self._levels:
            self._insert_bulk(us)
            return
        combine = self._combine
        insert = self._insert_lifted
        levels = self._levels
        prev = self._total
        if prev is UNSET and us:
            prev = combine(self._r0, self._r1)
        for u in us:
            r1 = combine(self._r1, u)  # may refuse u: extend() then undoes the batch
            i = self._next
            if i & 1 and len(levels) > 1:
                levels[0].tail[1] = u
                self._r1 = r1
                self._next = i + 1
            else:
                insert(u, r1)
                levels = self._levels
        # a merge left R stale until the end of the operation: the plan needs the total now
        self._total = combine(prev, self._fold_batch(us)) if self._dirty else UNSET

    def _insert_bulk(self, us: list[Any]) -> None:  # long: a measured hot path (batches)
        """Algorithm 3 for a long batch, level by level: the same pairs and the same combines
        as inserting the items one at a time (each sealed pair's aggregate goes to the level
        above at the position of the pair), in tight loops per level, and one recomputation
        of R and the stack at the end instead of maintaining R1 per item.

        Every combine that touches a new item runs before the window changes, so a monoid
        that refuses an item leaves the window as it was."""
        combine = self._combine
        levels = self._levels
        lv = levels[0]
        pos = self._next
        n = len(us)
        # level 0, computed first: the aggregates of the pairs this batch seals
        j = 0
        if pos & 1:  # the open leaf pair takes the first item
            t = lv.tail
            fill = us[0]
            a = t[0]
            sealed_first = [fill if a is EMPTY else combine(a, fill)]
            j = 1
        else:
            t = lv.tail
            a, b = t[0], t[1]
            sealed_first = [a if b is EMPTY else (b if a is EMPTY else combine(a, b))]
        rest = us[j:]
        full = len(rest) & ~1
        pair_aggs = [combine(rest[k], rest[k + 1]) for k in range(0, full, 2)]
        if len(rest) & 1:
            combine(self._identity, rest[-1])  # first contact of the lone last item
        # commit level 0
        if j:
            lv.tail[1] = us[0]
        e = lv.end - 1  # the pair sealed first; its aggregate goes to position e above
        pairs: list[Any] = [(rest[k], rest[k + 1]) for k in range(0, full, 2)]
        if len(rest) & 1:
            pairs.append((rest[-1], EMPTY))
        ups = (sealed_first + pair_aggs)[: len(pairs)]  # each appended pair seals one
        lv.extend(pairs)
        self._next = pos + n
        self._total = UNSET
        # upper levels: ups land at positions e, e+1, ...
        lvl = 1
        xs = ups
        pos = e
        while xs:
            if lvl == len(levels):
                x0 = xs[0]
                levels.append(
                    self._new_level(lvl, pos >> 1, [EMPTY, x0] if pos & 1 else [x0, EMPTY])
                )
                xs = xs[1:]
                pos += 1
                if not xs:
                    break
            lv = levels[lvl]
            k = 0
            if pos & 1:
                lv.tail[1] = xs[0]
                k = 1
            e = lv.end - 1
            m = len(xs)
            new: list[Any] = [(xs[q], xs[q + 1]) for q in range(k, m - 1, 2)]
            if (m - k) & 1:
                new.append((xs[-1], EMPTY))
            nxt: list[Any] = []
            if new:
                t = lv.tail
                a, b = t[0], t[1]
                nxt.append(a if b is EMPTY else (b if a is EMPTY else combine(a, b)))
                nxt.extend([combine(p[0], p[1]) for p in new[:-1]])
                lv.extend(new)
            xs = nxt
            pos = e
            lvl += 1
        self._recompute()  # R0, R1 and the stack from the new heads and tails: O(log n)

    # -- enforcement: single evictions (Algorithms 6-7), bulk after log n (4.2.4)
    def _plan(self) -> int:
        n = self._next - self._first
        if n == 0:
            return 0
        total = self._total
        if total is UNSET:
            total = self._total = self._combine(self._r0, self._r1)
        f = self._first
        sub = self._levels[0].head[f & 1]
        if not self._policy(total, sub):
            return 0
        return self._plan_from(total, sub, 1)

    def _plan_from(self, total: Any, sub: Any, k: int) -> int:
        """Go on testing leaves one by one after ``k`` passed (``sub`` is their aggregate);
        switch to the bulk search after ``bulk_factor * log2(n)`` of them (section 4.2.4)."""
        n = self._next - self._first
        policy = self._policy
        combine = self._combine
        lv0 = self._levels[0]
        f = self._first
        limit = max(2, self.bulk_factor * n.bit_length())
        if k > limit:
            return self._search(total)
        while k < n:
            i = f + k
            pos = i >> 1
            p = lv0.head if pos == lv0.start else lv0.peek(pos)
            cand = combine(sub, p[i & 1])
            if not policy(total, cand):
                return k
            sub = cand
            k += 1
            if k > limit:
                return self._search(total)
        return n

    def push(self, x: Any, producer_id: str | None = None, sequence: int | None = None) -> Any:
        """Insert ``x``, enforce the policy and return the result: the reactive pipeline.

        The common cases of a sliding window (one leaf in, at most one leaf out) run inline;
        everything else goes through the general paths. Same states as insert + enforce.
        ``producer_id`` + ``sequence``: see :meth:`extend`."""
        if producer_id is not None or sequence is not None:
            if self._duplicate(producer_id, sequence):
                return self.query()
        elif self._broken is not None:
            self._check_usable()
        u = self._lift(x)
        total = self._push_one(u)[0]
        if producer_id is not None or self._hook is not None:
            self._applied("x", (u,), producer_id, sequence)
        if self.debug:
            self.check_invariants()
        return self._lower(total)

    def _push_one(self, u: Any) -> tuple[Any, int]:  # long: the measured hot path of push
        """Insert the lifted ``u`` and enforce: (the window's total, items evicted). The
        inline cases of :meth:`push`; no journal, no duplicate check."""
        combine = self._combine
        prev = self._total
        r1 = combine(self._r1, u)  # first contact of u with the window: may refuse it
        if prev is UNSET:
            prev = combine(self._r0, self._r1)
        i = self._next
        levels = self._levels
        h = len(levels)
        if h > 1:
            lv0 = levels[0]
            if i & 1:
                lv0.tail[1] = u  # Algorithm 3, the leaf pair is open: no propagation
                self._r1 = r1
                self._next = i + 1
            else:
                t = lv0.tail
                a = t[0]
                v = t[1] if a is EMPTY else combine(a, t[1])
                m = lv0.end - 1  # the sealed pair's parent element on level 1
                up = levels[1]
                if m & 1 and h > 2:
                    lv0.append([u, EMPTY])
                    up.tail[1] = v
                    self._r1 = r1
                    self._next = i + 1
                elif h > 3 and (up.end - 1) & 1:
                    # one level more: level 1's tail pair is sealed too and its aggregate
                    # fills the open slot of level 2 (not the top: no recomputation)
                    t = up.tail
                    a, b = t[0], t[1]
                    v1 = a if b is EMPTY else (b if a is EMPTY else combine(a, b))
                    lv0.append([u, EMPTY])
                    up.append([v, EMPTY])
                    levels[2].tail[1] = v1
                    self._r1 = r1
                    self._next = i + 1
                else:
                    self._insert_or_undo(u, r1)
        else:
            self._insert_or_undo(u, r1)
            levels = self._levels
            lv0 = levels[0]
        f = self._first
        head = lv0.head
        policy = self._policy
        try:
            total = combine(prev, u)  # R may wait for a recomputation; associativity does not
            sub = head[f & 1]
            if not policy(total, sub):
                k = 0
            elif i == f:  # a window of one item that may leave
                k = 1
            else:
                j = f + 1
                p = head if (j >> 1) == lv0.start else lv0.peek(j >> 1)
                cand = combine(sub, p[j & 1])
                k = self._plan_from(total, cand, 2) if policy(total, cand) else 1
        except BaseException:
            self._total = UNSET
            self._undo_inserts(i)
            raise
        if k:
            try:
                if k == 1 and i != f and not self._dirty:
                    stack = self._stack
                    if head[0] is not EMPTY and head[1] is not EMPTY:
                        # Algorithm 6, the oldest leaf's pair is full: pop R0, clear the slot
                        head[0] = EMPTY
                        self._r0 = stack.pop()
                        self._first = f + 1
                    elif (
                        stack
                        and (h1 := self._levels[1].head)[0] is not EMPTY
                        and h1[1] is not EMPTY
                    ):
                        # Algorithm 6 + 7, the leaf pair goes and its parent's pair is full
                        r0 = stack.pop()
                        lv0.drop_front(lv0.start + 1)
                        nh = lv0.head
                        h1[0] = EMPTY
                        if nh[0] is not EMPTY and nh[1] is not EMPTY:
                            stack.append(combine(nh[1], stack[-1]) if stack else nh[1])
                        self._r0 = r0
                        self._first = f + 1
                    elif (
                        stack
                        and h > 2
                        and (h2 := self._levels[2].head)[0] is not EMPTY
                        and h2[1] is not EMPTY
                        and lv0.end - lv0.start > 1
                        and (lv1 := self._levels[1]).end - lv1.start > 1
                    ):
                        # Algorithm 6 + 7 one level higher: the leaf pair and its parent's
                        # pair go, the grandparent's pair is full; new heads pushed top first
                        r0 = stack.pop()
                        lv0.drop_front(lv0.start + 1)
                        lv1.drop_front(lv1.start + 1)
                        h2[0] = EMPTY
                        for nh in (lv1.head, lv0.head):
                            if nh[0] is not EMPTY and nh[1] is not EMPTY:
                                stack.append(combine(nh[1], stack[-1]) if stack else nh[1])
                        self._r0 = r0
                        self._first = f + 1
                    else:
                        self._evict_one()
                else:
                    if k > 1 and self._hook is not None:
                        self._fetch_heads(f + k)
                    self._evict(k)
                if self._dirty:  # the one recomputation of this operation
                    self._recompute()
                total = combine(self._r0, self._r1) if self._levels else self._identity
            except BaseException as ex:
                self._raise_midway(ex, f"evicting {k} item(s)")
        elif self._dirty:
            self._settle()
        self._total = total
        return total, k

    def _search(self, total: Any) -> int:
        """Bulk search over the forest: whole trees from the oldest, then Algorithm 2 inside
        the first tree that may not leave. Read-only except the leftmost-branch refresh."""
        levels = self._levels
        policy = self._policy
        combine = self._combine
        h = len(levels)
        sub: Any = UNSET
        self._recompute_leftmost_branch()  # single evictions leave it stale; R0 may be too
        for j in range(h - 1, -1, -1):
            agg = self._pair_agg(levels[j].head if j == h - 1 else levels[j].tail)
            cand = agg if sub is UNSET else combine(sub, agg)
            if not policy(total, cand):
                break
            sub = cand
        else:
            return len(self)
        # the first leaf of tree j: the window's own, or where the tree at level j's tail starts
        g = self._first if j == h - 1 else (levels[j].end - 1) << (j + 1)
        return self._descend(total, j, g, sub) - self._first

    def _evict(self, k: int) -> None:
        n = self._next - self._first
        if k == n:
            self._bulk_evicted += k
            self._clear()
            return
        if k <= max(2, self.bulk_factor * n.bit_length()):
            for done in range(k):
                if self._dirty:  # R and the stack are stale: remove the rest structurally
                    self._bulk_evicted += k - done
                    self._drop_leaves(self._first + k - done)
                    break
                self._evict_one()
            self._total = UNSET
            return
        self.bulk_evictions += 1
        self._bulk_evicted += k
        self._drop_leaves(self._first + k)
        self._dirty = True
        self._total = UNSET

    def _evict_one(self) -> None:
        """Algorithm 6 with the stack update of Algorithm 7."""
        stack = self._stack
        levels = self._levels
        self._r0 = stack.pop() if stack else self._identity
        self._first += 1
        new_heads: list[list[Any]] = []
        lvl = 0
        h = len(levels)
        while lvl < h:
            lv = levels[lvl]
            p = lv.head
            if p[0] is not EMPTY and p[1] is not EMPTY:
                p[0] = EMPTY
                break
            if lv.end - lv.start == 1:  # the top pair went: the leftmost tree is gone
                lv.discard()
                levels.pop()
                self._dirty = True  # the next tree becomes the leftmost one
                return
            lv.drop_front(lv.start + 1)
            p = lv.head
            if p[0] is not EMPTY and p[1] is not EMPTY:
                new_heads.append(p)
            lvl += 1
        if new_heads:
            combine = self._combine
            for idx in range(len(new_heads) - 1, -1, -1):  # highest level first
                nh = new_heads[idx]
                stack.append(combine(nh[1], stack[-1]) if stack else nh[1])
