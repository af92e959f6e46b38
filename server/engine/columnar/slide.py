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

__all__ = ["slide", "slide_pair", "slide_scalar"]


MAX, MIN, INT_SUM = 0, 1, 2  # slide_scalar's combines
DD_SUM, MAX_COUNT = 0, 1  # slide_pair's


@numba.njit(cache=True, nogil=True, inline="always")
def _op(a: Any, b: Any, op: int, bad: np.ndarray) -> Any:
    """``a ⊕ b`` (older first) for ``op``; an int64 sum past int64 sets ``bad[0]``."""
    if op == MAX:
        return b if b > a else a
    if op == MIN:
        return b if b < a else a
    s = a + b  # int64 only (wraps on overflow: two terms of one sign whose sum has the other)
    ai, bi, si = np.int64(a), np.int64(b), np.int64(s)  # (typed for floats too: not run)
    if ((ai ^ si) & (bi ^ si)) < 0:
        bad[0] = True
    return s


@numba.njit(cache=True, nogil=True)
def slide_scalar(v: np.ndarray, starts: np.ndarray, op: int, out: np.ndarray) -> bool:
    """``out[i]``: ``op`` (MAX, MIN or INT_SUM: int64 only) over ``v[starts[i] .. e_i]``,
    ``e_i`` row ``i``'s place (the rows are ``v``'s last ``len(starts)``); a row whose start
    is past it (an empty range) is left as it is. False when an integer sum overflowed
    (the results are then not to be used)."""
    n = starts.shape[0]
    nv = v.shape[0]
    bad = np.zeros(1, dtype=np.bool_)
    front = np.empty(nv, dtype=v.dtype)
    f_hi = starts[0]  # the front holds [f_lo, f_hi): nothing yet
    back = v[0]  # (a placeholder: has_back says when it holds a value)
    has_back = False
    e = f_hi - 1
    for i in range(n):
        ei = nv - n + i
        while e < ei:
            e += 1
            if e >= f_hi:
                if has_back:
                    back = _op(back, v[e], op, bad)
                else:
                    back = v[e]
                    has_back = True
        s = starts[i]
        if s > ei:  # an empty range
            continue
        if s >= f_hi:  # flip: the suffix aggregates of v[s .. e], the back empty
            acc = v[e]
            front[e] = acc
            for j in range(e - 1, s - 1, -1):
                acc = _op(v[j], acc, op, bad)
                front[j] = acc
            f_hi = e + 1
            has_back = False
        out[i] = _op(front[s], back, op, bad) if has_back else front[s]
    return not bad[0]


@numba.njit(cache=True, nogil=True, inline="always")
def _op2(ah: Any, al: Any, bh: Any, bl: Any, op: int) -> tuple[Any, Any]:
    """``a ⊕ b`` of pairs: DD_SUM, a double-double sum (TwoSum, as kernels.py's
    ``_dd_add``); MAX_COUNT, (max, how many rows hold it)."""
    if op == DD_SUM:
        t, err = _two_sum(ah, bh)
        return t, al + bl + err
    if bh > ah:
        return bh, bl
    if bh < ah:
        return ah, al
    return ah, al + bl


@numba.njit(cache=True, nogil=True)
def slide_pair(
    vh: np.ndarray,
    vl: np.ndarray,
    starts: np.ndarray,
    op: int,
    out_hi: np.ndarray,
    out_lo: np.ndarray,
) -> None:
    """:func:`slide_scalar` for pairs ``(vh, vl)`` combined by ``op`` (:func:`_op2`)."""
    n = starts.shape[0]
    nv = vh.shape[0]
    fh = np.empty(nv, dtype=vh.dtype)
    fl = np.empty(nv, dtype=vl.dtype)
    f_hi = starts[0]
    bh = vh[0]
    bl = vl[0]
    has_back = False
    e = f_hi - 1
    for i in range(n):
        ei = nv - n + i
        while e < ei:
            e += 1
            if e >= f_hi:
                if has_back:
                    bh, bl = _op2(bh, bl, vh[e], vl[e], op)
                else:
                    bh, bl = vh[e], vl[e]
                    has_back = True
        s = starts[i]
        if s > ei:
            continue
        if s >= f_hi:
            ah = vh[e]
            al = vl[e]
            fh[e] = ah
            fl[e] = al
            for j in range(e - 1, s - 1, -1):
                ah, al = _op2(vh[j], vl[j], ah, al, op)
                fh[j] = ah
                fl[j] = al
            f_hi = e + 1
            has_back = False
        if has_back:
            out_hi[i], out_lo[i] = _op2(fh[s], fl[s], bh, bl, op)
        else:
            out_hi[i] = fh[s]
            out_lo[i] = fl[s]


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
    if t is ExtremeKernel:
        dtype = np.result_type(*(c[0] for c in parts))
        if dtype not in (np.int64, np.float64):
            return None
        out = np.zeros(n, dtype)
        slide_scalar(_joined([c[0] for c in parts], dtype), starts, MAX if k.largest else MIN, out)  # type: ignore[attr-defined]
        return (out,)
    if t is MaxCountKernel:
        dtype = np.result_type(*(c[0] for c in parts))
        if dtype not in (np.int64, np.float64):
            return None
        out_v = np.zeros(n, dtype)
        out_c = np.zeros(n, np.int64)
        vs = _joined([c[0] for c in parts], dtype)
        slide_pair(vs, _joined([c[1] for c in parts], np.int64), starts, MAX_COUNT, out_v, out_c)
        return out_v, out_c
    if t is SumKernel or t is MeanKernel:
        first = int(t is MeanKernel)  # a mean's (count, hi, lo): its sum after the count
        kinds = {c[j].dtype for c in parts for j in (first, first + 1)}
        if kinds == {np.dtype(np.int64)}:  # exact int64 sums while they fit
            if first:
                return None  # (a mean's: the array path)
            out = np.zeros(n, np.int64)
            if not slide_scalar(_joined([c[0] for c in parts], np.int64), starts, INT_SUM, out):
                return None  # past int64: the array path carries it as floats
            return out, np.zeros(n, np.int64)
        if kinds != {np.dtype(np.float64)}:
            return None
        vh = _joined([c[first] for c in parts], np.float64)
        vl = _joined([c[first + 1] for c in parts], np.float64)
        out_hi = np.zeros(n)
        out_lo = np.zeros(n)
        slide_pair(vh, vl, starts, DD_SUM, out_hi, out_lo)
        if first:
            return sizes.astype(np.int64, copy=False), out_hi, out_lo
        return out_hi, out_lo
    return None


def _joined(arrays: list[np.ndarray], dtype: Any) -> np.ndarray:
    """V's values in one array (the compiled loops read one array much faster than three)."""
    if len(arrays) == 1:
        return arrays[0].astype(dtype, copy=False)
    return np.concatenate(arrays, dtype=dtype)
