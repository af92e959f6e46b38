"""The built-in monoids as array kernels: a lifted column is a tuple of numpy arrays (its
*components*), and every operation the columnar window needs runs on whole arrays.

A kernel gives, for one monoid over one batch of rows:

* ``lift(cols, n)``: the components of ``n`` rows from the batch's columns (refusing what the
  monoid's own ``lift`` refuses: NaN for an ordered value, a number <= 0 for a geometric mean);
* ``scan(comps, reverse)``: over 2-D components (one segment per row), the aggregate of each
  segment's prefix (or, ``reverse``, suffix) at every position: ``numpy.ufunc.accumulate``
  along axis 1, or the few lines of array code a non-ufunc monoid needs;
* ``combine(older, newer)``: element by element, the monoid's combine;
* ``to_lifted(comps, i, values)`` and ``from_lifted(agg)``: one aggregate to and from the
  per-row engine's Python form (the tree over the window's slices holds those: one truth);
* ``lower(comps, values)``: the results as an Arrow array (nulls where ``lower`` gives None).

Kernels leave floating-point warnings to their callers (``numpy.errstate``): an inf or a NaN
in a sum is an answer, not an error.

Sums are carried as double-double pairs ``(hi, lo)`` (Knuth's TwoSum on every step of a scan,
vectorized as Ogita, Rump and Oishi's cascaded sum): a sum's result is the correctly rounded
sum of its rows to within an ulp, at least as close to ``math.fsum`` as the tree's. Variances
are carried as Welford moments ``(n, mean, M2)`` whose scans are cumulative sums of
non-negative increments, combined as Chan, Golub and LeVeque's pairwise formula (the
per-row engine's). First, Last and the keys of arg-max/arg-min are positions into the rows a
call sees (``values`` resolves them); position ``FOREIGN`` stands for a value the aggregate
of stored slices carries (``from_lifted``).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numba
import numpy as np
import pyarrow as pa

from ...sentinels import NOTHING
from ..monoids import (
    ArgMax,
    ArgMin,
    Count,
    First,
    GeometricMean,
    Last,
    Max,
    MaxCount,
    Mean,
    Min,
    StdDev,
    Sum,
    Variance,
)

__all__ = ["FOREIGN", "Kernel", "kernel_for", "one_form", "search_sorted"]

FOREIGN = -2  # a position standing for a value held by a stored slices' aggregate
Comps = tuple[np.ndarray, ...]


@numba.njit(cache=True, nogil=True, inline="always")
def _two_sum(s: float, x: float) -> tuple[float, float]:
    """Knuth's TwoSum: ``s + x`` rounded and its rounding error (0 for an inf or a NaN: it
    is the answer, no error term)."""
    t = s + x
    bp = t - s
    err = (s - (t - bp)) + (x - bp)
    if not math.isfinite(err):
        err = 0.0
    return t, err


@numba.njit(cache=True, nogil=True)
def _dd_scan(hi: np.ndarray, lo: np.ndarray, out_hi: np.ndarray, out_lo: np.ndarray) -> None:
    """Row by row, the running double-double sum (one fused loop: in numpy each TwoSum step
    is eight passes over the rows, measured as a third of a batch's time)."""
    for i in range(hi.shape[0]):
        s = 0.0
        e = 0.0
        for j in range(hi.shape[1]):
            s, err = _two_sum(s, hi[i, j])
            e += lo[i, j] + err
            out_hi[i, j] = s
            out_lo[i, j] = e


@numba.njit(cache=True, nogil=True)
def _dd_total(hi: np.ndarray, lo: np.ndarray) -> tuple[float, float]:
    """The double-double sum of all of ``hi`` + ``lo``: the last element of :func:`_dd_scan`
    over one row, step for step (the same value), without the scan's arrays."""
    s = 0.0
    e = 0.0
    for j in range(hi.shape[0]):
        s, err = _two_sum(s, hi[j])
        e += lo[j] + err
    return s, e


@numba.njit(cache=True, nogil=True)
def _dd_total1(x: np.ndarray) -> tuple[float, float]:
    """:func:`_dd_total` of ``x`` with no low parts (rows as they came): the same value."""
    s = 0.0
    e = 0.0
    for j in range(x.shape[0]):
        s, err = _two_sum(s, x[j])
        e += err
    return s, e


@numba.njit(cache=True, nogil=True)
def _dd_add(
    ahi: np.ndarray,
    alo: np.ndarray,
    bhi: np.ndarray,
    blo: np.ndarray,
    out_hi: np.ndarray,
    out_lo: np.ndarray,
) -> None:
    """Element by element, the double-double sum of ``a`` and ``b`` (TwoSum, fused)."""
    for i in range(ahi.shape[0]):
        t, err = _two_sum(ahi[i], bhi[i])
        out_hi[i] = t
        out_lo[i] = alo[i] + blo[i] + err


@numba.njit(cache=True, nogil=True)
def _merge_right(t: np.ndarray, bounds: np.ndarray, out: np.ndarray) -> None:
    j = 0
    n = t.shape[0]
    for i in range(bounds.shape[0]):
        b = bounds[i]
        while j < n and t[j] <= b:
            j += 1
        out[i] = j


def search_sorted(t: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """``numpy.searchsorted(t, bounds, side="right")`` for ``bounds`` in order too: one
    merge, O(len(t) + len(bounds)), instead of a binary search per bound."""
    out = np.empty(len(bounds), dtype=np.int64)
    if len(t) > 8 * len(bounds):  # a few bounds in a long part: binary search wins
        return np.searchsorted(t, bounds, side="right")
    common = np.result_type(t.dtype, bounds.dtype)
    _merge_right(t.astype(common, copy=False), bounds.astype(common, copy=False), out)
    return out


def _dd_cumsum(hi: np.ndarray, lo: np.ndarray) -> Comps:
    """Prefix sums of double-doubles along axis 1: the cascaded sum (each step's rounding
    error recovered by TwoSum and summed apart)."""
    out_hi = np.empty(hi.shape)
    out_lo = np.empty(hi.shape)
    _dd_scan(hi.astype(np.float64, copy=False), lo.astype(np.float64, copy=False), out_hi, out_lo)
    return out_hi, out_lo


def _dd_of(hi: np.ndarray, lo: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A sum's components as double-doubles: an int64 sum exactly (its top 53 bits and the
    rest; a float of it alone rounds 2**54 + 2 to 2**54), floats as they are."""
    if hi.dtype.kind != "i":
        return hi.astype(np.float64, copy=False), lo.astype(np.float64, copy=False)
    big = np.clip(hi.astype(np.float64), -(2.0**63), 2.0**63 - 1024)  # (int64s)
    return big, (hi - big.astype(np.int64)).astype(np.float64) + lo.astype(np.float64)


def one_form(k: Kernel, parts: list[Comps]) -> list[Comps]:
    """``parts`` (components of kernel ``k``) ready to be joined or mixed: where a sum is
    int64 in some and a double-double in others (lifted apart: a tail of small values, a
    batch of large ones), the int64 ones as the double-doubles they are exactly (numpy's
    common type rounds each to one float: 2**53 + 1 to 2**53)."""
    j = k.sum_comp
    if j is None or len({p[j].dtype.kind == "i" for p in parts}) < 2:
        return parts
    return [
        p if p[j].dtype.kind != "i" else (*p[:j], *_dd_of(p[j], p[j + 1]), *p[j + 2 :])
        for p in parts
    ]


def _rev(comps: Comps) -> Comps:
    return tuple(c[:, ::-1] for c in comps)


class Kernel:
    """One monoid's array operations (subclasses per monoid kind)."""

    reads: tuple[str, ...] = ()  # the columns it reads
    commutative = True
    pos_comp: int | None = None  # the component holding row positions (rebased by callers)
    sum_comp: int | None = None  # a sum's (hi, lo) components start here (Sum, Mean)

    def lift(self, cols: dict[str, np.ndarray], n: int) -> Comps:  # pragma: no cover
        raise NotImplementedError

    def scan(self, comps: Comps, reverse: bool) -> Comps:
        if reverse:
            return _rev(self._scan(_rev(comps)))
        return self._scan(comps)

    def _scan(self, comps: Comps) -> Comps:  # pragma: no cover - abstract
        raise NotImplementedError

    def combine(self, a: Comps, b: Comps) -> Comps:  # pragma: no cover - abstract
        raise NotImplementedError

    def total(self, comps: Comps) -> Comps:
        """The aggregate of all of ``comps`` (1-D), as components of length 1."""
        return tuple(c[:, -1] for c in self.scan(tuple(c.reshape(1, -1) for c in comps), False))

    def reduce(self, cols: dict[str, np.ndarray], n: int) -> Comps:
        """The aggregate of ``n`` rows a window holds (checked when they came): ``total`` of
        their lift, or the same value without the lifted arrays (Count, Max, Min, sums of
        floats)."""
        return self.total(self.lift(cols, n))

    def to_lifted(self, comps: Comps, i: int, values: Any) -> Any:  # pragma: no cover
        raise NotImplementedError

    def from_lifted(self, agg: Any) -> Comps:  # pragma: no cover - abstract
        raise NotImplementedError

    # A sealed slice's aggregate in the window's tree: the per-row engine's form, but for sums
    # of floats, carried as their double-double pair (rounded to one float only when a
    # result leaves the window): the tree's combines keep the scans' precision
    def slice_monoid(self, m: Any) -> Any:
        """The monoid the window's tree combines this field's slice aggregates with."""
        return m

    def to_slice(self, comps: Comps, i: int, values: Any) -> Any:
        return self.to_lifted(comps, i, values)

    def from_slice(self, agg: Any) -> Comps:
        return self.from_lifted(agg)

    def slice_to_lifted(self, agg: Any) -> Any:
        """A slice-form aggregate in the per-row engine's form."""
        return agg

    def lower(self, comps: Comps, values: Any) -> pa.Array:  # pragma: no cover - abstract
        raise NotImplementedError


def _column(owner: str, cols: dict[str, np.ndarray], name: str | None, n: int) -> np.ndarray:
    if name is None:
        msg = f"{owner}: the columnar path reads a named field (Record(x={owner}('col')))"
        raise ValueError(msg)
    try:
        col = cols[name]
    except KeyError:
        msg = f"{owner}: the batch has no column {name!r} (columns: {sorted(cols)})"
        raise KeyError(msg) from None
    if len(col) != n:
        msg = f"{owner}: column {name!r} holds {len(col)} rows, expected {n}"
        raise ValueError(msg)
    return col


def _real(owner: str, col: np.ndarray) -> np.ndarray:
    if col.dtype.kind == "b" or col.dtype.kind not in "iuf":
        msg = f"{owner}: expected a numeric column, got {col.dtype}"
        raise TypeError(msg)
    return col.astype(np.float64, copy=False)


_INT64_MAX = np.iinfo(np.int64).max


def _ints(owner: str, col: np.ndarray) -> np.ndarray:
    """An integer column as int64 (integers in aggregates fit in 64 signed bits)."""
    if col.dtype.kind == "u" and len(col) and col.max() > _INT64_MAX:
        i = int(np.argmax(col > _INT64_MAX))
        msg = f"{owner}: integers must fit in 64 signed bits, got {col[i].item()} (row {i})"
        raise ValueError(msg)
    return col.astype(np.int64, copy=False)


def _ordered(owner: str, col: np.ndarray, keep_ints: bool = False) -> np.ndarray:
    if keep_ints and col.dtype.kind in "iu":
        return _ints(owner, col)
    x = _real(owner, col)
    bad = np.isnan(x)
    if bad.any():
        i = int(np.argmax(bad))
        msg = f"{owner}: expected an ordered number, got nan (row {i})"
        raise ValueError(msg)
    return x


class CountKernel(Kernel):
    def lift(self, cols: dict[str, np.ndarray], n: int) -> Comps:
        return (np.ones(n, dtype=np.int64),)

    def _scan(self, comps: Comps) -> Comps:
        return (np.cumsum(comps[0], axis=1),)

    def total(self, comps: Comps) -> Comps:
        return (comps[0].sum(keepdims=True),)

    def reduce(self, cols: dict[str, np.ndarray], n: int) -> Comps:
        return (np.array([n], dtype=np.int64),)

    def combine(self, a: Comps, b: Comps) -> Comps:
        return (a[0] + b[0],)

    def to_lifted(self, comps: Comps, i: int, values: Any) -> Any:
        return int(comps[0][i])

    def from_lifted(self, agg: Any) -> Comps:
        return (np.array([agg], dtype=np.int64),)

    def lower(self, comps: Comps, values: Any) -> pa.Array:
        return pa.array(comps[0], type=pa.int64())


class SumKernel(Kernel):
    """A sum. Integer columns sum exactly as int64 ``(s, 0)`` while no prefix of the rows
    lifted can pass int64 (``rows_bound``, set by the window: its rows and the batch's) and
    no combine does (checked); otherwise, and for floats, as a double-double ``(hi, lo)``."""

    sum_comp = 0

    def __init__(self, field: str | None, owner: str = "Sum", log: bool = False) -> None:
        self.field = field
        self.reads = (field,) if field else ()
        self.owner = owner
        self.log = log
        self.rows_bound = 0
        # the most rows any prefix or combine of a call sums (0: unknown, every row lifted):
        # a caller that knows its windows' longest (runs.py) keeps int64 sums over long calls
        self.sum_rows = 0

    def lift(self, cols: dict[str, np.ndarray], n: int) -> Comps:
        col = _column(self.owner, cols, self.field, n)
        if not self.log and col.dtype.kind in "iu" and n:
            xi = _ints(self.owner, col)
            top = max(abs(int(xi.max())), abs(int(xi.min())))
            rows = self.sum_rows or max(self.rows_bound, n)
            if top * rows <= _INT64_MAX:  # no prefix of it can overflow
                return xi, np.zeros(n, dtype=np.int64)
            # past int64: each integer as the double-double it is exactly (its top 53 bits
            # and its low 11; a double of it alone rounds 2**62 + 383 to 2**62 + 384)
            low = xi & 0x7FF
            return (xi - low).astype(np.float64), low.astype(np.float64)
        x = _real(self.owner, col)
        if self.log:
            bad = ~(x > 0)
            if bad.any():
                i = int(np.argmax(bad))
                msg = f"{self.owner}: expected a number > 0, got {x[i].item()!r} (row {i})"
                raise ValueError(msg)
            x = np.log(x)
        return (x, np.zeros(n))

    def _scan(self, comps: Comps) -> Comps:
        if comps[0].dtype.kind == "i":
            return np.cumsum(comps[0], axis=1), comps[1]
        return _dd_cumsum(comps[0], comps[1])

    def combine(self, a: Comps, b: Comps) -> Comps:
        if a[0].dtype.kind == "i" and b[0].dtype.kind == "i":
            with np.errstate(over="ignore"):
                s = a[0] + b[0]
            # two sums of one sign whose sum has the other: past int64, then as floats
            if not (((a[0] ^ s) & (b[0] ^ s)) < 0).any():
                hi, lo = np.broadcast_arrays(s, a[1])
                return hi, lo
        ahi, alo, bhi, blo = np.broadcast_arrays(*_dd_of(a[0], a[1]), *_dd_of(b[0], b[1]))
        out_hi = np.empty(ahi.shape)
        out_lo = np.empty(ahi.shape)
        _dd_add(ahi, alo, bhi, blo, out_hi, out_lo)
        return out_hi, out_lo

    def total(self, comps: Comps) -> Comps:
        if comps[0].dtype.kind == "i":
            return comps[0].sum(keepdims=True), np.zeros(1, dtype=np.int64)
        f = np.float64
        hi, lo = _dd_total(comps[0].astype(f, copy=False), comps[1].astype(f, copy=False))
        return np.array([hi]), np.array([lo])

    def reduce(self, cols: dict[str, np.ndarray], n: int) -> Comps:
        col = _column(self.owner, cols, self.field, n)
        if self.log or col.dtype.kind != "f":  # (ints: exact as int64 while they fit)
            return SumKernel.total(self, SumKernel.lift(self, cols, n))
        hi, lo = _dd_total1(col.astype(np.float64, copy=False))
        return np.array([hi]), np.array([lo])

    def value(self, comps: Comps) -> np.ndarray:
        hi, lo = comps[0], comps[1]
        if hi.dtype.kind == "i":
            return hi
        return np.where(np.isfinite(hi), hi + lo, hi)

    def to_lifted(self, comps: Comps, i: int, values: Any) -> Any:
        hi = comps[0][i].item()
        if comps[0].dtype.kind == "i":
            return hi
        return _dd_value((hi, comps[1][i].item()))  # as value() rounds

    def from_lifted(self, agg: Any) -> Comps:
        if isinstance(agg, int) and abs(agg) <= _INT64_MAX:
            return np.array([agg], dtype=np.int64), np.zeros(1, dtype=np.int64)
        return np.array([float(agg)]), np.zeros(1)

    def slice_monoid(self, m: Any) -> Any:
        return DD_SUM

    def to_slice(self, comps: Comps, i: int, values: Any) -> Any:
        hi = comps[0][i].item()
        if comps[0].dtype.kind == "i":
            return hi
        return (hi, comps[1][i].item())

    def from_slice(self, agg: Any) -> Comps:
        if isinstance(agg, tuple | list):
            return np.array([float(agg[0])]), np.array([float(agg[1])])
        return self.from_lifted(agg)  # an integer, or a float a window stored before pairs

    def slice_to_lifted(self, agg: Any) -> Any:
        return _dd_value(agg) if isinstance(agg, tuple | list) else agg

    def lower(self, comps: Comps, values: Any) -> pa.Array:
        return pa.array(self.value(comps))


class ExtremeKernel(Kernel):
    def __init__(self, field: str | None, largest: bool) -> None:
        self.field = field
        self.reads = (field,) if field else ()
        self.largest = largest
        self.ufunc = np.maximum if largest else np.minimum
        self.owner = "Max" if largest else "Min"

    def lift(self, cols: dict[str, np.ndarray], n: int) -> Comps:
        return (_ordered(self.owner, _column(self.owner, cols, self.field, n), keep_ints=True),)

    def _scan(self, comps: Comps) -> Comps:
        return (self.ufunc.accumulate(comps[0], axis=1),)

    def total(self, comps: Comps) -> Comps:
        return (self.ufunc.reduce(comps[0], keepdims=True),)

    def reduce(self, cols: dict[str, np.ndarray], n: int) -> Comps:
        col = _column(self.owner, cols, self.field, n)
        if col.dtype.kind not in "if":  # (unsigned: checked as it is lifted)
            return super().reduce(cols, n)
        x = col.astype(np.int64 if col.dtype.kind == "i" else np.float64, copy=False)
        return (self.ufunc.reduce(x, keepdims=True),)

    def combine(self, a: Comps, b: Comps) -> Comps:
        return (self.ufunc(a[0], b[0]),)

    def to_lifted(self, comps: Comps, i: int, values: Any) -> Any:
        return comps[0][i].item()  # an int column's extremes stay ints (timestamps)

    def from_lifted(self, agg: Any) -> Comps:
        return (np.array([agg]),)

    def lower(self, comps: Comps, values: Any) -> pa.Array:
        return pa.array(comps[0])


class MeanKernel(SumKernel):
    """(count, sum) carried; the mean is lowered as sum / count (one rounding of the
    double-double sum: at least as close as the tree's running mean)."""

    sum_comp = 1

    def __init__(self, field: str | None, owner: str = "Mean", log: bool = False) -> None:
        super().__init__(field, owner, log)
        self.counts = CountKernel()

    def lift(self, cols: dict[str, np.ndarray], n: int) -> Comps:
        return self.counts.lift(cols, n) + super().lift(cols, n)

    def _scan(self, comps: Comps) -> Comps:
        return self.counts._scan(comps[:1]) + super()._scan(comps[1:])

    def total(self, comps: Comps) -> Comps:
        return self.counts.total(comps[:1]) + super().total(comps[1:])

    def reduce(self, cols: dict[str, np.ndarray], n: int) -> Comps:
        return self.counts.reduce(cols, n) + super().reduce(cols, n)

    def combine(self, a: Comps, b: Comps) -> Comps:
        return self.counts.combine(a[:1], b[:1]) + super().combine(a[1:], b[1:])

    def _mean(self, comps: Comps) -> tuple[np.ndarray, np.ndarray]:
        n = comps[0]
        has = n > 0
        hi, lo = _dd_of(comps[1], comps[2])
        return has, _dd_div(hi, lo, np.where(has, n, 1))

    def to_lifted(self, comps: Comps, i: int, values: Any) -> Any:
        has, m = self._mean(tuple(c[i : i + 1] for c in comps))
        return (int(comps[0][i]), float(m[0]) if has[0] else 0.0)

    def from_lifted(self, agg: Any) -> Comps:
        n, m = agg
        return np.array([n], dtype=np.int64), np.array([float(m) * n]), np.zeros(1)

    def slice_monoid(self, m: Any) -> Any:
        return DD_MEAN

    def to_slice(self, comps: Comps, i: int, values: Any) -> Any:
        if comps[1].dtype.kind == "i":  # an int64 sum: the double-double it is exactly (one
            # float of it rounds 2**63 - 100 to 2**63: a window over slices was an ulp off)
            return (int(comps[0][i]), *_dd_pair(comps[1][i].item()))
        return (int(comps[0][i]), float(comps[1][i]), float(comps[2][i]))

    def from_slice(self, agg: Any) -> Comps:
        n, hi, lo = _mean_triple(agg)
        return np.array([n], dtype=np.int64), np.array([hi]), np.array([lo])

    def slice_to_lifted(self, agg: Any) -> Any:
        n, hi, lo = _mean_triple(agg)
        if n <= 0:
            return (n, 0.0)
        if not (math.isfinite(hi) and math.isfinite(lo)):
            return (n, _dd_value((hi, lo)) / n)
        return (n, float((Fraction(hi) + Fraction(lo)) / n))  # rounded once

    def lower(self, comps: Comps, values: Any) -> pa.Array:
        has, m = self._mean(comps)
        if self.log:
            m = np.exp(m)
        return pa.array(m, type=pa.float64(), mask=~has)


class VarianceKernel(Kernel):
    """Welford moments ``(n, mean, M2)``; scans as cumulative sums, combine as Chan's."""

    def __init__(self, field: str | None, ddof: int, root: bool, owner: str) -> None:
        self.field = field
        self.reads = (field,) if field else ()
        self.ddof = ddof
        self.root = root
        self.owner = owner

    def lift(self, cols: dict[str, np.ndarray], n: int) -> Comps:
        x = _real(self.owner, _column(self.owner, cols, self.field, n))
        return np.ones(n), x, np.zeros(n)

    def _scan(self, comps: Comps) -> Comps:
        # Chan's combine applied left to right, every step's terms known in advance: the
        # running count and mean (a double-double sum), then M2 as a sum of increments
        n0, m0, q0 = comps
        n = np.cumsum(n0, axis=1)
        hi, lo = _dd_cumsum(n0 * m0, np.zeros_like(m0))
        mean = (hi + lo) / np.where(n > 0, n, 1)
        prev_mean = np.empty_like(mean)
        prev_mean[:, 0] = m0[:, 0]
        prev_mean[:, 1:] = mean[:, :-1]
        prev_n = n - n0
        d = m0 - prev_mean
        inc = q0 + d * d * prev_n * n0 / np.where(n > 0, n, 1)
        return n, mean, np.cumsum(inc, axis=1)

    def combine(self, a: Comps, b: Comps) -> Comps:
        na, ma, qa = a
        nb, mb, qb = b
        n = na + nb
        delta = mb - ma
        safe = np.where(n > 0, n, 1)
        mean = ma + delta * nb / safe
        q = qa + qb + delta * delta * na * nb / safe
        mean = np.where(nb == 0, ma, np.where(na == 0, mb, mean))
        q = np.where(nb == 0, qa, np.where(na == 0, qb, q))
        return n, mean, q

    def to_lifted(self, comps: Comps, i: int, values: Any) -> Any:
        return (int(comps[0][i]), float(comps[1][i]), float(comps[2][i]))

    def from_lifted(self, agg: Any) -> Comps:
        n, m, q = agg
        return np.array([float(n)]), np.array([float(m)]), np.array([float(q)])

    def lower(self, comps: Comps, values: Any) -> pa.Array:
        n = comps[0] - self.ddof
        has = n > 0
        v = comps[2] / np.where(has, n, 1)
        if self.root:
            v = np.sqrt(np.maximum(v, 0.0))
        return pa.array(v, type=pa.float64(), mask=~has)


class _Positional(Kernel):
    """First/Last: the position of the row it holds (-1: none), its value read at lowering."""

    commutative = False
    pos_comp = 0

    def __init__(self, field: str | None, newest: bool) -> None:
        self.field = field
        self.reads = (field,) if field else ()
        self.newest = newest
        self.owner = "Last" if newest else "First"

    def lift(self, cols: dict[str, np.ndarray], n: int) -> Comps:
        _column(self.owner, cols, self.field, n)
        return (np.arange(n, dtype=np.int64),)  # rebased by the caller

    def scan(self, comps: Comps, reverse: bool) -> Comps:
        p = comps[0]
        if self.newest != reverse:  # Last forward, First backward: the row itself
            return (p,)
        edge = p[:, -1:] if reverse else p[:, :1]
        return (np.broadcast_to(edge, p.shape).copy(),)

    def combine(self, a: Comps, b: Comps) -> Comps:
        pa_, pb = a[0], b[0]
        if self.newest:
            return (np.where(pb != -1, pb, pa_),)
        return (np.where(pa_ != -1, pa_, pb),)

    def to_lifted(self, comps: Comps, i: int, values: Any) -> Any:
        p = int(comps[0][i])
        return NOTHING if p == -1 else values.one(self.field, p, arg=self)

    def from_lifted(self, agg: Any) -> Comps:
        return (np.array([-1 if agg is NOTHING else FOREIGN], dtype=np.int64),)

    def lower(self, comps: Comps, values: Any) -> pa.Array:
        return values.gather(self.field, comps[0], self)


class ArgKernel(Kernel):
    """ArgMax/ArgMin: ``(value, position of its row)``, both of the same row; ties go to the
    newest row (the value is read at the position chosen, so a tie of 0.0 and -0.0 reports the
    row's own zero). Integer values stay integers."""

    commutative = False
    pos_comp = 1

    def __init__(self, value: str | None, key: str | None, largest: bool) -> None:
        self.field = value
        self.key = key
        self.reads = tuple(f for f in (value, key) if f)
        self.largest = largest
        self.ufunc = np.maximum if largest else np.minimum
        self.owner = "ArgMax" if largest else "ArgMin"

    def lift(self, cols: dict[str, np.ndarray], n: int) -> Comps:
        x = _ordered(self.owner, _column(self.owner, cols, self.field, n), keep_ints=True)
        _column(self.owner, cols, self.key, n)
        return x, np.arange(n, dtype=np.int64)

    def _beats(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """``a`` strictly more extreme than ``b``."""
        return a > b if self.largest else a < b

    def scan(self, comps: Comps, reverse: bool) -> Comps:
        v, p = _rev(comps) if reverse else comps
        run = self.ufunc.accumulate(v, axis=1)
        w = v.shape[1]
        if not reverse:  # the newest row holding the running extreme
            at = np.where(v == run, np.arange(w), -1)
        else:  # newest first: the first row to reach the running extreme holds it
            new = np.ones(v.shape, dtype=bool)
            new[:, 1:] = self._beats(v[:, 1:], run[:, :-1])
            at = np.where(new, np.arange(w), 0)
        j = np.maximum.accumulate(at, axis=1)
        out = np.take_along_axis(v, j, axis=1), np.take_along_axis(p, j, axis=1)
        return _rev(out) if reverse else out

    def combine(self, a: Comps, b: Comps) -> Comps:
        newer = ~self._beats(a[0], b[0]) & (b[1] != -1) | (a[1] == -1)
        return np.where(newer, b[0], a[0]), np.where(newer, b[1], a[1])

    def identity(self, n: int) -> Comps:
        return np.full(n, -math.inf if self.largest else math.inf), np.full(n, -1, dtype=np.int64)

    def to_lifted(self, comps: Comps, i: int, values: Any) -> Any:
        p = int(comps[1][i])
        if p == -1:
            return (-math.inf if self.largest else math.inf, None)
        return (comps[0][i].item(), values.one(self.key, p, arg=self))

    def from_lifted(self, agg: Any) -> Comps:
        v, k = agg
        if k is None and v in (math.inf, -math.inf):
            return self.identity(1)
        return np.array([v]), np.array([FOREIGN], dtype=np.int64)

    def lower(self, comps: Comps, values: Any) -> pa.Array:
        v, p = comps
        has = p != -1
        keys = values.gather(self.key, p, self)
        return pa.StructArray.from_arrays(
            [pa.array(v), keys], ["value", "key"], mask=pa.array(~has)
        )


class MaxCountKernel(Kernel):
    """(max, how many rows hold it)."""

    def __init__(self, field: str | None) -> None:
        self.field = field
        self.reads = (field,) if field else ()

    def lift(self, cols: dict[str, np.ndarray], n: int) -> Comps:
        col = _column("MaxCount", cols, self.field, n)
        return _ordered("MaxCount", col, keep_ints=True), np.ones(n, np.int64)

    def _scan(self, comps: Comps) -> Comps:
        v, c = comps
        run = np.maximum.accumulate(v, axis=1)
        eq = np.where(v == run, c, 0)
        cs = np.cumsum(eq, axis=1)
        starts = np.ones(v.shape, dtype=bool)  # a new maximum: its count starts here
        starts[:, 1:] = run[:, 1:] != run[:, :-1]
        base = np.where(starts, cs - eq, 0)
        # the count before the current run: carried forward from the run's start
        idx = np.maximum.accumulate(np.where(starts, np.arange(v.shape[1]), 0), axis=1)
        return run, cs - np.take_along_axis(base, idx, axis=1)

    def combine(self, a: Comps, b: Comps) -> Comps:
        va, ca = a
        vb, cb = b
        v = np.maximum(va, vb)
        c = np.where(va == v, ca, 0) + np.where(vb == v, cb, 0)
        return v, c

    def to_lifted(self, comps: Comps, i: int, values: Any) -> Any:
        return (comps[0][i].item(), int(comps[1][i]))

    def from_lifted(self, agg: Any) -> Comps:
        return np.array([agg[0]]), np.array([int(agg[1])], dtype=np.int64)

    def lower(self, comps: Comps, values: Any) -> pa.Array:
        v, c = comps
        return pa.StructArray.from_arrays(
            [pa.array(v), pa.array(c, type=pa.int64())],
            ["max", "count"],
            mask=pa.array(c == 0),
        )


def _dd_div(hi: np.ndarray, lo: np.ndarray, n: np.ndarray) -> np.ndarray:
    """``(hi + lo) / n`` of double-doubles by counts, rounded once (but within a hair of a
    halfway case), not ``fl(fl(hi + lo) / n)`` (157 of 2,000 means of three were an ulp off
    that way): the pair normalized (TwoSum: a scan's ``lo`` may be as large as ``hi``,
    the two cancelling: -1/6 came back -0.16666666666662877), the quotient ``q``, the
    remainder ``hi - q n`` exactly (TwoProduct by Veltkamp splitting; Sterbenz makes
    ``hi - p`` exact) plus ``lo``, then ``q + r / n``. Where the terms are not finite or too
    large to split, ``fl(fl(hi + lo) / n)``."""
    nf = n.astype(np.float64)
    with np.errstate(all="ignore"):
        whole = np.where(np.isfinite(hi), hi + lo, hi) / nf
        t = hi + lo
        bp = t - hi
        hi, lo = t, (hi - (t - bp)) + (lo - bp)
        q = hi / nf
        p, e = _two_prod(q, nf)
        r = ((hi - p) - e + lo) / nf
        out = q + r
    ok = np.isfinite(out) & np.isfinite(lo) & (np.abs(q) < 2.0**995)
    return np.where(ok, out, whole)


def _two_prod(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``a * b`` rounded and its exact error (Dekker's TwoProduct, Veltkamp's splitting;
    for |a|, |b| below 2^995)."""
    p = a * b
    a_hi, a_lo = _split(a)
    b_hi, b_lo = _split(b)
    return p, ((a_hi * b_hi - p) + a_hi * b_lo + a_lo * b_hi) + a_lo * b_lo


def _split(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    t = 134217729.0 * a  # 2^27 + 1
    hi = t - (t - a)
    return hi, a - hi


def _dd_value(pair: Any) -> float:
    """A double-double pair rounded to one float (as :meth:`SumKernel.value`)."""
    hi, lo = float(pair[0]), float(pair[1])
    return hi + lo if math.isfinite(hi) else hi


def _dd_pair(x: Any) -> tuple[float, float]:
    """A slice sum (an int, a float, or a pair) as a double-double pair (an int exactly,
    below 2^106)."""
    if isinstance(x, tuple | list):
        return float(x[0]), float(x[1])
    if isinstance(x, int):
        hi = float(x)
        return hi, float(x - int(hi)) if math.isfinite(hi) else 0.0
    return float(x), 0.0


def _dd_plus(a: Any, b: Any) -> tuple[float, float]:
    """``a + b`` of double-double pairs: TwoSum of the high parts, the low parts and its
    error added (as the kernels' element-wise sum)."""
    ah, al = _dd_pair(a)
    bh, bl = _dd_pair(b)
    t = ah + bh
    bp = t - ah
    err = (ah - (t - bp)) + (bh - bp)
    if not math.isfinite(err):
        err = 0.0
    return t, al + bl + err


def _mean_triple(agg: Any) -> tuple[int, float, float]:
    """A slice's mean as (count, double-double sum); a window stored before pairs kept
    (count, mean)."""
    if len(agg) == 2:
        n, m = agg
        return int(n), float(m) * int(n), 0.0
    n, hi, lo = agg
    return int(n), float(hi), float(lo)


class _DDSum:
    """Slice sums in the window's tree: integers exactly, floats as double-double pairs."""

    identity: Any = 0
    commutative = True

    def lift(self, x: Any) -> Any:  # pragma: no cover - the tree takes lifted slices
        return x

    def combine(self, a: Any, b: Any) -> Any:
        if type(a) is int and type(b) is int:
            return a + b
        return _dd_plus(a, b)

    def lower(self, a: Any) -> Any:  # pragma: no cover - the window lowers
        return a


class _DDMean:
    """Slice means in the window's tree: (count, double-double sum)."""

    identity: Any = (0, 0.0, 0.0)
    commutative = True

    def lift(self, x: Any) -> Any:  # pragma: no cover - the tree takes lifted slices
        return x

    def combine(self, a: Any, b: Any) -> Any:
        na, ha, la = _mean_triple(a)
        nb, hb, lb = _mean_triple(b)
        return (na + nb, *_dd_plus((ha, la), (hb, lb)))

    def lower(self, a: Any) -> Any:  # pragma: no cover - the window lowers
        return a


DD_SUM = _DDSum()
DD_MEAN = _DDMean()


def kernel_for(m: Any) -> Kernel | None:
    """The kernel of built-in monoid ``m``, or None when it has none (the general path)."""
    t = type(m)
    if t is Count:
        return CountKernel()
    if t is Sum:
        return SumKernel(m.field)
    if t is Max or t is Min:
        return ExtremeKernel(m.field, t is Max)
    if t is Mean:
        return MeanKernel(m.field)
    if t is GeometricMean:
        return MeanKernel(m.field, "GeometricMean", log=True)
    if t is Variance or t is StdDev:
        return VarianceKernel(m.field, m.ddof, t is StdDev, t.__name__)
    if t is First or t is Last:
        return _Positional(m.field, t is Last)
    if t is ArgMax or t is ArgMin:
        if m.value_field is None:
            return None
        return ArgKernel(m.value_field, m.key_field, t is ArgMax)
    if t is MaxCount:
        return MaxCountKernel(m.field)
    return None
