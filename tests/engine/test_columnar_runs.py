"""Per-row results over many keys at once (the segmented columnar path, run_results) against
the per-row engine (Amortized MTA), one engine per key fed that key's rows one by one: every
result and window size, exact where the issue says exact, sums and variances at least as close
to an exact answer as the per-row engine's; context rows (``skip``) answered as if sent before.
"""

from __future__ import annotations

import math
from typing import Any
from unittest import mock

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mtawindows.server.engine import (
    AmortizedMTA,
    Count,
    CountPolicy,
    Max,
    Record,
    Sum,
    TimeRangePolicy,
)
from mtawindows.server.engine.columnar import runs as runs_module
from mtawindows.server.engine.columnar.runs import run_results
from tests.engine.test_columnar_window import RECORDS, VALUES, _row, assert_row

POLICIES = st.one_of(
    st.integers(0, 12).map(lambda n: CountPolicy(n, field="n")),
    st.integers(1, 30).map(lambda r: TimeRangePolicy(r, field="ts")),
    st.sampled_from([0.5, 2.5, 7.25, 10**19]).map(lambda r: TimeRangePolicy(r, field="ts")),
)


@st.composite
def keyed_rows(draw: Any) -> tuple[dict[str, np.ndarray], list[int]]:
    """Rows of 1..20 keys, each key's rows one run in timestamp order (ties, gaps, bursts;
    runs of one row; keys with negative, huge or equal timestamps)."""
    cols: dict[str, list[Any]] = {c: [] for c in ("ts", "v", "w", "p", "k", "i")}
    runs = []
    for _ in range(draw(st.integers(1, 20))):
        runs.append(len(cols["ts"]))
        n = draw(st.one_of(st.just(1), st.integers(1, 30), st.integers(60, 200)))
        t0 = draw(st.sampled_from([0, 5, -(10**6), 10**12, 2**62]))
        steps = draw(st.lists(st.sampled_from([0, 0, 1, 1, 2, 3, 60]), min_size=n, max_size=n))
        ts = (t0 + np.cumsum(np.array(steps, dtype=np.int64))).tolist()
        v = draw(st.lists(VALUES, min_size=n, max_size=n))
        nan = draw(st.lists(st.booleans(), min_size=n, max_size=n))
        cols["ts"] += ts
        cols["v"] += v
        cols["w"] += [math.nan if b else x for b, x in zip(nan, v, strict=True)]
        cols["p"] += [abs(x) + 0.5 for x in v]
        cols["k"] += [f"k{x % 7}" for x in ts]
        cols["i"] += draw(st.lists(st.integers(-(2**40), 2**40), min_size=n, max_size=n))
    arrays = {c: np.array(v) for c, v in cols.items()}
    arrays["ts"] = arrays["ts"].astype(np.int64)
    arrays["i"] = arrays["i"].astype(np.int64)
    return arrays, runs


def _check(monoid: Any, policy: Any, cols: dict[str, np.ndarray], runs: list[int], skip: int):
    got = run_results(monoid, policy, cols, np.array(runs), skip=skip)
    assert got.rows is not None and got.sizes is not None
    n = len(cols["ts"])
    table = got.rows.to_pylist()
    assert len(table) == n - skip == len(got.sizes)
    ends = [*runs[1:], n]
    for lo, hi in zip(runs, ends, strict=True):
        ref = AmortizedMTA(monoid, policy)
        window: list[dict[str, Any]] = []
        for i in range(lo, hi):
            row = _row(cols, i)
            total = ref.push(row)
            window = [*window, row][len(window) + 1 - len(ref) :]
            if i < skip:
                continue
            assert got.sizes[i - skip] == len(ref), (i, got.sizes[i - skip], len(ref))
            assert_row(i, table[i - skip], total, window)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(sorted(RECORDS)), policy=POLICIES, data=keyed_rows(), cut=st.data())
def test_every_key_gets_the_per_row_engines_results(
    kind: str, policy: Any, data: tuple[dict[str, np.ndarray], list[int]], cut: Any
) -> None:
    cols, runs = data
    first_run = (runs[1] if len(runs) > 1 else len(cols["ts"])) - 1
    skip = cut.draw(st.integers(0, first_run))  # context rows: within the first key's run
    _check(RECORDS[kind](), policy, cols, runs, skip)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(sorted(RECORDS)),
    policy=POLICIES,
    data=keyed_rows(),
    chunk=st.sampled_from([1, 2, 5, 64]),
)
def test_results_computed_in_chunks_of_rows_are_the_same(
    kind: str, policy: Any, data: tuple[dict[str, np.ndarray], list[int]], chunk: int
) -> None:
    """The block scans of a long call run over chunks of result rows (with the rows their
    windows reach): every chunk size answers as the per-row engine."""
    cols, runs = data
    with mock.patch.object(runs_module, "CHUNK", chunk):
        _check(RECORDS[kind](), policy, cols, runs, 0)


def test_a_million_rows_of_many_keys_in_one_call() -> None:
    """100,000 keys x 10 rows: one call, every key its own window (sampled keys checked)."""
    keys, per = 100_000, 10
    n = keys * per
    ts = np.tile(np.arange(per, dtype=np.int64) * 1_000, keys) + 10**12
    v = (np.arange(n) * 7 % 101).astype(np.float64)
    monoid = Record(s=Sum("v"), hi=Max("v"), ts=Max("ts"))
    policy = TimeRangePolicy(3_500, field="ts")  # the row and the 3 before it
    got = run_results(monoid, policy, {"ts": ts, "v": v}, np.arange(0, n, per))
    assert got.sizes is not None and got.rows is not None
    assert got.sizes.tolist() == [min(j, 3) + 1 for j in range(per)] * keys
    s = got.rows.column("s").to_numpy()
    for key in (0, 1, 4_321, keys - 1):
        vals = v[key * per : (key + 1) * per]
        want = [math.fsum(vals[max(0, j - 3) : j + 1]) for j in range(per)]
        assert s[key * per : (key + 1) * per].tolist() == want


def test_what_it_refuses() -> None:
    monoid = Record(s=Sum("v"), ts=Max("ts"))
    policy = TimeRangePolicy(10, field="ts")
    cols = {"ts": np.array([5, 3, 1, 2], dtype=np.int64), "v": np.ones(4)}
    with pytest.raises(ValueError, match="backwards within a key's rows at row 1"):
        run_results(monoid, policy, cols, np.array([0, 2]))
    # a new key's run may start older than the last key's rows
    ok = run_results(monoid, policy, cols, np.array([0, 1, 2]))
    assert ok.sizes is not None and ok.sizes.tolist() == [1, 1, 1, 2]
    with pytest.raises(ValueError, match="run starts"):
        run_results(monoid, policy, cols, np.array([1, 2]))
    with pytest.raises(ValueError, match="skip"):
        run_results(monoid, policy, cols, np.array([0, 1, 2, 3]), skip=5)
    bad = {"ts": np.array([1, 2], dtype=np.int64), "v": np.array([1.0, np.nan])}
    with pytest.raises(ValueError, match="nan"):
        run_results(Record(hi=Max("v"), ts=Max("ts")), policy, bad, np.array([0]))


def test_runs_too_wide_to_lay_end_to_end() -> None:
    """Timestamps spanning most of int64 within a key: a search per run instead of one."""
    ts = np.array([-(2**62), -5, 0, 2**62, 2**62 + 3, 7, 8, 2**61], dtype=np.int64)
    v = np.arange(8, dtype=np.float64)
    cols = {c: v for c in ("v", "w", "p", "i")} | {"ts": ts, "k": np.array(["a"] * 8)}
    for policy in (TimeRangePolicy(5, field="ts"), TimeRangePolicy(2**62, field="ts")):
        _check(RECORDS["extremes"](), policy, cols, [0, 5], 0)
        _check(RECORDS["extremes"](), policy, cols, [0, 5], 2)


def test_integer_sums_stay_exact_over_a_long_call_of_short_windows() -> None:
    """300,000 rows of values near 2^45 in windows of 1,000 rows: no window's sum can pass
    int64 (2^55), though the call's rows could (2^63.2): exact int64 sums, as Python's."""
    n, size = 300_000, 1_000
    rng = np.random.default_rng(7)
    v = rng.integers(2**45 - 1000, 2**45, n).astype(np.int64)
    ts = np.arange(n, dtype=np.int64)
    runs = np.array([0, 123_456])
    got = run_results(
        Record(s=Sum("v"), n=Count()), CountPolicy(size, field="n"), {"ts": ts, "v": v}, runs
    )
    assert got.rows is not None
    s = got.rows.column("s")
    assert s.type == pa.int64()
    vals = v.tolist()
    for i in (0, 999, 1_000, 123_455, 123_456, 124_500, n - 1):
        lo = max(i - size + 1, 0 if i < 123_456 else 123_456)
        assert s[i].as_py() == sum(vals[lo : i + 1])
