"""A window's per-row results of one field in one compiled pass: Two-Stacks (Hirzel et al.,
``../shared/papers/004``) over the rows a batch's ranges read.

A window's ranges over a batch have starts that never decrease and ends one row apart (each
row's range ends at it): a sliding window. The rows they read are, in order, Y (the rows of
the slices where the older starts fall), M (the aggregate of the slices between Y and the
tail, one element standing for many rows) and X (the tail, then the batch); a range is given
by its start as an index into that sequence ``V = Y M X`` and ends at its row's place in X.

Two stacks: the *back* holds the aggregate of ``V[f_hi .. e]`` (the rows added since the last
flip, in order), the *front* the suffix aggregates of ``V[f_lo .. f_hi)``; a range from
``s < f_hi`` is ``front[s] ⊕ back`` (older part first), and a start past the front *flips*:
the suffix aggregates of ``V[s .. e]`` are taken afresh and the back empties. Every element
enters the back once and a flip once: O(|V|) for the batch, two combines a row, no arrays but
the front and the results (the array path in window.py takes some ten numpy passes and their
temporaries for the same rows: numba, because the flip is a loop over a data-dependent range).
V is joined into one array first: the same loop reading Y, M and X through an accessor ran
ten times slower (measured: 25 ns a row against 2.5).

Max, Min and MaxCount of numbers (int64 or float64), int64 sums (exact: a batch whose sums
pass int64 goes the array path, which carries them on as floats), and double-double sums
(window.py's Sum and Mean components, TwoSum on every step as kernels.py's scans): the same
values as the array path, a float sum to within the same double-double rounding.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

from .kernels import (
    Comps,
    CountKernel,
    ExtremeKernel,
    Kernel,
    MaxCountKernel,
    MeanKernel,
    SumKernel,
    _two_sum,
)

__all__ = ["slide", "slide_extreme", "slide_pairs", "slide_triples"]


MAX, MIN, INT_SUM, DD_SUM, MAX_COUNT = 0, 1, 2, 3, 4  # the combines of slide_pairs


@numba.njit(cache=True, nogil=True, inline="always")
def _op(ah: Any, al: Any, ax: Any, bh: Any, bl: Any, bx: Any, op: int) -> tuple[Any, Any, Any]:
    """``a ⊕ b`` (older first) of triples ``(h, l, x)``: MAX and MIN of ``h`` (``l`` and ``x``
    unused); INT_SUM, an int64 sum, ``l`` not 0 when it (or a part of it) passed int64;
    DD_SUM, a double-double sum ``h + l`` whose low parts are added by TwoSum too, their
    errors kept in ``x`` (the errors of partial sums far larger than the window's can
    cancel each other, and the small values added between them must not go with them);
    MAX_COUNT, (max, how many rows hold it)."""
    if op == DD_SUM:
        t, e1 = _two_sum(ah, bh)
        lo, e2 = _two_sum(al, bl)
        lo, e3 = _two_sum(lo, e1)
        return t, lo, ax + bx + e2 + e3
    if op == MAX:
        return (bh, bl, bx) if bh > ah else (ah, al, ax)
    if op == MIN:
        return (bh, bl, bx) if bh < ah else (ah, al, ax)
    if op == INT_SUM:  # (wraps on overflow: two terms of one sign whose sum has the other)
        h = ah + bh
        ai, bi, hi = np.int64(ah), np.int64(bh), np.int64(h)  # (typed for floats: not run)
        return h, al + bl + (((ai ^ hi) & (bi ^ hi)) < 0), ax  # (a count of overflows)
    if bh > ah:
        return bh, bl, bx
    if bh < ah:
        return ah, al, ax
    return ah, al + bl, ax


@numba.njit(cache=True, nogil=True)
def slide_triples(
    vh: np.ndarray,
    vl: np.ndarray,
    vx: np.ndarray,
    starts: np.ndarray,
    op: int,
    out_hi: np.ndarray,
    out_lo: np.ndarray,
    out_x: np.ndarray,
) -> None:
    """``(out_hi[i], out_lo[i], out_x[i])``: ``op`` (:func:`_op`) over the triples
    ``(vh, vl, vx)`` from ``starts[i]`` to ``e_i``, row ``i``'s place (the rows are the last
    ``len(starts)``); a row whose start is past it (an empty range) is left as it is."""
    n = starts.shape[0]
    nv = vh.shape[0]
    fh = np.empty(nv, dtype=vh.dtype)
    fl = np.empty(nv, dtype=vl.dtype)
    fx = np.empty(nv, dtype=vx.dtype)
    f_hi = starts[0]  # the front holds [f_lo, f_hi): nothing yet
    bh = vh[0]  # (placeholders: has_back says when the back holds a value)
    bl = vl[0]
    bx = vx[0]
    has_back = False
    e = f_hi - 1
    for i in range(n):
        ei = nv - n + i
        while e < ei:
            e += 1
            if e >= f_hi:
                if has_back:
                    bh, bl, bx = _op(bh, bl, bx, vh[e], vl[e], vx[e], op)
                else:
                    bh, bl, bx = vh[e], vl[e], vx[e]
                    has_back = True
        s = starts[i]
        if s > ei:  # an empty range
            continue
        if s >= f_hi:  # flip: the suffix aggregates of V[s .. e], the back empty
            ah, al, ax = vh[e], vl[e], vx[e]
            fh[e], fl[e], fx[e] = ah, al, ax
            for j in range(e - 1, s - 1, -1):
                ah, al, ax = _op(vh[j], vl[j], vx[j], ah, al, ax, op)
                fh[j], fl[j], fx[j] = ah, al, ax
            f_hi = e + 1
            has_back = False
        if has_back:
            out_hi[i], out_lo[i], out_x[i] = _op(fh[s], fl[s], fx[s], bh, bl, bx, op)
        else:
            out_hi[i], out_lo[i], out_x[i] = fh[s], fl[s], fx[s]


@numba.njit(cache=True, nogil=True, inline="always")
def _newer_wins(newer: Any, older: Any, largest: bool) -> bool:
    """Whether ``older ⊕ newer`` is ``newer`` for Max (``largest``) or Min: as :func:`_op`'s
    MAX and MIN (a tie keeps the older)."""
    return bool(newer > older) if largest else bool(newer < older)


@numba.njit(cache=True, nogil=True)
def slide_extreme(vh: np.ndarray, starts: np.ndarray, largest: bool, out: np.ndarray) -> None:
    """:func:`slide_triples`' MAX (``largest``) or MIN over one array, the same values (ties
    to the older as :func:`_op`): one array read and one front written instead of three
    (measured on a 60 s window's 24,000 rows: 40 us against 130)."""
    n = starts.shape[0]
    nv = vh.shape[0]
    front = np.empty(nv, dtype=vh.dtype)
    f_hi = starts[0]
    back = vh[0]
    has_back = False
    e = f_hi - 1
    for i in range(n):
        ei = nv - n + i
        while e < ei:
            e += 1
            if e >= f_hi:
                if not has_back:
                    back = vh[e]
                    has_back = True
                elif _newer_wins(vh[e], back, largest):
                    back = vh[e]
        s = starts[i]
        if s > ei:  # an empty range
            continue
        if s >= f_hi:  # flip
            a = vh[e]
            front[e] = a
            for j in range(e - 1, s - 1, -1):
                if not _newer_wins(a, vh[j], largest):
                    a = vh[j]
                front[j] = a
            f_hi = e + 1
            has_back = False
        if has_back and _newer_wins(back, front[s], largest):
            out[i] = back
        else:
            out[i] = front[s]


def slide_pairs(
    vh: np.ndarray,
    vl: np.ndarray,
    starts: np.ndarray,
    op: int,
    out_hi: np.ndarray,
    out_lo: np.ndarray,
) -> None:
    """:func:`slide_triples` of pairs (a third part of zeros); a double-double sum's third
    part is added into its low part at the end, and the sums of ranges holding an infinity
    or a NaN are made as in order (:func:`_non_finite_sums`)."""
    out_x = np.zeros(len(starts))
    slide_triples(vh, vl, np.zeros(len(vh)), starts, op, out_hi, out_lo, out_x)
    if op == DD_SUM:
        _settle(out_hi, out_lo, out_x)
        decided = None
        if not np.isfinite(vh).all():
            decided = _non_finite_sums(vh, starts, out_hi, out_lo)
        over = ~np.isfinite(out_hi)
        if decided is not None:
            over &= ~decided
        if over.any():
            _overflowed_sums(vh, vl, starts, out_hi, out_lo, over)


def _overflowed_sums(
    vh: np.ndarray,
    vl: np.ndarray,
    starts: np.ndarray,
    out_hi: np.ndarray,
    out_lo: np.ndarray,
    rows: np.ndarray,
) -> None:
    """The sums of ranges of finite values that overflowed on the way (``rows``): Two-Stacks
    adds in an order of its own, and ``[-1e308, DBL_MAX, 7e292]`` added from the newest back
    passed DBL_MAX at ``DBL_MAX + 7e292`` where the sum is 7.98e307 (an outside tester). The
    loop again over V scaled by 2^-k, k enough that no partial sum of V's values can pass
    DBL_MAX (a power of two: exact but for values that become subnormal, below 2^-1000 or
    so, which only a sum of values hundreds of orders of magnitude apart would feel), the
    results scaled back: +-inf where the sum itself passes DBL_MAX."""
    k = int(np.ceil(np.log2(len(vh) + 2))) + 1
    n = len(starts)
    hi, lo = np.zeros(n), np.zeros(n)
    with np.errstate(all="ignore"):  # (scaled, no partial sum overflows: no rescue again)
        slide_pairs(vh * 2.0**-k, vl * 2.0**-k, starts, DD_SUM, hi, lo)
        back_hi = hi[rows] * 2.0**k
        back_lo = lo[rows] * 2.0**k
    out_hi[rows] = back_hi
    out_lo[rows] = np.where(np.isfinite(back_hi) & np.isfinite(back_lo), back_lo, 0.0)


@numba.njit(cache=True, nogil=True)
def _settle(hi: np.ndarray, lo: np.ndarray, x: np.ndarray) -> None:
    """Triples ``(hi, lo, x)`` of double-double sums as pairs: ``hi + lo`` first (they can be
    large and cancel: the errors of a partial sum far larger than the window's), then ``x``."""
    for i in range(hi.shape[0]):
        t, err = _two_sum(hi[i], lo[i])
        hi[i] = t
        lo[i] = err + x[i]


def slide(k: Kernel, parts: list[Comps], starts: np.ndarray, sizes: np.ndarray) -> Comps | None:
    """Kernel ``k``'s results (components, a row each) over V, the rows of ``parts`` in
    order (lifted components; an aggregate standing for many rows is one), from ``starts``
    (indexes into V; a start past its row: an empty range, its result zeros) to each row
    (the last ``len(starts)`` of V), by Two-Stacks; ``sizes``: each range's rows. None where
    the array path answers: other kernels, integer sums (exact as int64 while they fit),
    values of other types."""
    t = type(k)
    if t is CountKernel:  # a range's count is its rows
        return (sizes.astype(np.int64, copy=False),)
    n = len(starts)
    if t is ExtremeKernel or t is MaxCountKernel:
        dtype = np.result_type(*(c[0] for c in parts))
        if dtype not in (np.int64, np.float64):
            return None
        vs = _joined([c[0] for c in parts], dtype)
        out_v = np.zeros(n, dtype)
        if t is MaxCountKernel:
            out_c = np.zeros(n, np.int64)
            counts = _joined([c[1] for c in parts], np.int64)
            slide_pairs(vs, counts, starts, MAX_COUNT, out_v, out_c)
            return out_v, out_c
        slide_extreme(vs, starts, bool(k.largest), out_v)  # type: ignore[attr-defined]
        return (out_v,)
    if t is SumKernel or t is MeanKernel:
        first = int(t is MeanKernel)  # a mean's (count, hi, lo): its sum after the count
        kinds = {c[j].dtype for c in parts for j in (first, first + 1)}
        if kinds == {np.dtype(np.int64)}:  # exact int64 sums while they fit
            if first:
                return None  # (a mean's: the array path)
            out = np.zeros(n, np.int64)
            over = np.zeros(n, np.int64)
            vs = _joined([c[0] for c in parts], np.int64)
            slide_pairs(vs, np.zeros(len(vs), np.int64), starts, INT_SUM, out, over)
            if over.any():
                return None  # past int64: the array path carries it as floats
            return out, over
        if kinds != {np.dtype(np.float64)}:
            return None
        vh = _joined([c[first] for c in parts], np.float64)
        vl = _joined([c[first + 1] for c in parts], np.float64)
        out_hi = np.zeros(n)
        out_lo = np.zeros(n)
        slide_pairs(vh, vl, starts, DD_SUM, out_hi, out_lo)
        if first:
            return sizes.astype(np.int64, copy=False), out_hi, out_lo
        return out_hi, out_lo
    return None


def _non_finite_sums(
    vh: np.ndarray, starts: np.ndarray, out_hi: np.ndarray, out_lo: np.ndarray
) -> np.ndarray:
    """The sums of ranges holding an infinity or a NaN, whatever order Two-Stacks added them
    in: NaN with a NaN or infinities of both signs, else the infinity (the finite values
    cannot change it: an overflow of theirs on the way is not taken against it; added from
    the newest back, ``[inf, -7e292, -1.8e308]`` overflowed ``-7e292 - 1.8e308`` to ``-inf``
    first, and then gave NaN). The rows of V are the last ``len(starts)``; a range starting past its row stays as it is. Returns
    which rows it answered (their ranges hold an infinity or a NaN)."""
    n, nv = len(starts), len(vh)
    ends = np.arange(nv - n + 1, nv + 1)  # one past each row's place in V
    ok = starts < ends

    def count(flags: np.ndarray) -> np.ndarray:
        cum = np.concatenate(([0], np.cumsum(flags)))
        got: np.ndarray = cum[ends[ok]] - cum[starts[ok]]
        return got

    nans, pos, neg = count(np.isnan(vh)), count(vh == np.inf), count(vh == -np.inf)
    at = np.flatnonzero(ok)
    hi = np.where((nans > 0) | ((pos > 0) & (neg > 0)), np.nan, np.where(pos > 0, np.inf, -np.inf))
    hit = (nans > 0) | (pos > 0) | (neg > 0)
    out_hi[at[hit]] = hi[hit]
    out_lo[at[hit]] = 0.0
    decided = np.zeros(n, dtype=bool)
    decided[at[hit]] = True
    return decided


def _joined(arrays: list[np.ndarray], dtype: Any) -> np.ndarray:
    """V's values in one array (the compiled loops read one array much faster than three)."""
    if len(arrays) == 1:
        return arrays[0].astype(dtype, copy=False)
    return np.concatenate(arrays, dtype=dtype)
