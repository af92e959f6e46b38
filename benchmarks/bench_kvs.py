"""The MTA paper's KVS experiments for the Redis tier (experiments 1, 2 and 4).

    python benchmarks/bench_kvs.py            # the README's figures (~15 minutes)
    python benchmarks/bench_kvs.py --quick    # smaller sizes, a smoke run

Redis: ``$MTAWINDOWS_REDIS_URL`` if set, else the embedded valkey-server (unix socket, AOF).
Writes ``benchmarks/results/kvs.csv``, ``kvs.md`` and ``kvs.png``.

* Experiment 1 (paper 5.4): per-push latency (insert + enforce + query) of a count window of N
  items (count + sum record, ``CountPolicy(N)``), KVS AMTA/LMTA (``RedisStore``, default block
  and cache sizes) against the in-memory engines, taking turns in rounds.
* Experiment 2 (paper 5.5): bulk eviction of k items from an N-item Redis-backed window
  (Listing 2/3). The full window is checkpointed once; each trial reopens it from Redis (head
  caches refilled, everything else in Redis), inserts the item that makes the policy evict k
  and times ``enforce()`` alone, counting Redis round trips and synchronous misses.
* Experiment 4 (paper 5.7): peak RSS (``VmHWM``) of a fresh process that builds one window
  of N items and pushes through it, KVS AMTA against in-memory AMTA.
"""

from __future__ import annotations

import argparse
import csv
import gc
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_engine import listing3, quantiles, timed_rounds

from mtawindows.server.engine.amta import AmortizedMTA
from mtawindows.server.engine.lmta import LogMTA
from mtawindows.server.engine.monoids import Count, Last, Record, Sum
from mtawindows.server.engine.policies import CountPolicy
from mtawindows.server.storage.embedded import default_url
from mtawindows.server.storage.redis_store import RedisStore

OUT = Path(__file__).resolve().parent / "results"
pc = time.perf_counter_ns
BATCH = 65536


def fill(w: Any, n: int, item: Any = None) -> None:
    done = 0
    while done < n:
        m = min(BATCH, n - done)
        w.extend(range(done, done + m) if item is None else [item] * m)
        done += m


def experiment1(url: str, sizes: list[int], pushes: int, rows: list[dict[str, Any]]) -> None:
    monoid = Record(n=Count(), s=Sum())
    for n in sizes:
        windows = {
            "AmortizedMTA": AmortizedMTA(monoid, CountPolicy(n)),
            "LogMTA": LogMTA(monoid, CountPolicy(n)),
            "KVS-AmortizedMTA": AmortizedMTA(monoid, CountPolicy(n), store=RedisStore(url)),
            "KVS-LogMTA": LogMTA(monoid, CountPolicy(n), store=RedisStore(url)),
        }
        for w in windows.values():
            fill(w, n)
        lat: dict[str, list[int]] = {k: [] for k in windows}
        timed_rounds(windows, dict.fromkeys(windows, pushes), lat, first=n)
        for name, values in lat.items():
            q = quantiles(values)
            extra = {}
            w = windows[name]
            if w.store is not None:
                s = w.store.stats
                extra = {"round_trips_per_push": s.round_trips / max(1, s.pairs_written + n)}
                w.store.delete_window()
                w.store.close()
            rows.append(
                {"experiment": "1-constant-window", "engine": name, "param": n, **q, **extra}
            )
            print(
                f"  exp1 {name:>16} N=2^{n.bit_length() - 1:<2} median {q['median_ns'] / 1e3:6.2f} us "
                f"mean {q['mean_ns'] / 1e3:6.2f} us p99 {q['p99_ns'] / 1e3:7.2f} us",
                flush=True,
            )


def experiment2(url: str, n: int, ks: list[int], reps: int, rows: list[dict[str, Any]]) -> None:
    monoid = Record(n=Count(), max_size=Last("max_size"))
    keep_all = {"max_size": 2**62}
    for name, cls in (("KVS-AmortizedMTA", AmortizedMTA), ("KVS-LogMTA", LogMTA)):
        opts = {"checkpoint_every": 2**62}
        t0 = time.perf_counter()
        w = cls(monoid, listing3, store=RedisStore(url, **opts))
        fill(w, n, keep_all)
        w.flush()  # the checkpoint every trial reopens; evicted blocks are never deleted
        print(f"  exp2 {name}: built N={n} in {time.perf_counter() - t0:.1f}s", flush=True)
        wid = w.window_id
        w.store.close()
        for k in ks:
            if k >= n:
                continue
            lat, trips, misses = [], [], []
            for _ in range(reps):
                v = cls.open(wid, monoid, listing3, url=url, **opts)
                v.insert({"max_size": n + 1 - k})
                v.store.sync()  # the head-cache refills of the reopen are done
                s = v.store.stats
                rt0, m0 = s.round_trips, s.misses
                gc.disable()
                t1 = pc()
                got = v.enforce()
                dt = pc() - t1
                gc.enable()
                assert got == k, (name, k, got)
                lat.append(dt)
                trips.append(s.round_trips - rt0)
                misses.append(s.misses - m0)
                v.store._exec.shutdown(wait=True)  # abandon: no checkpoint, blocks stay
                v.store._client.close()
            q = quantiles(lat)
            rows.append(
                {
                    "experiment": "2-bulk-eviction",
                    "engine": name,
                    "param": k,
                    **q,
                    "round_trips": max(trips),
                    "misses": max(misses),
                }
            )
            print(
                f"  exp2 {name:>16} k={k:<8} median {q['median_ns'] / 1e3:8.1f} us max "
                f"{q['max_ns'] / 1e3:8.1f} us round trips <= {max(trips)} misses <= {max(misses)}",
                flush=True,
            )
        RedisStore(url, window_id=wid).delete_window()


def vm_hwm_mb() -> float:
    """Peak resident set of this process (``VmHWM``; ``ru_maxrss`` would include the parent's
    size at fork time, which Linux carries across exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def rss_child(kind: str, n: int, url: str) -> None:
    """In a fresh process: build a window of n items, push 100k more, report peak RSS."""
    monoid = Record(n=Count(), s=Sum())
    store = RedisStore(url) if kind == "KVS-AmortizedMTA" else None
    w = AmortizedMTA(monoid, CountPolicy(n), store=store)
    base = vm_hwm_mb()
    t0 = time.perf_counter()
    fill(w, n)
    for i in range(100_000):
        w.push(n + i)
    secs = time.perf_counter() - t0
    peak = vm_hwm_mb()
    out = {
        "peak_rss_mb": peak,
        "start_rss_mb": base,
        "build_s": secs,
        "local_pairs": w.stats()["local_pairs"],
        "levels": w.levels,
        "size": len(w),
    }
    if store is not None:
        store.delete_window()
        store.close()
    print(json.dumps(out))


def experiment4(
    url: str, kvs_sizes: list[int], mem_sizes: list[int], rows: list[dict[str, Any]]
) -> None:
    for kind, sizes in (("KVS-AmortizedMTA", kvs_sizes), ("AmortizedMTA", mem_sizes)):
        for n in sizes:
            env = {**os.environ, "MTAWINDOWS_REDIS_URL": url}
            res = subprocess.run(
                [sys.executable, __file__, "--rss-child", kind, str(n)],
                capture_output=True,
                text=True,
                env=env,
                check=True,
                timeout=3600,
            )
            r = json.loads(res.stdout.strip().splitlines()[-1])
            rows.append({"experiment": "4-memory", "engine": kind, "param": n, **r})
            print(
                f"  exp4 {kind:>16} N=2^{n.bit_length() - 1:<2} peak RSS {r['peak_rss_mb']:7.1f} MB "
                f"(start {r['start_rss_mb']:.1f} MB, local pairs {r['local_pairs']}, "
                f"{r['build_s']:.0f}s)",
                flush=True,
            )


def previous_rows() -> list[dict[str, Any]]:
    """The rows of the last full results file, numbers parsed back."""
    path = OUT / "kvs.csv"
    if not path.exists():
        return []

    def num(v: str) -> Any:
        for cast in (int, float):
            try:
                return cast(v)
            except ValueError:
                pass
        return v

    with open(path, newline="") as f:
        return [{k: num(v) for k, v in r.items() if v != ""} for r in csv.DictReader(f)]


def write_outputs(rows: list[dict[str, Any]], meta: dict[str, Any]) -> None:
    OUT.mkdir(exist_ok=True)
    keys: list[str] = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    with open(OUT / "kvs.csv", "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=keys)
        wr.writeheader()
        wr.writerows(rows)
    md = [f"# KVS benchmarks\n\n{meta['machine']}; {meta['when']}\n"]
    e1 = [r for r in rows if r["experiment"] == "1-constant-window"]
    if e1:
        md.append("\n## Experiment 1: push latency, count window of N (median / p99, us)\n")
        names = list(dict.fromkeys(r["engine"] for r in e1))
        md.append("| N | " + " | ".join(names) + " | KVS/mem AMTA | KVS/mem LMTA |")
        md.append("|---" * (len(names) + 3) + "|")
        for n in sorted({r["param"] for r in e1}):
            by = {r["engine"]: r for r in e1 if r["param"] == n}
            cells = [f"{by[e]['median_ns'] / 1e3:.2f} / {by[e]['p99_ns'] / 1e3:.1f}" for e in names]
            ra = by["KVS-AmortizedMTA"]["median_ns"] / by["AmortizedMTA"]["median_ns"]
            rl = by["KVS-LogMTA"]["median_ns"] / by["LogMTA"]["median_ns"]
            md.append(
                f"| 2^{n.bit_length() - 1} | " + " | ".join(cells) + f" | {ra:.2f}x | {rl:.2f}x |"
            )
    e2 = [r for r in rows if r["experiment"] == "2-bulk-eviction"]
    if e2:
        md.append(
            "\n## Experiment 2: bulk eviction of k items, reopened window (us; worst round trips)\n"
        )
        md.append("| engine | k | median | max | round trips | misses |\n|---|---|---|---|---|---|")
        md += [
            f"| {r['engine']} | {r['param']} | {r['median_ns'] / 1e3:.0f} | {r['max_ns'] / 1e3:.0f} | "
            f"{r['round_trips']} | {r['misses']} |"
            for r in e2
        ]
    e4 = [r for r in rows if r["experiment"] == "4-memory"]
    if e4:
        md.append("\n## Experiment 4: peak RSS of a process holding one window of N items (MB)\n")
        md.append(
            "| engine | N | peak RSS | local pairs | build + 100k pushes (s) |\n|---|---|---|---|---|"
        )
        md += [
            f"| {r['engine']} | 2^{r['param'].bit_length() - 1} | {r['peak_rss_mb']:.1f} | "
            f"{r['local_pairs']} | {r['build_s']:.0f} |"
            for r in e4
        ]
        kv = sorted((r["param"], r["peak_rss_mb"]) for r in e4 if r["engine"] == "KVS-AmortizedMTA")
        if len(kv) > 1:
            md.append(
                f"\nKVS AMTA growth from 2^{kv[0][0].bit_length() - 1} to "
                f"2^{kv[-1][0].bit_length() - 1}: {100 * (kv[-1][1] / kv[0][1] - 1):+.1f}%"
            )
    (OUT / "kvs.md").write_text("\n".join(md) + "\n")
    plot(rows)


def plot(rows: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(17, 4.8))
    for ax, exp, ykey, ylabel, title in (
        (axes[0], "1-constant-window", "median_ns", "median push (us)", "Exp. 1: push latency"),
        (axes[1], "2-bulk-eviction", "max_ns", "worst enforce (us)", "Exp. 2: bulk eviction"),
        (axes[2], "4-memory", "peak_rss_mb", "peak RSS (MB)", "Exp. 4: process memory"),
    ):
        sel = [r for r in rows if r["experiment"] == exp]
        for eng in dict.fromkeys(r["engine"] for r in sel):
            pts = sorted((r["param"], r[ykey]) for r in sel if r["engine"] == eng)
            ys = [y / 1e3 if ykey.endswith("_ns") else y for _, y in pts]
            ax.plot([x for x, _ in pts], ys, marker="o", label=eng)
        ax.set_xscale("log", base=2)
        if exp != "1-constant-window":
            ax.set_yscale("log")
        ax.set_xlabel("k (items evicted)" if exp.startswith("2") else "N (window size)")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(OUT / "kvs.png", dpi=110)


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", choices=["1", "2", "4"], action="append")
    ap.add_argument("--rss-child", nargs=2, metavar=("KIND", "N"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    url = default_url()
    if a.rss_child:
        rss_child(a.rss_child[0], int(a.rss_child[1]), url)
        return 0
    only = set(a.only or ["1", "2", "4"])
    rows: list[dict[str, Any]] = []
    meta = {
        "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, Redis at {url.split('@')[-1]}",
        "when": time.strftime("%Y-%m-%d %H:%M"),
    }
    if "1" in only:
        experiment1(
            url,
            [2**10, 2**16] if a.quick else [2**10, 2**14, 2**17, 2**20],
            20_000 if a.quick else 100_000,
            rows,
        )
    if "2" in only:
        n2 = 2**16 if a.quick else 2**22
        ks = [1, 2, 16, 256, 4096, 2**16 - 1, 2**18, 2**20, 2**21, n2 - 1]
        experiment2(url, n2, sorted({k for k in ks if k < n2}), 3 if a.quick else 5, rows)
    if "4" in only:
        if a.quick:
            experiment4(url, [2**14, 2**16, 2**18], [2**14, 2**16], rows)
        else:
            experiment4(
                url, [2**16, 2**18, 2**20, 2**22, 2**24], [2**16, 2**18, 2**20, 2**22], rows
            )
    if a.only and not a.quick:  # a partial rerun keeps the other experiments' last results
        rows = [r for r in previous_rows() if r["experiment"][0] not in only] + rows
        rows.sort(key=lambda r: r["experiment"])
    write_outputs(rows, meta)
    print(f"wrote {OUT / 'kvs.csv'}, kvs.md, kvs.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
