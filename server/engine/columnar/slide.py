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

Max and Min of numbers (int64 or float64), and double-double sums (window.py's Sum and Mean
components, TwoSum on every step as kernels.py's scans): the same values as the array path,
a sum to within the same double-double rounding.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

from .kernels import Comps, CountKernel, ExtremeKernel, Kernel, MeanKernel, SumKernel, _two_sum

__all__ = ["slide", "slide_dd", "slide_extreme"]


@numba.njit(cache=True, nogil=True, inline="always")
def _better(a: float, b: float, largest: bool) -> bool:
    return a > b if largest else a < b


@numba.njit(cache=True, nogil=True)
def slide_extreme(v: np.ndarray, starts: np.ndarray, largest: bool, out: np.ndarray) -> None:
    """``out[i]``: the max (``largest``) or min of ``v[starts[i] .. e_i]``, ``e_i`` row ``i``'s
    place (the rows are ``v``'s last ``len(starts)``); a row whose start is past it (an
    empty range) is left as it is."""
    n = starts.shape[0]
    nv = v.shape[0]
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
                x = v[e]
                if not has_back:
                    back = x
                    has_back = True
                elif _better(x, back, largest):
                    back = x
        s = starts[i]
        if s > ei:  # an empty range
            continue
        if s >= f_hi:  # flip: the suffix aggregates of v[s .. e], the back empty
            acc = v[e]
            front[e] = acc
            for j in range(e - 1, s - 1, -1):
                x = v[j]
                if _better(x, acc, largest):
                    acc = x
                front[j] = acc
            f_hi = e + 1
            has_back = False
        r = front[s]
        if has_back and _better(back, r, largest):
            r = back
        out[i] = r


@numba.njit(cache=True, nogil=True)
def slide_dd(
    vh: np.ndarray, vl: np.ndarray, starts: np.ndarray, out_hi: np.ndarray, out_lo: np.ndarray
) -> None:
    """:func:`slide_extreme` for double-double sums ``(hi, lo)``: each combine TwoSum's
    (kernels.py's ``_dd_add``), older part first."""
    n = starts.shape[0]
    nv = vh.shape[0]
    fh = np.empty(nv)
    fl = np.empty(nv)
    f_hi = starts[0]
    bh = 0.0
    bl = 0.0
    has_back = False
    e = f_hi - 1
    for i in range(n):
        ei = nv - n + i
        while e < ei:
            e += 1
            if e >= f_hi:
                if not has_back:
                    bh = vh[e]
                    bl = vl[e]
                    has_back = True
                else:
                    t, err = _two_sum(bh, vh[e])
                    bh = t
                    bl = bl + vl[e] + err
        s = starts[i]
        if s > ei:
            continue
        if s >= f_hi:
            ah = vh[e]
            al = vl[e]
            fh[e] = ah
            fl[e] = al
            for j in range(e - 1, s - 1, -1):
                t, err = _two_sum(vh[j], ah)
                ah = t
                al = vl[j] + al + err
                fh[j] = ah
                fl[j] = al
            f_hi = e + 1
            has_back = False
        if has_back:
            t, err = _two_sum(fh[s], bh)
            out_hi[i] = t
            out_lo[i] = fl[s] + bl + err
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
        v = _joined([c[0] for c in parts], dtype)
        out = np.zeros(n, dtype)
        slide_extreme(v, starts, k.largest, out)  # type: ignore[attr-defined]
        return (out,)
    if t is SumKernel or t is MeanKernel:
        first = int(t is MeanKernel)  # a mean's (count, hi, lo): its sum after the count
        if any(c[j].dtype != np.float64 for c in parts for j in (first, first + 1)):
            return None
        vh = _joined([c[first] for c in parts], np.float64)
        vl = _joined([c[first + 1] for c in parts], np.float64)
        out_hi = np.zeros(n)
        out_lo = np.zeros(n)
        slide_dd(vh, vl, starts, out_hi, out_lo)
        if first:
            return sizes.astype(np.int64, copy=False), out_hi, out_lo
        return out_hi, out_lo
    return None


def _joined(arrays: list[np.ndarray], dtype: Any) -> np.ndarray:
    """V's values in one array (the compiled loops read one array much faster than three)."""
    if len(arrays) == 1:
        return arrays[0].astype(dtype, copy=False)
    return np.concatenate(arrays, dtype=dtype)
