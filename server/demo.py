"""The main job until the service exists: a time-range window over a generated telemetry stream.

``make demo`` (or ``python -m mtawindows.server.demo``) streams memory-usage readings of one
host, one per second with bursts and silent gaps, through an Amortized MTA window that keeps
the last 10 minutes, and prints the window's max, mean and standard deviation as it goes. Each
reading is checked against a recomputation from scratch every ``--check-every`` items.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import sys
import time
from collections.abc import Iterator
from typing import Any

from .engine.amta import AmortizedMTA
from .engine.laws import approx_equal
from .engine.lmta import LogMTA
from .engine.monoids import Count, Max, Mean, Record, StdDev
from .engine.naive import NaiveWindow
from .engine.policies import TimeRangePolicy
from .storage.memory import MemoryStore


def telemetry(seed: int) -> Iterator[dict[str, Any]]:
    """Memory usage (GiB) of one host: a daily wave, noise, load spikes, bursts and outages."""
    rnd = random.Random(seed)
    ts = 1_700_000_000.0
    while True:
        r = rnd.random()
        if r < 0.002:
            ts += rnd.uniform(600, 3_600)  # the agent was down: a gap longer than the window
        elif r < 0.05:
            ts += 0.01  # a burst: readings flushed together
        else:
            ts += 1.0
        day = (ts % 86_400) / 86_400
        value = 8 + 4 * math.sin(2 * math.pi * day) + rnd.gauss(0, 0.3)
        if rnd.random() < 0.001:
            value += rnd.uniform(4, 12)
        yield {"ts": ts, "mem_gib": max(value, 0.0)}


def _prog() -> str:
    script = os.path.basename(sys.argv[0])
    return script if script.startswith("mtawindows") else "python -m mtawindows.server.demo"


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog=_prog(),
        description="Stream generated telemetry through an MTA window of the last 10 minutes.",
    )
    ap.add_argument("--items", type=int, default=300_000, help="readings to stream [300000]")
    ap.add_argument("--range", type=float, default=600.0, help="window range in seconds [600]")
    ap.add_argument("--algorithm", choices=["amta", "lmta"], default="amta")
    ap.add_argument(
        "--store",
        choices=["redis", "memory", "tiered"],
        default="redis",
        help=(
            "keep the middle of every level in Redis (the embedded server unless "
            "$MTAWINDOWS_REDIS_URL is set) [redis], every level local, or the middle in an "
            "in-process store"
        ),
    )
    ap.add_argument("--every", type=int, default=25_000, help="print a line every N items")
    ap.add_argument(
        "--check-every",
        type=int,
        default=50_000,
        help="compare with a from-scratch recomputation every N items (0: never)",
    )
    ap.add_argument("--seed", type=int, default=2026)
    args = ap.parse_args(argv)
    if args.items < 1 or args.every < 1 or args.range <= 0:
        ap.error("--items and --every must be >= 1 and --range > 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    monoid = Record(
        n=Count(),
        ts=Max("ts"),
        max=Max("mem_gib"),
        mean=Mean("mem_gib"),
        sd=StdDev("mem_gib", ddof=1),
    )
    policy = TimeRangePolicy(args.range, field="ts")
    store: Any = None
    if args.store == "tiered":
        store = MemoryStore()
    elif args.store == "redis":
        from .storage.redis_store import RedisStore

        store = RedisStore()
    engine = AmortizedMTA if args.algorithm == "amta" else LogMTA
    window = engine(monoid, policy, store=store)
    print(
        f"{engine.__name__} over the last {args.range:g} s of memory usage "
        f"({args.items:,} readings, store={args.store})"
    )
    if not _stream(args, window, monoid, policy):
        return 1
    if args.store == "redis" and not _reopen(window, engine, monoid, policy):
        return 1
    return 0


def _stream(args: argparse.Namespace, window: Any, monoid: Any, policy: Any) -> bool:
    """Push the readings, print a line every ``--every`` and compare with a recomputation
    every ``--check-every``. Whether every comparison agreed."""
    print(
        f"{'items':>9} {'window':>7} {'levels':>6} {'max GiB':>8} {'mean':>7} {'stddev':>7} "
        f"{'evicted':>9} {'bulk':>5} {'us/item':>8}"
    )
    recent: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    last_t = t0
    checked = 0
    for i, row in enumerate(telemetry(args.seed), 1):
        out = window.push(row)
        if args.check_every:
            recent.append(row)
        if i % args.every == 0 or i == args.items:
            now = time.perf_counter()
            st = window.stats()
            us = (now - last_t) / (args.every if i % args.every == 0 else i % args.every) * 1e6
            last_t = now
            print(
                f"{i:>9,} {st['size']:>7,} {st['levels']:>6} {out['max']:>8.2f} "
                f"{out['mean']:>7.2f} {out['sd'] or 0:>7.3f} {st['evicted']:>9,} "
                f"{st['bulk_evictions']:>5} {us:>8.2f}"
            )
        if args.check_every and (i % args.check_every == 0 or i >= args.items):  # + the last
            newest = row["ts"]
            recent = [r for r in recent if newest - r["ts"] < args.range]
            oracle = NaiveWindow(monoid, policy)
            oracle.extend(recent)
            want = oracle.query()
            if (
                want["n"] != out["n"]
                or not math.isclose(want["max"], out["max"])
                or not math.isclose(want["mean"], out["mean"], rel_tol=1e-9)
            ):
                print(f"MISMATCH at item {i}: window {out}, recomputed {want}", file=sys.stderr)
                return False
            checked += 1
        if i >= args.items:
            break
    elapsed = time.perf_counter() - t0
    print(
        f"done: {args.items:,} readings in {elapsed:.2f} s "
        f"({args.items / elapsed:,.0f} readings/s); {checked} checks against a recomputation passed"
    )
    return True


def _reopen(window: Any, engine: Any, monoid: Any, policy: Any) -> bool:
    """Flush the Redis-backed window, reopen it from Redis and compare; delete it after.
    Whether the reopened window gives the same result."""
    store = window.store
    window.flush()
    reopened = engine.open(store.window_id, monoid, policy, url=store.url)
    same = approx_equal(reopened.query(), window.query()) and len(reopened) == len(window)
    s = store.stats
    print(
        f"redis: window {window.window_id} at {store.url}; {s.round_trips:,} round trips, "
        f"{s.bytes_written / 2**20:.1f} MiB written, {s.misses} misses, "
        f"{window.stats()['local_pairs']:,} pairs local; reopened from Redis: "
        f"{'same result' if same else 'DIFFERENT RESULT'}"
    )
    reopened.store.delete_window()
    reopened.close()
    store.close()
    return bool(same)


if __name__ == "__main__":
    raise SystemExit(main())
