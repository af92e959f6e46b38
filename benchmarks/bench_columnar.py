"""The columnar path in process (issue 22): per-row results of one built-in window against
pandas ``rolling`` on the same rows, in the same run.

    python benchmarks/bench_columnar.py            # 2,000,000 rows (~2 minutes)
    python benchmarks/bench_columnar.py --quick    # 200,000 rows (a smoke test)

Rows at 1,000 rows/s (timestamps in ns, ~1 ms apart with jitter and bursts), one DOUBLE value.
The window: max + sum of the value over the last 10 s, 60 s and 600 s (a time range). For each:

* **pandas**: ``series.rolling("60s")`` ``.max()`` and ``.sum()`` over the whole series
  (pandas' own time-based rolling: rows newer than ``ts - range``, as the window's policy);
* **columnar**: :class:`~mtawindows.server.engine.columnar.ColumnarWindow` fed 10,000-row
  batches with per-row results (a ``pyarrow.Table`` per batch), and 100,000-row batches;
* **per-row engine**: Amortized MTA over lifted rows with per-row totals (on a tenth of the
  rows: it is the slow baseline);
* **four windows** (10 s, 60 s, 600 s, count 1,000) on the same batches against one, each
  window's result asked after every batch (as the service does), with and without per-row
  results: as four windows, and as one window (60 s) with three members sharing its rows
  (``ColumnarWindow.attach``);
* **many keys in one call**: ``Compute``'s work in process (``run_results``: every key's
  window over rows sorted by key, nothing stored; the Spark connector's batch path), 100
  keys in calls of 50,000 rows, against pandas ``groupby(key).rolling`` on the same calls;
* **through gRPC** (1,000,000 rows; 200,000 for the per-row engine's state): one server, a
  Redis-backed window of max + sum over 60 s, 10,000-row batches with per-row results from
  the state as columns (the default), from the columnar shadow of the per-row engine, and
  from the per-row engine (``MTAWINDOWS_COLUMNAR=0``), against pandas in process on the same
  rows; batched ingest; four windows against one.

Every per-row result of the columnar path is checked against pandas (max exact, sum within
1e-9 relative). Writes benchmarks/results/columnar.{csv,md,png} (``--quick``: columnar-quick.*).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).parent))
from bench_cluster import Report, write

from mtawindows.client import (
    Aggregation,
    Field,
    Policy,
    Storage,
    StreamSpec,
    WindowClient,
    WindowSpec,
)
from mtawindows.server.engine import (
    AmortizedMTA,
    Count,
    CountPolicy,
    Max,
    Record,
    Sum,
    TimeRangePolicy,
)
from mtawindows.server.engine.columnar import ColumnarWindow
from mtawindows.server.engine.columnar.runs import run_results
from mtawindows.testing import LocalServer

BATCH = 10_000  # the service's batches (issue 22's gRPC case)
BIG = 100_000  # larger batches, for comparison
WARM = 3  # batches a server takes before the gRPC cases time it (its one-time work)
GRPC_ROWS = 1_000_000  # rows through gRPC, state as columns
ENGINE_ROWS = 200_000  # rows through gRPC, the per-row engine's state
KEYS = 100  # keys of the Compute case
CALL_ROWS = 50_000  # rows a Compute call carries (the Spark connector's batch_rows)
RANGES_S = (10, 60, 600)
SEC = 1_000_000_000


def rows(n: int, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """``n`` rows at ~1,000 rows/s: 1 ms steps with jitter, a burst (0 ms) now and then."""
    rng = np.random.default_rng(seed)
    steps = rng.integers(0, 2_000_000, n)  # 0 to 2 ms: 1 ms on average
    steps[rng.random(n) < 0.01] = 0
    ts = 1_700_000_000 * SEC + np.cumsum(steps)
    v = rng.normal(100.0, 15.0, n)
    return ts.astype(np.int64), v


def record(count: bool = False) -> Record:
    """max + sum of v, and what the policy reads: the newest timestamp (or a count)."""
    if count:
        return Record(m=Max("v"), s=Sum("v"), n=Count())
    return Record(m=Max("v"), s=Sum("v"), ts=Max("ts"))


def time_pandas(ts: np.ndarray, v: np.ndarray, range_s: int) -> tuple[float, pd.DataFrame]:
    series = pd.Series(v, index=pd.DatetimeIndex(ts))
    t0 = time.perf_counter()
    r = series.rolling(f"{range_s}s")
    out = pd.DataFrame({"max": r.max(), "sum": r.sum()})
    return time.perf_counter() - t0, out


def time_columnar(
    windows: list[ColumnarWindow], ts: np.ndarray, v: np.ndarray, batch: int = BATCH
) -> tuple[float, list]:
    tables = []
    t0 = time.perf_counter()
    for i in range(0, len(ts), batch):
        cols = {"ts": ts[i : i + batch], "v": v[i : i + batch]}
        for w in windows:
            r = w.apply(cols, per_row=True)
            if w is windows[0]:
                tables.append(r.rows)
    return time.perf_counter() - t0, tables


def one_window() -> ColumnarWindow:
    return ColumnarWindow(record(), TimeRangePolicy(60 * SEC, field="ts"))


def separate_windows() -> list[ColumnarWindow]:
    out = [ColumnarWindow(record(), TimeRangePolicy(r * SEC, field="ts")) for r in RANGES_S]
    out.append(ColumnarWindow(record(count=True), CountPolicy(1000, field="n")))
    return out


def shared_window() -> ColumnarWindow:
    """The 60 s window holding the rows of three members: 10 s, 600 s, count 1,000."""
    w = ColumnarWindow(
        Record(m=Max("v"), s=Sum("v"), ts=Max("ts"), n=Count()),
        TimeRangePolicy(60 * SEC, field="ts"),
    )
    w.attach("w10", record(), TimeRangePolicy(10 * SEC, field="ts"))
    w.attach("w600", record(), TimeRangePolicy(600 * SEC, field="ts"))
    w.attach("c1000", record(count=True), CountPolicy(1000, field="n"))
    return w


def time_windows(make: Any, ts: np.ndarray, v: np.ndarray, per_row: bool) -> float:
    """Seconds for every batch into the windows ``make()`` gives (and their members), each
    one's result asked after every batch."""
    windows = make()
    t0 = time.perf_counter()
    for i in range(0, len(ts), BATCH):
        cols = {"ts": ts[i : i + BATCH], "v": v[i : i + BATCH]}
        for w in windows:
            w.apply(cols, per_row=per_row, member_rows=set(w.members) if per_row else set())
            w.query()
            for m in w.members:
                w.member_aggregate(m)
    return time.perf_counter() - t0


def time_per_row(ts: np.ndarray, v: np.ndarray, range_s: int) -> float:
    m = record()
    w = AmortizedMTA(m, TimeRangePolicy(range_s * SEC, field="ts"))
    t0 = time.perf_counter()
    for i in range(0, len(ts), BATCH):
        lifted = [
            m.lift({"ts": int(a), "v": float(b)})
            for a, b in zip(ts[i : i + BATCH], v[i : i + BATCH], strict=True)
        ]
        totals: list = []
        sizes: list = []
        w.apply_lifted(lifted, totals=totals, sizes=sizes)
        [m.lower(t) for t in totals]
    return time.perf_counter() - t0


def time_service(
    ts: np.ndarray,
    v: np.ndarray,
    columnar: bool,
    mode: str,
    arrow: bool = False,
    state: bool = False,
    windows: int = 1,
    shared: bool = True,
    pipelined: bool = False,
) -> tuple[float, float]:
    """Seconds for the rows after the first :data:`WARM` batches through gRPC into one
    server (its own embedded Redis), and the first batch's own: a server's first batches
    pay its one-time work (pyarrow imports pandas on first use, numba loads its compiled
    scans: about a second), which a long-running service pays once, not per batch. One
    Redis-backed window of max + sum over 60 s, 10,000-row batches, results ``mode``; with
    ``columnar`` False the server computes per-row results on the per-row engine
    (``MTAWINDOWS_COLUMNAR=0``); with ``arrow`` the batches go as Arrow tables (IPC) and
    per-row results come back as Arrow tables (``arrow=True``), else as lists and protobuf;
    with ``state`` the window's state is columnar (``MTAWINDOWS_COLUMNAR_STATE=1``: no engine
    over lifted rows); ``windows`` 4: the four windows of the in-process case, sharing the
    first one's rows (the default) or, without ``shared``, each with rows of its own
    (``--no-shared-rows``); ``pipelined``: the batches through ``append_batches`` (one
    AppendBatches call, four batches in flight) instead of one ``append`` at a time."""
    import pyarrow as pa

    env = {
        "MTAWINDOWS_COLUMNAR": "1" if columnar else "0",
        "MTAWINDOWS_COLUMNAR_STATE": "1" if state else "0",
        "MTAWINDOWS_SHARED_ROWS": "1" if shared else "0",
    }
    with (
        tempfile.TemporaryDirectory(prefix="mtaw-bc-") as d,
        LocalServer(d, env=env) as srv,
        WindowClient(srv.target, timeout=120) as c,
    ):
        c.create_stream(StreamSpec("s", (Field("v", "DOUBLE"),), wall_clock=False))
        aggs = (Aggregation("m", "max", "v"), Aggregation("s", "sum", "v"))
        policies = [Policy.time_range(timedelta(seconds=60))]
        if windows == 4:
            policies += [
                Policy.time_range(timedelta(seconds=10)),
                Policy.time_range(timedelta(seconds=600)),
                Policy.count(1000),
            ]
        for j, policy in enumerate(policies):
            name = "w" if j == 0 else f"w{j}"
            c.create_window(WindowSpec("s", name, aggs, policy, "AMTA", Storage("redis")))
        # the batches as a user holds them (Arrow tables, or lists), made before the clock
        # starts, as pandas' Series is made before its rolling is timed
        batches: list[Any] = []
        for i in range(0, len(ts), BATCH):
            if arrow:
                stamps = pa.array(ts[i : i + BATCH]).cast(pa.timestamp("ns"))
                batches.append(pa.table({"ts": stamps, "v": v[i : i + BATCH]}))
            else:
                batches.append({"ts": ts[i : i + BATCH].tolist(), "v": v[i : i + BATCH].tolist()})
        t0 = first = time.perf_counter()
        if pipelined:  # the warm-up batches first, one at a time, then the rest timed
            kw: dict[str, Any] = {"results": mode, "arrow": arrow and mode == "per_row"}
            for j, batch in enumerate(batches[:WARM]):
                c.append("s", batch, **kw)
                if j == 0:
                    first = time.perf_counter() - t0
            t0 = time.perf_counter()
            piped = c.append_batches("s", batches[WARM:], **kw)
            for batch, res in zip(batches[WARM:], piped, strict=True):
                if mode == "per_row":
                    n = batch.num_rows if arrow else len(batch["ts"])
                    got = res.row_tables["w"].num_rows if arrow else len(res.row_results["w"]["m"])
                    assert got == n
            batches = []
        for j, batch in enumerate(batches):
            if j == 1:
                first = time.perf_counter() - t0
            if j == WARM:
                t0 = time.perf_counter()
            if arrow:
                res = c.append("s", batch, results=mode, arrow=mode == "per_row")
                if mode == "per_row":
                    assert res.row_tables["w"].num_rows == batch.num_rows
                continue
            res = c.append("s", batch, results=mode)
            if mode == "per_row":
                assert len(res.row_results["w"]["m"]) == len(batch["ts"])
        took = time.perf_counter() - t0
        if columnar and mode == "per_row":
            assert c.get_window("s", "w").stats["columnar_batches"] > 0
        if state:
            assert "columnar" in c.get_window("s", "w").storage
        if windows > 1:  # the later windows share the first one's rows, or not
            shares = [c.get_window("s", f"w{j}").storage for j in range(1, windows)]
            assert all(("rows of window 'w'" in t) == (shared and state) for t in shares), shares
        return took, first


def four_over_one(
    report: Report, experiment: str, case: str, mode: str, ratio: float, n: int
) -> None:
    """Four windows' time over one window's, against issue 22's target (at most 1.5x)."""
    report.add(
        experiment, case, f"four / one, {mode}", ratio, "x", n=n, target="<= 1.5", met=ratio <= 1.5
    )


def check(tables: list, want: pd.DataFrame) -> int:
    """Rows whose max differs from pandas' or whose sum is off by more than 1e-9 relative."""
    m = np.concatenate([t.column("m").to_numpy() for t in tables])
    s = np.concatenate([t.column("s").to_numpy() for t in tables])
    bad = m != want["max"].to_numpy()
    ws = want["sum"].to_numpy()
    bad |= np.abs(s - ws) > 1e-9 * np.maximum(1.0, np.abs(ws))
    return int(bad.sum())


def keyed_rows(n: int, keys: int, seed: int = 2) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``n`` rows of ``keys`` keys, each key's at ~1,000 rows/s, sorted by (key, time) as the
    Spark connector sends them: the key, the timestamps, the value."""
    per = n // keys
    rng = np.random.default_rng(seed)
    steps = rng.integers(0, 2_000_000, (keys, per))
    ts = (1_700_000_000 * SEC + np.cumsum(steps, axis=1)).reshape(-1).astype(np.int64)
    key = np.repeat(np.arange(keys, dtype=np.int64), per)
    return key, ts, rng.normal(100.0, 15.0, keys * per)


def time_runs(key: np.ndarray, ts: np.ndarray, v: np.ndarray, range_s: int) -> tuple[float, list]:
    """``Compute``'s work in process (:func:`run_results`: every key's window in one call,
    nothing stored) over calls of :data:`CALL_ROWS` rows; the result tables."""
    policy = TimeRangePolicy(range_s * SEC, field="ts")
    tables = []
    t0 = time.perf_counter()
    for i in range(0, len(ts), CALL_ROWS):
        k = key[i : i + CALL_ROWS]
        starts = np.flatnonzero(np.r_[True, k[1:] != k[:-1]]).astype(np.int64)
        # (a call's first key from the call's first row: the connector sends the rows its
        # windows still reach again as context; here each call's first key starts anew)
        got = run_results(
            record(), policy, {"ts": ts[i : i + CALL_ROWS], "v": v[i : i + CALL_ROWS]}, starts
        )
        tables.append(got.rows)
    return time.perf_counter() - t0, tables


def time_pandas_keys(
    key: np.ndarray, ts: np.ndarray, v: np.ndarray, range_s: int
) -> tuple[float, pd.DataFrame]:
    """pandas ``groupby(key).rolling`` max and sum over the same rows, in the same calls
    (the rows sorted by key: the groups come back in the rows' order)."""
    out = []
    t0 = time.perf_counter()
    for i in range(0, len(ts), CALL_ROWS):
        df = pd.DataFrame(
            {"k": key[i : i + CALL_ROWS], "v": v[i : i + CALL_ROWS]},
            index=pd.DatetimeIndex(ts[i : i + CALL_ROWS]),
        )
        r = df.groupby("k", sort=False)["v"].rolling(f"{range_s}s")
        out.append(pd.DataFrame({"max": r.max().to_numpy(), "sum": r.sum().to_numpy()}))
    took = time.perf_counter() - t0
    return took, pd.concat(out, ignore_index=True)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--quick", action="store_true", help="200,000 rows")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = ap.parse_args()
    n = 200_000 if args.quick else args.rows
    ts, v = rows(n)
    report = Report()
    stem = "columnar-quick" if args.quick else "columnar"
    # warm both up (numba's compiled scans load on first use; pandas' rolling too)
    time_pandas(ts[:BATCH], v[:BATCH], 10)
    time_columnar(
        [ColumnarWindow(record(), TimeRangePolicy(SEC, field="ts"))],
        ts[: 3 * BATCH],
        v[: 3 * BATCH],
    )
    for range_s in RANGES_S:
        case = f"max + sum, {range_s} s"
        tp, want = time_pandas(ts, v, range_s)
        policy = TimeRangePolicy(range_s * SEC, field="ts")
        tc, tables = time_columnar([ColumnarWindow(record(), policy)], ts, v, BATCH)
        tbig, tables_big = time_columnar([ColumnarWindow(record(), policy)], ts, v, BIG)
        k = max(BATCH, n // 10)
        tr = time_per_row(ts[:k], v[:k], range_s) * n / k
        report.add("per-row results", case, "pandas rolling", n / tp, "rows/s", n=n)
        report.add("per-row results", case, "columnar", n / tc, "rows/s", n=n)
        ratio = tp / tc
        report.add(
            "per-row results",
            case,
            "columnar / pandas",
            ratio,
            "x",
            n=n,
            target=">= 0.5",
            met=ratio >= 0.5,
        )
        report.add(
            "per-row results", case, f"columnar, {BIG:,}-row batches", n / tbig, "rows/s", n=n
        )
        report.add(
            "per-row results", case, f"columnar / pandas, {BIG:,}-row batches", tp / tbig, "x", n=n
        )
        report.add("per-row results", case, "per-row engine", n / tr, "rows/s", n=k)
        report.add("per-row results", case, "columnar / per-row engine", tr / tc, "x", n=n)
        wrong = check(tables, want) + check(tables_big, want)
        report.add(
            "per-row results",
            case,
            "rows differing from pandas",
            wrong,
            "rows",
            n=n,
            target="0",
            met=wrong == 0,
        )
    # four windows on one stream against one: as four windows, and as one window's members
    # (ColumnarWindow.attach: the rows lifted, sealed and held once); each window's result
    # asked after every batch, as the service does
    for per_row in (True, False):
        mode = "per-row results" if per_row else "batched"
        one = min(time_windows(lambda: [one_window()], ts, v, per_row) for _ in range(2))
        apart = min(time_windows(separate_windows, ts, v, per_row) for _ in range(2))
        shared = min(time_windows(lambda: [shared_window()], ts, v, per_row) for _ in range(2))
        for how, t in (("four windows", apart), ("one window and three members", shared)):
            four_over_one(
                report, "four windows", f"10 s, 60 s, 600 s, count 1,000: {how}", mode, t / one, n
            )
    # many keys' windows in one call (Compute's work, the Spark connector's batch path), in
    # process, against pandas groupby-rolling over the same calls; the best of three each
    key, kts, kv = keyed_rows(n, KEYS)
    time_runs(key[:CALL_ROWS], kts[:CALL_ROWS], kv[:CALL_ROWS], 10)  # (compiled scans)
    for range_s in RANGES_S:
        case = f"{KEYS} keys, max + sum, {range_s} s, {CALL_ROWS:,}-row calls"
        ours = [time_runs(key, kts, kv, range_s) for _ in range(3)]
        theirs = [time_pandas_keys(key, kts, kv, range_s) for _ in range(3)]
        tr, tk = min(t for t, _ in ours), min(t for t, _ in theirs)
        x = "many keys in one call"
        report.add(x, case, "pandas groupby rolling", n / tk, "rows/s", n=n)
        report.add(x, case, "Compute's work (run_results)", n / tr, "rows/s", n=n)
        report.add(x, case, "Compute / pandas", tk / tr, "x", n=n)
        wrong = check(ours[0][1], theirs[0][1])
        report.add(
            x, case, "rows differing from pandas", wrong, "rows", n=n, target="0", met=wrong == 0
        )
    # through gRPC: one server, a Redis-backed window (max + sum over 60 s); the columnar
    # cases over GRPC_ROWS (100 batches after the warm-up: a run of 17 moved with the
    # machine's phase by a third), the per-row engine's over ENGINE_ROWS (it takes ~100x
    # longer a row)
    case = "max + sum, 60 s, Redis-backed, gRPC"
    services = (
        (True, True, False, "columnar state (the default), Arrow both ways, append_batches"),
        (True, True, False, "columnar state (the default), Arrow both ways"),
        (True, False, False, "columnar state (the default), lists and protobuf"),
        (True, True, True, "engine + columnar shadow (--no-columnar-state), Arrow both ways"),
        (True, False, True, "engine + columnar shadow (--no-columnar-state), lists and protobuf"),
        (False, False, True, "per-row engine alone, lists and protobuf"),
    )
    for columnar, arrow, engine, name in services:
        k = min(n, ENGINE_ROWS if engine else GRPC_ROWS)
        timed = k - WARM * BATCH  # the rows timed through gRPC: after the warm-up batches
        # pandas on the same rows just before and just after each run (the machine's speed
        # moves by phases of seconds: a baseline measured minutes apart moved the ratio by
        # a third); three runs (one for the per-row engine's: ~10 s a run), the best time
        # of each side (the best ratio of a run would pick a run where pandas was slow)
        pandas_times = [time_pandas(ts[:k], v[:k], 60)[0]]
        runs = []
        for _ in range(1 if engine else 3):
            piped = "append_batches" in name
            runs.append(
                time_service(
                    ts[:k], v[:k], columnar, "per_row", arrow, state=not engine, pipelined=piped
                )
            )
            pandas_times.append(time_pandas(ts[:k], v[:k], 60)[0])
        t, first = min(runs)
        tp = min(pandas_times)
        t *= k / timed  # as if every row went at the rate after the warm-up
        report.add("through gRPC", case, f"per-row results, {name}", k / t, "rows/s", n=timed)
        report.add(
            "through gRPC", case, f"per-row results, {name}: first batch", first * 1e3, "ms", n=1
        )
        report.add(
            "through gRPC",
            case,
            f"per-row results, {name} / pandas in process",
            tp / t,
            "x",
            n=k,
            target=">= 0.2" if not engine else "",
            met=(tp / t >= 0.2) if not engine else None,
        )
    ingest = (
        (True, True, "Arrow, columnar state (the default), append_batches"),
        (True, True, "Arrow, columnar state (the default)"),
        (False, True, "lists and protobuf, columnar state (the default)"),
        (True, False, "Arrow, engine (--no-columnar-state)"),
        (False, False, "lists and protobuf, engine (--no-columnar-state)"),
    )
    for arrow, state, name in ingest:
        k = min(n, GRPC_ROWS if state else ENGINE_ROWS)
        timed = k - WARM * BATCH
        piped = "append_batches" in name
        t = time_service(ts[:k], v[:k], True, "none", arrow, state=state, pipelined=piped)[0]
        t *= k / timed
        report.add(
            "through gRPC", case, f"batched ingest (no results), {name}", k / t, "rows/s", n=timed
        )
    # four windows on one stream through the service, the state columnar: against one; the
    # three later windows sharing the first one's rows (the default), or rows of their own
    k = min(n, GRPC_ROWS)
    for mode in ("per_row", "none"):
        # the best of three runs each (the machine's speed moves by phases)
        one = min(time_service(ts[:k], v[:k], True, mode, True, state=True)[0] for _ in range(3))
        for shared, how in ((True, "sharing rows (the default)"), (False, "--no-shared-rows")):
            four = min(
                time_service(ts[:k], v[:k], True, mode, True, state=True, windows=4, shared=shared)[
                    0
                ]
                for _ in range(3)
            )
            four_over_one(
                report,
                "four windows, through gRPC",
                f"10 s, 60 s, 600 s, count 1,000; columnar state, Arrow, {how}",
                "per-row results" if mode == "per_row" else "batched ingest",
                four / one,
                k,
            )
    header = [
        f"in process, {n:,} rows at ~1,000 rows/s, {BATCH:,}-row batches (and {BIG:,}), per-row results; "
        f"numpy {np.__version__}, pandas {pd.__version__}"
    ]
    print(write(report, args.out, stem, header))
    plot(report, args.out / f"{stem}.png")


def plot(report: Report, path: Path) -> None:
    try:
        import matplotlib
    except ImportError:
        print("matplotlib is not installed: no plot", flush=True)
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    names = ["pandas rolling", "columnar", "per-row engine"]
    width = 0.25
    for j, name in enumerate(names):
        ys = [
            next(
                r["value"]
                for r in report.rows
                if r["case"] == f"max + sum, {s} s" and r["metric"] == name
            )
            for s in RANGES_S
        ]
        ax.bar([i + j * width for i in range(len(RANGES_S))], ys, width, label=name)
    ax.set_xticks([i + width for i in range(len(RANGES_S))], [f"{s} s" for s in RANGES_S])
    ax.set_yscale("log")
    ax.set_ylabel("per-row results, rows/s")
    ax.set_title("max + sum over a time range, in process")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
