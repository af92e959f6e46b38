"""Sliding sketches (distinct, quantiles, top_k: :mod:`mtawindows.server.engine.sketches`): the
error of each against the exact answer over a sliding window of N rows, beside the sketch's
own bound, and the cost per row.

    python benchmarks/bench_sketches.py            # windows of 1,000 .. 100,000 rows (~3 min)
    python benchmarks/bench_sketches.py --quick    # a smoke run (under 30 s)
    python benchmarks/bench_sketches.py --out DIR  # write somewhere else

Writes ``benchmarks/results/sketches.csv`` (one row per sketch, engine and window: µs per row,
µs per lift, the worst error seen and the bound), ``sketches.md`` (the table) and
``sketches.png`` (``-quick`` in the names with ``--quick``).

A row is one ``push`` of the engine's window (lift, insert, evict the oldest, query and lower
the result: what a per-row result costs), timed over ``rows`` rows after the window has filled;
the error is measured at ``checks`` points spread over those rows against the exact answer
(numpy over the rows in the window):

* distinct: |estimate / exact - 1|, bound ``hll_sketch.get_rel_err(upper, unioned, lg_k, 3)``
  (3 standard deviations);
* quantiles: the worst rank error over the fractions (how far the true rank of the value given
  is from the fraction), bound ``kll_doubles_sketch.get_normalized_rank_error(k, False)``
  (99% confidence);
* top_k: the worst |estimated - true count| / rows over the items given, bound
  ``frequent_strings_sketch.get_epsilon_for_lg_size(lg_map_size)`` (the a-priori error per row).

:func:`measure` is the one measurement, for other benchmarks to call.
"""

from __future__ import annotations

import argparse
import csv
import gc
import platform
import random
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from datasketches import frequent_strings_sketch, hll_sketch, kll_doubles_sketch

from mtawindows.server.engine.algorithms import engine_class
from mtawindows.server.engine.monoids import Count, Record
from mtawindows.server.engine.policies import CountPolicy
from mtawindows.server.engine.sketches import Distinct, Quantiles, TopK

OUT = Path(__file__).resolve().parent / "results"
FRACTIONS = (0.5, 0.9, 0.99)
SKETCHES: dict[str, Callable[[], Any]] = {
    "distinct": lambda: Distinct("user"),
    "quantiles": lambda: Quantiles("latency", fractions=FRACTIONS),
    "top_k": lambda: TopK("page", k=10),
}
FIELDS = {"distinct": "user", "quantiles": "latency", "top_k": "page"}


def rows_of(n: int, seed: int = 1) -> list[dict[str, Any]]:
    """Web-log-like rows: users from a pool that grows, log-normal latencies, pages: Zipf-ish
    popular ones and a long tail."""
    rnd = random.Random(seed)
    return [
        {
            "user": rnd.randint(0, 5 + i // 2),
            "latency": rnd.lognormvariate(3, 0.8),
            # 60% over a few popular pages, 40% over a million (the map overflows)
            "page": f"/p{min(int(rnd.paretovariate(1.1)), 5000)}"
            if rnd.random() < 0.6
            else f"/q{rnd.randrange(10**6)}",
        }
        for i in range(n)
    ]


def _error(kind: str, monoid: Any, got: Any, inside: list[Any]) -> float:
    if kind == "distinct":
        exact = len(set(inside))
        return abs(got / exact - 1.0)
    if kind == "quantiles":
        xs = np.sort(np.asarray(inside, dtype=float))
        worst = 0.0
        for q, x in zip(FRACTIONS, got, strict=True):
            lo = np.searchsorted(xs, x, side="left") / len(xs)
            hi = np.searchsorted(xs, x, side="right") / len(xs)
            worst = max(worst, 0.0 if lo <= q <= hi else min(abs(q - lo), abs(q - hi)))
        return worst
    exact = Counter(inside)
    return max(abs(e["count"] - exact[e["item"]]) for e in got) / len(inside)


def bound(kind: str, monoid: Any) -> float:
    """The sketch's documented error, in the units of :func:`_error`."""
    if kind == "distinct":
        return abs(float(hll_sketch.get_rel_err(True, True, monoid.lg_k, 3)))
    if kind == "quantiles":
        return float(kll_doubles_sketch.get_normalized_rank_error(monoid.k, False))
    return float(frequent_strings_sketch.get_epsilon_for_lg_size(monoid.lg_map_size))


def measure(
    kind: str,
    window: int,
    *,
    engine: str = "AMTA",
    rows: int = 2000,
    checks: int = 20,
    budget_s: float = 20.0,
    seed: int = 1,
) -> dict[str, Any]:
    """One sketch over a sliding window of ``window`` rows on ``engine``: µs per row (push:
    lift, insert, evict, query and lower) over ``rows`` rows after the window has filled, µs
    per lift alone, and the worst error at ``checks`` points against the exact answer, with
    the sketch's bound. Stops early past ``budget_s`` seconds of timed pushes."""
    monoid = SKETCHES[kind]()
    field = FIELDS[kind]
    data = rows_of(window + rows, seed)
    w = engine_class(engine)(Record(n=Count(), s=monoid), CountPolicy(window))
    push = w.push
    for r in data[:window]:
        push(r)
    every = max(1, rows // checks)
    worst = 0.0
    timed_ns = 0
    done = 0
    gc.disable()
    try:
        for i in range(window, window + rows):
            t0 = time.perf_counter_ns()
            got = push(data[i])
            timed_ns += time.perf_counter_ns() - t0
            done += 1
            if done % every == 0:
                inside = [r[field] for r in data[i + 1 - window : i + 1]]
                worst = max(worst, _error(kind, monoid, got["s"], inside))
            if timed_ns > budget_s * 1e9:
                break
        sample = data[:2000]
        t0 = time.perf_counter_ns()
        for r in sample:
            monoid.lift(r)
        lift_ns = (time.perf_counter_ns() - t0) / len(sample)
    finally:
        gc.enable()
    b = bound(kind, monoid)
    return {
        "sketch": kind,
        "engine": engine,
        "window": window,
        "rows": done,
        "us_per_row": round(timed_ns / done / 1000, 2),
        "lift_us": round(lift_ns / 1000, 3),
        "error": round(worst, 5),
        "bound": round(b, 5),
        "within": worst <= b,
    }


def markdown(results: list[dict[str, Any]]) -> str:
    lines = [
        "# Sliding sketches: error and cost per row",
        "",
        f"{platform.machine()}, Python {platform.python_version()}; a row is one push of the "
        "window (lift, insert, evict, query and lower: a per-row result). Error: distinct, "
        "relative; quantiles, rank; top_k, count / rows (see benchmarks/bench_sketches.py).",
        "",
        "| sketch | engine | window | µs per row | µs per lift | worst error | bound | within |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    lines.extend(
        f"| {r['sketch']} | {r['engine']} | {r['window']:,} | {r['us_per_row']:.1f} | "
        f"{r['lift_us']:.2f} | {r['error']:.4f} | {r['bound']:.4f} | "
        f"{'yes' if r['within'] else 'NO'} |"
        for r in results
    )
    return "\n".join(lines) + "\n"


def plot(results: list[dict[str, Any]], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover - matplotlib is in the bench extra
        print("matplotlib missing: no plot", file=sys.stderr)
        return
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for (kind, engine), marker in zip(
        sorted({(r["sketch"], r["engine"]) for r in results}), "os^vD<>x+*", strict=False
    ):
        rs = sorted(
            (r for r in results if r["sketch"] == kind and r["engine"] == engine),
            key=lambda r: r["window"],
        )
        xs = [r["window"] for r in rs]
        label = f"{kind} ({engine})"
        ax1.plot(xs, [r["us_per_row"] for r in rs], marker=marker, label=label)
        ax2.plot(xs, [r["error"] / r["bound"] for r in rs], marker=marker, label=label)
    ax1.set(xscale="log", yscale="log", xlabel="window (rows)", ylabel="µs per row (push)")
    ax2.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    ax2.set(xscale="log", xlabel="window (rows)", ylabel="worst error / bound")
    ax1.legend(fontsize=7)
    ax1.set_title("cost per row")
    ax2.set_title("error against the sketch's bound")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small windows, a smoke run (< 30 s)")
    p.add_argument("--out", type=Path, default=OUT, help="where to write (default %(default)s)")
    args = p.parse_args(argv)
    if args.quick:
        windows, engines, rows, checks, budget = [500, 2000], ["AMTA"], 300, 6, 2.0
    else:
        windows, engines, rows, checks, budget = (
            [1000, 10_000, 100_000],
            ["AMTA", "LMTA"],
            2000,
            20,
            12.0,
        )
    results = []
    for engine in engines:
        for kind in SKETCHES:
            for n in windows:
                r = measure(kind, n, engine=engine, rows=rows, checks=checks, budget_s=budget)
                print(
                    f"{kind:9} {engine:5} window {n:>7,}: {r['us_per_row']:8.1f} µs/row, "
                    f"error {r['error']:.4f} (bound {r['bound']:.4f})",
                    flush=True,
                )
                results.append(r)
    suffix = "-quick" if args.quick else ""
    args.out.mkdir(parents=True, exist_ok=True)
    with (args.out / f"sketches{suffix}.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(results[0]))
        writer.writeheader()
        writer.writerows(results)
    (args.out / f"sketches{suffix}.md").write_text(markdown(results))
    plot(results, args.out / f"sketches{suffix}.png")
    return 0 if all(r["within"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
