"""Built-in monoids: the laws over every monoid in the catalog, their results against direct
computations, and clear refusals of bad input."""

from __future__ import annotations

import math
import statistics
from fractions import Fraction
from typing import Any

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given

from mtawindows.server.engine import monoids as M
from mtawindows.server.engine.laws import LawViolation, approx_equal, assert_monoid_laws, check_laws

REALS = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False) | st.integers(-1000, 1000)
POSITIVE = st.floats(min_value=1e-3, max_value=1e6) | st.integers(1, 1000)

# samples per catalog entry: every built-in must appear here (test_catalog_is_covered)
SAMPLES: dict[str, tuple[Any, st.SearchStrategy[Any]]] = {
    "Count": (M.Count(), st.integers()),
    "Sum": (M.Sum(), st.integers(-(10**6), 10**6)),
    "Min": (M.Min(), REALS),
    "Max": (M.Max(), REALS),
    "Mean": (M.Mean(), REALS),
    "Variance": (M.Variance(), REALS),
    "StdDev": (M.StdDev(ddof=1), REALS),
    "GeometricMean": (M.GeometricMean(), POSITIVE),
    "ArgMax": (M.ArgMax(), st.tuples(st.integers(-5, 5), st.integers())),
    "ArgMin": (M.ArgMin(), st.tuples(st.integers(-5, 5), st.integers())),
    "First": (M.First(), st.integers()),
    "Last": (M.Last(), st.integers()),
    "MaxCount": (M.MaxCount(), st.integers(-3, 3)),
    "Concat": (M.Concat(), st.integers()),
}


def test_catalog_is_covered() -> None:
    assert set(M.catalog()) == set(SAMPLES)


@pytest.mark.parametrize("name", sorted(SAMPLES))
@given(data=st.data())
def test_builtin_monoid_laws(name: str, data: st.DataObject) -> None:
    monoid, strategy = SAMPLES[name]
    items = data.draw(st.lists(strategy, min_size=1, max_size=6), label="items")
    report = check_laws(monoid, items, max_triples=400)
    assert report.ok, report.explain()


@given(
    rows=st.lists(
        st.fixed_dictionaries({"v": REALS, "t": st.integers(0, 100)}), min_size=1, max_size=5
    )
)
def test_record_laws_and_field_by_field(rows: list[dict[str, Any]]) -> None:
    rec = M.Record(n=M.Count(), s=M.Sum("v"), hi=M.Max("v"), last=M.Last("t"), cat=M.Concat("t"))
    assert_monoid_laws(rec, rows, max_triples=300)
    agg = rec.combine_all(rec.lift(r) for r in rows)
    out = rec.lower(agg)
    assert out["n"] == len(rows)
    assert approx_equal(out["s"], sum(r["v"] for r in rows))
    assert out["hi"] == max(r["v"] for r in rows)
    assert out["last"] == rows[-1]["t"]
    assert out["cat"] == [r["t"] for r in rows]


@given(xs=st.lists(st.floats(min_value=-1e9, max_value=1e9), min_size=2, max_size=40))
def test_moments_match_statistics_module(xs: list[float]) -> None:
    var = M.Variance(ddof=1)
    agg = var.identity
    for x in xs:  # any split order must give the same moments
        agg = var.combine(agg, var.lift(x))
    assert math.isclose(
        M.Mean().lower(M.Mean().combine_all(M.Mean().lift(x) for x in xs)),
        statistics.fmean(xs),
        rel_tol=1e-9,
        abs_tol=1e-6,
    )
    assert math.isclose(var.lower(agg), statistics.variance(xs), rel_tol=1e-7, abs_tol=1e-3)
    sd = M.StdDev()
    assert math.isclose(sd.lower(agg), statistics.pstdev(xs), rel_tol=1e-7, abs_tol=1e-3)


def test_variance_is_numerically_stable_at_large_offsets() -> None:
    """Naive sum-of-squares fails here; mergeable moments do not."""
    xs = [1e9 + v for v in (4.0, 7.0, 13.0, 16.0)] * 250
    var = M.Variance()
    halves = [var.combine_all(var.lift(x) for x in xs[i::2]) for i in (0, 1)]
    assert math.isclose(var.lower(var.combine(*halves)), statistics.pvariance(xs), rel_tol=1e-9)


def test_geometric_mean_and_empty_results() -> None:
    g = M.GeometricMean()
    assert math.isclose(g.lower(g.combine_all(g.lift(x) for x in (1, 10, 100))), 10.0)
    assert g.lower(g.identity) is None
    assert M.Mean().lower(M.Mean().identity) is None
    assert M.StdDev(ddof=1).lower(M.StdDev(ddof=1).lift(3.0)) is None
    assert M.First().lower(M.First().identity) is None
    assert M.ArgMax().lower(M.ArgMax().identity) is None
    assert M.MaxCount().lower(M.MaxCount().identity) is None


def test_argmax_ties_go_to_the_newest_so_it_is_not_commutative() -> None:
    am = M.ArgMax("v", "ts")
    a, b = am.lift({"v": 3, "ts": 1}), am.lift({"v": 3, "ts": 2})
    assert am.lower(am.combine(a, b)) == M.ArgResult(3, 2)
    assert am.lower(am.combine(b, a)) == M.ArgResult(3, 1)
    assert am.commutative is False
    assert M.ArgMin().lower(M.ArgMin().combine((1, "x"), (1, "y"))).key == "y"


def test_max_count_counts_ties() -> None:
    mc = M.MaxCount()
    assert mc.combine_all(mc.lift(x) for x in (1, 3, 2, 3, 3)) == (3, 3)


@pytest.mark.parametrize(
    ("monoid", "item", "error", "words"),
    [
        (M.Sum(), "12", TypeError, "Sum: expected a real number"),
        (M.Sum(), None, TypeError, "got NoneType"),
        (M.Max(), float("nan"), ValueError, "NaN cannot be ordered"),
        (M.Min(), float("nan"), ValueError, "NaN"),
        (M.GeometricMean(), 0, ValueError, "expected a number > 0, got 0"),
        (M.Sum("v"), {"w": 1}, TypeError, "expected a row with field 'v'"),
        (M.ArgMax(), 5, TypeError, "expected a (value, key) pair"),
        (M.Mean(), "x", TypeError, "Mean: expected a real number"),
    ],
)
def test_bad_items_are_refused_with_a_clear_error(
    monoid: Any, item: Any, error: type, words: str
) -> None:
    with pytest.raises(error, match=words.replace("(", r"\(").replace(")", r"\)")):
        monoid.lift(item)


def test_constructor_errors_name_the_problem() -> None:
    with pytest.raises(ValueError, match="ddof must be 0 or 1, got 2"):
        M.Variance(ddof=2)
    with pytest.raises(ValueError, match="give both value= and key="):
        M.ArgMax(value="v")
    with pytest.raises(ValueError, match="at least one field"):
        M.Record()
    with pytest.raises(TypeError, match="field 'x' must be a monoid"):
        M.Record(x=42)  # type: ignore[arg-type]
    with pytest.raises(KeyError, match="no field 'nope'"):
        M.Record(a=M.Count()).index("nope")


def test_lifted_zero_is_an_item_not_an_empty_slot() -> None:
    """A lifted value equal to the identity (a sum of zeros) still counts as an item."""
    s = M.Sum()
    assert s.lift(0) == s.identity


class BrokenAssociativity(M.MonoidBase):
    identity = 0

    def combine(self, older: Any, newer: Any) -> Any:
        return older - newer  # not associative, and 0 is only a right identity


def test_law_checker_labels_violations() -> None:
    report = check_laws(BrokenAssociativity(), [1, 2, 3])
    assert not report.ok
    laws = {v.law for v in report.violations}
    assert {"left identity", "associativity"} <= laws
    assert "right identity" not in laws
    assert all(isinstance(v, LawViolation) for v in report.violations)
    assert "associativity fails for" in report.explain()
    with pytest.raises(AssertionError, match="law violation"):
        assert_monoid_laws(BrokenAssociativity(), [1, 2])


class FalselyCommutative(M.Concat):
    commutative = True


def test_declared_commutativity_is_checked() -> None:
    report = check_laws(FalselyCommutative(), [1, 2])
    assert [v.law for v in report.violations] and all(
        v.law == "commutativity" for v in report.violations
    )


# ------------------------------------------------------------------ the INT64 mean
INT64 = st.one_of(
    st.integers(-(2**63), 2**63 - 1),
    st.integers(2**62 - 1000, 2**62 + 1000),  # near +-2^62: their sums pass int64
    st.integers(-(2**62) - 1000, -(2**62) + 1000),
    st.sampled_from([2**53 + 1, -(2**53) - 1, 2**53 + 3, -(2**63), 2**63 - 1]),
    st.integers(-3, 3),  # ties, cancellation
)


@given(xs=st.lists(INT64, min_size=1, max_size=6))
def test_an_int64_mean_is_exact_and_its_laws_hold_to_the_bit(xs: list[int]) -> None:
    """``Mean(integers=True)`` keeps ``(count, sum)`` of Python integers: identity and
    associativity hold exactly (no tolerance), and the mean is the exact one rounded once
    (the float form rounds each value above 2^53 before it adds it)."""
    m = M.Mean(integers=True)
    report = check_laws(m, xs, eq=_to_the_bit, max_triples=400)
    assert report.ok, report.explain()
    for split in range(len(xs) + 1):  # any grouping of the items: one exact answer
        agg = m.combine(
            m.combine_all(map(m.lift, xs[:split])), m.combine_all(map(m.lift, xs[split:]))
        )
        assert agg == (len(xs), sum(xs))
        assert m.lower(agg) == float(Fraction(sum(xs), len(xs)))


def _to_the_bit(a: Any, b: Any) -> bool:
    return bool(a == b) and type(a[1]) is type(b[1])


def test_an_int64_mean_of_an_outside_testers_rows() -> None:
    """-2**63, 2**62 + 383, 2**62 + 910: 431 exactly (the float form gave 512)."""
    rows = [-(2**63), 2**62 + 383, 2**62 + 910]
    m = M.Mean("v", integers=True)
    assert m.lower(m.combine_all(m.lift({"v": v}) for v in rows)) == 431.0
    rec = M.Record(mean=M.Mean("v", integers=True), n=M.Count())
    assert rec.lower(rec.combine_all(rec.lift({"v": v}) for v in rows)) == {"mean": 431.0, "n": 3}
    assert m.lift({"v": np.int64(5)}) == (1, 5) and type(m.lift({"v": np.int64(5)})[1]) is int
    for bad in (1.5, True, "7"):
        with pytest.raises(TypeError, match=r"Mean\(integers=True\): expected an int"):
            m.lift({"v": bad})
    # what a stored definition names is what it was: a window saved before reopens
    assert m.describe() == M.Mean("v").describe() and repr(m) == repr(M.Mean("v"))


class _OldOrNew:
    """An INT64 mean whose items come either lifted now (``("new", v)``: the exact form) or
    as a release before exact INT64 means saved them (``("old", v)``: ``(count, mean)``)."""

    commutative = True

    def __init__(self) -> None:
        self.m = M.Mean(integers=True)
        self.old = M.Mean()
        self.identity = self.m.identity
        self.combine = self.m.combine

    def lift(self, x: tuple[str, Any]) -> Any:
        form, v = x
        if form == "old-empty":
            return self.old.identity  # an empty aggregate saved then: (0, 0.0)
        return self.m.lift(v) if form == "new" else self.old.lift(v)

    def lower(self, agg: Any) -> Any:
        return self.m.lower(agg)


@given(
    items=st.lists(
        st.tuples(st.sampled_from(["new", "new", "old", "old-empty"]), INT64),
        min_size=1,
        max_size=6,
    )
)
def test_an_int64_mean_beside_the_float_form_keeps_the_laws(items: list[tuple[str, int]]) -> None:
    """A window saved before exact INT64 means holds ``(count, mean)`` floats: combined with
    exact ``(count, sum)`` items in any grouping, the laws hold (floats within rounding, both
    sides in the same form) and the mean stays close to the exact one."""
    mixed = _OldOrNew()
    scale = max(abs(v) for _, v in items) * 2.0**-48  # a float mean's rounding, at most
    report = check_laws(
        mixed, items, eq=lambda a, b: _same_form_close(a, b, scale), max_triples=400
    )
    assert report.ok, report.explain()
    m = mixed.m
    lifted = [mixed.lift(x) for x in items]
    full = [x for f, x in items if f != "old-empty"]
    agg = m.combine_all(lifted)
    assert agg[0] == len(full)
    if full:
        exact = Fraction(sum(full), len(full))
        assert abs(Fraction(m.lower(agg)) - exact) <= scale
        if all(f == "new" for f, _ in items):
            assert m.lower(agg) == float(exact)


def _same_form_close(a: Any, b: Any, tol: float) -> bool:
    """Equal counts, the same form (an exact sum or a float mean), exact sums equal and float
    means within ``tol`` (rounding, relative to the largest value: means cancel)."""
    if a[0] != b[0] or type(a[1]) is not type(b[1]):
        return a[0] == b[0] == 0  # an empty aggregate of either form is the identity
    if type(a[1]) is int:
        return bool(a == b)
    return abs(a[1] - b[1]) <= tol
