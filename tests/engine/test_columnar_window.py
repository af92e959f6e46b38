"""The columnar window against the per-row engine (Amortized MTA), batch by batch: the same
random batches (sizes, ties, gaps, bursts, NaN where a monoid takes it), every per-row result,
every window size and the final state compared; exact where the issue says exact, sums and
variances at least as close to an exact answer as the per-row engine's."""

from __future__ import annotations

import math
from datetime import timedelta
from fractions import Fraction
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mtawindows.server.engine import (
    AmortizedMTA,
    ArgMax,
    ArgMin,
    ArgResult,
    Count,
    CountPolicy,
    First,
    GeometricMean,
    Last,
    Max,
    MaxCount,
    Mean,
    Min,
    Record,
    StdDev,
    Sum,
    TimeRangePolicy,
    Variance,
)
from mtawindows.server.engine.columnar import ColumnarWindow, columnar_refusal

RECORDS = {
    "extremes": lambda: Record(
        n=Count(), s=Sum("v"), sw=Sum("w"), mx=Max("v"), mn=Min("v"), si=Sum("i"), ai=ArgMin(value="i", key="k"), ts=Max("ts")
    ),
    "moments": lambda: Record(
        n=Count(), mean=Mean("v"), var=Variance("v", ddof=1), sd=StdDev("v"), ts=Last("ts")
    ),
    "ordered": lambda: Record(
        first=First("v"), last=Last("k"), am=ArgMax(value="v", key="ts"),
        an=ArgMin(value="v", key="k"), mc=MaxCount("v"), g=GeometricMean("p"), n=Count(), ts=Max("ts"),
    ),
}  # fmt: skip
APPROX = {"s", "sw", "mean", "var", "sd", "g"}

VALUES = st.one_of(
    st.integers(-5, 5).map(float),  # ties
    st.sampled_from([0.1, -0.3, 1e10, -1e10, 2.5e-7, 7.0]),  # rounding and cancellation
)


@st.composite
def batches(draw: Any) -> list[dict[str, np.ndarray]]:
    out = []
    t = 0
    for _ in range(draw(st.integers(1, 12))):
        n = draw(st.one_of(st.integers(1, 40), st.just(1), st.integers(100, 300)))
        steps = draw(
            st.lists(st.sampled_from([0, 0, 1, 1, 2, 3, 60]), min_size=n, max_size=n)
        )  # ties, gaps, bursts
        ts = t + np.cumsum(np.array(steps, dtype=np.int64))
        t = int(ts[-1])
        v = np.array(draw(st.lists(VALUES, min_size=n, max_size=n)))
        w = np.where(np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n))), np.nan, v)
        p = np.abs(v) + 0.5
        k = np.array([f"k{int(x) % 7}" for x in ts])
        i = np.array(
            draw(st.lists(st.integers(-(2**40), 2**40), min_size=n, max_size=n)), dtype=np.int64
        )
        out.append({"ts": ts, "v": v, "w": w, "p": p, "k": k, "i": i})
    return out


def _row(cols: dict[str, np.ndarray], i: int) -> dict[str, Any]:
    return {c: a[i].item() for c, a in cols.items()}


def _plain(v: Any) -> Any:
    if isinstance(v, ArgResult):
        return {"value": v.value, "key": v.key}
    if isinstance(v, tuple):
        return {"max": v[0], "count": v[1]}
    return v


def _exact(name: str, xs: list[float], ps: list[float]) -> float | None:
    """The exactly rounded answer of an approximate field over the window's values."""
    finite = [x for x in xs if not math.isnan(x)]
    if name in ("s", "sw"):
        return math.fsum(xs) if len(finite) == len(xs) else math.nan
    if name == "mean":
        return float(sum(map(Fraction, xs)) / len(xs)) if xs else None
    if name in ("var", "sd"):
        ddof = 1 if name == "var" else 0  # as RECORDS["moments"] declares them
        if len(xs) <= ddof:
            return None
        fr = [Fraction(x) for x in xs]
        m = sum(fr) / len(fr)
        var = float(sum((x - m) ** 2 for x in fr) / (len(fr) - ddof))
        return var if name == "var" else math.sqrt(var)
    if name == "g":
        return math.exp(math.fsum(math.log(p) for p in ps) / len(ps)) if ps else None
    raise AssertionError(name)


def _close(name: str, got: Any, ref: Any, exact: Any, scale: float) -> bool:
    if ref is None or exact is None:
        return got is None and ref is None
    if got is None:
        return False
    if math.isnan(ref):
        return math.isnan(got)
    slack = 4e-16 * scale if name in ("s", "sw", "mean", "g") else 1e-9 * max(1.0, abs(exact))
    return abs(got - exact) <= abs(ref - exact) + slack


def assert_row(i: int, got: dict[str, Any], want: dict[str, Any], window: list[Any]) -> None:
    """Row ``i``'s columnar results ``got`` against the per-row engine's ``want`` (lowered),
    ``window`` the rows in its window: exact fields equal, approximate ones at least as close
    to the exact answer as the engine's."""
    for name, ref_v in want.items():
        if name in APPROX:
            xs = [r["w" if name == "sw" else "v"] for r in window]
            ps = [r["p"] for r in window]
            scale = math.fsum(abs(x) for x in xs if not math.isnan(x)) + 1.0
            exact = _exact(name, xs, ps)
            assert _close(name, got[name], ref_v, exact, scale), (i, name, got[name], ref_v, exact)
        else:
            assert got[name] == _plain(ref_v), (i, name, got[name], ref_v)


def _drive(kind: str, policy: Any, slice_rows: int, data: list[dict[str, np.ndarray]]) -> None:
    monoid = RECORDS[kind]()
    fast = ColumnarWindow(monoid, policy, slice_rows=slice_rows)
    ref = AmortizedMTA(monoid, policy)
    window: list[dict[str, Any]] = []  # the rows in the window, as the oracle keeps them
    for b, cols in enumerate(data):
        n = len(cols["ts"])
        totals: list[Any] = []
        sizes: list[int] = []
        rows = [_row(cols, i) for i in range(n)]
        ref.apply_lifted([monoid.lift(r) for r in rows], totals=totals, sizes=sizes)
        if b % 3 == 2:  # without per-row results: the window after the batch only
            fast.apply(cols)
            window = ([*window, *rows])[len(window) + n - len(ref) :]
            assert len(fast) == len(ref)
            final, want = fast.query(), ref.query()
            for name, ref_v in want.items():
                if name not in APPROX:
                    assert _plain(final[name]) == _plain(ref_v), (b, name, final[name], ref_v)
            continue
        got = fast.apply(cols, per_row=True)
        assert got.rows is not None and got.sizes is not None
        assert got.sizes.tolist() == sizes
        table = got.rows.to_pylist()
        for i, (g, t) in enumerate(zip(table, totals, strict=True)):
            want = monoid.lower(t)
            window = ([*window, rows[i]])[len(window) + 1 - sizes[i] :]
            assert_row(i, g, want, window)
        assert len(fast) == len(ref)
        final = fast.query()
        want = ref.query()
        for name, ref_v in want.items():
            if name not in APPROX:
                assert _plain(final[name]) == _plain(ref_v), (name, final[name], ref_v)


POLICIES = st.one_of(
    st.integers(0, 40).map(lambda n: CountPolicy(n, field="n")),
    st.integers(1, 30).map(lambda r: TimeRangePolicy(r, field="ts")),
    st.sampled_from([0.5, 2.5, 7.25]).map(lambda r: TimeRangePolicy(r, field="ts")),
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(sorted(RECORDS)),
    policy=POLICIES,
    slice_rows=st.sampled_from([2, 3, 8, 64, 4096]),
    data=batches(),
)
def test_columnar_equals_the_per_row_engine(
    kind: str, policy: Any, slice_rows: int, data: list[dict[str, np.ndarray]]
) -> None:
    _drive(kind, policy, slice_rows, data)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(sorted(RECORDS)),
    policy=POLICIES,
    slice_rows=st.sampled_from([2, 3, 8, 64]),
    chunk=st.sampled_from([1, 2, 5, 17]),
    data=batches(),
)
def test_a_batch_applied_in_chunks_is_the_batch(
    kind: str, policy: Any, slice_rows: int, chunk: int, data: list[dict[str, np.ndarray]]
) -> None:
    """A batch larger than ``CHUNK_ROWS`` goes in as consecutive chunks (memory): every
    per-row result and the state the per-row engine's, positions of First, Last and arg-*
    rebased per chunk (tiny chunks here: every batch of the draw is split)."""
    from mtawindows.server.engine.columnar import window as module

    old = module.CHUNK_ROWS
    module.CHUNK_ROWS = chunk
    try:
        _drive(kind, policy, slice_rows, data)
    finally:
        module.CHUNK_ROWS = old


def test_a_batch_of_a_million_rows_goes_in_chunks() -> None:
    """10^6 rows in one call (16 chunks): the same per-row results, sizes and final state as
    the batch fed in pieces of 1,000 (each below a chunk), ties and bursts included."""
    from mtawindows.server.engine.columnar.window import CHUNK_ROWS

    rng = np.random.default_rng(11)
    n = 1_000_000
    assert n > 8 * CHUNK_ROWS
    ts = np.cumsum(rng.integers(0, 3, n)).astype(np.int64)
    v = rng.normal(0, 1, n)
    monoid = Record(
        n=Count(), mx=Max("v"), last=Last("v"), am=ArgMax(value="v", key="ts"), ts=Max("ts")
    )
    policy = TimeRangePolicy(5_000, field="ts")
    whole = ColumnarWindow(monoid, policy, slice_rows=512)
    pieces = ColumnarWindow(monoid, policy, slice_rows=512)
    got = whole.apply({"ts": ts, "v": v}, per_row=True)
    parts = [
        pieces.apply({"ts": ts[a : a + 1000], "v": v[a : a + 1000]}, per_row=True)
        for a in range(0, n, 1000)
    ]
    assert got.rows is not None and got.sizes is not None
    assert got.rows.num_rows == n
    assert got.rows.equals(pa.concat_tables([p.rows for p in parts]))  # type: ignore[misc]
    assert got.sizes.tolist() == np.concatenate([p.sizes for p in parts]).tolist()  # type: ignore[misc]
    assert got.evicted == sum(p.evicted for p in parts) == whole.evicted
    assert whole.query() == pieces.query() and len(whole) == len(pieces)


def long_batches(seed: int, count: int, keys: int) -> list[dict[str, np.ndarray]]:
    """``count`` batches of 50-400 rows, timestamps 0-2 apart, integer values, ``keys`` text
    keys: for windows far longer than a batch."""
    rng = np.random.default_rng(seed)
    data = []
    t = 0
    for _ in range(count):
        n = int(rng.integers(50, 400))
        ts = t + np.cumsum(rng.integers(0, 3, n))
        t = int(ts[-1])
        v = rng.integers(-1000, 1000, n).astype(float)
        k = np.array([f"k{x % keys}" for x in ts])
        data.append({"ts": ts, "v": v, "w": v, "p": np.abs(v) + 1, "k": k, "i": ts % 97})
    return data


def test_a_large_window_reads_only_what_a_batch_evicts() -> None:
    """A window far longer than a batch, many slices: the same answers as the per-row engine
    over 200 batches (a smoke run of the slices' tree and its bulk eviction)."""
    data = long_batches(5, 60, keys=1)
    _drive("extremes", TimeRangePolicy(2000, field="ts"), 64, data)
    _drive("ordered", CountPolicy(3000, field="n"), 32, data)


def test_refused_batches_change_nothing() -> None:
    m = Record(n=Count(), s=Sum("v"), sw=Sum("w"), mx=Max("v"), mn=Min("v"), ts=Max("ts"))
    w = ColumnarWindow(m, TimeRangePolicy(10, field="ts"), slice_rows=4)
    cols = {"ts": np.arange(10), "v": np.arange(10.0), "w": np.zeros(10)}
    w.apply(cols)
    before = (len(w), w.query())
    bad_v = {
        "ts": np.arange(10, 20),
        "v": np.where(np.arange(10) == 5, np.nan, 1.0),
        "w": np.zeros(10),
    }
    with pytest.raises(ValueError, match=r"Max: expected an ordered number, got nan \(row 5\)"):
        w.apply(bad_v, per_row=True)
    back = {"ts": np.array([20, 21, 19]), "v": np.ones(3), "w": np.zeros(3)}
    with pytest.raises(ValueError, match="timestamps go backwards at row 2: 19 after 21"):
        w.apply(back)
    old = {"ts": np.array([5]), "v": np.ones(1), "w": np.zeros(1)}
    with pytest.raises(ValueError, match="older than the window's newest 9"):
        w.apply(old)
    with pytest.raises(KeyError, match="no column 'w'"):
        w.apply({"ts": np.array([30]), "v": np.ones(1)})
    with pytest.raises(TypeError, match=r"timestamps must be integers .* got float64"):
        w.apply({"ts": np.array([30.0]), "v": np.ones(1), "w": np.zeros(1)})
    assert (len(w), w.query()) == before


def test_what_the_path_refuses() -> None:
    assert columnar_refusal(Record(n=Count(), s=Sum("v")), CountPolicy(3)) is None
    assert "reads whole rows" in str(columnar_refusal(Sum(), CountPolicy(3)))
    with pytest.raises(TypeError, match="no columnar kernel"):
        ColumnarWindow(Record(n=Count(), a=ArgMax()), CountPolicy(3))


def _per_row(monoid: Any, policy: Any, cols: dict[str, Any]) -> list[Any]:
    ref = AmortizedMTA(monoid, policy)
    n = len(next(iter(cols.values())))
    return [ref.push({c: _py(a[i]) for c, a in cols.items()}) for i in range(n)]


def _py(x: Any) -> Any:
    return x.item() if hasattr(x, "item") else x


def _same(table: Any, want: list[Any]) -> None:
    got = table.to_pylist()
    assert [{k: _plain(v) for k, v in g.items()} for g in got] == [
        {k: _plain(v) for k, v in w.items()} for w in want
    ]


def test_what_an_outsider_broke_stays_fixed() -> None:
    """Found by attacking the README's promises: each case against the per-row engine."""
    count = CountPolicy(10_000, field="n")
    # text stored as Python objects (pandas, object arrays, Arrow): values and keys, across
    # sealed slices
    m = Record(n=Count(), h=Last("host"), f=First("host"), a=ArgMax(value="v", key="host"))
    w = ColumnarWindow(m, count, slice_rows=4)
    for i in range(6):
        hosts = np.array([f"h{i}{j}" for j in range(3)], dtype=object)
        cols = {"host": hosts, "v": np.array([1.0, 3.0, 2.0])}
        w.apply(cols, per_row=True)
    assert w.query()["h"] == "h52" and w.query()["f"] == "h00"
    assert w.query()["a"].key == "h51"
    # a column that was floats and is ints now: results in the type both fit
    m = Record(n=Count(), mn=Min("v"), mx=Max("v"))
    w = ColumnarWindow(m, count, slice_rows=4)
    w.apply({"v": np.full(8, 1.5)})
    got = w.apply({"v": np.array([7, 8])}, per_row=True).rows
    assert got.column("mn").to_pylist() == [1.5, 1.5]
    # int64 values stay exact in arg-max, max-count and sums (timestamps in ns)
    ts = np.array([1_700_000_000_000_000_100, 1_700_000_000_000_000_000, 2**53, 1])
    ids = np.array([1, 2, 3, 4])
    m = Record(
        n=Count(), mc=MaxCount("ts"), am=ArgMax(value="ts", key="id"), s=Sum("id"), t=Sum("ts")
    )
    cols = {"ts": ts, "id": ids}
    _same(
        ColumnarWindow(m, CountPolicy(3, field="n")).apply(cols, per_row=True).rows,
        _per_row(m, CountPolicy(3, field="n"), cols),
    )
    # ArgMin over a tie of 0.0 and -0.0: the value and the key of one row
    m = Record(n=Count(), a=ArgMin(value="v", key="k"))
    got = ColumnarWindow(m, CountPolicy(3, field="n")).apply(
        {"v": np.array([0.0, -0.0, 1.0]), "k": np.arange(3)}, per_row=True
    )
    row = got.rows.column("a").to_pylist()[2]
    assert row["key"] == 1 and math.copysign(1, row["value"]) == -1
    # a window of counts only reads no column, and still counts every row
    w = ColumnarWindow(Count(), CountPolicy(3))
    assert w.query() == 0
    assert w.apply({"v": np.ones(4)}, per_row=True).rows.column("value").to_pylist() == [1, 2, 3, 3]
    # a time range of centuries, timestamps near the int64 minimum
    m = Record(n=Count(), ts=Max("ts"))
    for rng, stamps in [
        (2**63, [5, 6]),
        (10, [-(2**63) + 5]),
        (2**63 - 1, [-(2**63), 5]),
        (2**62 + 1, [-(2**62), 2**62]),
    ]:
        cols = {"ts": np.array(stamps, dtype=np.int64)}
        pol = TimeRangePolicy(rng, field="ts")
        _same(ColumnarWindow(m, pol).apply(cols, per_row=True).rows, _per_row(m, pol, cols))
    # an empty batch: the columns of the last results
    w = ColumnarWindow(Record(n=Count(), s=Sum("v")), count)
    first = w.apply({"v": np.ones(2)}, per_row=True).rows
    assert w.apply({"v": np.ones(0)}, per_row=True).rows.schema == first.schema


def test_what_an_outsider_broke_is_refused_and_changes_nothing() -> None:
    m = Record(n=Count(), s=Sum("v"), mx=Max("v"), u=Max("u"))
    w = ColumnarWindow(m, CountPolicy(100, field="n"), slice_rows=3)
    w.apply({"v": np.arange(5.0), "u": np.arange(5)})
    before = (len(w), w.query())
    bad: list[tuple[dict[str, Any], str]] = [
        (
            {"v": np.ones((3, 1)), "u": np.ones(3, int)},
            r"column 'v' must be one-dimensional, got shape \(3, 1\)",
        ),
        (
            {"v": np.float64(1.0), "u": np.ones(1, int)},
            r"column 'v' must be one-dimensional, got shape \(\)",
        ),
        (
            {"v": pa.array([1.0, None]), "u": np.ones(2, int)},
            r"column 'v' has 1 nulls \(the first at row 1\)",
        ),
        (
            {"v": np.ma.masked_array([1.0, 2.0], mask=[0, 1]), "u": np.ones(2, int)},
            r"column 'v' has masked values",
        ),
        (
            {"v": np.ones(2), "u": np.array([2**64 - 1, 1], dtype=np.uint64)},
            r"fit in 64 signed bits, got 18446744073709551615 \(row 0\)",
        ),
    ]
    for cols, match in bad:
        with pytest.raises((ValueError, TypeError), match=match):
            w.apply(cols, per_row=True)
        assert (len(w), w.query()) == before
    assert w.apply({"v": np.ones(2), "u": np.ones(2, int)}, per_row=True).rows.column(
        "n"
    ).to_pylist() == [6, 7]
    assert columnar_refusal(
        Record(n=Count(), ts=Max("ts")), TimeRangePolicy(timedelta(seconds=1), field="ts")
    )
    assert "no field 'x'" in str(
        columnar_refusal(Record(n=Count(), ts=Max("ts")), TimeRangePolicy(5, field="x"))
    )
    assert columnar_refusal(Record(s=Sum("v")), CountPolicy(3)) is not None


def test_sums_keep_their_precision_across_many_slices() -> None:
    """A window spanning several sealed slices (an outsider's case: a count window of 9,000
    rows, 3,000-row batches, N(0, 100) values, sums cancelling to a few units): every per-row
    sum is math.fsum's answer to the ulp and every mean its correctly rounded quotient, and
    so are the results after batches without per-row results (the slices' aggregates keep
    the scans' double-double pairs in the tree: rounded to one float each, they were off by
    up to 485 ulps). A mean is the exact sum divided by the count, rounded once."""
    from fractions import Fraction

    rng = np.random.default_rng(7)
    v = rng.normal(0, 100, 24_000)
    ts = np.arange(1, len(v) + 1, dtype=np.int64)
    size = 9_000
    scale = 2**1074  # every double times this is an integer: exact prefix sums
    prefix = [0]
    for x in v.tolist():
        num, den = x.as_integer_ratio()
        prefix.append(prefix[-1] + num * (scale // den))

    def mean(a: int, b: int) -> float:  # of v[a:b], exactly rounded
        return float(Fraction(prefix[b] - prefix[a], scale * (b - a)))

    for batch in (3_000, 7_000, 24_000):
        fast = ColumnarWindow(
            Record(n=Count(), s=Sum("v"), me=Mean("v")), CountPolicy(size, field="n")
        )
        for lo in range(0, len(v), batch):
            hi = min(len(v), lo + batch)
            per_row = (lo // batch) % 2 == 0
            got = fast.apply({"ts": ts[lo:hi], "v": v[lo:hi]}, per_row=per_row)
            if per_row:
                assert got.rows is not None
                sums = got.rows.column("s").to_pylist()
                means = got.rows.column("me").to_pylist()
                for j in range(lo, hi, 7):
                    window = v[max(0, j + 1 - size) : j + 1].tolist()
                    assert sums[j - lo] == math.fsum(window), (batch, j)
                    assert means[j - lo] == mean(max(0, j + 1 - size), j + 1), (batch, j)
            window = v[max(0, hi - size) : hi].tolist()
            final = fast.query()
            assert final["s"] == math.fsum(window), (batch, hi)
            assert final["me"] == mean(max(0, hi - size), hi), (batch, hi)
            got_s, _ = fast.aggregate_range(count=size // 3)
            assert got_s[1] == math.fsum(v[hi - min(hi, size // 3) : hi].tolist())


def test_a_slice_sum_stored_as_one_float_still_reads() -> None:
    """Slices stored before sums were pairs hold one float (a sum) and (count, mean) (a
    mean): the tree's monoids and the kernels take them as pairs with no low part."""
    from mtawindows.server.engine.columnar.kernels import DD_MEAN, DD_SUM, kernel_for

    assert DD_SUM.combine(2, 3) == 5  # integers stay exact
    assert DD_SUM.combine(1.5, (2.0, 1e-20)) == (3.5, 1e-20)
    assert DD_SUM.combine([1e16, 1.0], 1.0) == (1e16, 2.0)  # a list: as the codec reads it
    assert DD_MEAN.combine((2, 1.5), (1, 3.0, 0.0)) == (3, 6.0, 0.0)
    s, me = kernel_for(Sum("v")), kernel_for(Mean("v"))
    assert s is not None and me is not None
    assert [c.tolist() for c in s.from_slice(2.5)] == [[2.5], [0.0]]
    assert s.slice_to_lifted((1e16, 1.0)) == 1e16 + 1.0
    assert me.slice_to_lifted((4, 2.0)) == (4, 2.0)
    assert me.slice_to_lifted((4, 10.0, 0.0)) == (4, 2.5)


# --------------------------------------------------------------- INT64 means, both paths
MS = 1_000_000  # ns
A, B = 2**62 - 50, 2**53 + 1  # near 2^62 (a few pass int64 when summed); 2^53 + 1


def _int64_window(policy: Any) -> Any:
    """A window of mean, count and sum of an INT64 field, as the service builds it."""
    from mtawindows.server.service.window_builder import build_window
    from mtawindows.v1.types import Aggregation, Field, StreamSpec, WindowSpec

    aggs = (
        Aggregation("mean", "mean", "i"),
        Aggregation("n", "count"),
        Aggregation("s", "sum", "i"),
    )
    stream = StreamSpec("s", (Field("i", "INT64"),), wall_clock=False)
    return build_window(stream, WindowSpec("s", "w", aggs, policy))


def _batch(ts: list[int], i: list[int]) -> dict[str, np.ndarray]:
    return {"ts": np.array(ts, dtype=np.int64), "i": np.array(i, dtype=np.int64)}


def test_an_int64_mean_over_sealed_slices_is_exact() -> None:
    """Per-row and final means of an INT64 field on the columnar path are the exact mean
    rounded once, where the window's rows sit in sealed slices (two rows each), in a tail
    lifted as int64 beside a batch lifted as double-doubles, or cancel: each case was an
    ulp or more off (a slice's int64 sum rounded to one float, an int64 sum rounded to a
    float beside a double-double, ``hi`` and ``lo`` of a pair cancelling in the division:
    -1/6 gave -0.16666666666662877)."""
    from mtawindows.v1.types import Policy

    by_time = Policy.time_range(timedelta(milliseconds=1))
    cases = [
        (by_time, [_batch([0] * 13 + [MS] * 4, [A] * 14 + [-A, B, B]), _batch([MS], [A]), _batch([MS], [-A])]),
        (by_time, [_batch([0] * 13 + [MS] * 4, [A] * 13 + [B, B, A, A]), _batch([MS], [-A]), _batch([MS], [-A])]),
        (by_time, [_batch([0] * 16 + [MS], [A] * 16 + [-A]), _batch([MS] * 14, [A] * 8 + [-A] * 5 + [B]), _batch([MS] * 2, [-A, -A])]),
        (Policy.count(11), [_batch([0] * 7, [A] * 5 + [-A] * 2), _batch([0], [-A]), _batch([0], [-B]), _batch([0], [-(2**63)]), _batch([0], [B])]),
    ]  # fmt: skip
    for c, (policy, data) in enumerate(cases):
        built = _int64_window(policy)
        fast = ColumnarWindow(built.monoid, built.policy, slice_rows=2)
        held: list[int] = []
        for b, cols in enumerate(data):
            got = fast.apply(cols, per_row=True)
            assert got.rows is not None and got.sizes is not None
            means = got.rows.column("mean").to_pylist()
            for j, v in enumerate(cols["i"].tolist()):
                held = [*held, v][len(held) + 1 - int(got.sizes[j]) :]
                assert means[j] == float(Fraction(sum(held), len(held))), (c, b, j, held)
        assert fast.query()["mean"] == float(Fraction(sum(held), len(held))), (c, held)


I64 = st.one_of(
    st.integers(2**62 - 50, 2**62 + 50),  # a few of them pass int64 when summed
    st.integers(-(2**62) - 50, -(2**62) + 50),
    st.sampled_from([2**53 + 1, -(2**53) - 1, 2**53 - 1, 2**63 - 1, -(2**63)]),
    st.integers(-4, 4),  # small values, ties, cancellation
    st.integers(-(2**63), 2**63 - 1),
)


@st.composite
def int64_batches(draw: Any) -> list[dict[str, np.ndarray]]:
    out = []
    t = 0
    for _ in range(draw(st.integers(1, 6))):
        n = draw(st.integers(1, 60))
        steps = draw(st.lists(st.sampled_from([0, 0, 1, 2, 5, 40]), min_size=n, max_size=n))
        ts = t + np.cumsum(np.array(steps, dtype=np.int64)) * MS  # ties, gaps
        t = int(ts[-1])
        i = np.array(draw(st.lists(I64, min_size=n, max_size=n)), dtype=np.int64)
        out.append({"ts": ts, "i": i})
    return out


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    size=st.integers(1, 50),
    by_time=st.booleans(),
    slice_rows=st.sampled_from([2, 7, 64]),
    data=int64_batches(),
)
def test_int64_means_are_exact_on_both_paths(
    size: int, by_time: bool, slice_rows: int, data: list[dict[str, np.ndarray]]
) -> None:
    """A mean of an INT64 field as the service builds it, with an INT64 sum beside it (such
    a window keeps its per-row engine; its columnar shadow gives per-row results): the same
    batches through the engine (lifted by the service's batch lift) and the columnar window,
    a count window or a time range of 1..50. Every per-row mean and each window's mean is
    ``float(Fraction(sum, n))`` of the rows held: equal, not close (the engine's float mean
    rounded each value above 2^53 first: hundreds off)."""
    from mtawindows.server.service.columnar_lift import columnar_lifter
    from mtawindows.v1.types import Policy

    policy = Policy.time_range(timedelta(milliseconds=size)) if by_time else Policy.count(size)
    built = _int64_window(policy)
    engine = AmortizedMTA(built.monoid, built.policy)
    lift = columnar_lifter(built.monoid, set())
    assert lift is not None
    fast = ColumnarWindow(built.monoid, built.policy, slice_rows=slice_rows)
    held: list[int] = []  # the values in the window after the last row
    for b, cols in enumerate(data):
        ints = cols["i"].tolist()
        lifted = lift({"ts": cols["ts"].tolist(), "i": ints})
        if b % 3 == 2:  # without per-row results: the window's mean after the batch only
            engine.apply_lifted(lifted)
            fast.apply(cols)
            assert len(fast) == len(engine)
            held = [*held, *ints][len(held) + len(ints) - len(engine) :]
        else:
            totals: list[Any] = []
            sizes: list[int] = []
            engine.apply_lifted(lifted, totals=totals, sizes=sizes)
            got = fast.apply(cols, per_row=True)
            assert got.rows is not None and got.sizes is not None
            assert got.sizes.tolist() == sizes
            means = got.rows.column("mean").to_pylist()
            for j, v in enumerate(ints):
                held = [*held, v][len(held) + 1 - sizes[j] :]
                exact = float(Fraction(sum(held), len(held)))
                assert built.monoid.lower(totals[j])["mean"] == exact, (b, j, "engine", held)
                assert means[j] == exact, (b, j, "columnar", held)
        exact = float(Fraction(sum(held), len(held)))
        assert engine.query()["mean"] == exact, (b, "engine", held)
        assert fast.query()["mean"] == exact, (b, "columnar", held)
