"""The sliding sketches (distinct, quantiles, top_k: :mod:`mtawindows.server.engine.sketches`)
as monoids: the laws on serialized states, the codec's round trip, and windows of every engine
that takes them, with many evictions, against the exact answer over the same rows within each
sketch's own error bound (the library's bound functions); SlickDeque refuses them.

Bounds, from the library:

* distinct: ``hll_sketch.get_rel_err(upper, unioned=True, lg_k, 3)``, relative, 3 standard
  deviations (a window's sketch is a union);
* quantiles: ``kll_doubles_sketch.get_normalized_rank_error(k, False)``: the value given for a
  fraction q has a true rank (the share of values below it, to the share at or below it) within
  that of q;
* top_k: ``frequent_strings_sketch.get_apriori_error(lg_map_size, n)``: every count within it
  of the true one.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import hypothesis.strategies as st
import numpy as np
import pytest
from datasketches import frequent_strings_sketch, hll_sketch, kll_doubles_sketch
from hypothesis import given, settings

from mtawindows.server.engine.algorithms import (
    ALGORITHMS,
    EngineRefusal,
    check_algorithm,
    engine_class,
)
from mtawindows.server.engine.monoids import Count, Record, capabilities
from mtawindows.server.engine.policies import CountPolicy
from mtawindows.server.engine.sketches import (
    DEFAULT_FRACTIONS,
    Distinct,
    Quantiles,
    TopK,
    error_bounds,
)
from mtawindows.server.storage.codecs import CorruptDataError, packb, unpackb

FRACTIONS = (0.0, 0.1, 0.5, 0.9, 0.99, 1.0)


def fold(m: Any, values: list[Any], rnd: random.Random | None = None) -> Any:
    """The aggregate of ``values`` (in order), as a random tree of combines when ``rnd``."""
    aggs = [m.lift(v) for v in values]
    if rnd is None:
        acc = m.identity
        for a in aggs:
            acc = m.combine(acc, a)
        return acc
    while len(aggs) > 1:
        i = rnd.randrange(len(aggs) - 1)
        aggs[i : i + 2] = [m.combine(aggs[i], aggs[i + 1])]
    return aggs[0] if aggs else m.identity


# --------------------------------------------------------------------------- exact answers
def distinct_ok(lg_k: int, got: float, values: list[Any]) -> bool:
    exact = len(set(values))
    hi = hll_sketch.get_rel_err(True, True, lg_k, 3)
    lo = hll_sketch.get_rel_err(False, True, lg_k, 3)
    return exact * (1 - abs(lo)) - 1e-6 <= got <= exact * (1 + abs(hi)) + 1e-6


def quantiles_ok(k: int, fractions: tuple[float, ...], got: list[float], values: Any) -> bool:
    """Each value given has a true rank within the rank error of its fraction."""
    eps = kll_doubles_sketch.get_normalized_rank_error(k, False)
    xs = np.sort(np.asarray(values, dtype=float))
    n = len(xs)
    for q, x in zip(fractions, got, strict=True):
        below = np.searchsorted(xs, x, side="left") / n
        at_or_below = np.searchsorted(xs, x, side="right") / n
        if not (below - eps <= q <= at_or_below + eps):
            return False
    return True


def exact_quantiles(fractions: tuple[float, ...], values: Any) -> list[float]:
    xs = np.asarray(values, dtype=float)
    return [float(v) for v in np.quantile(xs, fractions, method="inverted_cdf")]


def top_ok(m: TopK, got: list[dict[str, Any]], values: list[Any]) -> bool:
    exact = Counter(values)
    err = frequent_strings_sketch.get_apriori_error(m.lg_map_size, len(values))
    if any(abs(e["count"] - exact[e["item"]]) > err for e in got):
        return False
    if [e["count"] for e in got] != sorted((e["count"] for e in got), reverse=True):
        return False
    # no value truly heavier than the k-th given by more than twice the error is missing
    kth = got[-1]["count"] if len(got) == m.k else 0
    given = {e["item"] for e in got}
    return all(v in given for v, c in exact.items() if c > kth + 2 * err)


# --------------------------------------------------------------------------- the monoids
def test_capabilities_commutative_neither_invertible_nor_selection() -> None:
    for m in (Distinct("v"), Quantiles("v"), TopK("v")):
        assert capabilities(m) == frozenset({"commutative"}), m
        assert m.lower(m.identity) in (0.0, None)


def test_slickdeque_refuses_them_the_others_take_them() -> None:
    rec = Record(n=Count(), d=Distinct("v"), q=Quantiles("x"), top=TopK("s"))
    with pytest.raises(EngineRefusal, match="neither") as err:
        check_algorithm("SLICKDEQUE", rec, CountPolicy(5))
    assert "d (distinct)" in str(err.value) or "d (" in str(err.value), err.value
    for name in ALGORITHMS:
        if name != "SLICKDEQUE":
            check_algorithm(name, rec, CountPolicy(5))


def test_bad_parameters_name_what_was_expected() -> None:
    with pytest.raises(ValueError, match=r"lg_k must be an int in \[4, 21\], got 30"):
        Distinct("v", lg_k=30)
    with pytest.raises(ValueError, match=r"each fraction must be a number in \[0, 1\], got 1.5"):
        Quantiles("v", fractions=(0.5, 1.5))
    with pytest.raises(ValueError, match="non-empty sequence"):
        Quantiles("v", fractions="0.5")
    with pytest.raises(ValueError, match=r"k must be an int in \[8, 65535\], got 2"):
        Quantiles("v", k=2)
    with pytest.raises(ValueError, match="fewer than k = 1000"):
        TopK("v", k=1000, lg_map_size=8)
    with pytest.raises(TypeError, match="Quantiles: expected a real number"):
        Quantiles().lift("3")
    with pytest.raises(ValueError, match="NaN cannot be ordered"):
        Quantiles().lift(float("nan"))
    with pytest.raises(TypeError, match=r"TopK: expected an int \(item_type INT64\), got str"):
        TopK(item_type="INT64").lift("3")
    with pytest.raises(TypeError, match="Distinct: expected an int, float, string or bool"):
        Distinct().lift(b"x")


def test_distinct_counts_equal_numbers_once_and_is_exact_while_short() -> None:
    d = Distinct()
    assert d.lower(fold(d, [3, 3.0, True, 1, "3", -0.0, 0, 2**70, float(2**70)])) == 5.0
    assert d.lower(d.identity) == 0.0


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(st.integers(0, 400), min_size=0, max_size=700),
    cuts=st.tuples(st.integers(0, 700), st.integers(0, 700)),
    seed=st.integers(0, 2**16),
)
def test_laws_on_serialized_states(values: list[int], cuts: tuple[int, int], seed: int) -> None:
    """Identity: the serialized state itself. Associativity: the same bytes while the state is
    exact (short tuples; KLL up to k values, frequent items under its map's capacity: the same
    answers), past that two answers each within the bound of the exact one."""
    i, j = sorted(min(c, len(values)) for c in cuts)
    parts = values[:i], values[i:j], values[j:]
    rnd = random.Random(seed)
    floats = [v / 7 for v in values]
    strings = [f"s{v % 97}" for v in values]
    cases: list[tuple[Any, list[Any]]] = [
        (Distinct(lg_k=10), values),
        (Quantiles(fractions=FRACTIONS, k=64), floats),
        (TopK(k=5, lg_map_size=7), strings),
    ]
    for m, xs in cases:
        ps = [xs[: len(parts[0])], xs[i:j], xs[j:]]
        a, b, c = (fold(m, p, rnd) for p in ps)
        for x in (a, b, c):
            assert packb(m.combine(m.identity, x)) == packb(x)
            assert packb(m.combine(x, m.identity)) == packb(x)
            assert m.lower(unpackb(packb(x))) == m.lower(x)  # the codec round trip
        left = m.combine(m.combine(a, b), c)
        right = m.combine(a, m.combine(b, c))
        if len(xs) <= m.buffer:
            assert packb(left) == packb(right)
        if not xs:
            assert m.lower(left) == m.lower(right) == m.lower(m.identity)
            continue
        for agg in (left, right):
            got = m.lower(agg)
            if isinstance(m, Distinct):
                assert distinct_ok(m.lg_k, got, xs), (got, len(set(xs)))
            elif isinstance(m, Quantiles):
                assert quantiles_ok(m.k, m.fractions, got, xs), got
                if len(xs) <= m.k:  # exact: numpy's inverted_cdf, in any grouping
                    assert got == exact_quantiles(m.fractions, xs)
            else:
                assert top_ok(m, got, xs), got
                if len(set(xs)) < 3 * 2**m.lg_map_size // 4:  # under capacity: exact
                    want = sorted(Counter(xs).items(), key=lambda e: (-e[1], e[0]))[: m.k]
                    assert [(e["item"], e["count"]) for e in got] == want


def test_combine_never_changes_its_inputs() -> None:
    rnd = random.Random(3)
    for m, gen in (
        (Distinct(), lambda: rnd.randint(0, 10**6)),
        (Quantiles(k=16), lambda: rnd.random()),
        (TopK(lg_map_size=5), lambda: str(rnd.randint(0, 100))),
    ):
        a = fold(m, [gen() for _ in range(500)])
        b = fold(m, [gen() for _ in range(500)])
        small = fold(m, [gen() for _ in range(3)])
        before = [packb(x) for x in (a, b, small)]
        m.combine(a, b), m.combine(a, small), m.combine(small, b), m.combine(small, small)
        assert [packb(x) for x in (a, b, small)] == before


def test_codec_refuses_bytes_of_an_unknown_or_broken_sketch() -> None:
    import msgpack  # type: ignore[import-untyped]

    bad = msgpack.packb(msgpack.ExtType(7, b"nosuch\0abc"))
    with pytest.raises(CorruptDataError, match="unknown type"):
        unpackb(bad)
    broken = msgpack.packb(msgpack.ExtType(7, b"kll_doubles\0\x05\x01"))
    with pytest.raises(CorruptDataError, match="does not decode"):
        unpackb(broken)


# --------------------------------------------------------------------------- sliding windows
ENGINES = [a for a in ALGORITHMS if a != "SLICKDEQUE"]
WINDOW = 400


def _rows(n: int, seed: int) -> list[dict[str, Any]]:
    rnd = random.Random(seed)
    return [
        {
            "v": rnd.randint(0, 3000) if i % 1000 < 500 else rnd.randint(0, 150),
            "x": rnd.lognormvariate(0, 1) if i % 2 else rnd.gauss(10, 3),
            "s": f"item{min(int(rnd.paretovariate(1.2)), 999)}",
            "t": i,
        }
        for i in range(n)
    ]


@pytest.mark.parametrize("name", ENGINES)
def test_sliding_sketches_after_many_evictions_within_bounds(name: str) -> None:
    """2,000 rows through a window of 400 (1,600 evicted), the answer after every 7th row
    against the exact one over the rows in the window, within each sketch's bound."""
    d, q, top = Distinct("v"), Quantiles("x", fractions=FRACTIONS), TopK("s", k=5)
    rec = Record(n=Count(), d=d, q=q, top=top)
    w = engine_class(name)(rec, CountPolicy(WINDOW))
    rows = _rows(2000, seed=len(name))
    for i, r in enumerate(rows):
        got = w.push(r)
        if i % 7 and i != len(rows) - 1:
            continue
        inside = rows[max(0, i + 1 - WINDOW) : i + 1]
        assert got["n"] == len(inside)
        assert distinct_ok(d.lg_k, got["d"], [r["v"] for r in inside]), (i, got["d"])
        assert quantiles_ok(q.k, FRACTIONS, got["q"], [r["x"] for r in inside]), (i, got["q"])
        assert top_ok(top, got["top"], [r["s"] for r in inside]), (i, got["top"])
    # what the window's own sketches promise (their bound functions) holds too
    agg = w.aggregate()  # the record's aggregate: (n, d, q, top)
    inside = rows[-WINDOW:]
    b = error_bounds(d, agg[1])
    assert b["lower"] <= len({r["v"] for r in inside}) <= b["upper"], b
    eps = error_bounds(q, agg[2])["rank_error"]
    assert quantiles_ok(q.k, FRACTIONS, q.lower(agg[2]), [r["x"] for r in inside])
    assert eps == kll_doubles_sketch.get_normalized_rank_error(q.k, False)
    tb = error_bounds(top, agg[3])
    exact = Counter(r["s"] for r in inside)
    for item, (lo, hi) in tb["items"].items():
        assert lo <= exact[item] <= hi, (item, lo, exact[item], hi)


def test_a_window_on_redis_reopens_with_the_same_answers(redis_url: str) -> None:
    from mtawindows.server.storage.redis_store import RedisStore

    rec = Record(n=Count(), d=Distinct("v"), q=Quantiles("x"), top=TopK("s", k=3))
    for name in ("AMTA", "LMTA", "TWO_STACKS_LITE"):
        store = RedisStore(redis_url, durable=True, checkpoint_every=50)
        w = engine_class(name)(rec, CountPolicy(300), store=store)
        rows = _rows(1500, seed=9)
        for r in rows:
            w.push(r)
        before = w.query()
        w.flush()
        store.close()
        again = type(w).open(w.window_id, rec, CountPolicy(300), url=redis_url, durable=True)
        got = again.query()
        # a reopened window may combine stored sketches or rows anew: the same top (exact
        # under the map's capacity), HLL and KLL within their bounds
        inside = rows[-300:]
        assert got["n"] == 300 and got["top"] == before["top"]
        assert distinct_ok(12, got["d"], [r["v"] for r in inside]), name
        assert quantiles_ok(200, DEFAULT_FRACTIONS, got["q"], [r["x"] for r in inside]), name
        again.close()
