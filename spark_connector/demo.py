"""The main job: telemetry from Spark through mtawindows and back, end to end.

``make demo`` (or ``python -m mtawindows.spark_connector.demo``):

1. starts ``mtawindows serve`` on a free loopback port with the embedded Redis;
2. creates stream ``telemetry`` (memory usage per reading, keyed by host) with window
   ``last_10m``: max and standard deviation over the last 10 minutes, one instance per host,
   kept by Amortized MTA with its middle levels in Redis;
3. generates memory readings of ``--hosts`` hosts over ``--hours`` hours in a local Spark job
   (a daily wave, noise, load spikes, bursts; like the paper's experiment 3), one Parquet file
   per hour;
4. streams the files through :func:`sliding_aggregate` (one window state per host) and prints
   each host's windowed result as every micro-batch lands;
5. pulls the windows' current results back as a DataFrame with ``spark.read.format("mtawindows")``,
   checks one host's per-row results against pandas, and writes a PNG plot of that host's value
   and its window max.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

T0 = 1_700_000_000  # 2023-11-14 22:13:20 UTC
STREAM = "telemetry"
WINDOW = "last_10m"
FIRST_HOST = "host-00"  # the host whose per-row results are checked and plotted


def generate(spark: Any, hosts: int, hours: int, every: float, folder: Path) -> int:
    """Readings per host every ``every`` seconds (with bursts), one Parquet file per hour."""
    from pyspark.sql import functions as F

    per_host = int(hours * 3600 / every)
    ids = spark.range(hosts * per_host)
    host = F.col("id") % hosts
    step = F.floor(F.col("id") / hosts)
    t = F.lit(T0) + step * every + host * 0.37 + F.rand(7) * every * 0.5
    day = (t % 86_400) / 86_400
    spike = F.when(F.rand(11) < 0.01, F.rand(13) * 12).otherwise(0.0)
    mem = 6 + host % 5 + 4 * F.sin(2 * 3.141592653589793 * day) + F.randn(17) * 0.4 + spike
    df = ids.select(
        F.format_string("host-%02d", host).alias("host"),
        F.timestamp_seconds(t).alias("ts"),
        F.round(mem, 3).alias("mem"),
        F.floor((t - T0) / 3600).alias("hour"),
    )
    # the last readings of a host jitter past the last hour: written nowhere, counted nowhere
    df = df.filter(F.col("hour") < hours).cache()
    for h in range(hours):  # files appear in time order: the stream reads them in that order
        df.filter(F.col("hour") == h).drop("hour").coalesce(1).write.mode("append").parquet(
            str(folder)
        )
    n = int(df.count())
    df.unpersist()
    return n


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="mtawindows-demo", description=__doc__.split("\n")[0])
    p.add_argument("--hosts", type=int, default=12)
    p.add_argument("--hours", type=int, default=6)
    p.add_argument("--every", type=float, default=2.0, help="seconds between readings")
    p.add_argument("--cores", type=int, default=2, help="local[N]")
    p.add_argument("--out", default="demo-output", help="where the plot goes")
    p.add_argument(
        "--endpoint",
        help="use this running server, or cluster (seeds: a:50051,b:50051), instead of starting one",
    )
    p.add_argument(
        "--master",
        default=os.environ.get("SPARK_MASTER_URL") or None,
        help="Spark master, e.g. spark://spark-master:7077 ($SPARK_MASTER_URL; default local[N])",
    )
    p.add_argument(
        "--work",
        help="directory for the Parquet files and checkpoints (default: a temporary one); with "
        "a Spark cluster, one its executors share with this driver",
    )
    return p.parse_args(argv)


def define(target: str) -> None:
    """Stream ``telemetry`` keyed by host with window ``last_10m``, afresh (a former run's
    deleted)."""
    from mtawindows.client import (
        Aggregation,
        Field,
        Policy,
        Storage,
        StreamSpec,
        WindowClient,
        WindowSpec,
    )

    with WindowClient(target) as c:
        if STREAM in [s.spec.name for s in c.list_streams()]:  # a former run's
            c.delete_stream(STREAM)
        c.create_stream(
            StreamSpec(
                STREAM,
                (Field("host", "STRING"), Field("mem", "DOUBLE")),
                timestamp_field="ts",
                key="host",
            )
        )
        c.create_window(
            WindowSpec(
                STREAM,
                WINDOW,
                (Aggregation("mem_max", "max", "mem"), Aggregation("mem_std", "stddev", "mem")),
                Policy.time_range(timedelta(minutes=10)),
                storage=Storage("redis"),
            )
        )


def _batch_table(pdf: Any, batch_id: int) -> Any:
    """A micro-batch's newest result per host (the first 8 hosts) as a rich table."""
    from rich.table import Table

    last = pdf.sort_values("ts").groupby("host").tail(1).sort_values("host")
    table = Table(
        title=f"micro-batch {batch_id}: {len(pdf):,} rows, up to {pdf['ts'].max():%Y-%m-%d %H:%M} UTC",
        title_justify="left",
    )
    for col in ("host", "ts", "mem", "max 10 min", "stddev 10 min"):
        table.add_column(col, justify="right" if col != "host" else "left")
    for r in last.head(8).itertuples():
        table.add_row(
            r.host, f"{r.ts:%H:%M:%S}", f"{r.mem:.2f}", f"{r.mem_max:.2f}", f"{r.mem_std:.3f}"
        )
    if len(last) > 8:
        table.add_row(f"... {len(last) - 8} more hosts", "", "", "", "")
    return table


def stream_through(spark: Any, files: Path, target: str, work: Path, console: Any) -> Any:
    """Stream the Parquet files through :func:`sliding_aggregate`, printing every
    micro-batch; returns the per-row results of host ``host-00`` (a pandas DataFrame)."""
    import pandas as pd

    from mtawindows.spark_connector import sliding_aggregate

    src = (
        spark.readStream.schema("host string, ts timestamp, mem double")
        .option("maxFilesPerTrigger", 1)
        .parquet(str(files))
    )
    results = sliding_aggregate(src, target, STREAM, key_col="host", ts_col="ts", window=WINDOW)
    kept: list[Any] = []
    rows_seen = [0]

    def show(batch: Any, batch_id: int) -> None:
        pdf = batch.toPandas()
        if pdf.empty:
            return
        rows_seen[0] += len(pdf)
        kept.append(pdf[pdf["host"] == FIRST_HOST])
        console.print(_batch_table(pdf, batch_id))

    started = time.perf_counter()
    q = (
        results.writeStream.foreachBatch(show)
        .option("checkpointLocation", str(work / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    if q.exception() is not None:
        raise RuntimeError(str(q.exception()))
    took = time.perf_counter() - started
    console.print(
        f"[bold]stream[/] {rows_seen[0]:,} rows through sliding_aggregate in {took:.1f} s "
        f"({rows_seen[0] / took:,.0f} rows/s including Spark's micro-batch overhead)"
    )
    return pd.concat(kept, ignore_index=True).sort_values("ts")


def pull_back(spark: Any, target: str, console: Any) -> None:
    """Each host's window now, read with ``spark.read.format("mtawindows")``."""
    pulled = (
        spark.read.format("mtawindows")
        .option("endpoint", target)
        .option("stream", STREAM)
        .option("key_column", "host")
        .load()
        .select("key", "sequence", "timestamp", "size", "mem_max", "mem_std")
        .orderBy("key")
    )
    console.print("[bold]pulled back[/] spark.read.format('mtawindows'): each host's window now")
    pulled.show(8, truncate=False)


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)

    from rich.console import Console

    from mtawindows.client.launch import start_server, stop_server
    from mtawindows.spark_connector import local_session

    console = Console()
    own_work = not args.work
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="mtawindows-demo-"))
    work.mkdir(parents=True, exist_ok=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    proc = None
    try:
        if args.endpoint:
            target = args.endpoint
        else:
            proc, port = start_server(work, "--log-level", "warning")
            target = f"127.0.0.1:{port}"
            console.print(
                f"[bold]server[/] mtawindows serve on {target} (embedded Redis in {work})"
            )
        define(target)
        master = args.master or f"local[{args.cores}]"
        spark = local_session(master, "mtawindows-demo", partitions=args.cores)
        files = work / "telemetry"
        started = time.perf_counter()
        n = generate(spark, args.hosts, args.hours, args.every, files)
        console.print(
            f"[bold]spark[/] generated {n:,} readings of {args.hosts} hosts over {args.hours} h "
            f"in {time.perf_counter() - started:.1f} s ({args.hours} Parquet files)"
        )
        host = stream_through(spark, files, target, work, console)
        pull_back(spark, target, console)
        worst = check_against_pandas(host)
        console.print(
            f"[bold]check[/] {len(host):,} per-row results of {FIRST_HOST} equal pandas' rolling "
            f"10 min max/std (largest difference {worst:.2e})"
        )
        png = plot(host, out / f"telemetry_{FIRST_HOST}.png", FIRST_HOST)
        console.print(f"[bold]plot[/] {png}")
        spark.stop()
        return 0
    finally:
        if proc is not None:
            stop_server(proc)
        if own_work:
            shutil.rmtree(work, ignore_errors=True)


def check_against_pandas(host: Any) -> float:
    """Largest difference between the per-row results and pandas' rolling window (10 min)."""
    import pandas as pd

    s = host.set_index(pd.to_datetime(host["ts"]))["mem"]
    roll = s.rolling(pd.Timedelta(minutes=10))
    want_max = roll.max().to_numpy()
    want_std = roll.std(ddof=0).to_numpy()
    worst = 0.0
    for got, want in (
        (host["mem_max"].to_numpy(), want_max),
        (host["mem_std"].to_numpy(), want_std),
    ):
        diff = float(abs(got - want).max())
        worst = max(worst, diff)
    if worst > 1e-6:
        msg = f"per-row results differ from pandas by {worst}"
        raise AssertionError(msg)
    return worst


def plot(host: Any, path: Path, name: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, ax2) = plt.subplots(
        2, 1, figsize=(11, 6), sharex=True, gridspec_kw={"height_ratios": [3, 1]}
    )
    ax.plot(host["ts"], host["mem"], lw=0.5, color="#9ab", label=f"{name} memory (GiB)")
    ax.plot(host["ts"], host["mem_max"], lw=1.2, color="#c33", label="max over the last 10 min")
    ax.set_ylabel("GiB")
    ax.set_title("mtawindows: exact sliding max and stddev per host, computed from Spark")
    ax.legend(loc="upper left")
    ax2.plot(host["ts"], host["mem_std"], lw=0.9, color="#36a", label="stddev over the last 10 min")
    ax2.set_xlabel("time (UTC)")
    ax2.set_ylabel("GiB")
    ax2.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


if __name__ == "__main__":
    sys.exit(main())
