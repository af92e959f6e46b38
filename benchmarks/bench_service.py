"""Service benchmarks (issue 4): the gRPC server as a subprocess on loopback, the SDK as client.

    python benchmarks/bench_service.py            # all experiments (~2 minutes)
    python benchmarks/bench_service.py --quick    # smaller counts

1. ingest: 10k-row batches over loopback gRPC into one Redis-backed AMTA window
   (count + sum + max record): rows/s (target >= 300k).
2. latency: 1-row Appends one after another: p50 / p99 / p99.9 (target p99 < 2 ms).
3. fan-out: the same rows through 1 and 4 windows of one stream (shared decode): cost per row
   (target: 4 windows < 4x one).
4. CEL: per-update cost of a CEL policy vs the equivalent built-in (target <= 3x), in the engine.

Writes benchmarks/results/service.{csv,md,png}. Every loop is bounded in count and time.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from mtawindows.client import (
    Aggregation,
    Field,
    Policy,
    StreamSpec,
    WindowClient,
    WindowSpec,
)
from mtawindows.client.calls import append_request
from mtawindows.testing import LocalServer

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "results"
AGGS = (Aggregation("n", "count"), Aggregation("s", "sum", "v"), Aggregation("m", "max", "v"))


def batches(n_batches: int, size: int, t0: int = 0) -> list[Any]:
    import random

    rng = random.Random(1)
    out = []
    t = t0
    for _ in range(n_batches):
        cols = {"ts": list(range(t, t + size)), "v": [rng.random() for _ in range(size)]}
        out.append(
            append_request("s", cols, {"ts": "TIMESTAMP", "v": "DOUBLE"}, None, None, "none", ())
        )
        t += size
    return out


def setup(c: WindowClient, windows: int, stream: str = "s") -> None:
    c.create_stream(StreamSpec(stream, (Field("v", "DOUBLE"),), wall_clock=False))
    for i in range(windows):
        c.create_window(WindowSpec(stream, f"w{i}", AGGS, Policy.count(1_000_000)))


def ingest(c: WindowClient, reqs: list[Any], budget: float) -> tuple[float, list[float]]:
    """Overall rows/s and per-batch rows/s (sequential unary calls)."""
    per: list[float] = []
    rows = 0
    t0 = time.perf_counter()
    for r in reqs:
        t = time.perf_counter()
        c.stub.Append(r, timeout=60)
        dt = time.perf_counter() - t
        n = len(r.columns[0].timestamps.values)
        per.append(n / dt)
        rows += n
        if time.perf_counter() - t0 > budget:
            break
    return rows / (time.perf_counter() - t0), per


def latency(c: WindowClient, count: int, t0: int, budget: float) -> list[float]:
    reqs = []
    for i in range(count):
        cols = {"ts": [t0 + i], "v": [0.5]}
        reqs.append(
            append_request("s", cols, {"ts": "TIMESTAMP", "v": "DOUBLE"}, None, None, "none", ())
        )
    out = []
    start = time.perf_counter()
    for r in reqs:
        t = time.perf_counter()
        c.stub.Append(r, timeout=10)
        out.append(time.perf_counter() - t)
        if time.perf_counter() - start > budget:
            break
    return out


def health_floor(target: str, count: int) -> list[float]:
    """The same server's standard health Check, one after another: the round-trip floor of
    this machine's gRPC stack, measured in the same minute as the Appends."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(target) as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        req = health_pb2.HealthCheckRequest()
        out = []
        for _ in range(count):
            t = time.perf_counter()
            stub.Check(req, timeout=10)
            out.append(time.perf_counter() - t)
    return out


def cel_vs_builtin(n: int) -> dict[str, float]:
    from mtawindows.server.engine.amta import AmortizedMTA
    from mtawindows.server.service.window_builder import build_window

    stream = StreamSpec("s", (Field("v", "DOUBLE"),), wall_clock=False)
    aggs = (Aggregation("n", "count"), Aggregation("ts_max", "max", "ts"))
    rng = timedelta(microseconds=500)  # 500_000 ns: a window of ~500 rows below
    built_in = build_window(stream, WindowSpec("s", "b", aggs, Policy.time_range(rng)))
    cel = build_window(
        stream,
        WindowSpec(
            "s", "c", aggs, Policy.expression('total.ts_max - old.ts_max >= duration("500us")')
        ),
    )
    rows = [{"ts": i * 1000, "v": 0.5} for i in range(n)]
    out: dict[str, float] = {}
    for name, built in (("builtin", built_in), ("cel", cel)):
        best = float("inf")
        for _ in range(5):
            w = AmortizedMTA(built.monoid, built.policy)
            lifted = [built.monoid.lift(r) for r in rows]
            t = time.perf_counter()
            for u in lifted:
                w.apply_lifted([u])
            best = min(best, (time.perf_counter() - t) / n)
        out[name] = best * 1e6
        out[f"{name}_size"] = len(w)
    # a plain cel-python evaluation, for scale
    import celpy

    env = celpy.Environment()
    prog = env.program(env.compile("total.ts_max - old.ts_max >= 500000"))
    act = {"total": celpy.json_to_cel({"ts_max": 10**6}), "old": celpy.json_to_cel({"ts_max": 1})}
    t = time.perf_counter()
    for _ in range(2000):
        prog.evaluate(act)
    out["celpy_eval"] = (time.perf_counter() - t) / 2000 * 1e6
    return out


def timed(label: str, fn: Callable[[], Any]) -> Any:
    t = time.perf_counter()
    out = fn()
    print(f"  {label}: {time.perf_counter() - t:.1f}s", flush=True)
    return out


def run_once(quick: bool) -> tuple[list[dict[str, Any]], list[float], list[float]]:
    """One run of experiments 1-3 on fresh servers."""
    n_batches = 40 if quick else 150
    n_lat = 2000 if quick else 10_000
    rows_csv: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        # 1 + 2: one window
        with (
            LocalServer(
                Path(tmp) / "one", "--log-level", "warning", "--flush-interval", "1.0"
            ) as srv,
            WindowClient(srv.target) as c,
        ):
            setup(c, 1)
            reqs = batches(n_batches, 10_000)
            overall, per = timed("ingest", lambda: ingest(c, reqs, 120))
            rows_csv.append(
                {
                    "experiment": "ingest_10k_batches",
                    "windows": 1,
                    "value": overall,
                    "unit": "rows/s",
                }
            )
            rows_csv.append(
                {
                    "experiment": "ingest_10k_batches_median_batch",
                    "windows": 1,
                    "value": statistics.median(per),
                    "unit": "rows/s",
                }
            )
            t_end = n_batches * 10_000
            time.sleep(3)  # let the ingest's background writes and checkpoint finish
            floor = timed("health floor", lambda: health_floor(srv.target, n_lat))
            lat = timed("latency", lambda: latency(c, n_lat, t_end, 60))
            for label, xs in (("append_1row", lat), ("health_check", floor)):
                q = statistics.quantiles(xs, n=1000)
                for name, v in (("p50", statistics.median(xs)), ("p99", q[989]), ("p99.9", q[998])):
                    rows_csv.append(
                        {
                            "experiment": f"{label}_{name}",
                            "windows": 1,
                            "value": v * 1e3,
                            "unit": "ms",
                        }
                    )
            one_row_1 = statistics.median(lat) * 1e6
            stats = c.get_window("s", "w0").stats
            print(f"  window: {stats}")
        # 3: four windows on one stream
        with (
            LocalServer(
                Path(tmp) / "four", "--log-level", "warning", "--flush-interval", "1.0"
            ) as srv,
            WindowClient(srv.target) as c,
        ):
            setup(c, 4)
            reqs = batches(n_batches, 10_000)
            overall4, _ = timed("ingest x4", lambda: ingest(c, reqs, 120))
            lat4 = timed("latency x4", lambda: latency(c, n_lat, n_batches * 10_000, 60))
            one_row_4 = statistics.median(lat4) * 1e6
        rows_csv.append(
            {"experiment": "ingest_10k_batches", "windows": 4, "value": overall4, "unit": "rows/s"}
        )
        rows_csv.append(
            {
                "experiment": "cost_ratio_4_vs_1_batched",
                "windows": 4,
                "value": overall / overall4,
                "unit": "x",
            }
        )
        rows_csv.append(
            {"experiment": "append_1row_p50", "windows": 4, "value": one_row_4 / 1e3, "unit": "ms"}
        )
        rows_csv.append(
            {
                "experiment": "cost_ratio_4_vs_1_single_row",
                "windows": 4,
                "value": one_row_4 / one_row_1,
                "unit": "x",
            }
        )
    return rows_csv, per, lat


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeat", type=int, default=3, help="runs; the table shows medians")
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    runs = []
    for i in range(args.repeat):
        print(f"run {i + 1}/{args.repeat}", flush=True)
        runs.append(run_once(args.quick))
    rows_csv = []
    for j, row in enumerate(runs[0][0]):
        values = [r[0][j]["value"] for r in runs]
        rows_csv.append(
            {
                **row,
                "value": statistics.median(values),
                "runs": len(values),
                "min": min(values),
                "max": max(values),
            }
        )
    per, lat = runs[len(runs) // 2][1], runs[len(runs) // 2][2]
    # 4: CEL
    cel = timed("cel", lambda: cel_vs_builtin(20_000 if args.quick else 100_000))
    rows_csv.append(
        {
            "experiment": "policy_builtin_per_update",
            "windows": 1,
            "value": cel["builtin"],
            "unit": "us",
        }
    )
    rows_csv.append(
        {"experiment": "policy_cel_per_update", "windows": 1, "value": cel["cel"], "unit": "us"}
    )
    rows_csv.append(
        {
            "experiment": "cel_vs_builtin",
            "windows": 1,
            "value": cel["cel"] / cel["builtin"],
            "unit": "x",
        }
    )
    rows_csv.append(
        {
            "experiment": "celpy_plain_evaluation",
            "windows": 1,
            "value": cel["celpy_eval"],
            "unit": "us",
        }
    )
    assert cel["builtin_size"] == cel["cel_size"], cel

    for r in rows_csv:
        r.setdefault("runs", 1)
        r.setdefault("min", r["value"])
        r.setdefault("max", r["value"])
    with (OUT / "service.csv").open("w", newline="") as f:
        fields = ["experiment", "windows", "value", "unit", "runs", "min", "max"]
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows_csv)
    lines = [
        "| experiment | windows | median | min | max | unit | runs |",
        "|---|---:|---:|---:|---:|---|---:|",
    ]
    lines += [
        f"| {r['experiment']} | {r['windows']} | {r['value']:.3g} | {r['min']:.3g} "
        f"| {r['max']:.3g} | {r['unit']} | {r['runs']} |"
        for r in rows_csv
    ]
    (OUT / "service.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    plot(per, lat, OUT / "service.png")


def plot(per_batch: list[float], lat: list[float], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    a.plot([x / 1e3 for x in per_batch])
    a.axhline(300, color="red", linestyle="--", label="target 300k rows/s")
    a.set_xlabel("batch (10k rows)")
    a.set_ylabel("k rows/s")
    a.set_title("Ingest into one Redis-backed AMTA window")
    a.legend()
    ms = sorted(x * 1e3 for x in lat)
    b.plot(ms, [i / len(ms) for i in range(len(ms))])
    b.axvline(2.0, color="red", linestyle="--", label="target p99 < 2 ms")
    b.set_xscale("log")
    b.set_xlabel("1-row Append latency (ms)")
    b.set_ylabel("CDF")
    b.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
