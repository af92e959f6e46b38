"""Queries the way users ask them (issue 25): hopping windows against Spark's ``window()`` in the
same run on the same rows, the shared plan of several hopping windows on one stream against a
stream per window, and (when their scripts are here) query-time ranges and sliding sketches.

    python benchmarks/bench_queries.py            # 1M rows, 600 s range, 1 s slide (~4 min)
    python benchmarks/bench_queries.py --quick    # a smoke run (under 60 s)
    python benchmarks/bench_queries.py --out DIR  # write somewhere else

* hopping vs Spark: ``--rows`` readings of ``--keys`` keys at ``--rate`` rows/s per key;
  "every second, the max, sum and count of the last 600 s" per key. mtawindows:
  ``sliding_aggregate(df, ..., slide=1 s)`` (the connector: the rows of every key of a task
  into one scratch stream with the hopping window, one row per (key, boundary) back); Spark:
  ``df.groupBy(key, F.window("ts", "600 seconds", "1 second")).agg(max, sum, count)``; both
  collected (a row per window), Spark ``local[2]``. Spark copies every row into 600 windows: when
  its whole run would pass ``--budget`` seconds it runs on a prefix of the rows (``rows`` says
  how many), and mtawindows is checked against it on that prefix: the same windows, counts and
  maxima equal, sums within 1e-9 (relative); mtawindows's time on that prefix is a row too.
* shared plan vs separate windows: 1, 4 and 16 hopping windows (max, sum, count; ranges 60 s
  .. 600 s, slides 1 s .. 10 s) on one stream, against the same windows each on a stream of
  its own (the same rows appended to each: ``--shared-rows`` at ``--rate``, a case stops at
  ``--shared-budget`` seconds); the rows go in Appends of 10,000 through the SDK;
  rows/s = input rows / seconds. GetWindow's plan of the first window is recorded: it names
  the windows sharing its slices when the server shares them.
* query-time ranges and sketches: ``benchmarks/bench_ranges.py`` and ``bench_sketches.py``
  (their own figures and files) run as subprocesses when present, not in ``--quick`` unless
  ``--others``.

Writes ``queries.csv`` (one row per measurement), ``queries.md`` (the tables) and
``queries-spark.png``, ``queries-shared.png`` in benchmarks/results (``-quick`` in the names
with ``--quick``).
"""

from __future__ import annotations

import argparse
import csv
import math
import platform
import subprocess
import sys
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
    Storage,
    StreamSpec,
    WindowClient,
    WindowSpec,
)
from mtawindows.testing import LocalServer

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "results"
T0 = 1_700_000_000
AGGS = (
    Aggregation("hi", "max", "value"),
    Aggregation("total", "sum", "value"),
    Aggregation("n", "count"),
)
OURS = "mtawindows sliding_aggregate(slide)"
OURS_SAME = "mtawindows, on Spark's rows"
SPARK = "Spark groupBy(window())"
SHARED = "one stream, all windows"
SEPARATE = "a stream per window"
OTHERS = ("bench_ranges.py", "bench_sketches.py")


def timed(run: Callable[[], Any]) -> tuple[float, Any]:
    t = time.perf_counter()
    got = run()
    return time.perf_counter() - t, got


# --------------------------------------------------------------------------- hopping vs Spark


def make_input(spark: Any, rows: int, keys: int, rate: float, folder: Path) -> Any:
    from pyspark.sql import functions as F

    step = (F.floor(F.col("id") / keys) + F.rand(3) * 0.9) / F.lit(rate)
    df = spark.range(rows).select(
        (F.col("id") % keys).cast("string").alias("key"),
        F.timestamp_seconds(F.lit(T0) + step).alias("ts"),
        F.round(F.rand(5) * 100, 3).alias("value"),
    )
    df.write.mode("overwrite").parquet(str(folder))
    return spark.read.parquet(str(folder)).cache()


def run_ours(df: Any, target: str, stream: str, range_s: int, slide_s: int) -> list[Any]:
    from mtawindows.spark_connector import sliding_aggregate

    out = sliding_aggregate(
        df,
        target,
        stream,
        key_col="key",
        ts_col="ts",
        window=WindowSpec(stream, "w", AGGS, Policy.time_range(timedelta(seconds=range_s))),
        slide=timedelta(seconds=slide_s),
    )
    rows: list[Any] = out.collect()
    return rows


def run_spark(df: Any, range_s: int, slide_s: int) -> list[Any]:
    from pyspark.sql import functions as F

    out = (
        df.groupBy("key", F.window("ts", f"{range_s} seconds", f"{slide_s} seconds"))
        .agg(F.max("value").alias("hi"), F.sum("value").alias("total"), F.count("*").alias("n"))
        .select("key", F.col("window.end").alias("window_end"), "hi", "total", "n")
    )
    rows: list[Any] = out.collect()
    return rows


def agree(ours: list[Any], theirs: list[Any]) -> tuple[bool, str]:
    """The same windows (key, end), counts and maxima equal, sums within 1e-9."""
    a = {(r["key"], r["window_end"]): r for r in ours}
    b = {(r["key"], r["window_end"]): r for r in theirs}
    if a.keys() != b.keys():
        return False, f"windows differ: {len(a)} vs {len(b)} ({len(a.keys() ^ b.keys())} apart)"
    worst = 0.0
    for k, x in a.items():
        y = b[k]
        if x["n"] != y["n"] or x["hi"] != y["hi"]:
            return False, f"window {k}: count/max {x['n']}/{x['hi']} vs {y['n']}/{y['hi']}"
        err = abs(x["total"] - y["total"]) / max(1.0, abs(y["total"]))
        worst = max(worst, err)
        if err > 1e-9:
            return False, f"window {k}: sum {x['total']} vs {y['total']}"
    return True, f"{len(a):,} windows equal (sums within {worst:.1e})"


def hopping_vs_spark(
    spark: Any, srv: LocalServer, args: argparse.Namespace, work: Path
) -> list[dict[str, Any]]:
    rng, slide = args.range, args.slide
    with WindowClient(srv.target) as c:
        c.create_stream(StreamSpec("q_template", (Field("value", "DOUBLE"),), timestamp_field="ts"))
    df = make_input(spark, args.rows, args.keys, args.rate, work / "input")
    n = df.count()
    # warm up (Python workers, imports, Spark's plans): not timed
    small = df.orderBy("ts").limit(500)
    run_ours(small, srv.target, "q_template", rng, slide)
    run_spark(small, rng, slide)

    sec_ours, ours = timed(lambda: run_ours(df, srv.target, "q_template", rng, slide))
    print(f"{OURS:<40} {n:>10,} rows {sec_ours:7.1f} s {n / sec_ours:>11,.0f} rows/s", flush=True)
    # Spark on a prefix when the whole would pass the budget (a probe sizes it)
    probe = min(n, max(2_000, n // 50))
    sub = df.orderBy("key", "ts").limit(probe).cache() if probe < n else df
    sub.count()
    sec_probe, _ = timed(lambda: run_spark(sub, rng, slide))
    rows = int(min(n, max(probe, probe / max(sec_probe, 1e-3) * args.budget)))
    if rows < n:
        data = df.orderBy("key", "ts").limit(rows).cache()
        data.count()
    else:
        data = df
    sec_spark, theirs = timed(lambda: run_spark(data, rng, slide))
    print(
        f"{SPARK:<40} {rows:>10,} rows {sec_spark:7.1f} s {rows / sec_spark:>11,.0f} rows/s",
        flush=True,
    )
    sec_same, same = (
        (sec_ours, ours)
        if rows == n
        else timed(lambda: run_ours(data, srv.target, "q_template", rng, slide))
    )
    ok, note = agree(same, theirs)
    print(f"numbers agree: {ok} ({note})", flush=True)
    common = {
        "experiment": "hopping-vs-spark",
        "range_s": rng,
        "slide_s": slide,
        "keys": args.keys,
        "windows": len(theirs),
        "agree": ok,
        "note": note,
    }
    out = [
        {
            **common,
            "case": OURS,
            "rows": n,
            "seconds": round(sec_ours, 3),
            "rows_per_s": round(n / sec_ours),
        },
        {
            **common,
            "case": SPARK,
            "rows": rows,
            "seconds": round(sec_spark, 3),
            "rows_per_s": round(rows / sec_spark),
        },
    ]
    if rows < n:  # mtawindows on Spark's rows too (the same data, a shorter run)
        out.append(
            {
                **common,
                "case": OURS_SAME,
                "rows": rows,
                "seconds": round(sec_same, 3),
                "rows_per_s": round(rows / sec_same),
            }
        )
    return out


# --------------------------------------------------------------------------- shared plan


def queries(q: int) -> list[tuple[int, int]]:
    """``q`` (range s, slide s): ranges spread over 60 .. 600 s, slides over 1, 2, 5, 10 s."""
    slides = (1, 2, 5, 10)
    out = []
    for i in range(q):
        rng = 60 + (540 * i // (q - 1) // 10) * 10 if q > 1 else 600
        out.append((rng, slides[i % len(slides)]))
    return out


def shared_vs_separate(srv: LocalServer, args: argparse.Namespace) -> list[dict[str, Any]]:
    import numpy as np
    import pyarrow as pa

    rows, per = args.shared_rows, 10_000
    rng = np.random.default_rng(7)
    ts = (T0 * 10**9 + (np.arange(rows) / args.rate * 1e9).astype(np.int64)).astype(np.int64)
    vals = np.round(rng.random(rows) * 100, 3)
    batches = [
        pa.table(
            {
                "ts": pa.array(ts[i : i + per], pa.timestamp("ns")),
                "value": pa.array(vals[i : i + per]),
            }
        )
        for i in range(0, rows, per)
    ]
    out: list[dict[str, Any]] = []
    with WindowClient(srv.target, timeout=120) as c:
        # warm up (the server's first hopping window and Appends): not timed
        c.create_stream(StreamSpec("q_warm", (Field("value", "DOUBLE"),), timestamp_field="ts"))
        c.create_window(
            WindowSpec(
                "q_warm",
                "w",
                AGGS,
                Policy.time_range(timedelta(seconds=60)),
                slide=timedelta(seconds=1),
            )
        )
        for b in batches[:20]:
            c.append("q_warm", b)
        c.delete_stream("q_warm")
        for q in (1, 4, 16):
            qs = queries(q)
            for case in (SHARED, SEPARATE):
                tag = "s" if case == SHARED else "x"
                names = [f"q{q}{tag}"] if case == SHARED else [f"q{q}{tag}{i}" for i in range(q)]
                for name in names:
                    c.create_stream(
                        StreamSpec(name, (Field("value", "DOUBLE"),), timestamp_field="ts")
                    )
                for i, (r, s) in enumerate(qs):
                    stream = names[0] if case == SHARED else names[i]
                    c.create_window(
                        WindowSpec(
                            stream,
                            f"w{i}",
                            AGGS,
                            Policy.time_range(timedelta(seconds=r)),
                            storage=Storage(args.storage),
                            slide=timedelta(seconds=s),
                        )
                    )
                start = time.perf_counter()
                sent = 0
                for b in batches:
                    for name in names:
                        c.append(name, b)
                    sent += b.num_rows
                    if time.perf_counter() - start > args.shared_budget:
                        break
                sec = time.perf_counter() - start
                plan = c.get_window(names[0], "w0").plan
                closed = sum(
                    c.read_results(
                        names[0] if case == SHARED else names[i],
                        f"w{i}",
                        after_sequence=1 << 62,
                        limit=1,
                    )[1]
                    for i in range(q)
                )
                rec = {
                    "experiment": "shared-plan",
                    "case": case,
                    "queries": q,
                    "rows": sent,
                    "seconds": round(sec, 3),
                    "rows_per_s": round(sent / sec),
                    "windows": closed,
                    "note": " ".join(plan.split())[:160],
                }
                out.append(rec)
                print(
                    f"{q:>2} queries  {case:<26} {sent:>9,} rows {sec:6.1f} s {sent / sec:>10,.0f} rows/s",
                    flush=True,
                )
                for name in names:
                    c.delete_stream(name)
    return out


# --------------------------------------------------------------------------- the others' figures


def others(out_dir: Path, quick: bool, budget: float) -> list[dict[str, Any]]:
    """>>> query-time ranges and sketches: bench_ranges.py and bench_sketches.py (other
    scripts, their own files), run as they are when present; their tables go into ours."""
    got = []
    for script in OTHERS:
        path = ROOT / "benchmarks" / script
        if not path.exists():
            print(f"{script}: not here (skipped)", flush=True)
            continue
        cmd = [sys.executable, str(path), "--out", str(out_dir), *(["--quick"] if quick else [])]
        start = time.perf_counter()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=budget, check=False)
            code = proc.returncode
        except subprocess.TimeoutExpired:
            code = -1
        sec = time.perf_counter() - start
        print(f"{script}: exit {code} in {sec:.0f} s", flush=True)
        got.append(
            {
                "experiment": f"others:{script}",
                "case": " ".join(Path(x).name if x.endswith(".py") else x for x in cmd[1:]),
                "seconds": round(sec, 1),
                "note": "ok" if code == 0 else f"exit {code}",
            }
        )
    return got


# --------------------------------------------------------------------------- output


def slicing(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Pairs (what the server runs) against Panes (slices of gcd(range, slide)) as the slicing
    of one hopping window, in process: the same Hopper and final aggregator (AMTA over max +
    sum + count), the same rows (``--slicing-rows`` at 1,000 rows/s); rows/s, slices pushed,
    and the boundaries' results compared."""
    import numpy as np

    from mtawindows.server.engine import AmortizedMTA, Count, Max, Record, Sum
    from mtawindows.server.engine.hopping import Hopper, HopPlan, SliceCutoff, slice_record

    class PanesPlan(HopPlan):
        def next_edge(self, pos: int) -> int:
            g = math.gcd(self.range, self.slide)
            return (pos // g + 1) * g

    rec = Record(m=Max("v"), s=Sum("v"), n=Count())
    n = args.slicing_rows
    rng = np.random.default_rng(7)
    ts = (np.cumsum(rng.integers(0, 2_000_000, n)) + 1_700_000_000 * 10**9).tolist()
    lifted = [rec.lift({"v": float(x)}) for x in rng.normal(100.0, 15.0, n)]
    out: list[dict[str, Any]] = []
    for range_s, slide_s in ((600, 1), (600, 7), (61, 10), (65, 10)):
        got: dict[str, Any] = {}
        for name, cls in (("Pairs", HopPlan), ("Panes", PanesPlan)):
            cut = SliceCutoff()
            srec = slice_record(rec)
            engine = AmortizedMTA(srec, cut)
            h = Hopper(cls("time", slide_s * 10**9, "time", range_s * 10**9), rec, engine, cut)
            seconds, (bs, _) = timed(lambda h=h: h.apply(lifted, ts))
            got[name] = [(b.at, b.size, srec.lower(b.aggregate)["m"]) for b in bs]
            out.append(
                {
                    "experiment": "slicing",
                    "case": name,
                    "range_s": range_s,
                    "slide_s": slide_s,
                    "rows": n,
                    "seconds": round(seconds, 3),
                    "rows_per_s": round(n / seconds),
                    "slices": engine.inserted,
                    "boundaries": len(bs),
                    "agree": got.get("Pairs") == got[name],
                }
            )
    return out


def write(results: list[dict[str, Any]], out_dir: Path, args: argparse.Namespace) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = "queries" + ("-quick" if args.quick else "")
    fields = list(dict.fromkeys(k for r in results for k in r))
    with (out_dir / f"{stem}.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(results)
    hop = [r for r in results if r["experiment"] == "hopping-vs-spark"]
    lines = [
        f"# Queries (benchmarks/bench_queries.py{' --quick' if args.quick else ''})",
        "",
        f"{platform.machine()}, Python {platform.python_version()}, Spark local[2], one server "
        f"(scratch windows in {args.storage}).",
        "",
    ]
    if hop:
        ours = next(r for r in hop if r["case"] == OURS)
        theirs = next(r for r in hop if r["case"] == SPARK)
        same = next((r for r in hop if r["case"] == OURS_SAME), ours)
        lines += [
            f"## Hopping windows vs Spark window(): {args.keys} key(s), {args.rate:g} rows/s per key, "
            f"{ours['range_s']} s range, {ours['slide_s']} s slide, max + sum + count",
            "",
            "| case | rows | seconds | rows/s |",
            "|---|---:|---:|---:|",
        ]
        lines += [
            f"| {r['case']} | {r['rows']:,} | {r['seconds']} | {r['rows_per_s']:,} |" for r in hop
        ]
        lines += [
            "",
            f"mtawindows / Spark: **{ours['rows_per_s'] / theirs['rows_per_s']:.1f}x** "
            f"({same['rows_per_s'] / theirs['rows_per_s']:.1f}x on Spark's rows); "
            f"numbers agree: **{theirs['agree']}** ({theirs['note']}).",
            "",
        ]
    shared = [r for r in results if r["experiment"] == "shared-plan"]
    if shared:
        by = {(r["queries"], r["case"]): r for r in shared}
        lines += [
            f"## Shared plan vs separate windows (hopping, ranges 60-600 s, slides 1-10 s, "
            f"{args.rate:g} rows/s)",
            "",
            f"| queries | {SHARED} rows/s | {SEPARATE} rows/s | shared / separate | plan of w0 (shared) |",
            "|---:|---:|---:|---:|---|",
        ]
        for q in sorted({r["queries"] for r in shared}):
            a, b = by[(q, SHARED)], by[(q, SEPARATE)]
            lines.append(
                f"| {q} | {a['rows_per_s']:,} | {b['rows_per_s']:,} | "
                f"{a['rows_per_s'] / b['rows_per_s']:.2f}x | {a['note'].replace('|', '/')} |"
            )
        lines.append("")
    cuts = [r for r in results if r["experiment"] == "slicing"]
    if cuts:
        lines += [
            f"## Slicing: Pairs (the server's) vs Panes, in process ({cuts[0]['rows']:,} rows "
            "at 1,000 rows/s, AMTA over max + sum + count)",
            "",
            "| range | slide | slicing | rows/s | slices pushed | boundaries | same results |",
            "|---:|---:|---|---:|---:|---:|---|",
        ]
        lines += [
            f"| {r['range_s']} s | {r['slide_s']} s | {r['case']} | {r['rows_per_s']:,} | "
            f"{r['slices']:,} | {r['boundaries']:,} | {r['agree']} |"
            for r in cuts
        ]
        lines.append("")
    rest = [r for r in results if r["experiment"].startswith("others:")]
    if not rest:
        have = [n for n in ("ranges.md", "sketches.md") if (out_dir / n).exists()]
        if have:
            lines += ["## Query-time ranges and sketches", ""]
            lines += [f"Their own scripts' tables (not run here): {', '.join(have)}.", ""]
    if rest:
        lines += ["## Query-time ranges and sketches (their own scripts)", ""]
        for r in rest:
            lines.append(f"- `{r['case']}`: {r['note']} in {r['seconds']} s")
            table = out_dir / (
                r["experiment"].split(":")[1].removeprefix("bench_").removesuffix(".py")
                + ("-quick" if args.quick else "")
                + ".md"
            )
            if table.exists():
                lines += ["", table.read_text().strip(), ""]
        lines.append("")
    (out_dir / f"{stem}.md").write_text("\n".join(lines))
    print("\n".join(lines))
    plot(hop, shared, out_dir, stem)


def plot(hop: list[dict[str, Any]], shared: list[dict[str, Any]], out_dir: Path, stem: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover
        return
    if hop:
        fig, ax = plt.subplots(figsize=(6, 4))
        ax.bar(
            [r["case"] for r in hop],
            [r["rows_per_s"] for r in hop],
            color=["C0", "C1", "C2"][: len(hop)],
        )
        ax.set_yscale("log")
        ax.set_ylabel("input rows/s (log)")
        ax.set_title(f"Hopping {hop[0]['range_s']} s / {hop[0]['slide_s']} s: max + sum + count")
        ax.tick_params(axis="x", labelsize=8)
        fig.tight_layout()
        fig.savefig(out_dir / f"{stem}-spark.png", dpi=110)
        plt.close(fig)
    if shared:
        qs = sorted({r["queries"] for r in shared})
        by = {(r["queries"], r["case"]): r["rows_per_s"] for r in shared}
        fig, ax = plt.subplots(figsize=(6, 4))
        for i, case in enumerate((SHARED, SEPARATE)):
            xs = [j + (i - 0.5) * 0.4 for j in range(len(qs))]
            ax.bar(xs, [by[(q, case)] for q in qs], width=0.4, label=case)
        ax.set_xticks(range(len(qs)), [f"{q} quer{'y' if q == 1 else 'ies'}" for q in qs])
        ax.set_ylabel("input rows/s")
        ax.set_title("Hopping windows on one stream vs a stream each")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out_dir / f"{stem}-shared.png", dpi=110)
        plt.close(fig)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=1_000_000, help="rows of the Spark comparison")
    p.add_argument("--keys", type=int, default=1)
    p.add_argument("--rate", type=float, default=1000.0, help="rows per second per key")
    p.add_argument("--range", type=int, default=600, help="seconds")
    p.add_argument("--slide", type=int, default=1, help="seconds")
    p.add_argument("--budget", type=float, default=120.0, help="seconds of Spark's run at most")
    p.add_argument("--shared-rows", type=int, default=1_000_000)
    p.add_argument("--shared-budget", type=float, default=60.0, help="seconds per case at most")
    p.add_argument("--storage", default="memory", choices=("memory", "redis"))
    p.add_argument("--others", action="store_true", help="run bench_ranges/sketches in --quick too")
    p.add_argument("--slicing-rows", type=int, default=1_000_000)
    p.add_argument("--skip", default="", help="comma-separated: spark, shared, slicing, others")
    p.add_argument("--quick", action="store_true", help="a smoke run, under 60 s")
    p.add_argument("--out", type=Path, default=OUT, help=f"output directory [{OUT}]")
    args = p.parse_args()
    skip = {x.strip() for x in args.skip.split(",") if x.strip()}
    if args.quick:
        args.rows, args.budget = 20_000, 3.0
        args.shared_rows, args.shared_budget = 20_000, 3.0
        args.slicing_rows = 20_000
        if not args.others:
            skip.add("others")
    work = Path(tempfile.mkdtemp(prefix="mtaw-bench-queries-"))
    results: list[dict[str, Any]] = []
    srv = LocalServer(work / "server", flush_interval=1.0).start()
    try:
        if "spark" not in skip:
            from mtawindows.spark_connector import local_session

            session: Any = local_session  # a Spark setting's name has dots: **{...}
            spark = session(app="mtawindows-bench-queries", **{"spark.driver.memory": "3g"})
            try:
                results += hopping_vs_spark(spark, srv, args, work)
            finally:
                spark.stop()
        if "shared" not in skip:
            results += shared_vs_separate(srv, args)
        if "slicing" not in skip:
            results += slicing(args)
    finally:
        srv.stop()
    if "others" not in skip:
        results += others(args.out, args.quick, budget=900.0)
    for r in results:
        v = r.get("rows_per_s")
        if v is not None and not (math.isfinite(v) and v > 0):  # pragma: no cover
            print(f"not a figure: {r}", file=sys.stderr)
            return 1
    write(results, args.out, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
