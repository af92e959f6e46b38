"""The cost of a query-time range (issue 25): ``aggregate_range(count=...)`` and
``aggregate_range(time_range=...)`` of a window of n items, n = 2^10 .. 2^20, for every engine
that answers one, against a fold of the suffix (what an engine without suffixes would have to
do).

    python benchmarks/bench_ranges.py            # the full figures (a few minutes)
    python benchmarks/bench_ranges.py --quick    # n = 2^10 .. 2^14, a smoke run (under 30 s)
    python benchmarks/bench_ranges.py --out DIR  # write somewhere else

Writes ``benchmarks/results/ranges.csv`` (one row per measurement: engine, storage, form, n,
metric, value), ``ranges.md`` (the tables, and the least-squares fit of each engine's cost
against log2 n) and ``ranges.png``; ``--quick`` writes them with ``-quick`` in their names.

Setup: ``Record(n=Count(), s=Sum("v", integers=True), m=Max("v"), ts=Max("t"))`` under a
``CountPolicy(n)`` (the window holds exactly n items, timestamps 0 .. n - 1 after n / 4 more
were evicted), then a fixed sequence of random suffixes, drawn once: counts uniform in
1 .. n, time ranges uniform in 1 .. n (the same suffix lengths). Each figure is the minimum over
repetitions of the mean cost per query of the whole sequence (the garbage collector off). The
engines in the process (AMTA, LMTA, FLATFAT, BINT, FLATFIT) and AMTA on Redis (the embedded
server, or ``$MTAWINDOWS_REDIS_URL``; 512-pair blocks and head caches, the service's default),
for which the store's round trips and pairs read per query are counted too. ``fold``: a left
fold of the suffix's items from a list (O(r)), up to 2^16 items.
"""

from __future__ import annotations

import argparse
import csv
import gc
import math
import os
import platform
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mtawindows.server.engine.algorithms import engine_class
from mtawindows.server.engine.monoids import Count, Max, Record, Sum
from mtawindows.server.engine.policies import CountPolicy

OUT = Path(__file__).resolve().parent / "results"
ENGINES = ("AMTA", "LMTA", "FLATFAT", "BINT", "FLATFIT")
FOLD_MAX = 2**16  # the fold baseline stops here (O(n) per query)


def record() -> Record:
    return Record(n=Count(), s=Sum("v", integers=True), m=Max("v"), ts=Max("t"))


def build(engine: str, n: int, store: Any = None) -> Any:
    w = engine_class(engine)(record(), CountPolicy(n, field="n"), store=store)
    extra = n // 4  # a bulk eviction first: the window starts mid-level, as in service
    rng = random.Random(n)
    w.extend({"v": rng.randint(-1000, 1000), "t": i} for i in range(n + extra))
    assert len(w) == n
    return w


def timed(run: Callable[[], None], queries: int, reps: int) -> float:
    """Minimum over ``reps`` of the mean microseconds per query of ``run``."""
    best = math.inf
    for _ in range(reps):
        gc.disable()
        t0 = time.perf_counter_ns()
        run()
        dt = time.perf_counter_ns() - t0
        gc.enable()
        best = min(best, dt / queries / 1000)
    return best


def suffixes(n: int, queries: int) -> list[int]:
    rng = random.Random(f"ranges-{n}")
    return [rng.randint(1, n) for _ in range(queries)]


def measure(w: Any, n: int, queries: int, reps: int) -> dict[str, float]:
    """µs per query, count form and time form (the newest item's timestamp is n + n/4 - 1:
    a range r keeps the newest r items)."""
    rs = suffixes(n, queries)
    agg = w.aggregate_range

    def counts() -> None:
        for r in rs:
            agg(count=r)

    def ranges() -> None:
        for r in rs:
            agg(time_range=r, field="ts")

    # a check, untimed: the answers have the sizes asked
    assert agg(count=rs[0])[1] == rs[0] and agg(time_range=rs[0], field="ts")[1] == rs[0]
    return {"count": timed(counts, queries, reps), "range": timed(ranges, queries, reps)}


def fold_cost(n: int, queries: int, reps: int) -> float:
    m = record()
    rng = random.Random(n)
    items = [m.lift({"v": rng.randint(-1000, 1000), "t": i}) for i in range(n)]
    rs = suffixes(n, queries)
    combine = m.combine

    def run() -> None:
        for r in rs:
            acc = m.identity
            for u in items[n - r :]:
                acc = combine(acc, u)

    return timed(run, queries, reps)


def redis_costs(url: str, n: int, queries: int, reps: int) -> dict[str, float]:
    from mtawindows.server.storage.redis_store import RedisStore

    store = RedisStore(url)
    w = build("AMTA", n, store)
    try:
        w.flush()
        store.sync()  # the checkpoint's deletions are round trips too: none left in flight
        out = {}
        for form, us in measure(w, n, queries, reps).items():
            out[f"{form}_us"] = us
        rs = suffixes(n, queries)
        for form in ("count", "range"):
            trips, pairs = store.stats.round_trips, store.stats.pairs_read
            for r in rs:
                if form == "count":
                    w.aggregate_range(count=r)
                else:
                    w.aggregate_range(time_range=r, field="ts")
            out[f"{form}_trips"] = (store.stats.round_trips - trips) / queries
            out[f"{form}_pairs"] = (store.stats.pairs_read - pairs) / queries
        return out
    finally:
        store.delete_window()
        w.close()


def fit_log(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least squares of value = a + b log2 n: (a, b)."""
    xs = [math.log2(n) for n, _ in points]
    ys = [v for _, v in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else 0.0
    return my - b * mx, b


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="n = 2^10 .. 2^14: a smoke run (< 30 s)")
    ap.add_argument("--out", type=Path, default=OUT, help=f"output directory [{OUT}]")
    args = ap.parse_args()
    quick = args.quick
    sizes = [2**e for e in (10, 12, 14)] if quick else [2**e for e in range(10, 21)]
    redis_sizes = sizes if quick else [2**e for e in range(10, 21, 2)]
    queries, reps = (200, 2) if quick else (1000, 3)
    t_start = time.time()

    from mtawindows.server.storage.embedded import default_url

    url = default_url()
    rows: list[dict[str, Any]] = []

    def add(engine: str, storage: str, form: str, n: int, metric: str, value: float) -> None:
        rows.append(
            {
                "engine": engine,
                "storage": storage,
                "form": form,
                "n": n,
                "metric": metric,
                "value": round(value, 3),
            }
        )

    for n in sizes:
        print(f"n = 2^{n.bit_length() - 1}", flush=True)
        for engine in ENGINES:
            w = build(engine, n)
            for form, us in measure(w, n, queries, reps).items():
                add(engine, "memory", form, n, "us_per_query", us)
            del w
        if n <= FOLD_MAX:
            add(
                "fold",
                "memory",
                "count",
                n,
                "us_per_query",
                fold_cost(n, max(20, queries // 10), reps),
            )
        if n in redis_sizes:
            got = redis_costs(url, n, queries, reps)
            for form in ("count", "range"):
                add("AMTA", "redis", form, n, "us_per_query", got[f"{form}_us"])
                add("AMTA", "redis", form, n, "round_trips_per_query", got[f"{form}_trips"])
                add("AMTA", "redis", form, n, "pairs_read_per_query", got[f"{form}_pairs"])
    total = time.time() - t_start

    args.out.mkdir(parents=True, exist_ok=True)
    stem = "ranges-quick" if quick else "ranges"
    fields = ["engine", "storage", "form", "n", "metric", "value"]
    with (args.out / f"{stem}.csv").open("w", newline="") as fh:
        wr = csv.DictWriter(fh, fieldnames=fields)
        wr.writeheader()
        wr.writerows(rows)

    def value(engine: str, storage: str, form: str, n: int, metric: str) -> float | None:
        for r in rows:
            if (r["engine"], r["storage"], r["form"], r["n"], r["metric"]) == (
                engine,
                storage,
                form,
                n,
                metric,
            ):
                return float(r["value"])
        return None

    def cell(v: float | None, digits: int = 1) -> str:
        return "" if v is None else f"{v:.{digits}f}"

    series = [(e, "memory") for e in ENGINES] + [("AMTA", "redis")]
    lines = [
        "# Query-time ranges: the cost of a suffix query (bench_ranges.py)",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, {platform.system()}; Python "
        f"{platform.python_version()}; run {time.strftime('%Y-%m-%d')} "
        f"({'quick' if quick else 'full'}, {total:.0f} s). A window of n items "
        "(Record of a count, an integer sum, a max and the timestamps' max), the mean over "
        f"{queries} random suffixes of 1 .. n items, the minimum of {reps} runs. The machine is "
        "shared: figures move by 10-20 % between runs.",
        "",
    ]
    for form, title in (("count", "count=r"), ("range", "time_range (the boundary searched)")):
        lines += [
            f"## µs per query, {title}",
            "",
            "| n | "
            + " | ".join(f"{e}{' (Redis)' if s == 'redis' else ''}" for e, s in series)
            + (" | fold of the suffix |" if form == "count" else " |"),
            "|---:|" + "---:|" * (len(series) + (1 if form == "count" else 0)),
        ]
        for n in sizes:
            cells = [cell(value(e, s, form, n, "us_per_query")) for e, s in series]
            if form == "count":
                cells.append(cell(value("fold", "memory", "count", n, "us_per_query")))
            lines.append(f"| 2^{n.bit_length() - 1} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += [
        "## AMTA on Redis: the store's work per query",
        "",
        "| n | round trips (count) | pairs read (count) | round trips (range) | pairs read (range) |",
        "|---:|---:|---:|---:|---:|",
    ]
    for n in redis_sizes:
        lines.append(
            f"| 2^{n.bit_length() - 1} | "
            + " | ".join(
                cell(value("AMTA", "redis", form, n, metric), 2)
                for form in ("count", "range")
                for metric in ("round_trips_per_query", "pairs_read_per_query")
            )
            + " |"
        )
    lines += ["", "## Growth: least squares of µs = a + b log2 n (count form)", ""]
    lines += [
        "| engine | a (µs) | b (µs per doubling) | 2^10 | largest n |",
        "|---|---:|---:|---:|---:|",
    ]
    for e, s in series:
        pts = [
            (n, v)
            for n in (redis_sizes if s == "redis" else sizes)
            if (v := value(e, s, "count", n, "us_per_query")) is not None
        ]
        if len(pts) >= 2:
            a, b = fit_log(pts)
            lines.append(
                f"| {e}{' (Redis)' if s == 'redis' else ''} | {a:.1f} | {b:.2f} | "
                f"{pts[0][1]:.1f} | {pts[-1][1]:.1f} (2^{pts[-1][0].bit_length() - 1}) |"
            )
    fold = [(n, v) for n in sizes if (v := value("fold", "memory", "count", n, "us_per_query"))]
    if len(fold) >= 2:
        ratio = fold[-1][1] / fold[0][1]
        growth = fold[-1][0] / fold[0][0]
        lines.append(
            f"| fold (O(n)) | | | {fold[0][1]:.1f} | {fold[-1][1]:.1f} "
            f"(2^{fold[-1][0].bit_length() - 1}: x{ratio:.0f} for n x{growth:.0f}) |"
        )
    lines += [
        "",
        "FLATFIT answers with its shared compressed pointers: amortized O(1) when the same "
        "ranges come back every slide (the papers' multi-query), O(r) for a new one; random "
        "suffixes of a static window mostly land on compressed positions after the first "
        "queries. Its time form bisects the items' timestamps (O(log n)) first.",
        "",
    ]
    (args.out / f"{stem}.md").write_text("\n".join(lines))

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover - matplotlib is a dev dependency
        print("matplotlib missing: no plot", file=sys.stderr)
        return 0
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    for e, s in [*series, ("fold", "memory")]:
        pts = [(n, v) for n in sizes if (v := value(e, s, "count", n, "us_per_query")) is not None]
        if pts:
            label = f"{e}{' (Redis)' if s == 'redis' else ''}"
            ax1.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
    ax1.set_xscale("log", base=2)
    ax1.set_yscale("log")
    ax1.set_xlabel("window size n (items)")
    ax1.set_ylabel("µs per suffix query (count form)")
    ax1.set_title("query-time range cost")
    ax1.legend(fontsize=8)
    for form in ("count", "range"):
        pts = [
            (n, v)
            for n in redis_sizes
            if (v := value("AMTA", "redis", form, n, "pairs_read_per_query")) is not None
        ]
        trips = [value("AMTA", "redis", form, n, "round_trips_per_query") for n, _ in pts]
        ax2.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"pairs read ({form})")
        ax2.plot(
            [p[0] for p, _ in zip(pts, trips, strict=True)],
            trips,
            marker="x",
            ls="--",
            label=f"round trips ({form})",
        )
    ax2.set_xscale("log", base=2)
    ax2.set_xlabel("window size n (items)")
    ax2.set_ylabel("per suffix query")
    ax2.set_title("AMTA on Redis: store work")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out / f"{stem}.png", dpi=110)
    print(f"wrote {args.out / stem}.csv, .md, .png in {total:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
