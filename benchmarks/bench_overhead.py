"""The engine's own overhead (issue 22, item 5): Amortized MTA per update against Two-Stacks
with a cheap monoid (a tuple of a count and a sum, a lambda combine) and a lambda policy (keep
the newest 2^14 items), where the engines' own work dominates the user's code. Three in one
run, interleaved (the machine's speed drifts), medians of the runs:

* a minimal Python Two-Stacks (Hammer et al.'s front stack of (value, aggregate) pairs and a
  back aggregate), evicting while ``policy(total, oldest item)`` holds, recomputing the total
  after each eviction: the least a Python sliding aggregator does per update;
* the product's ``TwoStacks`` engine (the same algorithm behind the windows' contract);
* ``AmortizedMTA`` (the product's default engine), ``push`` per item.

    python benchmarks/bench_overhead.py           # about 30 s
    python benchmarks/bench_overhead.py --quick   # a few seconds

Writes benchmarks/results/overhead.{csv,md,png}.
"""

from __future__ import annotations

import argparse
import csv
import gc
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mtawindows.server.engine import AmortizedMTA, TwoStacks

OUT = Path(__file__).resolve().parent / "results"
N = 1 << 14  # the window's size


class Cheap:
    """A count and a sum as a tuple: the cheapest useful monoid."""

    identity = (0, 0)
    commutative = True

    def lift(self, x: Any) -> tuple[int, Any]:
        return (1, x)

    @staticmethod
    def combine(a: tuple[int, Any], b: tuple[int, Any]) -> tuple[int, Any]:
        return (a[0] + b[0], a[1] + b[1])

    def lower(self, a: Any) -> Any:
        return a


def policy(total: Any, old: Any) -> bool:
    return bool(total[0] - old[0] >= N)


class MinimalTwoStacks:
    """Two-Stacks as plain as Python gets: ``front`` holds (value, aggregate of it and every
    newer value in front), newest last popped first; ``back`` the newer values and their
    aggregate."""

    def __init__(self, combine: Callable[[Any, Any], Any], identity: Any) -> None:
        self.f = combine
        self.e = identity
        self.front: list[tuple[Any, Any]] = []
        self.back: list[Any] = []
        self.back_agg = identity

    def push(self, v: Any) -> None:
        self.back.append(v)
        self.back_agg = self.f(self.back_agg, v)

    def pop(self) -> None:
        if not self.front:
            f, agg, front = self.f, self.e, []
            for v in reversed(self.back):
                agg = f(v, agg)
                front.append((v, agg))
            self.front, self.back, self.back_agg = front, [], self.e
        self.front.pop()

    def query(self) -> Any:
        return self.f(self.front[-1][1], self.back_agg) if self.front else self.back_agg


def minimal(n: int) -> float:
    m = Cheap()
    w = MinimalTwoStacks(m.combine, m.identity)
    lift, lower = m.lift, m.lower
    t = time.perf_counter()
    for i in range(n):
        w.push(lift(i))
        total = w.query()
        while w.front or w.back:
            old = w.front[-1][0] if w.front else w.back[0]
            if not policy(total, old):
                break
            w.pop()
            total = w.query()
        lower(total)
    return (time.perf_counter() - t) / n * 1e6


def engine(cls: Any) -> Callable[[int], float]:
    def run(n: int) -> float:
        w = cls(Cheap(), policy)
        for i in range(2 * N):  # full: every push evicts one
            w.push(i)
        push = w.push
        t = time.perf_counter()
        for i in range(n):
            push(i)
        return (time.perf_counter() - t) / n * 1e6

    return run


CASES: dict[str, Callable[[int], float]] = {
    "minimal Two-Stacks": minimal,
    "TwoStacks engine": engine(TwoStacks),
    "AmortizedMTA": engine(AmortizedMTA),
}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--pushes", type=int, default=6 * N)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args()
    if args.quick:
        args.runs, args.pushes = 3, N
    gc.disable()  # as the service does while a batch goes in
    times: dict[str, list[float]] = {k: [] for k in CASES}
    order = list(CASES)
    rng = random.Random(1)
    for _ in range(args.runs):
        rng.shuffle(order)
        for name in order:
            times[name].append(CASES[name](args.pushes))
    med = {k: statistics.median(v) for k, v in times.items()}
    base = med["minimal Two-Stacks"]
    args.out.mkdir(parents=True, exist_ok=True)
    stem = "overhead" + ("-quick" if args.quick else "")
    with (args.out / f"{stem}.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["case", "us_per_update_median", "runs", "vs_minimal", "vs_twostacks_engine"])
        for k, v in med.items():
            w.writerow(
                [k, f"{v:.3f}", args.runs, f"{v / base:.2f}", f"{v / med['TwoStacks engine']:.2f}"]
            )
    lines = [
        "# Engine overhead: one update with a cheap monoid (bench_overhead.py)",
        "",
        f"{platform.machine()}, Python {platform.python_version()}; a count + sum tuple, a "
        f"lambda policy keeping 2^14 items, {args.pushes:,} pushes per run, the median of "
        f"{args.runs} interleaved runs.",
        "",
        "| case | us per update | vs minimal Two-Stacks | vs TwoStacks engine |",
        "|---|---:|---:|---:|",
    ]
    lines += [
        f"| {k} | {v:.2f} | {v / base:.2f}x | {v / med['TwoStacks engine']:.2f}x |"
        for k, v in med.items()
    ]
    (args.out / f"{stem}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 3))
        ax.barh(list(med), list(med.values()))
        ax.set_xlabel("us per update (median)")
        ax.set_title("One update, cheap monoid, 2^14 items")
        fig.tight_layout()
        fig.savefig(args.out / f"{stem}.png", dpi=120)
    except ImportError:  # pragma: no cover - matplotlib is in the bench extra
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
