"""Two-Stacks over a batch's ranges (server/engine/columnar/slide.py) against the naive
answer: every range's max, min, max-count, int64 sum (or its overflow reported) and
double-double sum recomputed from its rows, for random rows (ints and floats, ties, inf and
NaN in sums) and random non-decreasing starts, some past their row (an empty range keeps
what its slot held)."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from mtawindows.server.engine.columnar.slide import (
    DD_SUM,
    INT_SUM,
    MAX,
    MAX_COUNT,
    MIN,
    slide_extreme,
    slide_pairs,
)


@st.composite
def ranges(draw: st.DrawFn, floats: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows ``v`` and, for its last ``n``, starts that never decrease (some empty ranges)."""
    nv = draw(st.integers(1, 60))
    n = draw(st.integers(1, nv))
    if floats:
        item = st.floats(allow_nan=True, allow_infinity=True, width=64) | st.sampled_from(
            [0.0, -0.0, 1.0, 1e16, -1e16, 0.1]
        )
    else:
        item = st.integers(-(2**63), 2**63 - 1) | st.sampled_from([0, 1, -1])
    v = np.array(
        draw(st.lists(item, min_size=nv, max_size=nv)), dtype=np.float64 if floats else np.int64
    )
    ends = np.arange(nv - n, nv)
    raw = sorted(draw(st.lists(st.integers(0, nv + 2), min_size=n, max_size=n)))
    return v, np.array(raw, dtype=np.int64), ends


def _empty_kept(out: np.ndarray, starts: np.ndarray, ends: np.ndarray, fill: object) -> None:
    assert all(
        (o == fill) or (isinstance(fill, float) and math.isnan(fill) and math.isnan(o))
        for o, s, e in zip(out, starts, ends, strict=True)
        if s > e
    )


@settings(max_examples=400, deadline=None)
@given(st.booleans(), st.data())
def test_extremes_are_each_ranges_max_and_min(floats: bool, data: st.DataObject) -> None:
    v, starts, ends = data.draw(ranges(floats))
    if floats:
        v = np.where(np.isnan(v), 0.5, v)  # ordered values: a max or min refuses NaN
    for largest in (True, False):
        fill = v.dtype.type(7)
        out = np.full(len(starts), fill)
        lo = np.zeros(len(starts), np.int64)
        slide_pairs(v, np.zeros(len(v), np.int64), starts, MAX if largest else MIN, out, lo)
        for o, s, e in zip(out, starts, ends, strict=True):
            if s <= e:
                want = v[s : e + 1].max() if largest else v[s : e + 1].min()
                assert o == want, (s, e)
        _empty_kept(out, starts, ends, fill)


@settings(max_examples=400, deadline=None)
@given(st.booleans(), st.data())
def test_the_one_array_extremes_are_the_general_loops(floats: bool, data: st.DataObject) -> None:
    """slide_extreme (Max and Min over one array, what the window runs) gives what the
    general loop's MAX and MIN give, to the bit: ties keep the older value (0.0 and -0.0
    among the drawn values), NaN as it comes, empty ranges untouched."""
    v, starts, _ends = data.draw(ranges(floats))
    for largest, op in ((True, MAX), (False, MIN)):
        fill = v.dtype.type(7)
        want = np.full(len(starts), fill)
        slide_pairs(
            v, np.zeros(len(v), np.int64), starts, op, want, np.zeros(len(starts), np.int64)
        )
        got = np.full(len(starts), fill)
        slide_extreme(v, starts, largest, got)
        assert got.tobytes() == want.tobytes(), (largest, v, starts, got, want)


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_sums_are_each_ranges_sum_to_a_double_double(data: st.DataObject) -> None:
    v, starts, ends = data.draw(ranges(True))
    lo = np.zeros(len(v))
    out_hi = np.full(len(starts), 7.0)
    out_lo = np.zeros(len(starts))
    with np.errstate(all="ignore"):
        slide_pairs(v, lo, starts, DD_SUM, out_hi, out_lo)
    for h, low, s, e in zip(out_hi, out_lo, starts, ends, strict=True):
        if s > e:
            assert h == 7.0
            continue
        rows = v[s : e + 1]
        if np.isnan(rows).any() or (np.isinf(rows).any() and len(set(rows[np.isinf(rows)])) > 1):
            assert math.isnan(h), (s, e, rows)
            continue
        if np.isinf(rows).any():
            assert h == rows[np.isinf(rows)][0]
            continue
        if max(abs(rows)) > 1e300:
            continue  # an overflow on the way: no finite answer to compare
        exact = math.fsum(rows)
        got = h + low if math.isfinite(h + low) else h
        assert abs(got - exact) <= 1e-15 * max(abs(rows).sum(), 1e-300), (got, exact)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_max_counts_are_each_ranges_max_and_its_rows(data: st.DataObject) -> None:
    v, starts, ends = data.draw(ranges(data.draw(st.booleans())))
    v = np.where(np.isnan(v), 0.5, v) if v.dtype.kind == "f" else v % 5  # ties, often
    counts = np.array(data.draw(st.lists(st.integers(1, 3), min_size=len(v), max_size=len(v))))
    out_v = np.full(len(starts), v.dtype.type(7))
    out_c = np.full(len(starts), -1, dtype=np.int64)
    slide_pairs(v, counts, starts, MAX_COUNT, out_v, out_c)
    for ov, oc, s, e in zip(out_v, out_c, starts, ends, strict=True):
        if s > e:
            assert oc == -1
            continue
        top = v[s : e + 1].max()
        assert ov == top and oc == counts[s : e + 1][v[s : e + 1] == top].sum(), (s, e)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_int_sums_are_exact_or_report_their_overflow(data: st.DataObject) -> None:
    v, starts, ends = data.draw(ranges(False))
    if data.draw(st.booleans()):
        v = v // (1 << data.draw(st.integers(0, 62)))  # smaller: sums that fit, mostly
    out = np.full(len(starts), 7, dtype=np.int64)
    over = np.zeros(len(starts), np.int64)
    slide_pairs(v, np.zeros(len(v), np.int64), starts, INT_SUM, out, over)
    ok = not over.any()
    # it may report an overflow of a partial sum no range needs: never a wrong exact answer
    exact = [sum(int(x) for x in v[s : e + 1]) for s, e in zip(starts, ends, strict=True)]
    fits = all(-(2**63) <= x < 2**63 for x in exact)
    partial = [sum(int(x) for x in v[j:e]) for e in range(len(v) + 1) for j in range(e)]
    if all(-(2**63) <= x < 2**63 for x in partial):
        assert ok  # no partial sum overflowed
    if ok:
        assert fits
        for o, want, s, e in zip(out, exact, starts, ends, strict=True):
            if s <= e:
                assert o == want, (s, e)
            else:
                assert o == 7


def test_small_values_between_cancelling_large_ones_are_kept() -> None:
    """Found from outside: a count-7 window over [-a, a, 0.587, a, a, -a, -a] (a = 1.1e167)
    summed to 0.0 at its last row. The partial sums pass 3a, whose rounding error (~1e151)
    swallowed 0.587 in the low part; the low parts' own errors are kept now."""
    a = 1.1051511801364368e167
    v = np.array([-a, a, 0.5870199344191114, a, a, -a, -a])
    starts = np.zeros(len(v), dtype=np.int64)
    hi, lo = np.zeros(len(v)), np.zeros(len(v))
    slide_pairs(v, np.zeros(len(v)), starts, DD_SUM, hi, lo)
    for e in range(len(v)):
        assert hi[e] + lo[e] == math.fsum(v[: e + 1]), e


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_sums_cancelling_large_values_are_fsums(data: st.DataObject) -> None:
    """Large values of one magnitude, each cancelled by its negative somewhere, among small
    ones (the way an outside tester's "cancel" rows came): every range's sum within a few
    ulps of ``math.fsum``'s, or of the small values' magnitudes (added among the large ones'
    rounding errors, they are summed as doubles: 375.5 - 347.5 + ... keeps a double's
    precision of 375.5, not of the 28.02 it comes to), whatever the order."""
    big = data.draw(st.floats(1e20, 1e300))
    n = data.draw(st.integers(1, 60))
    small = st.floats(-1e3, 1e3, allow_nan=False)
    v = np.array(data.draw(st.lists(st.sampled_from([big, -big]) | small, min_size=n, max_size=n)))
    raw = sorted(data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=n)))
    k = len(raw)
    starts = np.minimum(np.array(raw, dtype=np.int64), np.arange(n - k, n))
    hi, lo = np.zeros(k), np.zeros(k)
    slide_pairs(v, np.zeros(n), starts, DD_SUM, hi, lo)
    for i, s in enumerate(starts):
        rows = v[s : n - k + i + 1]
        exact = math.fsum(rows)
        if abs(exact) > 1e290:
            continue  # (2 x 1e300 may overflow on the way)
        smalls = math.fsum(abs(x) for x in rows if abs(x) != big)
        bound = 4 * math.ulp(exact) + 8 * math.ulp(smalls) + 1e-300
        assert abs((hi[i] + lo[i]) - exact) <= bound, (rows, exact)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.integers(-(2**63), 2**63 - 1)
        | st.integers(2**62 - 2000, 2**62 + 2000)
        | st.integers(-(2**62) - 2000, -(2**62) + 2000),
        min_size=1,
        max_size=40,
    ),
    st.integers(1, 8),
)
@example([-(2**63), 2**62 + 383, 2**62 + 910], 3)
def test_means_of_int64s_past_int64_are_exactly_rounded(xs: list[int], size: int) -> None:
    """Found from outside: the mean of [-2**63, 2**62 + 383, 2**62 + 910] came back 341.33
    (each integer rounded to a double first, where the sums pass int64): an integer is now
    the double-double it is exactly, and a window's mean is the exact one, rounded."""
    from fractions import Fraction

    from mtawindows.server.engine import CountPolicy, Mean, Record
    from mtawindows.server.engine.columnar import ColumnarWindow
    from mtawindows.server.engine.monoids import Count

    w = ColumnarWindow(Record(m=Mean("x"), n=Count()), CountPolicy(size, field="n"))
    got = w.apply({"x": np.array(xs, dtype=np.int64)}, per_row=True).rows.column("m").to_pylist()
    for i, g in enumerate(got):
        rows = xs[max(0, i - size + 1) : i + 1]
        want = float(Fraction(sum(rows), len(rows)))
        assert g == want, (rows, g, want)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        # (within a few dozen orders of magnitude: a double-double sum keeps 106 bits, so a
        # value far below the others can only tip a halfway rounding it does not hold)
        st.floats(-1e6, 1e6).filter(lambda x: x == 0 or abs(x) > 1e-12)
        | st.sampled_from([0.1, -0.3, 1e-9, 7.0]),
        min_size=1,
        max_size=40,
    ),
    st.integers(1, 8),
)
@example([-973.7716208221956, -566.5403990723037, -441.0352679777793], 3)
def test_means_are_exactly_rounded(xs: list[float], size: int) -> None:
    """A mean is the exact mean of its rows, rounded once: per row, and as the window's
    result (found from outside: the mean of the three values above came back
    -660.4490959574263, the sum rounded and then divided; exactly rounded ...262)."""
    from fractions import Fraction

    from mtawindows.server.engine import CountPolicy, Mean, Record
    from mtawindows.server.engine.columnar import ColumnarWindow
    from mtawindows.server.engine.monoids import Count

    w = ColumnarWindow(Record(m=Mean("x"), n=Count()), CountPolicy(size, field="n"))
    got = w.apply({"x": np.array(xs)}, per_row=True).rows.column("m").to_pylist()
    want = []
    for i in range(len(xs)):
        rows = xs[max(0, i - size + 1) : i + 1]
        want.append(float(sum(map(Fraction, rows)) / len(rows)))
    assert got == want
    assert w.query()["m"] == want[-1]


def test_a_range_holding_an_infinity_sums_to_it() -> None:
    """A range's sum is its values' in order whatever order Two-Stacks adds them in: a flip
    adds from the newest back, so ``-7e292 - DBL_MAX`` overflowed to -inf first, and -inf
    + inf gave NaN where the rows' sum in order is inf (found by the hypothesis test
    above). NaN with a NaN or infinities of both signs; a range without either keeps its
    finite sum."""
    big = np.finfo(np.float64).max
    v = np.array([np.inf, -7e292, -big, 1.0, 2.0, -np.inf, np.nan, 3.0])
    starts = np.array([0, 0, 3, 4, 5, 7], dtype=np.int64)  # the last 6 rows' ranges
    out_hi, out_lo = np.zeros(6), np.zeros(6)
    with np.errstate(all="ignore"):
        slide_pairs(v, np.zeros(len(v)), starts, DD_SUM, out_hi, out_lo)
    got = out_hi.tolist()
    assert got[0] == np.inf  # inf, -7e292, -DBL_MAX
    assert got[1] == np.inf  # ... and 1.0
    assert got[2] == 3.0  # 1.0, 2.0
    assert got[3] == -np.inf  # 2.0, -inf
    assert math.isnan(got[4])  # -inf, NaN
    assert got[5] == 3.0  # 3.0 alone
    assert out_lo[[0, 1, 3, 4]].tolist() == [0.0] * 4


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.sampled_from([1e308, -1e308, 1.7976931348623157e308, -1.7976931348623157e308])
        | st.floats(-1e308, 1e308, allow_nan=False),
        min_size=1,
        max_size=30,
    ),
    st.data(),
)
@example([-1e308, 1.7976931348623157e308, 7e292], None)
def test_sums_of_huge_finite_values_do_not_overflow_on_the_way(
    v: list[float], data: st.DataObject | None
) -> None:
    """A range of finite values whose exact sum is a double sums to it (exactly rounded, or
    within an ulp of the values' magnitudes) though Two-Stacks adds in its own order:
    ``[-1e308, DBL_MAX, 7e292]`` added from the newest back passed DBL_MAX (an outside
    tester: inf where the sum is 7.98e307); one whose sum passes DBL_MAX is +-inf."""
    from fractions import Fraction

    n = len(v)
    if data is None:
        starts = np.zeros(n, dtype=np.int64)
    else:
        raw = data.draw(st.lists(st.integers(0, n - 1), min_size=n, max_size=n))
        starts = np.minimum(np.maximum.accumulate(np.array(raw, dtype=np.int64)), np.arange(n))
    out_hi, out_lo = np.zeros(n), np.zeros(n)
    with np.errstate(all="ignore"):
        slide_pairs(np.array(v), np.zeros(n), starts, DD_SUM, out_hi, out_lo)
    big = np.finfo(np.float64).max
    for i in range(n):
        rows = v[int(starts[i]) : i + 1]
        exact = sum(map(Fraction, rows))
        got = out_hi[i] + out_lo[i] if math.isfinite(out_hi[i]) else out_hi[i]
        if abs(exact) > Fraction(big) + Fraction(2**970):  # past DBL_MAX and half an ulp
            assert got == (math.inf if exact > 0 else -math.inf), (rows, got)
            continue
        want = float(exact) if abs(exact) <= Fraction(big) else math.copysign(big, exact)
        scale = max(abs(x) for x in rows)  # (the rounding, and what a double-double keeps)
        bound = Fraction(math.ulp(want)) + Fraction(scale) * Fraction(2**-52)
        assert abs(Fraction(got) - exact) <= bound, (rows, got, want)
