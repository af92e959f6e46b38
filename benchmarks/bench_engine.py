"""Reproduce the MTA paper's experiments 1, 2 and 5 for the in-memory engines, plus batching.

    python benchmarks/bench_engine.py            # the README's figures (a few minutes)
    python benchmarks/bench_engine.py --quick    # smaller sizes, for a smoke run

Writes ``benchmarks/results/engine.csv`` (one row per measurement), ``engine.md`` (the tables
the README quotes) and ``engine.png`` (the plots). Every run records the machine and versions.

* Experiment 1 (paper 5.4), constant-size window latency: a count window of N items over the
  paper's Listing 2/3 shape (count + sum record, ``CountPolicy(N)``); the window is filled,
  then each push (insert + enforce + query) is timed one by one with ``perf_counter_ns``.
  AmortizedMTA, LogMTA, TwoStacks and Naive (Naive only while O(N) stays affordable).
* Experiment 2 (paper 5.5), bulk eviction latency: a window of N items under the paper's
  Listing 2/3 monoid and policy; one insert makes the policy evict k items at once; only
  ``enforce()`` is timed. TwoStacks and Naive evict
  one item at a time, as the paper's DABA and Naive baselines did.
* Experiment 5 (paper 5.8), multi-dimensional aggregation: one AMTA window of 2^15 items whose
  record carries k count dimensions, k = 1..50.
* Batching: ``extend()`` of a 10,000-item batch against 10,000 ``push()`` calls.
"""

from __future__ import annotations

import argparse
import csv
import gc
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mtawindows.server.engine.amta import AmortizedMTA
from mtawindows.server.engine.lmta import LogMTA
from mtawindows.server.engine.monoids import Count, Last, Record, Sum
from mtawindows.server.engine.naive import NaiveWindow
from mtawindows.server.engine.policies import CountPolicy
from mtawindows.server.engine.two_stacks import TwoStacks

ENGINES: dict[str, Callable[..., Any]] = {
    "AmortizedMTA": AmortizedMTA,
    "LogMTA": LogMTA,
    "TwoStacks": TwoStacks,
    "Naive": NaiveWindow,
}
OUT = Path(__file__).resolve().parent / "results"
pc = time.perf_counter_ns


def quantiles(lat: list[int]) -> dict[str, float]:
    lat = sorted(lat)
    return {
        "median_ns": float(statistics.median(lat)),
        "mean_ns": statistics.fmean(lat),
        "p99_ns": float(lat[min(len(lat) - 1, int(len(lat) * 0.99))]),
        "max_ns": float(lat[-1]),
        "n": float(len(lat)),
    }


def timed_rounds(
    windows: dict[str, Any],
    counts: dict[str, int],
    lat: dict[str, list[int]],
    first: int,
    rounds: int = 10,
) -> int:
    """Push ``first + 1, first + 2, ...`` into each window, timing every push; the windows take
    turns in ``rounds`` rounds. Returns the last value pushed."""
    i = first
    for _ in range(rounds):
        for name, w in windows.items():
            push = w.push
            out = lat[name]
            gc.disable()
            try:
                for _ in range(counts[name] // rounds):
                    i += 1
                    t0 = pc()
                    push(i)
                    out.append(pc() - t0)
            finally:
                gc.enable()
    return i


def experiment1(sizes: list[int], pushes: int, naive_max: int, rows: list[dict[str, Any]]) -> None:
    """Engines take turns in rounds, so a machine that speeds up or slows down during the run
    (shared virtual machines do) affects them alike."""
    monoid = Record(n=Count(), s=Sum())
    rounds = 10
    for n in sizes:
        windows: dict[str, Any] = {}
        lat: dict[str, list[int]] = {}
        for name, engine in ENGINES.items():
            if name == "Naive" and n > naive_max:
                continue
            w = engine(monoid, CountPolicy(n))
            w.extend(range(n))
            windows[name] = w
            lat[name] = []
        counts = {
            name: min(pushes, max(n, 2000)) if name != "Naive" else min(pushes, 2000)
            for name in windows
        }
        timed_rounds(windows, counts, lat, first=0, rounds=rounds)
        for name, values in lat.items():
            q = quantiles(values)
            rows.append({"experiment": "1-constant-window", "engine": name, "param": n, **q})
            print(
                f"  exp1 {name:>12} N=2^{n.bit_length() - 1:<2} median {q['median_ns'] / 1e3:7.2f} us "
                f"mean {q['mean_ns'] / 1e3:7.2f} us p99 {q['p99_ns'] / 1e3:8.2f} us",
                flush=True,
            )


def listing3(total: Any, old: Any) -> bool:
    """The paper's experiment WSP (Listing 3): ``total.count - old.count >= total.maxSize``."""
    return bool(total[0] - old[0] >= total[1])


def experiment2(
    n: int, ks: list[int], reps: int, rows: list[dict[str, Any]], slow_budget_s: float
) -> None:
    """The paper's set-up: items carry ``max_size`` (the monoid keeps the newest one, Listing 2)
    and the policy keeps ``max_size`` items (Listing 3). Each trial refills the window to n
    items with a huge ``max_size``, then inserts one item whose ``max_size`` makes the policy
    evict exactly k; only ``enforce()`` is timed."""
    monoid = Record(n=Count(), max_size=Last("max_size"))
    keep_all = {"max_size": 2**62}
    for name, engine in ENGINES.items():
        w = engine(monoid, listing3)
        w.extend([keep_all] * n)
        spent = 0.0
        for k in ks:
            if k >= n or (name in ("TwoStacks", "Naive") and spent > slow_budget_s):
                continue
            lat = []
            for _ in range(reps if name in ("AmortizedMTA", "LogMTA") or k < 4096 else 1):
                w.extend([keep_all] * (n - len(w)))
                w.insert({"max_size": n + 1 - k})
                gc.disable()
                t0 = pc()
                got = w.enforce()
                dt = pc() - t0
                gc.enable()
                assert got == k, (name, k, got)
                lat.append(dt)
                spent += dt / 1e9
            q = quantiles(lat)
            rows.append({"experiment": "2-bulk-eviction", "engine": name, "param": k, **q})
            print(
                f"  exp2 {name:>12} N={n} k={k:<8} median {q['median_ns'] / 1e3:10.1f} us",
                flush=True,
            )


def experiment5(dims: list[int], size: int, pushes: int, rows: list[dict[str, Any]]) -> None:
    for k in dims:
        fields: dict[str, Any] = {"n": Count()}
        fields.update({f"count_{j}": Count() for j in range(1, k + 1)})
        w = AmortizedMTA(Record(fields), CountPolicy(size, field="n"))
        w.extend(range(size))
        push = w.push
        lat = [0] * pushes
        gc.disable()
        try:
            for i in range(pushes):
                t0 = pc()
                push(i)
                lat[i] = pc() - t0
        finally:
            gc.enable()
        q = quantiles(lat)
        rows.append({"experiment": "5-dimensions", "engine": "AmortizedMTA", "param": k, **q})
        print(
            f"  exp5 k={k:<3} median {q['median_ns'] / 1e3:7.2f} us mean {q['mean_ns'] / 1e3:7.2f} us",
            flush=True,
        )


def batching(batch: int, size: int, rounds: int, rows: list[dict[str, Any]]) -> None:
    monoid = Record(n=Count(), s=Sum())
    for name in ("AmortizedMTA", "LogMTA", "TwoStacks"):
        engine = ENGINES[name]
        per_push, per_extend = [], []
        for r in range(rounds):
            a = engine(monoid, CountPolicy(size))
            a.extend(range(size))
            b = engine(monoid, CountPolicy(size))
            b.extend(range(size))
            items = list(range(r * batch, (r + 1) * batch))
            gc.disable()
            t0 = pc()
            for x in items:
                a.push(x)
            t1 = pc()
            b.extend(items)
            t2 = pc()
            gc.enable()
            assert a.query() == b.query()
            per_push.append((t1 - t0) / batch)
            per_extend.append((t2 - t1) / batch)
        p, e = statistics.median(per_push), statistics.median(per_extend)
        rows.append(
            {
                "experiment": "batching",
                "engine": name,
                "param": batch,
                "median_ns": p,
                "mean_ns": statistics.fmean(per_push),
                "p99_ns": max(per_push),
                "max_ns": max(per_push),
                "n": float(rounds),
                "variant": "push",
            }
        )
        rows.append(
            {
                "experiment": "batching",
                "engine": name,
                "param": batch,
                "median_ns": e,
                "mean_ns": statistics.fmean(per_extend),
                "p99_ns": max(per_extend),
                "max_ns": max(per_extend),
                "n": float(rounds),
                "variant": "extend",
            }
        )
        print(
            f"  batch {name:>12} push {p:7.0f} ns/item  extend {e:7.0f} ns/item  speed-up {p / e:4.2f}x",
            flush=True,
        )


def fmt_us(ns: float) -> str:
    return f"{ns / 1e3:.2f}" if ns < 1e7 else f"{ns / 1e3:,.0f}"


def pick(
    rows: list[dict[str, Any]],
    exp: str,
    engine: str,
    param: int,
    key: str = "median_ns",
    variant: str | None = None,
) -> float | None:
    for r in rows:
        if (
            r["experiment"] == exp
            and r["engine"] == engine
            and int(r["param"]) == param
            and (variant is None or r.get("variant") == variant)
        ):
            return float(r[key])
    return None


def write_markdown(
    rows: list[dict[str, Any]],
    meta: dict[str, str],
    sizes: list[int],
    n2: int,
    ks: list[int],
    dims: list[int],
) -> str:
    lines = [
        f"Machine: {meta['machine']}; Python {meta['python']}; engines compiled: {meta['compiled']}; "
        f"run {meta['date']} ({meta['mode']}).",
        "",
    ]
    lines += [
        "**Experiment 1: constant-size count window, per push (insert + enforce + query), "
        "median / p99 in microseconds**",
        "",
    ]
    engines = list(ENGINES)
    lines.append("| window N | " + " | ".join(engines) + " |")
    lines.append("|---:|" + "---:|" * len(engines))
    for n in sizes:
        cells = []
        for e in engines:
            med = pick(rows, "1-constant-window", e, n)
            p99 = pick(rows, "1-constant-window", e, n, "p99_ns")
            cells.append("-" if med is None else f"{fmt_us(med)} / {fmt_us(p99 or 0)}")
        lines.append(f"| 2^{n.bit_length() - 1} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"**Experiment 2: bulk eviction of k items from a window of {n2:,} "
        "(2^{}), enforce() only, median microseconds**".format(n2.bit_length() - 1),
        "",
    ]
    lines.append("| k | " + " | ".join(engines) + " |")
    lines.append("|---:|" + "---:|" * len(engines))
    for k in ks:
        if k >= n2:
            continue
        cells = []
        for e in engines:
            med = pick(rows, "2-bulk-eviction", e, k)
            cells.append("-" if med is None else fmt_us(med))
        lines.append(f"| {k:,} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "**Experiment 5: AMTA window of 2^15 items with k count dimensions, per push, "
        "median / mean microseconds**",
        "",
        "| k | median | mean |",
        "|---:|---:|---:|",
    ]
    for k in dims:
        med = pick(rows, "5-dimensions", "AmortizedMTA", k)
        mean = pick(rows, "5-dimensions", "AmortizedMTA", k, "mean_ns")
        if med is not None:
            lines.append(f"| {k} | {fmt_us(med)} | {fmt_us(mean or 0)} |")
    lines += [
        "",
        "**Batching: 10,000 items into a 2^16 count window, ns per item**",
        "",
        "| engine | push() | extend() | speed-up |",
        "|---|---:|---:|---:|",
    ]
    for e in ("AmortizedMTA", "LogMTA", "TwoStacks"):
        p = pick(rows, "batching", e, 10_000, variant="push")
        x = pick(rows, "batching", e, 10_000, variant="extend")
        if p and x:
            lines.append(f"| {e} | {p:,.0f} | {x:,.0f} | {p / x:.2f}x |")
    return "\n".join(lines) + "\n"


def targets(rows: list[dict[str, Any]], sizes: list[int], n2: int) -> list[str]:
    out = []
    lo, hi = sizes[0] if 1024 not in sizes else 1024, sizes[-1]
    a_lo = pick(rows, "1-constant-window", "AmortizedMTA", lo)
    a_hi = pick(rows, "1-constant-window", "AmortizedMTA", hi)
    ts_hi = pick(rows, "1-constant-window", "TwoStacks", hi)
    if a_lo and a_hi and ts_hi:
        out.append(
            f"AMTA per update: 2^{hi.bit_length() - 1} / 2^{lo.bit_length() - 1} = {a_hi / a_lo:.2f}x "
            f"(target <= 1.5x); vs TwoStacks {a_hi / ts_hi:.2f}x (target <= 1.5x); "
            f"median {a_hi / 1e3:.2f} us (target < 3 us)"
        )
    k = n2 - 1
    for e in ("AmortizedMTA", "LogMTA"):
        v = pick(rows, "2-bulk-eviction", e, k)
        base = pick(rows, "2-bulk-eviction", "TwoStacks", k)
        if v:
            ratio = f"; TwoStacks one by one is {base / v:,.0f}x slower" if base else ""
            out.append(
                f"{e} bulk eviction of {k:,}: {v / 1e3:.0f} us (target < 1 ms{ratio}, target >= 100x)"
            )
    for e in ("AmortizedMTA", "LogMTA"):
        p = pick(rows, "batching", e, 10_000, variant="push")
        x = pick(rows, "batching", e, 10_000, variant="extend")
        if p and x:
            out.append(
                f"{e} extend() of 10,000: {p / x:.2f}x faster per item than push() (target >= 2x)"
            )
    return out


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover - matplotlib is in the bench extra
        print("matplotlib missing: no plot", file=sys.stderr)
        return
    fig, axes = plt.subplots(1, 3, figsize=(17, 5))

    def engines_loglog(ax: Any, experiment: str, xlabel: str, ylabel: str, title: str) -> None:
        for e in ENGINES:
            pts = sorted(
                (int(r["param"]), r["median_ns"] / 1e3)
                for r in rows
                if r["experiment"] == experiment and r["engine"] == e
            )
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=e)
        ax.set(xscale="log", yscale="log", xlabel=xlabel, ylabel=ylabel, title=title)

    engines_loglog(
        axes[0],
        "1-constant-window",
        "window size N (items)",
        "median us per push",
        "Exp. 1: constant-size window",
    )
    engines_loglog(
        axes[1],
        "2-bulk-eviction",
        "items evicted at once (k)",
        "median us per enforce()",
        "Exp. 2: bulk eviction",
    )
    pts = sorted(
        (int(r["param"]), r["median_ns"] / 1e3, r["mean_ns"] / 1e3)
        for r in rows
        if r["experiment"] == "5-dimensions"
    )
    if pts:
        axes[2].bar([p[0] for p in pts], [p[2] for p in pts], label="AMTA mean")
        axes[2].plot(
            [p[0] for p in pts],
            [pts[0][2] * p[0] for p in pts],
            color="red",
            label="k separate windows (k x mean at k=1)",
        )
        axes[2].set(
            xlabel="count dimensions k",
            ylabel="us per push",
            title="Exp. 5: dimensions",
            ylim=(0, max(p[2] for p in pts) * 2.5),
        )
    for ax in axes:
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="small sizes: a smoke run of a minute")
    ap.add_argument(
        "--bulk-exp", type=int, default=None, help="experiment 2 window = 2^this [20; quick 16]"
    )
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    quick = args.quick
    max_exp = 16 if quick else 20
    sizes = [2**e for e in range(0, max_exp + 1, 2 if quick else 1)]
    if 1024 not in sizes:
        sizes = sorted({*sizes, 1024})
    bulk_exp = args.bulk_exp or (16 if quick else 20)
    n2 = 2**bulk_exp
    ks = sorted({1, *[2**e for e in range(1, bulk_exp, 1)], n2 - 1})
    dims = [1, 2, 5, 10, 20, 30, 40, 50] if not quick else [1, 10, 50]
    rows: list[dict[str, Any]] = []
    compiled = any(
        str(getattr(m, "__file__", "")).endswith((".so", ".pyd"))
        for m in (sys.modules["mtawindows.server.engine.amta"],)
    )
    meta = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.system()}",
        "python": platform.python_version(),
        "compiled": "yes (mypyc)" if compiled else "no (pure Python)",
        "date": time.strftime("%Y-%m-%d"),
        "mode": "quick" if quick else "full",
    }
    t0 = time.time()
    print(f"experiment 1: sizes 2^0..2^{max_exp}", flush=True)
    experiment1(sizes, pushes=50_000 if quick else 200_000, naive_max=2**12, rows=rows)
    print(f"experiment 2: window 2^{bulk_exp}", flush=True)
    experiment2(n2, ks, reps=3 if quick else 5, rows=rows, slow_budget_s=20 if quick else 60)
    print("experiment 5: dimensions", flush=True)
    experiment5(dims, size=2**15, pushes=20_000 if quick else 100_000, rows=rows)
    print("batching", flush=True)
    batching(10_000, 2**16, rounds=3 if quick else 7, rows=rows)
    args.out.mkdir(parents=True, exist_ok=True)
    suffix = "-quick" if quick else ""
    with (args.out / f"engine{suffix}.csv").open("w", newline="") as fh:
        fields = [
            "experiment",
            "engine",
            "param",
            "variant",
            "median_ns",
            "mean_ns",
            "p99_ns",
            "max_ns",
            "n",
        ]
        wr = csv.DictWriter(fh, fieldnames=fields)
        wr.writeheader()
        for r in rows:
            wr.writerow({k: r.get(k, "") for k in fields})
    md = write_markdown(rows, meta, sizes, n2, ks, dims)
    md += "\nTargets:\n\n" + "\n".join(f"- {t}" for t in targets(rows, sizes, n2)) + "\n"
    (args.out / f"engine{suffix}.md").write_text(md)
    plot(rows, args.out / f"engine{suffix}.png")
    print(md)
    print(f"total {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
