"""Cluster benchmarks (issue 15): several ``mtawindows serve`` processes on one Redis.

    python benchmarks/bench_cluster.py                 # all five (~17 minutes on 2 cores)
    python benchmarks/bench_cluster.py --quick         # small counts (< 60 s): smoke test, CI
    python benchmarks/bench_cluster.py --only failover,rebalance

1. scaling: 1, 2 then 3 server processes on one Redis (each joins the running cluster, the
   streams rebalance onto it; they leave gracefully before the next repetition). S streams, each with a durable Redis window (count + sum + max
   of a double, count policy), fed by two producer processes (a few threads each) that append
   fixed-size batches round-robin to every stream at its owner (``GetClusterMap(streams)``,
   NOT_OWNER / STREAM_MOVING followed) for a fixed time. Rows acknowledged per server
   CPU-second (``/proc/<pid>/stat`` utime + stime of the server processes over the measured
   interval), relative to one server (target: 3 servers >= 85%); wall-clock rows/s too (the
   machine has 2 cores: more processes do not add cores). Full runs repeat 1-2-3 three
   times (other processes share the machine: each repetition is compared with its own
   1-server run; medians reported) and add rounds with the producers paced at 35% of what
   one server took (the same offered load for 1, 2 and 3 servers, CPU to spare), one server
   paced at a third of that (the load each of 3 gets: a less busy server spends more CPU
   per row), and the servers' CPU with no calls.
2. fencing: in-process :class:`Registry` appends (``Stream.append``) on streams created under
   a real fence (``Leases.acquire``) vs unfenced (``fence=None``), with a thread renewing the
   leases every lease/4 (one pipelined EVALSHA per stream, as Ownership does) during the fenced
   runs; durable and non-durable windows, 100- and 5,000-row batches; the cases take turns in
   every round. Ratio fenced / unfenced of rows/s, median of the per-round ratios (target
   >= 90%).
3. durable: the same runs, durable / non-durable rows/s for 100- and 5,000-row batches (the
   default becomes durable if it costs < 20%). 2 and 3 run on two Redis set-ups: without
   persistence (the software cost) and the embedded server's default AOF ``appendfsync
   always`` (what a durable append waits for on this disk).
4. failover: 3 servers (``--lease-ms 2000``, ``--flush-interval 1``); per trial a victim
   server owning a stream with a durable window and a stream with a non-durable one;
   idempotent appends acknowledged by it, then ``kill -9``; a client appends (producer_id +
   sequence) through any live server, following NOT_OWNER and STREAM_MOVING (waiting its
   ``retry_after_ms``), until one succeeds: time from the kill to that success (target worst
   < 5 s). Then the windows' counts against the rows acknowledged: 0 lost for the durable
   window; the non-durable one loses the rows after its last periodic flush. The victim is
   restarted on its port between trials (its streams move back to it).
5. rebalance: N streams whose windows hold 2^k items each, filled in-process by two filler
   processes and adopted by Ownership A (in-process); then member B joins (its own Registry
   and Ownership on the same Redis), ``A.rebalance()`` releases the streams placed on B,
   ``B.rebalance()`` adopts them: time per stream moved (release on A + adopt on B; target
   median < 10 ms), against reading all of a window's keys from Redis (one pipelined read of
   every key, keys listed beforehand, not timed). Local memory per adopted stream: the RSS
   growth of the process while A adopted every stream, divided by their number, and the
   Python heap (tracemalloc) of 20 streams opened by a third registry at the end; the longest
   garbage collection of the process during the move (A and B share it).

Redis: 1, 4 and 5 run on a ``valkey-server`` on a unix socket without persistence
(``--appendonly no --save ""``, :class:`VolatileRedis`: fsync does not dominate); 2 and 3
on that and on :class:`EmbeddedRedis` with its default AOF (``appendfsync always``).

Writes benchmarks/results/cluster.{csv,md,png} and cluster-samples.csv (``--quick``:
cluster-quick.*; ``--out`` another folder). Every loop is bounded in count and time.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import gc
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from mtawindows.client.errors import from_rpc_error
from mtawindows.server.storage.embedded import EmbeddedRedis
from mtawindows.testing import LocalServer, free_port
from mtawindows.v1 import convert
from mtawindows.v1 import windows_pb2 as pb
from mtawindows.v1 import windows_pb2_grpc as pb_grpc
from mtawindows.v1.placement import place
from mtawindows.v1.types import Aggregation, Field, Policy, Storage, StreamSpec, WindowSpec

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "results"
LEASE_MS = 2000
FLUSH_S = 1.0
AGGS = (Aggregation("n", "count"), Aggregation("s", "sum", "x"), Aggregation("m", "max", "x"))
EXPERIMENTS = ("scaling", "ingest", "failover", "rebalance")
CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Sizes:
    """How much each experiment does (``--quick``: the smallest that still measures)."""

    scaling_streams: int = 24
    scaling_batch: int = 2000
    scaling_seconds: float = 10.0
    scaling_warmup: float = 2.0
    scaling_reps: int = 3
    scaling_idle_s: float = 3.0  # servers' CPU with no load (0: not measured)
    scaling_paced_share: float = 0.35  # paced rounds at this share of 1 server's rows/s
    producer_threads: int = 3
    ingest_rounds: int = 9
    ingest_block_s: float = 0.5
    ingest_window: int = 20_000
    failover_trials: int = 20
    failover_fill_s: tuple[float, float] = (1.2, 2.4)
    rebalance_streams: int = 1000
    rebalance_log2: int = 16
    rebalance_read_sample: int = 200


QUICK = Sizes(
    scaling_streams=6,
    scaling_batch=500,
    scaling_seconds=1.5,
    scaling_warmup=0.5,
    scaling_reps=1,
    scaling_idle_s=0.0,
    scaling_paced_share=0.0,
    producer_threads=2,
    ingest_rounds=2,
    ingest_block_s=0.1,
    ingest_window=2000,
    failover_trials=3,
    failover_fill_s=(0.4, 1.0),
    rebalance_streams=20,
    rebalance_log2=12,
    rebalance_read_sample=20,
)


# --------------------------------------------------------------------------- results
@dataclass
class Report:
    """Figures (one CSV row each) and raw samples (the plot's data)."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    samples: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(
        self,
        experiment: str,
        case: str,
        metric: str,
        value: float,
        unit: str,
        *,
        n: int = 1,
        target: str = "",
        met: bool | None = None,
    ) -> None:
        self.rows.append(
            {
                "experiment": experiment,
                "case": case,
                "metric": metric,
                "value": value,
                "unit": unit,
                "n": n,
                "target": target,
                "met": "" if met is None else ("yes" if met else "no"),
            }
        )
        print(f"  {experiment} | {case} | {metric} = {value:.4g} {unit}", flush=True)

    def sample(self, experiment: str, case: str, values: Sequence[float], unit: str) -> None:
        for i, v in enumerate(values):
            self.samples.append(
                {"experiment": experiment, "case": case, "i": i, "value": v, "unit": unit}
            )

    def values(self, experiment: str, case: str) -> list[float]:
        return [
            float(s["value"])
            for s in self.samples
            if s["experiment"] == experiment and s["case"] == case
        ]


def quantile(xs: Sequence[float], q: float) -> float:
    """The ``q`` quantile of ``xs`` (nearest rank; 0 for none)."""
    if not xs:
        return 0.0
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


# --------------------------------------------------------------------------- processes
class VolatileRedis(EmbeddedRedis):
    """The embedded ``valkey-server`` (unix socket, temporary directory, dies with this
    process) without persistence: ``--appendonly no --save ""``."""

    def _command(self) -> list[str]:
        args = super()._command()
        args[args.index("--appendonly") + 1] = "no"
        return args


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (``/proc/<pid>/stat``)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime (fields 14, 15)


def rss_kb() -> int:
    """This process's resident set (kB)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def mem_available_kb() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1])
    return 0


class Server(LocalServer):
    """``mtawindows serve`` on a fixed loopback port (it advertises it), on a shared Redis;
    killed with this process (the testing kit's :class:`~mtawindows.testing.LocalServer`)."""

    def __init__(self, root: Path, redis_url: str) -> None:
        port = free_port()
        super().__init__(
            root / f"server-{port}",
            "--advertise", f"127.0.0.1:{port}",
            "--log-level", "warning",
            "--lease-ms", str(LEASE_MS),
            redis_url=redis_url,
            port=port,
            flush_interval=FLUSH_S,
        )  # fmt: skip

    @property
    def address(self) -> str:
        return self.target

    @property
    def alive(self) -> bool:
        return self.running


class Cluster:
    """The servers of one Redis and a client's view of them: channels, the cluster map and
    calls routed to a stream's owner."""

    def __init__(self, root: Path, redis_url: str) -> None:
        self.root = root
        self.redis_url = redis_url
        self.servers: list[Server] = []
        self._channels: dict[str, grpc.Channel] = {}

    @property
    def live(self) -> list[Server]:
        return [s for s in self.servers if s.alive]

    def add(self) -> Server:
        srv = Server(self.root, self.redis_url).start()
        self.servers.append(srv)
        return srv

    def stub(self, address: str) -> pb_grpc.WindowServiceStub:
        ch = self._channels.get(address)
        if ch is None:
            ch = self._channels[address] = grpc.insecure_channel(address)
        return pb_grpc.WindowServiceStub(ch)

    def forget(self, address: str) -> None:
        """Drop the channel of ``address`` (a killed server: a new one connects at once
        instead of waiting out the old one's reconnect backoff)."""
        ch = self._channels.pop(address, None)
        if ch is not None:
            ch.close()

    def cluster_map(self, streams: Sequence[str] = ()) -> pb.ClusterMap:
        last: Exception | None = None
        for srv in self.live:
            try:
                req = pb.GetClusterMapRequest(streams=list(streams))
                m: pb.ClusterMap = self.stub(srv.address).GetClusterMap(req, timeout=10)
                return m
            except grpc.RpcError as ex:
                last = ex
        msg = f"no live server answered GetClusterMap: {last}"
        raise RuntimeError(msg)

    def owners(self, streams: Sequence[str]) -> dict[str, str]:
        """stream -> its live owner's address ("" when none)."""
        out: dict[str, str] = {}
        for i in range(0, len(streams), 1000):
            m = self.cluster_map(streams[i : i + 1000])
            out.update({o.stream: o.address for o in m.owners})
        return out

    def wait_formed(self, timeout: float = 60.0) -> None:
        """Until every live server's map lists every live server."""
        want = sorted(s.address for s in self.live)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            seen = []
            for s in self.live:
                with contextlib.suppress(grpc.RpcError):
                    m = self.stub(s.address).GetClusterMap(pb.GetClusterMapRequest(), timeout=5)
                    seen.append(sorted(x.address for x in m.members))
            if len(seen) == len(want) and all(v == want for v in seen):
                return
            time.sleep(0.1)
        msg = f"the cluster did not form within {timeout}s (want {want})"
        raise TimeoutError(msg)

    def wait_placed(self, streams: Sequence[str], timeout: float = 60.0) -> float:
        """Until every stream is owned where placement puts it among the live servers;
        returns the seconds it took."""
        t0 = time.monotonic()
        ids = [s.address for s in self.live]
        want = {n: place(n, ids) for n in streams}
        while time.monotonic() - t0 < timeout:
            if self.owners(streams) == want:
                return time.monotonic() - t0
            time.sleep(0.05)
        msg = f"the streams did not settle on their placement within {timeout}s"
        raise TimeoutError(msg)

    def call(
        self,
        stream: str,
        method: str,
        request: Any,
        *,
        first: str | None = None,
        budget: float = 30.0,
    ) -> tuple[Any, int]:
        """``method(request)`` at ``stream``'s owner: start at ``first`` (else where placement
        puts it), follow NOT_OWNER, wait STREAM_MOVING's ``retry_after_ms``, move on from a
        server that does not answer. (response, attempts); bounded by ``budget`` seconds."""
        ids = [s.address for s in self.servers]
        address = first or place(stream, [s.address for s in self.live]) or ids[0]
        refused: set[str] = set()
        deadline = time.monotonic() + budget
        attempts = 0
        while True:
            attempts += 1
            try:
                return getattr(self.stub(address), method)(request, timeout=10), attempts
            except grpc.RpcError as err:
                ex = from_rpc_error(err, address)
                if time.monotonic() > deadline:
                    msg = f"{method} on {stream!r}: no success within {budget}s (last: {ex})"
                    raise TimeoutError(msg) from None
                if ex.reason == "NOT_OWNER" and ex.metadata.get("owner"):
                    address = ex.metadata["owner"]
                    continue
                if ex.reason == "STREAM_MOVING":
                    wait = int(ex.metadata.get("retry_after_ms", "100") or 100)
                    time.sleep(min(wait, 5000) / 1000)
                elif ex.code == "UNAVAILABLE":  # not answering: dead (or starting)
                    refused.add(address)
                else:
                    raise
                others = [a for a in ids if a not in refused] or ids
                live = [s.address for s in self.live if s.address not in refused]
                address = (place(stream, live) if live else None) or others[attempts % len(others)]

    def close(self) -> None:
        for s in self.servers:
            s.stop()
        for a in list(self._channels):
            self.forget(a)


def create(cluster: Cluster, spec: StreamSpec, windows: Sequence[WindowSpec]) -> None:
    """A stream and its windows, at the stream's owner."""
    cluster.call(spec.name, "CreateStream", pb.CreateStreamRequest(spec=convert.stream_spec_to_proto(spec)))  # fmt: skip
    for w in windows:
        req = pb.CreateWindowRequest(spec=convert.window_spec_to_proto(w))
        cluster.call(spec.name, "CreateWindow", req)


def window_count(cluster: Cluster, stream: str, window: str) -> int:
    res, _ = cluster.call(stream, "Query", pb.QueryRequest(stream=stream, window=window))
    return int(convert.result_from_proto(res).values["n"])


def append_request(
    stream: str, t0: int, xs: Sequence[float], producer: str = "", sequence: int = 0
) -> pb.AppendRequest:
    return pb.AppendRequest(
        stream=stream,
        columns=[
            pb.Column(name="ts", timestamps=pb.Int64List(values=range(t0, t0 + len(xs)))),
            pb.Column(name="x", doubles=pb.DoubleList(values=xs)),
        ],
        producer_id=producer,
        sequence=sequence,
    )


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


# --------------------------------------------------------------------------- 1. scaling
def producer_main(cfg: dict[str, Any]) -> None:
    """A producer process (``--producer JSON``): append ``batch``-row batches round-robin to
    its streams at their owners until ``stop`` (as fast as acknowledged, or paced at ``rate``
    rows/s); print what was acknowledged between ``start`` and ``end`` (epoch seconds) as
    JSON."""
    seeds: list[str] = cfg["seeds"]
    streams: list[str] = cfg["streams"]
    batch: int = cfg["batch"]
    start, end, stop = float(cfg["start"]), float(cfg["end"]), float(cfg["stop"])
    threads = max(1, min(int(cfg["threads"]), len(streams)))
    rate = float(cfg.get("rate", 0))  # rows/s of this process, 0: unpaced
    pause = batch * threads / rate if rate > 0 else 0.0  # seconds between a thread's batches
    channels: dict[str, grpc.Channel] = {}
    lock = threading.Lock()
    totals = {"rows": 0, "calls": 0, "rows_all": 0, "redirects": 0, "moving": 0, "errors": 0}

    def stub(address: str) -> pb_grpc.WindowServiceStub:
        with lock:
            ch = channels.get(address)
            if ch is None:
                ch = channels[address] = grpc.insecure_channel(address)
        return pb_grpc.WindowServiceStub(ch)

    def owners(names: list[str]) -> dict[str, str]:
        for seed in seeds:
            try:
                m = stub(seed).GetClusterMap(pb.GetClusterMapRequest(streams=names), timeout=10)
                return {o.stream: o.address or seed for o in m.owners}
            except grpc.RpcError:
                continue
        return dict.fromkeys(names, seeds[0])

    rng = random.Random(cfg.get("seed", 1))
    xs = [rng.random() for _ in range(batch)]

    def run(mine: list[str]) -> None:
        where = owners(mine)
        nxt = dict.fromkeys(mine, time.time_ns())
        got = {k: 0 for k in totals}
        i = 0
        due = time.time() + rng.random() * pause
        while time.time() < stop:
            if pause:
                time.sleep(max(0.0, due - time.time()))
                due += pause
            name = mine[i % len(mine)]
            i += 1
            req = append_request(name, nxt[name], xs)
            try:
                stub(where[name]).Append(req, timeout=30)
            except grpc.RpcError as err:
                ex = from_rpc_error(err)
                if ex.reason == "NOT_OWNER" and ex.metadata.get("owner"):
                    where[name] = ex.metadata["owner"]
                    got["redirects"] += 1
                elif ex.reason == "STREAM_MOVING":
                    got["moving"] += 1
                    time.sleep(min(1.0, int(ex.metadata.get("retry_after_ms", "100")) / 1000))
                    where.update(owners(mine))
                else:
                    got["errors"] += 1
                    time.sleep(0.05)
                    where.update(owners(mine))
                i -= 1  # the same stream again
                continue
            nxt[name] += batch
            t = time.time()
            got["rows_all"] += batch
            if start <= t <= end:
                got["rows"] += batch
                got["calls"] += 1
        with lock:
            for k, v in got.items():
                totals[k] += v

    workers = [
        threading.Thread(target=run, args=(streams[k::threads],), daemon=True)
        for k in range(threads)
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=max(1.0, stop - time.time() + 60))
    print(json.dumps(totals), flush=True)


def scaling_round(
    cluster: Cluster, streams: list[str], sizes: Sizes, redis_pid: int, rate: float = 0.0
) -> dict[str, Any]:
    """One measured interval with the servers now live: two producer processes (unpaced, or
    together ``rate`` rows/s), the servers' (and Redis's) CPU seconds over it, the rows
    acknowledged in it."""
    servers = cluster.live
    seeds = [s.address for s in servers]
    now = time.time()
    start = now + 1.5 + sizes.scaling_warmup  # the producers import and connect first
    end = start + sizes.scaling_seconds
    procs = []
    for k in range(2):
        cfg = {
            "seeds": seeds,
            "streams": streams[k::2],
            "batch": sizes.scaling_batch,
            "start": start,
            "end": end,
            "stop": end + 0.5,
            "threads": sizes.producer_threads,
            "seed": k,
            "rate": rate / 2,
        }
        procs.append(
            subprocess.Popen(
                [sys.executable, __file__, "--producer", json.dumps(cfg)],
                stdout=subprocess.PIPE,
                text=True,
            )
        )
    time.sleep(max(0.0, start - time.time()))
    pids = [s.pid for s in servers]
    cpu0 = [cpu_seconds(p) for p in pids]
    redis0 = cpu_seconds(redis_pid)
    t0 = time.time()
    time.sleep(max(0.0, end - time.time()))
    cpu1 = [cpu_seconds(p) for p in pids]
    redis1 = cpu_seconds(redis_pid)
    wall = time.time() - t0
    totals: dict[str, int] = {}
    for p in procs:
        out, _ = p.communicate(timeout=sizes.scaling_seconds + 120)
        for k, v in json.loads(out.strip().splitlines()[-1]).items():
            totals[k] = totals.get(k, 0) + int(v)
    per_server = [b - a for a, b in zip(cpu0, cpu1, strict=True)]
    return {
        "servers": len(servers),
        "rows": totals["rows"],
        "server_cpu": sum(per_server),
        "per_server_cpu": per_server,
        "redis_cpu": redis1 - redis0,
        "wall": wall,
        **{k: v for k, v in totals.items() if k != "rows"},
    }


def idle_cpu(cluster: Cluster, seconds: float) -> float:
    """Mean CPU (cores) of a live server with no calls: ticks, heartbeats, flushes."""
    pids = [s.pid for s in cluster.live]
    cpu0 = [cpu_seconds(p) for p in pids]
    time.sleep(seconds)
    cpu1 = [cpu_seconds(p) for p in pids]
    return sum(b - a for a, b in zip(cpu0, cpu1, strict=True)) / seconds / len(pids)


def set_servers(cluster: Cluster, n: int) -> None:
    """Exactly the first ``n`` servers live (started again on their ports, or stopped
    gracefully: they hand their streams over), the cluster formed."""
    while len(cluster.servers) < n:
        cluster.add()
    for i, srv in enumerate(cluster.servers):
        if i < n and not srv.alive:
            cluster.forget(srv.address)
            srv.start()
        elif i >= n and srv.alive:
            srv.stop()
            cluster.forget(srv.address)
    cluster.wait_formed()


def report_scaling(report: Report, case: str, runs: list[dict[str, Any]], n: int) -> None:
    """The figures of one case: medians over its repetitions (each run carries ``eff``, its
    rows per server CPU-second over the 1-server run of the same repetition)."""

    def med(fn: Callable[[dict[str, Any]], float]) -> float:
        return statistics.median(fn(r) for r in runs)

    k = len(runs)
    effs = [r["eff"] for r in runs]
    eff = statistics.median(effs)
    report.add("scaling", case, "rows_per_server_cpu_s", med(lambda r: r["rows"] / r["server_cpu"]), "rows/CPU-s", n=k)  # fmt: skip
    report.add(
        "scaling",
        case,
        "efficiency_vs_1_server",
        eff,
        "x",
        n=k,
        target=">= 0.85 (3 servers)" if n == 3 else "",
        met=eff >= 0.85 if n == 3 else None,
    )
    if k > 1:
        report.add("scaling", case, "efficiency_min", min(effs), "x", n=k)
        report.add("scaling", case, "efficiency_max", max(effs), "x", n=k)
    report.add("scaling", case, "rows_per_s_wall", med(lambda r: r["rows"] / r["wall"]), "rows/s", n=k)  # fmt: skip
    report.add("scaling", case, "server_cpu_s_per_wall_s", med(lambda r: r["server_cpu"] / r["wall"]), "cores", n=k)  # fmt: skip
    report.add(
        "scaling",
        case,
        "rows_per_cpu_s_servers_plus_redis",
        med(lambda r: r["rows"] / (r["server_cpu"] + r["redis_cpu"])),
        "rows/CPU-s",
        n=k,
    )
    report.add("scaling", case, "rows_acknowledged", sum(r["rows"] for r in runs), "rows", n=sum(r["calls"] for r in runs))  # fmt: skip
    report.add("scaling", case, "not_owner_redirects", sum(r["redirects"] for r in runs), "calls", n=k)  # fmt: skip
    report.add("scaling", case, "errors", sum(r["errors"] + r["moving"] for r in runs), "calls", n=k)  # fmt: skip
    report.sample("scaling", case, effs, "x")
    for r in runs:
        report.notes.append(
            f"scaling {case}: server CPU {r['server_cpu']:.1f}s (per server "
            f"{', '.join(f'{x:.1f}' for x in r['per_server_cpu'])}), Redis CPU "
            f"{r['redis_cpu']:.1f}s over {r['wall']:.1f}s wall"
        )


def bench_scaling(cluster: Cluster, report: Report, sizes: Sizes, redis_pid: int) -> None:
    """1, 2, 3 servers, ``scaling_reps`` times over (the machine's other load drifts: each
    repetition compares with its own 1-server run): unpaced producers (the servers as busy
    as the 2 cores let them), then (full runs) producers paced at a share of what 1 server
    took in the first repetition (the same offered load for every server count, CPU to
    spare), and 1 server paced at a third of that (the load each of 3 servers gets)."""
    print("1. scaling", flush=True)
    streams = [f"sc-{i:03d}" for i in range(sizes.scaling_streams)]
    set_servers(cluster, 1)
    for name in streams:
        create(
            cluster,
            StreamSpec(name, (Field("x", "DOUBLE"),), wall_clock=False),
            [WindowSpec(name, "w", AGGS, Policy.count(100_000), storage=Storage(durable=True))],
        )  # fmt: skip
    runs: dict[str, list[dict[str, Any]]] = {}
    order: list[tuple[str, int]] = []
    paced_rate = 0.0

    def record(case: str, n: int, r: dict[str, Any], base: dict[str, Any] | None) -> None:
        r["eff"] = (r["rows"] / r["server_cpu"]) / (base["rows"] / base["server_cpu"]) if base else 1.0  # fmt: skip
        if case not in runs:
            runs[case] = []
            order.append((case, n))
        runs[case].append(r)

    for rep in range(sizes.scaling_reps):
        base: dict[str, Any] | None = None
        paced_base: dict[str, Any] | None = None
        for n in (1, 2, 3):
            set_servers(cluster, n)
            settle = cluster.wait_placed(streams)
            case = f"{n} server{'s' if n > 1 else ''}"
            if rep == 0:
                owned = {s.address: 0 for s in cluster.live}
                for a in cluster.owners(streams).values():
                    owned[a] = owned.get(a, 0) + 1
                report.add("scaling", case, "settle_after_join_s", settle, "s")
                report.notes.append(f"scaling {case}: streams per server {sorted(owned.values())}")
                if sizes.scaling_idle_s:
                    idle = idle_cpu(cluster, sizes.scaling_idle_s)
                    report.add("scaling", case, "idle_cpu_per_server", idle, "cores")
            print(f"  repetition {rep + 1}, {case}", flush=True)
            r = scaling_round(cluster, streams, sizes, redis_pid)
            record(case, n, r, base)
            if n == 1:
                base = r
                if rep == 0:
                    paced_rate = sizes.scaling_paced_share * r["rows"] / r["wall"]
            if paced_rate:
                paced = f"{case}, paced {paced_rate / 1000:.0f}k rows/s"
                r = scaling_round(cluster, streams, sizes, redis_pid, paced_rate)
                record(paced, n, r, paced_base)
                if n == 1:
                    paced_base = r
                    # the load each of 3 servers gets, on one: what a less busy server costs
                    third = f"1 server, paced {paced_rate / 3000:.0f}k rows/s (a third)"
                    r = scaling_round(cluster, streams, sizes, redis_pid, paced_rate / 3)
                    record(third, 1, r, paced_base)
    for case, n in order:
        report_scaling(report, case, runs[case], n)
    set_servers(cluster, 3)
    for name in streams:  # the failover runs on the same servers, without these
        cluster.call(name, "DeleteStream", pb.DeleteStreamRequest(name=name))


# --------------------------------------------------------------------------- 4. failover
def stream_on(server: str, ids: list[str], prefix: str) -> str:
    """A stream name placed on ``server`` among ``ids``."""
    for k in range(100_000):
        name = f"{prefix}-{k}"
        if place(name, ids) == server:
            return name
    msg = f"no name placed on {server}"
    raise RuntimeError(msg)


@dataclass
class FailoverStream:
    name: str
    durable: bool
    producer: str
    sequence: int = 0
    next_ts: int = 1
    acked: int = 0  # rows acknowledged since the last count (or since creation)
    counted: int = 0  # the window's count as last read
    acks: list[tuple[float, int]] = field(default_factory=list)

    def request(self, rows: int, xs: Sequence[float]) -> pb.AppendRequest:
        self.sequence += 1
        req = append_request(self.name, self.next_ts, xs[:rows], self.producer, self.sequence)
        self.next_ts += rows
        return req


def bench_failover(cluster: Cluster, report: Report, sizes: Sizes) -> None:
    print("4. failover", flush=True)
    while len(cluster.live) < 3:
        cluster.add()
    cluster.wait_formed()
    ids = [s.address for s in cluster.live]
    victims: dict[str, tuple[FailoverStream, FailoverStream]] = {}
    for srv in cluster.servers:
        pair = []
        for durable in (True, False):
            name = stream_on(srv.address, ids, f"fo-{'d' if durable else 'n'}-{srv.port}")
            storage = Storage("redis", durable=durable)
            create(
                cluster,
                StreamSpec(name, (Field("x", "DOUBLE"),), wall_clock=False),
                [WindowSpec(name, "w", AGGS, Policy.count(100_000_000), storage=storage)],
            )
            pair.append(FailoverStream(name, durable, f"bench-{name}"))
        victims[srv.address] = (pair[0], pair[1])
    rng = random.Random(15)
    xs = [rng.random() for _ in range(100)]
    times_d: list[float] = []
    times_n: list[float] = []
    lost_d: list[float] = []
    lost_n: list[float] = []
    last_flush_rows: list[float] = []
    back: list[float] = []
    for trial in range(sizes.failover_trials):
        victim = cluster.servers[trial % len(cluster.servers)]
        d, nd = victims[victim.address]
        cluster.wait_placed([d.name, nd.name], timeout=60)
        # acknowledged rows at the victim, for a random time (a random phase of its flushes)
        fill = rng.uniform(*sizes.failover_fill_s)
        t_end = time.monotonic() + fill
        for _ in range(100_000):
            if time.monotonic() >= t_end:
                break
            for s in (d, nd):
                cluster.stub(victim.address).Append(s.request(100, xs), timeout=10)
                s.acked += 100
                s.acks.append((time.monotonic(), 100))
        t_kill = time.monotonic()
        victim.kill()
        cluster.forget(victim.address)
        since = [n for t, n in nd.acks if t > t_kill - FLUSH_S]
        last_flush_rows.append(float(sum(since)))
        # the client: an idempotent append through any live server until one succeeds
        for s, times in ((d, times_d), (nd, times_n)):
            req = s.request(100, xs)
            cluster.call(s.name, "Append", req, first=victim.address, budget=60)
            times.append(time.monotonic() - t_kill)
            s.acked += 100
        for s, lost in ((d, lost_d), (nd, lost_n)):
            count = window_count(cluster, s.name, "w")
            lost.append(float(s.counted + s.acked - count))
            s.counted, s.acked = count, 0
            s.acks.clear()
        print(
            f"  trial {trial + 1}: victim {victim.address}, first append after "
            f"{times_d[-1]:.2f}s (non-durable stream {times_n[-1]:.2f}s), lost durable "
            f"{lost_d[-1]:.0f}, non-durable {lost_n[-1]:.0f} (acked in its last "
            f"{FLUSH_S:g}s: {last_flush_rows[-1]:.0f})",
            flush=True,
        )
        if trial == sizes.failover_trials - 1:
            break  # the last victim stays down
        t_restart = time.monotonic()
        victim.start()
        cluster.wait_formed()
        cluster.wait_placed([d.name, nd.name], timeout=60)
        back.append(time.monotonic() - t_restart)
    n = len(times_d)
    report.add("failover", "durable stream", "kill_to_first_append_median", statistics.median(times_d), "s", n=n)  # fmt: skip
    report.add("failover", "durable stream", "kill_to_first_append_p90", quantile(times_d, 0.9), "s", n=n)  # fmt: skip
    report.add(
        "failover",
        "durable stream",
        "kill_to_first_append_max",
        max(times_d),
        "s",
        n=n,
        target="< 5 s",
        met=max(times_d) < 5,
    )
    report.add("failover", "non-durable stream", "kill_to_first_append_max", max(times_n), "s", n=n)  # fmt: skip
    report.add(
        "failover",
        "durable window",
        "rows_lost",
        sum(lost_d),
        "rows",
        n=n,
        target="0",
        met=sum(lost_d) == 0,
    )
    report.add("failover", "non-durable window", "rows_lost_total", sum(lost_n), "rows", n=n)
    report.add("failover", "non-durable window", "rows_lost_max", max(lost_n), "rows", n=n)
    report.add(
        "failover",
        "non-durable window",
        f"rows_acked_in_last_{FLUSH_S:g}s_before_kill_max",
        max(last_flush_rows),
        "rows",
        n=n,
    )
    if back:
        report.add("failover", "restarted victim", "restart_to_owning_again_median", statistics.median(back), "s", n=len(back))  # fmt: skip
    report.sample("failover", "durable stream", times_d, "s")
    report.sample("failover", "non-durable stream", times_n, "s")
    report.sample("failover", "non-durable lost", lost_n, "rows")
    report.sample("failover", "non-durable acked in last flush interval", last_flush_rows, "rows")


def bench_servers(report: Report, sizes: Sizes, root: Path, scaling: bool, failover: bool) -> None:
    """Experiments 1 and 4 on one cluster (the failover reuses the scaling's servers)."""
    with VolatileRedis(root / "redis-servers") as redis_srv:
        assert redis_srv.pid is not None
        cluster = Cluster(root, redis_srv.url)
        try:
            if scaling:
                bench_scaling(cluster, report, sizes, redis_srv.pid)
            if failover:
                bench_failover(cluster, report, sizes)
        finally:
            cluster.close()


# --------------------------------------------------------------------------- 2 + 3. ingest
@dataclass(frozen=True)
class IngestCase:
    fenced: bool
    durable: bool
    batch: int

    @property
    def name(self) -> str:
        return f"i-{'f' if self.fenced else 'u'}-{'d' if self.durable else 'n'}-{self.batch}"


def bench_ingest(report: Report, sizes: Sizes, url: str, redis_label: str) -> None:
    """Rows/s of ``Stream.append`` on an in-process Registry: fenced vs unfenced, durable vs
    not, 100- and 5,000-row batches; the cases take turns in every round."""
    from mtawindows.server.service.registry import Registry
    from mtawindows.server.storage.fencing import Fence
    from mtawindows.server.storage.leases import Leases

    print(f"2+3. ingest ({redis_label})", flush=True)
    prefix = f"ing{uuid.uuid4().hex[:8]}"
    reg = Registry(url, prefix=prefix)
    leases = Leases(reg.redis, prefix, "bench:1", uuid.uuid4().hex[:16], "bench:1", LEASE_MS)
    cases = [
        IngestCase(fenced, durable, batch)
        for batch in (100, 5000)
        for durable in (False, True)
        for fenced in (False, True)
    ]
    fences: dict[str, Fence] = {}
    rng = random.Random(2)
    xs = [rng.random() for _ in range(5000)]
    next_ts = {c.name: 1 for c in cases}

    def columns(c: IngestCase) -> dict[str, tuple[str, list[Any]]]:
        t = next_ts[c.name]
        next_ts[c.name] = t + c.batch
        return {"ts": ("TIMESTAMP", list(range(t, t + c.batch))), "x": ("DOUBLE", xs[: c.batch])}

    for c in cases:
        fence = None
        if c.fenced:
            ours, _ = leases.acquire(c.name)
            assert ours is not None, c.name
            fence = fences[c.name] = Fence(leases.keys(c.name)[1], ours.token)
        reg.create_stream(StreamSpec(c.name, (Field("x", "DOUBLE"),), wall_clock=False), fence)
        storage = Storage("redis", durable=c.durable)
        reg.create_window(WindowSpec(c.name, "w", AGGS, Policy.count(sizes.ingest_window), storage=storage))  # fmt: skip
        s = reg.stream(c.name)
        for _ in range(sizes.ingest_window // c.batch + 1):  # full: evicting from now on
            s.append(columns(c))
        reg.flush(s, wait=True)

    renewing = threading.Event()
    stop = threading.Event()
    renewals = [0]

    def renew_loop() -> None:  # what Ownership's tick does for the leases it holds
        while not stop.wait(LEASE_MS / 4000):
            if renewing.is_set():
                held = leases.renew(fences)
                assert all(held.values()), held
                renewals[0] += 1

    renewer = threading.Thread(target=renew_loop, daemon=True)
    renewer.start()

    def block(c: IngestCase) -> float:
        """Rows/s of appends for ``ingest_block_s`` seconds of appending (batches built
        outside the clock), with the server's periodic flush (``wait=False``) every
        FLUSH_S and the windows' queued writes waited for at the end."""
        s = reg.stream(c.name)
        spent = 0.0
        since_flush = 0.0
        rows = 0
        for _ in range(1_000_000):
            if spent >= sizes.ingest_block_s:
                break
            cols = columns(c)
            t = time.perf_counter()
            s.append(cols)
            if since_flush >= FLUSH_S:
                reg.flush(s, wait=False)
                since_flush = 0.0
            dt = time.perf_counter() - t
            spent += dt
            since_flush += dt
            rows += c.batch
        t = time.perf_counter()
        for w in s.windows.values():
            if w.engine.store is not None:
                w.engine.store.sync()
        spent += time.perf_counter() - t
        return rows / spent

    rates: dict[IngestCase, list[float]] = {c: [] for c in cases}
    try:
        for r in range(sizes.ingest_rounds):
            order = cases if r % 2 == 0 else cases[::-1]  # alternate who goes first
            for c in order:
                if c.fenced:
                    renewing.set()
                try:
                    rates[c].append(block(c))
                finally:
                    renewing.clear()
    finally:
        stop.set()
        renewer.join(timeout=10)

    def paired(a: IngestCase, b: IngestCase) -> float:
        """Median over rounds of rate(a) / rate(b) in the same round."""
        return statistics.median(x / y for x, y in zip(rates[a], rates[b], strict=True))

    n = sizes.ingest_rounds
    for c in cases:
        case = f"{redis_label}, {'fenced' if c.fenced else 'unfenced'}, {'durable' if c.durable else 'non-durable'}, {c.batch} rows"  # fmt: skip
        report.add("ingest", case, "rows_per_s", statistics.median(rates[c]), "rows/s", n=n)
        report.sample("ingest", case, rates[c], "rows/s")
    for batch in (100, 5000):
        for durable in (False, True):
            f = IngestCase(True, durable, batch)
            u = IngestCase(False, durable, batch)
            ratio = paired(f, u)
            case = f"{redis_label}, {'durable' if durable else 'non-durable'}, {batch} rows"
            report.add(
                "fencing",
                case,
                "fenced_over_unfenced",
                ratio,
                "x",
                n=n,
                target=">= 0.90",
                met=ratio >= 0.90,
            )
        for fenced in (False, True):
            d = IngestCase(fenced, True, batch)
            nd = IngestCase(fenced, False, batch)
            ratio = paired(d, nd)
            case = f"{redis_label}, {'fenced' if fenced else 'unfenced'}, {batch} rows"
            report.add(
                "durable",
                case,
                "durable_over_non_durable",
                ratio,
                "x",
                n=n,
                target=">= 0.80 (cost < 20%)",
                met=ratio >= 0.80,
            )
    report.notes.append(
        f"ingest ({redis_label}): {renewals[0]} lease renewals (one pipelined EVALSHA per "
        f"fenced stream, every {LEASE_MS // 4} ms) ran beside the fenced runs"
    )
    for name in list(reg.streams):
        reg.drop(name)
    reg.redis.close()


# --------------------------------------------------------------------------- 5. rebalance
def filler_main(cfg: dict[str, Any]) -> None:
    """A filler process (``--filler JSON``): create its streams under their leases, fill
    each window with ``items`` rows in one batch, flush and let the stream go (a last flush,
    then the lease)."""
    from mtawindows.server.service.registry import Registry
    from mtawindows.server.storage.fencing import Fence
    from mtawindows.server.storage.leases import Leases

    items = int(cfg["items"])
    reg = Registry(cfg["url"], prefix=cfg["prefix"])
    member = f"filler-{cfg['k']}"
    leases = Leases(reg.redis, cfg["prefix"], member, uuid.uuid4().hex[:16], member, 60_000)
    rng = random.Random(int(cfg["k"]))
    cols = {
        "ts": ("TIMESTAMP", list(range(1, items + 1))),
        "x": ("DOUBLE", [rng.random() for _ in range(items)]),
    }
    t0 = time.perf_counter()
    for name in cfg["names"]:
        ours, _ = leases.acquire(name)
        assert ours is not None, name
        fence = Fence(leases.keys(name)[1], ours.token)
        reg.create_stream(StreamSpec(name, (Field("x", "DOUBLE"),), wall_clock=False), fence)
        storage = Storage("redis", durable=True)
        reg.create_window(WindowSpec(name, "w", AGGS, Policy.count(items), storage=storage))
        reg.stream(name).append(cols, max_rows=max(items, 500_000))
        reg.release(name)
        leases.release(name, fence.token)
    print(json.dumps({"streams": len(cfg["names"]), "seconds": time.perf_counter() - t0}))


def timed_method(obj: Any, name: str, into: dict[str, float]) -> None:
    """Wrap ``obj.<name>(stream, ...)`` to record its seconds per stream in ``into``."""
    inner = getattr(obj, name)

    def wrapper(stream: str, *args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        try:
            return inner(stream, *args, **kwargs)
        finally:
            into[stream] = time.perf_counter() - t

    setattr(obj, name, wrapper)


@contextlib.contextmanager
def gc_pauses() -> Iterator[list[float]]:
    """The seconds of each cyclic garbage collection of this process meanwhile."""
    pauses: list[float] = []
    began = [0.0]

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            began[0] = time.perf_counter()
        else:
            pauses.append(time.perf_counter() - began[0])

    gc.callbacks.append(on_gc)
    try:
        yield pauses
    finally:
        gc.callbacks.remove(on_gc)


def read_all(client: Any, keys: list[tuple[str, str]]) -> int:
    """Read every key of a window (one pipelined round trip, by type); bytes read."""
    pipe = client.pipeline(transaction=False)
    for key, kind in keys:
        if kind == "string":
            pipe.get(key)
        elif kind == "hash":
            pipe.hgetall(key)
        elif kind == "list":
            pipe.lrange(key, 0, -1)
        else:
            pipe.dump(key)
    size = 0
    for v in pipe.execute():
        if isinstance(v, bytes):
            size += len(v)
        elif isinstance(v, dict):
            size += sum(len(k) + len(x) for k, x in v.items())
        elif isinstance(v, list):
            size += sum(len(x) for x in v)
    return size


def bench_rebalance(report: Report, sizes: Sizes, root: Path) -> None:
    from mtawindows.server.service.ownership import Ownership
    from mtawindows.server.service.registry import Registry

    streams, log2 = sizes.rebalance_streams, sizes.rebalance_log2
    items = 1 << log2
    # Redis ~80 B per item, the owner's process ~20 B per item (measured), twice for room
    need_kb = 2 * streams * items * 100 // 1024
    avail = mem_available_kb()
    if need_kb > avail:
        fit = max(10, int(streams * avail / need_kb))
        report.notes.append(
            f"rebalance: {streams} streams would need ~{need_kb // 1024} MB, "
            f"{avail // 1024} MB available: {fit} streams instead"
        )
        streams = fit
    print(f"5. rebalance ({streams} streams x 2^{log2} items)", flush=True)
    prefix = "rb"
    names = [f"rb-{i:05d}" for i in range(streams)]
    with VolatileRedis(root / "redis-rebalance") as redis_srv:
        t0 = time.perf_counter()
        fillers = []
        for k in range(2):
            cfg = {"url": redis_srv.url, "prefix": prefix, "names": names[k::2], "items": items, "k": k}  # fmt: skip
            fillers.append(
                subprocess.Popen(
                    [sys.executable, __file__, "--filler", json.dumps(cfg)],
                    stdout=subprocess.PIPE,
                    text=True,
                )
            )
        for p in fillers:
            out, _ = p.communicate(timeout=3600)
            if p.returncode != 0:
                msg = f"a filler failed ({p.returncode}): {out[-2000:]}"
                raise RuntimeError(msg)
        fill_s = time.perf_counter() - t0
        print(f"  filled in {fill_s:.1f}s", flush=True)

        reg_a = Registry(redis_srv.url, prefix=prefix)
        own_a = Ownership(reg_a, member="a:1", address="a:1", lease_ms=LEASE_MS)
        own_a.membership.beat(0)
        first_adopt: dict[str, float] = {}
        timed_method(own_a, "adopt", first_adopt)
        rss0 = rss_kb()
        t0 = time.perf_counter()
        own_a.rebalance()  # alone: every stream is placed on A
        adopt_all_s = time.perf_counter() - t0
        rss_per_stream = (rss_kb() - rss0) / max(1, len(own_a.fences))
        assert len(own_a.fences) == streams, (len(own_a.fences), streams)
        redis_mb = reg_a.redis.info("memory")["used_memory"] / 1e6

        # B joins: A lets the streams placed on B go, B takes them
        reg_b = Registry(redis_srv.url, prefix=prefix)
        own_b = Ownership(reg_b, member="b:1", address="b:1", lease_ms=LEASE_MS)
        own_b.membership.beat(0)
        own_a.membership.beat(len(own_a.fences))
        own_a.renew()
        released: dict[str, float] = {}
        adopted: dict[str, float] = {}
        timed_method(own_a, "release", released)
        timed_method(own_b, "adopt", adopted)
        with gc_pauses() as pauses:
            t0 = time.perf_counter()
            own_a.rebalance()
            t1 = time.perf_counter()
            own_b.membership.beat(0)
            own_b.rebalance()
            t2 = time.perf_counter()
        moved = sorted(own_b.fences)
        assert moved and sorted(released) == moved, (len(moved), len(released))
        move = [released[n] + adopted[n] for n in moved]
        for name in moved[:20]:  # the windows came over whole
            size = reg_b.stream(name).windows["w"].result().size
            assert size == items, (name, size)

        # for contrast: read every key of a moved window's data from Redis
        tags: dict[str, list[str]] = {}
        for raw in reg_a.redis.scan_iter(match=f"{prefix}:{{*}}:w:*", count=10_000):
            key = raw.decode()
            tags.setdefault(key[key.index("{") + 1 : key.index("}")], []).append(key)
        sample = moved[: sizes.rebalance_read_sample]
        reads: list[float] = []
        sizes_read: list[float] = []
        for name in sample:
            keys = tags.get(name, [])
            pipe = reg_a.redis.pipeline(transaction=False)
            for key in keys:
                pipe.type(key)
            kinds = [k.decode() if isinstance(k, bytes) else str(k) for k in pipe.execute()]
            t = time.perf_counter()
            nbytes = read_all(reg_a.redis, list(zip(keys, kinds, strict=True)))
            reads.append(time.perf_counter() - t)
            sizes_read.append(float(nbytes))

        # Python heap of an opened stream: a third registry opens a few of the moved streams
        # (no lease: reads only, at the end) under tracemalloc
        reg_c = Registry(redis_srv.url, prefix=prefix)
        sample_c = moved[:20]
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        for name in sample_c:
            reg_c.adopt(name)
        heap = (tracemalloc.get_traced_memory()[0] - before) / len(sample_c)
        tracemalloc.stop()
        for name in list(reg_c.streams):
            reg_c.drop(name)
        reg_c.redis.close()

        n = len(moved)
        case = f"{streams} streams x 2^{log2} items"
        report.add("rebalance", case, "fill_s", fill_s, "s", n=streams)
        report.add("rebalance", case, "redis_used_memory", redis_mb, "MB")
        report.add("rebalance", case, "adopt_cold_median", statistics.median(first_adopt.values()) * 1e3, "ms", n=streams)  # fmt: skip
        report.add("rebalance", case, "adopt_all_by_A", adopt_all_s, "s", n=streams)
        report.add("rebalance", case, "rss_growth_per_adopted_stream", rss_per_stream / 1024, "MB", n=streams)  # fmt: skip
        report.add("rebalance", case, "python_heap_per_opened_stream", heap / 1024, "kB (tracemalloc)", n=len(sample_c))  # fmt: skip
        report.add("rebalance", case, "streams_moved_to_B", n, "streams")
        report.add(
            "rebalance",
            case,
            "move_per_stream_median",
            statistics.median(move) * 1e3,
            "ms",
            n=n,
            target="< 10 ms",
            met=statistics.median(move) < 0.010,
        )
        report.add("rebalance", case, "move_per_stream_p90", quantile(move, 0.9) * 1e3, "ms", n=n)
        report.add("rebalance", case, "move_per_stream_max", max(move) * 1e3, "ms", n=n)
        report.add("rebalance", case, "release_on_A_median", statistics.median(released[m] for m in moved) * 1e3, "ms", n=n)  # fmt: skip
        report.add("rebalance", case, "adopt_on_B_median", statistics.median(adopted[m] for m in moved) * 1e3, "ms", n=n)  # fmt: skip
        report.add("rebalance", case, "gc_pause_max_during_move", max(pauses, default=0.0) * 1e3, "ms", n=len(pauses))  # fmt: skip
        report.add("rebalance", case, "A_rebalance_total", t1 - t0, "s", n=n)
        report.add("rebalance", case, "B_rebalance_total", t2 - t1, "s", n=n)
        report.add("rebalance", case, "read_whole_window_median", statistics.median(reads) * 1e3, "ms", n=len(reads))  # fmt: skip
        report.add("rebalance", case, "read_whole_window_p90", quantile(reads, 0.9) * 1e3, "ms", n=len(reads))  # fmt: skip
        report.add("rebalance", case, "window_bytes_in_redis_median", statistics.median(sizes_read) / 1e6, "MB", n=len(reads))  # fmt: skip
        report.sample("rebalance", "move per stream", move, "s")
        report.sample("rebalance", "read whole window", reads, "s")
        for reg in (reg_a, reg_b):
            for name in list(reg.streams):
                reg.drop(name)
            reg.redis.close()


# --------------------------------------------------------------------------- output
def write(report: Report, out: Path, stem: str, header: list[str]) -> str:
    out.mkdir(parents=True, exist_ok=True)
    fields = ["experiment", "case", "metric", "value", "unit", "n", "target", "met"]
    with (out / f"{stem}.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(report.rows)
    with (out / f"{stem}-samples.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["experiment", "case", "i", "value", "unit"])
        w.writeheader()
        w.writerows(report.samples)
    lines = [
        "| experiment | case | metric | value | unit | n | target | met |",
        "|---|---|---|---:|---|---:|---|---|",
    ]
    lines += [
        f"| {r['experiment']} | {r['case']} | {r['metric']} | {r['value']:.4g} | {r['unit']} "
        f"| {r['n']} | {r['target']} | {r['met']} |"
        for r in report.rows
    ]
    table = "\n".join(lines)
    notes = [f"- {n}" for n in (*header, *report.notes)]
    (out / f"{stem}.md").write_text("\n".join(notes) + "\n\n" + table + "\n")
    return table


def plot(report: Report, path: Path) -> None:
    try:
        import matplotlib
    except ImportError:
        print("matplotlib is not installed: no plot", flush=True)
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(12, 8))
    a, b, c, d = axes.flat

    def rows(experiment: str, metric: str) -> list[dict[str, Any]]:
        return [r for r in report.rows if r["experiment"] == experiment and r["metric"] == metric]

    eff = [r for r in rows("scaling", "efficiency_vs_1_server") if "," not in r["case"]]
    paced = [
        r
        for r in rows("scaling", "efficiency_vs_1_server")
        if "paced" in r["case"] and "third" not in r["case"]
    ]
    wall = [r for r in rows("scaling", "rows_per_s_wall") if "," not in r["case"]]
    if eff:
        xs = [int(str(r["case"]).split()[0]) for r in eff]
        a.plot(xs, [r["value"] for r in eff], "o-", label="rows per server CPU-s (vs 1)")
        if paced:
            label = "the same, paced producers (" + str(paced[0]["case"]).split("paced ")[1] + ")"
            a.plot(xs[: len(paced)], [r["value"] for r in paced], "^-", label=label)
        base = wall[0]["value"] or 1.0
        a.plot(xs, [r["value"] / base for r in wall], "s--", label="wall-clock rows/s (vs 1)")
        a.axhline(0.85, color="red", linestyle=":", label="target 0.85")
        a.set_xticks(xs)
        a.set_xlabel("server processes (2 cores)")
        a.set_ylabel("relative to 1 server")
        a.set_title("1. scaling")
        a.legend(fontsize=8)
    ratios = rows("fencing", "fenced_over_unfenced") + rows("durable", "durable_over_non_durable")
    if ratios:
        labels = [f"{r['experiment']}: {r['case']}" for r in ratios]
        b.barh(range(len(ratios)), [r["value"] for r in ratios])
        b.set_yticks(range(len(ratios)), labels, fontsize=6)
        b.axvline(0.9, color="red", linestyle=":", label="fencing target 0.9")
        b.axvline(0.8, color="orange", linestyle=":", label="durable: cost 20%")
        b.set_xlabel("rows/s ratio")
        b.set_title("2-3. fenced / unfenced, durable / non-durable")
        b.legend(fontsize=7)
    fo = report.values("failover", "durable stream")
    if fo:
        c.plot(range(1, len(fo) + 1), fo, "o", label="durable stream")
        c.plot(
            range(1, len(fo) + 1),
            report.values("failover", "non-durable stream"),
            "x",
            label="non-durable stream",
        )
        c.axhline(5, color="red", linestyle=":", label="target worst 5 s")
        c.set_ylim(bottom=0)
        c.set_xlabel("trial")
        c.xaxis.get_major_locator().set_params(integer=True)
        c.set_ylabel("kill -9 to first append (s)")
        c.set_title("4. failover")
        c.legend(fontsize=8)
    mv = sorted(report.values("rebalance", "move per stream"))
    rd = sorted(report.values("rebalance", "read whole window"))
    if mv:
        for xs_, label in ((mv, "move (release A + adopt B)"), (rd, "read all window keys")):
            if xs_:
                d.plot(
                    [x * 1e3 for x in xs_],
                    [(i + 1) / len(xs_) for i in range(len(xs_))],
                    label=label,
                )
        d.axvline(10, color="red", linestyle=":", label="target median 10 ms")
        d.set_xscale("log")
        d.set_xlabel("ms per stream")
        d.set_ylabel("CDF")
        d.set_title("5. rebalance")
        d.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


# --------------------------------------------------------------------------- main
@contextlib.contextmanager
def phase(label: str) -> Iterator[None]:
    t = time.perf_counter()
    yield
    print(f"  ({label}: {time.perf_counter() - t:.1f}s)", flush=True)


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small counts (< 60 s)")
    ap.add_argument("--only", default="", help=f"comma-separated subset of {','.join(EXPERIMENTS)}")
    ap.add_argument("--out", type=Path, default=OUT, help="folder of the results")
    ap.add_argument("--rebalance-streams", type=int, default=0, help="override the stream count")
    ap.add_argument("--failover-trials", type=int, default=0, help="override the trial count")
    ap.add_argument("--producer", help=argparse.SUPPRESS)
    ap.add_argument("--filler", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.producer:
        producer_main(json.loads(args.producer))
        return
    if args.filler:
        filler_main(json.loads(args.filler))
        return
    sizes = QUICK if args.quick else Sizes()
    if args.rebalance_streams:
        sizes = Sizes(**{**sizes.__dict__, "rebalance_streams": args.rebalance_streams})
    if args.failover_trials:
        sizes = Sizes(**{**sizes.__dict__, "failover_trials": args.failover_trials})
    only = {x.strip() for x in args.only.split(",") if x.strip()} or set(EXPERIMENTS)
    unknown = only - set(EXPERIMENTS)
    if unknown:
        ap.error(f"--only: unknown {sorted(unknown)}; expected some of {list(EXPERIMENTS)}")
    stem = "cluster-quick" if args.quick else "cluster"
    report = Report()
    load_before = load_average()
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="mtaw-bench-cluster-") as tmp:
        root = Path(tmp)
        if "scaling" in only or "failover" in only:
            with phase("scaling + failover"):
                bench_servers(report, sizes, root, "scaling" in only, "failover" in only)
        if "rebalance" in only:  # before ingest: its RSS growth is then its own
            with phase("rebalance"):
                bench_rebalance(report, sizes, root)
        if "ingest" in only:
            with phase("ingest"):
                with VolatileRedis(root / "redis-ingest") as r:
                    bench_ingest(report, sizes, r.url, "no persistence")
                with EmbeddedRedis(root / "redis-ingest-aof") as r:
                    bench_ingest(report, sizes, r.url, "AOF fsync always")
    header = [
        f"run: {time.strftime('%Y-%m-%d %H:%M')}, {'--quick' if args.quick else 'full'}, "
        f"{time.perf_counter() - t_start:.0f}s; {os.cpu_count()} cores; load average "
        f"{load_before} before, {load_average()} after (other processes share the machine)",
        "Redis: valkey-server on a unix socket without persistence (--appendonly no --save "
        '""), except ingest "AOF fsync always": the embedded server\'s default '
        "(--appendonly yes --appendfsync always)",
        f"servers: python -m mtawindows.server --lease-ms {LEASE_MS} --flush-interval "
        f"{FLUSH_S:g} --log-level warning, one Redis",
    ]
    table = write(report, args.out, stem, header)
    print(table)
    plot(report, args.out / f"{stem}.png")


if __name__ == "__main__":
    main()
