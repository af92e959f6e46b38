"""Keyed streams at scale (issue 21): one server, a million keys.

    python benchmarks/bench_keys.py                  # 1,000,000 keys x 10 rows (~3 minutes)
    python benchmarks/bench_keys.py --keys 100000    # smaller
    python benchmarks/bench_keys.py --quick          # 20,000 keys (< 30 s): smoke test

One ``mtawindows serve`` process (default flags: the default key cache) on a ``valkey-server``
without persistence (a unix socket: fsync does not dominate). One keyed stream ``hosts``
(``host`` STRING key, ``v`` DOUBLE), one window ``w``: count + sum + max of ``v`` over the last
10 minutes (every key keeps its 10 rows: compact windows of 10 items).

1. **ingest**: ``--keys`` keys x 10 rows, in 10,000-row batches each spanning 10,000 keys (pass
   p appends row p of every key, keys in order: each batch touches 10,000 keys once), two
   batches in flight, one producer process building the requests. Rows acknowledged per
   second (target >= 300,000 at 10^6 keys), and the CPU per row of the server, Redis and the
   producer (they share the machine's cores).
2. **idle**: after the last batch, once the server's last flush is written (its ``/metrics``
   show no dirty key, then one flush interval), the server's CPU (``/proc`` utime +
   stime over 10 s, % of one core; target < 2%) and Redis commands/s (INFO
   ``total_commands_processed`` over the same 10 s; target < 100).
3. **memory**: the server's RSS after the ingest (target < 1 GB with the default cache) and
   Redis ``used_memory`` growth per key (target < 500 bytes per small key window).
4. **exact**: a sample of keys queried against their known sums.

Writes benchmarks/results/keys.{csv,md,png} (``--quick``: keys-quick.*).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import random
import socket
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import grpc
import redis

sys.path.insert(0, str(Path(__file__).parent))
from bench_cluster import Report, VolatileRedis, cpu_seconds, write

from mtawindows.client import WindowClient
from mtawindows.testing import LocalServer
from mtawindows.v1 import windows_pb2 as pb
from mtawindows.v1 import windows_pb2_grpc as pb_grpc
from mtawindows.v1.types import Aggregation, Field, Policy, StreamSpec, WindowSpec

BATCH = 10_000
ROWS_PER_KEY = 10
IDLE_S = 10.0
STREAM = "hosts"


def key_of(i: int) -> str:
    return f"host-{i:07d}"


def value_of(i: int, p: int) -> float:
    return float((i * 7 + p * 13) % 101)


def request(p: int, first: int, n: int) -> pb.AppendRequest:
    """Row ``p`` of keys ``first .. first+n-1`` (timestamps: second p of the run)."""
    ts = (1_700_000_000 + p) * 1_000_000_000
    return pb.AppendRequest(
        stream=STREAM,
        columns=[
            pb.Column(name="ts", timestamps=pb.Int64List(values=[ts] * n)),
            pb.Column(name="host", strings=pb.StringList(values=[key_of(i) for i in range(first, first + n)])),
            pb.Column(name="v", doubles=pb.DoubleList(values=[value_of(i, p) for i in range(first, first + n)])),
        ],
    )  # fmt: skip


class ArrowRequests:
    """The same rows as :func:`request` as Arrow IPC (``--wire arrow``): a producer holding
    its data as columns (the key column built once per block of keys, as a source would hold
    it; the values computed as arrays), no Python object per row on either side."""

    def __init__(self) -> None:
        import pyarrow as pa

        self.pa = pa
        self.schema = pa.schema([("ts", pa.int64()), ("host", pa.string()), ("v", pa.float64())])
        self.hosts: dict[tuple[int, int], Any] = {}

    def __call__(self, p: int, first: int, n: int) -> pb.AppendRequest:
        import numpy as np

        pa = self.pa
        hosts = self.hosts.get((first, n))
        if hosts is None:
            hosts = self.hosts[first, n] = pa.array([key_of(i) for i in range(first, first + n)])
        i = np.arange(first, first + n, dtype=np.int64)
        ts = np.full(n, (1_700_000_000 + p) * 1_000_000_000, dtype=np.int64)
        v = ((i * 7 + p * 13) % 101).astype(np.float64)
        table = pa.Table.from_arrays([pa.array(ts), hosts, pa.array(v)], schema=self.schema)
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, self.schema) as w:
            w.write_table(table)
        return pb.AppendRequest(stream=STREAM, arrow_ipc=sink.getvalue().to_pybytes())


def producer(target: str, keys: int, out: Any, wire: str = "columns") -> None:
    """Append every pass of every key, two requests in flight; put (rows, seconds, times),
    or the error that ended it (the main process must not wait for a dead producer)."""
    try:
        _produce(target, keys, out, ArrowRequests() if wire == "arrow" else request)
    except BaseException as ex:
        out.put(RuntimeError(f"{type(ex).__name__}: {ex}"))  # picklable, whatever it was
        raise


def _produce(target: str, keys: int, out: Any, make: Any = request) -> None:
    channel = grpc.insecure_channel(target, options=[("grpc.max_send_message_length", 1 << 30)])
    stub = pb_grpc.WindowServiceStub(channel)
    plan = [(p, first) for p in range(ROWS_PER_KEY) for first in range(0, keys, BATCH)]
    inflight: list[Any] = []
    rows = 0
    times: list[float] = []
    start = time.perf_counter()
    cpu = time.process_time()
    for p, first in plan:
        n = min(BATCH, keys - first)
        inflight.append(stub.Append.future(make(p, first, n), timeout=120))
        if len(inflight) >= 2:
            rows += inflight.pop(0).result().rows_applied
            times.append(time.perf_counter() - start)
    for f in inflight:
        rows += f.result().rows_applied
        times.append(time.perf_counter() - start)
    out.put((rows, time.perf_counter() - start, times, time.process_time() - cpu))
    channel.close()


def redis_cpu(r: Any) -> float:
    """CPU seconds Redis used so far (user + system, its INFO)."""
    info = r.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def dirty_keys(port: int) -> int | None:
    """The server's keys changed since its last flush (its /metrics), None when unreadable."""
    return stream_metric(port, "mtawindows_dirty_keys")


def stream_metric(port: int, name: str) -> int | None:
    """The stream's gauge ``name`` in the server's /metrics, None when unreadable."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(name + "{") and f'stream="{STREAM}"' in line:
            return int(float(line.rsplit(" ", 1)[1]))
    return None


def wait_flushed(port: int, limit: float = 300.0) -> float:
    """Seconds until no key of the stream is dirty (a flush prepared them all)."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < limit:
        if dirty_keys(port) == 0:
            break
        time.sleep(0.2)
    return time.perf_counter() - t0


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def plot(report: Report, keys: int, path: Path) -> None:
    """Rows acknowledged over time (the ingest), and each figure against its target."""
    try:
        import matplotlib
    except ImportError:
        print("matplotlib is not installed: no plot", flush=True)
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5))
    times = report.values("ingest", "batch acknowledged at")
    a.plot(times, [(i + 1) * BATCH for i in range(len(times))], "-")
    a.set_xlabel("seconds")
    a.set_ylabel("rows acknowledged")
    a.set_title(f"ingest: {keys:,} keys x {ROWS_PER_KEY} rows")
    checks = [r for r in report.rows if r["target"].startswith(("<", ">="))]
    labels, ratios = [], []
    for r in checks:
        bound = float(r["target"].split()[-1])
        ratios.append(r["value"] / bound if bound else 0.0)
        labels.append(f"{r['metric']} ({r['target']})")
    b.barh(labels, ratios, color=["tab:green" if r["met"] == "yes" else "tab:red" for r in checks])
    b.axvline(1.0, color="black", linestyle=":")
    b.set_xlabel("measured / target bound")
    b.set_title("targets (>= : at least 1; < : under 1)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--key-cache-mb", type=float, default=0, help="the server's (0: its default)")
    ap.add_argument(
        "--wire",
        choices=("columns", "arrow"),
        default="columns",
        help="the batches as protobuf columns (Python lists) or as Arrow IPC",
    )
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = ap.parse_args(argv)
    keys = 20_000 if args.quick else args.keys
    stem = ("keys-quick" if args.quick else "keys") + ("-arrow" if args.wire == "arrow" else "")
    report = Report()
    root = Path(tempfile.mkdtemp(prefix="mtaw-bench-keys-"))
    with VolatileRedis(root / "redis") as rd:
        url = rd.url
        r = redis.Redis.from_url(url)
        metrics = free_port()
        server = LocalServer(
            root / "server",
            "--log-level",
            "warning",
            "--metrics-port",
            str(metrics),
            redis_url=url,
            flush_interval=1.0,
        )
        with server:
            client = WindowClient(server.target)
            client.create_stream(
                StreamSpec(
                    STREAM,
                    (Field("host", "STRING"), Field("v", "DOUBLE")),
                    key="host",
                    wall_clock=False,
                )
            )
            client.create_window(
                WindowSpec(
                    STREAM,
                    "w",
                    (
                        Aggregation("n", "count"),
                        Aggregation("s", "sum", "v"),
                        Aggregation("hi", "max", "v"),
                    ),
                    Policy("time_range", range=__import__("datetime").timedelta(minutes=10)),
                )
            )
            mem0 = int(r.info("memory")["used_memory"])
            print(f"ingest: {keys:,} keys x {ROWS_PER_KEY} rows", flush=True)
            q: Any = mp.get_context("spawn").Queue()
            cpu0 = cpu_seconds(server.pid)
            redis_cpu0 = redis_cpu(r)
            proc = mp.get_context("spawn").Process(
                target=producer, args=(server.target, keys, q, args.wire)
            )
            proc.start()
            got = q.get(timeout=3600)
            if isinstance(got, Exception):
                msg = f"the producer failed: {got}"
                raise RuntimeError(msg)
            rows, secs, times, producer_cpu = got
            report.sample("ingest", "batch acknowledged at", times, "s")
            proc.join(60)
            cpu_ingest = cpu_seconds(server.pid) - cpu0
            cpu_redis = redis_cpu(r) - redis_cpu0
            rate = rows / secs
            case = f"{keys:,} keys"
            report.add(
                "ingest",
                case,
                "rows/s",
                rate,
                "rows/s",
                n=rows,
                target=">= 300000",
                met=rate >= 300_000,
            )
            report.add(
                "ingest", case, "server CPU per row", cpu_ingest / rows * 1e6, "us/row", n=rows
            )
            # where the machine's cores went: the producer and Redis share them with the server
            report.add(
                "ingest", case, "Redis CPU per row", cpu_redis / rows * 1e6, "us/row", n=rows
            )
            report.add(
                "ingest", case, "producer CPU per row", producer_cpu / rows * 1e6, "us/row", n=rows
            )
            report.add(
                "memory",
                case,
                "server RSS",
                rss_mb(server.pid),
                "MB",
                target="< 1024",
                met=rss_mb(server.pid) < 1024,
            )
            # idle from when the ingest's last flush is written: no key dirty any more (the
            # flush that cleared them prepared), then a flush interval (its write done: the
            # next flush waits for it) and a margin. A fixed wait measured the tail of the
            # flushes at 10^5 keys (one more flush of every group: ~1,000 Redis commands)
            flushed = wait_flushed(metrics)
            time.sleep(1.5)
            c0, n0, t0 = (
                cpu_seconds(server.pid),
                int(r.info("stats")["total_commands_processed"]),
                time.perf_counter(),
            )
            time.sleep(IDLE_S)
            c1, n1, t1 = (
                cpu_seconds(server.pid),
                int(r.info("stats")["total_commands_processed"]),
                time.perf_counter(),
            )
            idle_cpu = (c1 - c0) / (t1 - t0) * 100
            idle_cmds = (n1 - n0 - 2) / (t1 - t0)  # less this benchmark's own INFO
            report.add(
                "idle", case, "server CPU", idle_cpu, "% of a core", target="< 2", met=idle_cpu < 2
            )
            report.add(
                "idle",
                case,
                "Redis commands",
                idle_cmds,
                "commands/s",
                target="< 100",
                met=idle_cmds < 100,
            )
            mem1 = int(r.info("memory")["used_memory"])
            per_key = (mem1 - mem0) / keys
            report.add(
                "memory",
                case,
                "Redis per key",
                per_key,
                "bytes/key",
                target="< 500",
                met=per_key < 500,
            )
            report.add("memory", case, "server RSS after idle", rss_mb(server.pid), "MB")
            # the keys held in columns (no object per key: slab.py), of the keys held
            slab = stream_metric(metrics, "mtawindows_slab_keys")
            report.add("memory", case, "keys in the slab", slab if slab is not None else -1, "keys")
            report.add("idle", case, "last flush prepared after the ingest", flushed, "s")
            # exact: a sample of keys against their sums
            rng = random.Random(7)
            bad = 0
            sample = rng.sample(range(keys), min(300, keys))
            t = time.perf_counter()
            for i in sample:
                res = client.query(STREAM, "w", key=key_of(i))
                want = sum(value_of(i, p) for p in range(ROWS_PER_KEY))
                if res.values["n"] != ROWS_PER_KEY or abs(res.values["s"] - want) > 1e-9:
                    bad += 1
            q_ms = (time.perf_counter() - t) / len(sample) * 1000
            report.add(
                "exact", case, "keys wrong", bad, "keys", n=len(sample), target="0", met=bad == 0
            )
            report.add("query", case, "Query(key) latency (cold keys)", q_ms, "ms")
            info = client.get_stream(STREAM)
            report.add(
                "exact",
                case,
                "keys held",
                info.keys,
                "keys",
                target=str(keys),
                met=info.keys == keys,
            )
            client.close()
    header = [
        f"one server (default flags), valkey without persistence; {keys:,} keys x {ROWS_PER_KEY} rows, "
        f"{BATCH:,}-row batches each spanning {BATCH:,} keys; window count+sum+max over 10 min",
    ]
    table = write(report, args.out, stem, header)
    plot(report, keys, args.out / f"{stem}.png")
    print(table)


if __name__ == "__main__":
    main()
