"""What one large batch costs in server memory (issue 22: "applying a batch of 1M rows costs at
most 2x its Arrow size in server RSS").

    python benchmarks/bench_batch_memory.py               # 1,000,000 rows (about a minute)
    python benchmarks/bench_batch_memory.py --rows 200000

For each case a fresh ``mtawindows serve`` (its own embedded Redis; ``--max-batch-rows`` and
``--max-message-mb`` raised to take the batch) gets one Arrow batch of ``--rows`` rows
(timestamps + one DOUBLE: 16 bytes a row in Arrow) after a warm-up batch of 1,000 rows; the
figure is the growth of the server's peak RSS (``VmHWM`` in ``/proc/<pid>/status``) over the
batch, against the batch's Arrow size:

- **append, no results, columnar state**: an append into a stream with one window (max + sum
  over 60 s, AMTA, Redis-backed, its state columnar: the default), sent as the SDK sends a
  batch of more than 4 MB, an AppendStream of 1 MB pieces;
- **append, per-row results, columnar state**: the same with ``results="per_row",
  arrow=True``;
- the two again as **unary**: one Append message (gRPC's server holds it about three times
  over while it hands it on);
- **compute**: a ``Compute`` of the same rows over that window (nothing stored);
- the two appends with the window on its engine (``MTAWINDOWS_COLUMNAR_STATE=0``).

Writes benchmarks/results/batch-memory.{csv,md}.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa

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
    calls,
)
from mtawindows.testing import LocalServer

SEC = 1_000_000_000


def peak_rss(pid: int) -> int:
    """The process's peak resident set size, in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    msg = "no VmHWM in /proc/<pid>/status"
    raise RuntimeError(msg)


def batch(n: int, t0: int) -> pa.Table:
    rng = np.random.default_rng(n)
    ts = t0 + np.cumsum(rng.integers(0, 2_000_000, n))
    return pa.table(
        {"ts": pa.array(ts, pa.int64()).cast(pa.timestamp("ns")), "v": rng.normal(100, 15, n)}
    )


def one_case(case: str, rows: int) -> tuple[int, int]:
    """(the batch's Arrow bytes, the server's peak RSS growth over the batch)."""
    flags = ("--max-batch-rows", str(rows * 2), "--max-message-mb", "1000")
    env = {"MTAWINDOWS_COLUMNAR_STATE": "1" if "columnar state" in case else "0"}
    with (
        tempfile.TemporaryDirectory(prefix="mtaw-bm-") as d,
        LocalServer(d, *flags, env=env) as srv,
        WindowClient(srv.target, timeout=600) as c,
    ):
        c.create_stream(StreamSpec("s", (Field("v", "DOUBLE"),), wall_clock=False))
        aggs = (Aggregation("m", "max", "v"), Aggregation("s", "sum", "v"))
        policy = Policy.time_range(timedelta(seconds=60))
        c.create_window(WindowSpec("s", "w", aggs, policy, "AMTA", Storage("redis")))
        warm = batch(1_000, 1_700_000_000 * SEC)
        big = batch(rows, 1_800_000_000 * SEC)
        # warm up every path the case takes (imports, the columnar engine's compiled scans)
        c.append("s", warm, results="per_row", arrow=True)
        c.compute("s", warm)
        time.sleep(0.5)
        before = peak_rss(srv.pid)
        if case == "compute":
            got = c.compute("s", big)["w"]
            assert got.num_rows == rows
        else:
            per_row = "per-row results" in case
            saved = calls.STREAM_BYTES
            if "unary" in case:  # one Append message, as the SDK sent any batch before
                calls.STREAM_BYTES = 1 << 62
            try:
                res = c.append("s", big, results="per_row" if per_row else "none", arrow=per_row)
            finally:
                calls.STREAM_BYTES = saved
            assert res.rows_applied == rows
        after = peak_rss(srv.pid)
        return big.nbytes, after - before


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = ap.parse_args()
    report = Report()
    cases = (
        "append, no results, engine",
        "append, per-row results, engine",
        "compute",
        "append, no results, columnar state",
        "append, no results, columnar state, unary",
        "append, per-row results, columnar state",
        "append, per-row results, columnar state, unary",
    )
    for case in cases:
        size, grown = one_case(case, args.rows)
        report.add("one batch", case, "Arrow size", size / 1e6, "MB", n=args.rows)
        report.add("one batch", case, "server peak RSS growth", grown / 1e6, "MB", n=args.rows)
        report.add(
            "one batch",
            case,
            "growth / Arrow size",
            grown / size,
            "x",
            n=args.rows,
            target="<= 2",
            met=grown / size <= 2,
        )
        print(f"{case}: Arrow {size / 1e6:.1f} MB, peak RSS +{grown / 1e6:.1f} MB")
    header = [
        f"one Arrow batch of {args.rows:,} rows (timestamp + one DOUBLE) into a fresh server; "
        "the growth of the server's peak RSS (VmHWM) over the batch"
    ]
    print(write(report, args.out, "batch-memory", header))


if __name__ == "__main__":
    main()
