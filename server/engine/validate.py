"""Structural validator for MTA windows (debug mode): the paper's invariants, checked in full.

O(n) per call: for tests and ``debug=True`` windows, never for production paths. Checks:

* position bookkeeping: head/tail are the pairs at ``start``/``end - 1``; level 0 holds exactly
  the leaves ``[first, next)``; tiered levels keep their write-buffer invariant;
* Invariant 1 (only the head may be ``<∅,*>``, only the tail ``<*,∅>``) and Invariant 2
  (no ``<∅,∅>``);
* parent/child structure: LMTA every pair has a parent except the top one; AMTA (Invariant 3)
  only sealed pairs have one, each level's tail is a root; the top level holds one pair;
* values: every element equals the aggregate of its children (AMTA: except the leftmost branch,
  which single evictions leave stale by design), LMTA's root, AMTA's R0/R1 against the leaves
  of the leftmost tree and of the rest, and the AMTA stack against Algorithm 4.
"""

from __future__ import annotations

from typing import Any, NoReturn

from ..sentinels import EMPTY
from .laws import approx_equal
from .levels import TieredLevel

__all__ = ["InvariantError", "check_window"]


class InvariantError(AssertionError):
    """A window's structure broke one of the paper's invariants."""


def _fail(w: Any, what: str) -> NoReturn:
    msg = f"{type(w).__name__} invariant broken: {what}"
    raise InvariantError(msg)


def _fold(w: Any, values: list[Any]) -> Any:
    acc = w._identity
    for v in values:
        acc = w._combine(acc, v)
    return acc


def check_window(w: Any) -> None:
    levels = w._levels
    n = w._next - w._first
    if n < 0:
        _fail(w, f"negative size {n}")
    if n == 0:
        if levels:
            _fail(w, f"empty window keeps {len(levels)} levels")
        return
    if not levels:
        _fail(w, f"window of {n} items has no levels")
    pairs_by_level = [_level_pairs(w, lvl, lv) for lvl, lv in enumerate(levels)]
    leaves = _elements(pairs_by_level[0])
    if sorted(leaves) != list(range(w._first, w._next)):
        _fail(w, f"level 0 holds leaves {sorted(leaves)[:8]}..., expected [{w._first}, {w._next})")
    if len(levels[-1]) != 1:
        _fail(w, f"top level {len(levels) - 1} holds {len(levels[-1])} pairs, expected 1")
    _check_parents(w, pairs_by_level)
    if w.algorithm == "AMTA":
        _check_amta_results(w, leaves)
    else:
        _check_lmta_results(w, [leaves[i] for i in sorted(leaves)])


def _level_pairs(w: Any, lvl: int, lv: Any) -> dict[int, Any]:
    """The pairs of one level by position, checked against Invariants 1 and 2 and the level's
    own bookkeeping (a tiered level's middle as its store holds it)."""
    if lv.index != lvl:
        _fail(w, f"level {lvl} thinks it is level {lv.index}")
    if lv.end - lv.start < 1:
        _fail(w, f"level {lvl} is empty but kept")
    pairs: dict[int, Any] = {}
    stored: dict[int, Any] = {}
    if isinstance(lv, TieredLevel):  # the middle as the store holds it, cache checked
        try:
            stored = lv.audit()
        except ValueError as ex:
            _fail(w, f"level {lvl}: {ex}")
    for pos in range(lv.start, lv.end):
        p = stored[pos] if pos in stored else lv.peek(pos)
        a, b = p[0], p[1]
        if a is EMPTY and b is EMPTY:
            _fail(w, f"Invariant 2: level {lvl} pair {pos} is <∅, ∅>")
        if a is EMPTY and pos != lv.start:
            _fail(w, f"Invariant 1: level {lvl} pair {pos} is <∅, *> but not the head")
        if b is EMPTY and pos != lv.end - 1:
            _fail(w, f"Invariant 1: level {lvl} pair {pos} is <*, ∅> but not the tail")
        pairs[pos] = p
    if lv.peek(lv.start) is not lv.head or lv.peek(lv.end - 1) is not lv.tail:
        _fail(w, f"level {lvl}: head/tail are not the pairs at start/end-1")
    return pairs


def _elements(pairs: dict[int, Any]) -> dict[int, Any]:
    """The elements of one level by position (element ``m`` is slot ``m & 1`` of pair
    ``m >> 1``)."""
    out = {}
    for pos, p in pairs.items():
        for slot in (0, 1):
            if p[slot] is not EMPTY:
                out[2 * pos + slot] = p[slot]
    return out


def _check_parents(w: Any, pairs_by_level: list[dict[int, Any]]) -> None:
    """Each level holds exactly the parents of the level below (LMTA: of every pair; AMTA:
    of the sealed ones), each the aggregate of its children (AMTA: but the leftmost branch)."""
    levels = w._levels
    amta = w.algorithm == "AMTA"
    spine: set[tuple[int, int]] = set()
    for lvl in range(1, len(levels)):
        below = levels[lvl - 1]
        elems = _elements(pairs_by_level[lvl])
        last_child = below.end - 2 if amta else below.end - 1
        want = list(range(below.start, last_child + 1))
        if sorted(elems) != want:
            _fail(
                w,
                f"level {lvl} holds elements {sorted(elems)}, expected parents {want} of level {lvl - 1}",
            )
        spine.add((lvl, min(elems)))
        for m, v in elems.items():
            expect = w._pair_agg(pairs_by_level[lvl - 1][m])
            if amta and (lvl, m) in spine:
                continue
            if not approx_equal(v, expect):
                _fail(w, f"level {lvl} element {m} = {v!r}, children aggregate to {expect!r}")


def _check_lmta_results(w: Any, leaves: list[Any]) -> None:
    """LMTA: levels below the top hold two pairs or more; the root is the window's aggregate."""
    levels = w._levels
    for lvl in range(len(levels) - 1):
        if len(levels[lvl]) < 2:
            _fail(w, f"LMTA level {lvl} below the top holds a single pair")
    root = w._pair_agg(levels[-1].head)
    if not approx_equal(w._root, root):
        _fail(w, f"root {w._root!r} != top pair aggregate {root!r}")
    total = _fold(w, leaves)
    if not approx_equal(root, total):
        _fail(w, f"root {root!r} != aggregate of the leaves {total!r}")


def _check_amta_results(w: Any, leaves: dict[int, Any]) -> None:
    """AMTA: the result pair R against the leaves of the leftmost tree and of the rest, and
    the stack against Algorithm 4."""
    eq = approx_equal
    levels = w._levels
    h = len(levels)
    # the leftmost tree ends where the tree rooted at the next level's tail begins
    boundary = ((levels[h - 2].end - 1) << (h - 1)) if h >= 2 else w._next
    order = sorted(leaves)
    left = [leaves[i] for i in order if i < boundary]
    right = [leaves[i] for i in order if i >= boundary]
    if not eq(w._r0, _fold(w, left)):
        _fail(w, f"R0 = {w._r0!r}, leftmost tree aggregates to {_fold(w, left)!r}")
    if not eq(w._r1, _fold(w, right)):
        _fail(w, f"R1 = {w._r1!r}, other trees aggregate to {_fold(w, right)!r}")
    if w._stack:
        expect_top = _fold(w, left[1:])
        if not eq(w._stack[-1], expect_top):
            _fail(w, f"stack top {w._stack[-1]!r} != R0 minus its head {expect_top!r}")
    stack: list[Any] = []
    for lvl in range(h - 1, -1, -1):
        p = levels[lvl].head
        if p[0] is not EMPTY and p[1] is not EMPTY:
            stack.append(p[1] if not stack else w._combine(p[1], stack[-1]))
    if len(stack) != len(w._stack) or not all(
        eq(a, b) for a, b in zip(stack, w._stack, strict=True)
    ):
        _fail(w, f"stack {w._stack!r} != Algorithm 4's {stack!r}")
