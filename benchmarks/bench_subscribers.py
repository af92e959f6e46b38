"""Subscriber and CEL abuse benchmarks (issue 13, part 5): what stalled subscribers and hostile
CEL expressions cost a server, measured from outside on loopback.

    python benchmarks/bench_subscribers.py --label after            # all experiments (~8 min)
    python benchmarks/bench_subscribers.py --label after --quick    # smaller counts
    python benchmarks/bench_subscribers.py --label after --only subscribers --modes stalled \
        --counts 100,1000 --value-bytes 4096                         # results of 4 KiB
    python benchmarks/bench_subscribers.py --compare before after   # the table of two runs

1. subscribers: 1-row Appends one after another (p50 / p99 / max) on a fresh server with 0, 100
   and 1,000 subscribers of the appended window, opened by a helper process that either never
   reads (``stalled``: its connections keep HTTP/2's initial 64 KiB window per stream, so gRPC
   takes no more than that for it; at the end it reads what it was left to see how its
   subscriptions ended) or reads everything (``reading``); the server's RSS before, at the end
   of the appends and after the helper went away; how the stalled subscriptions ended. Each
   result carries ``--value-bytes`` of text (a ``last`` of a string column), about 1 KB.
2. cel: CreateWindow with a 1 MB expression, 50 and 100 nested parentheses, a 200-term ``||``
   chain and an integer literal of 2**64:
   answer, seconds, server CPU seconds, server RSS growth, and the worst 1-row Append latency
   of another client on another stream while it ran.

Rows are appended (with ``--label``) to benchmarks/results/subscribers.csv and the table of
the run is printed and written to benchmarks/results/subscribers.md (``--compare A B`` writes
two labels side by side there instead). Every loop is bounded in count and time; a scenario
also stops once the server's RSS passes ``--max-rss-mb``. A "before" run needs a checkout of
the earlier code first on ``PYTHONPATH`` (run its copy of this script).
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from mtawindows.client import (
    Aggregation,
    Field,
    MtaWindowsError,
    Policy,
    StreamSpec,
    WindowClient,
    WindowSpec,
)
from mtawindows.client.calls import append_request
from mtawindows.testing import LocalServer
from mtawindows.v1 import windows_pb2 as pb

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "results"
AGGS = (Aggregation("n", "count"), Aggregation("s", "sum", "v"), Aggregation("m", "max", "v"))
# subscribed windows also keep the last row's text: each result carries --value-bytes of it
SUB_AGGS = (*AGGS, Aggregation("t", "last", "tag"))
FIELDS = ["label", "experiment", "mode", "subscribers", "metric", "value", "unit"]


# --------------------------------------------------------------------------- helpers


def rss_mb(pid: int) -> float:
    """Resident set size of a process, MB (from /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")  # pragma: no cover


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (from /proc)."""
    parts = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")


def one_row(stream: str, ts: int, tag: str = "") -> pb.AppendRequest:
    cols: dict[str, list[Any]] = {"ts": [ts], "v": [0.5]}
    schema = {"ts": "TIMESTAMP", "v": "DOUBLE"}
    if tag:
        cols["tag"], schema["tag"] = [tag], "STRING"
    return append_request(stream, cols, schema, None, None, "none", ())


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


# --------------------------------------------------------------------------- subscriber helper


async def _helper(target: str, n: int, mode: str, channels: int, budget: float) -> None:
    """Run in a child process: ``n`` subscriptions of s/w over ``channels`` connections that
    never read (stalled) or read everything (reading). Prints ``ready`` once the server
    confirmed them all; on a line on stdin prints how they ended and exits."""
    import grpc

    from mtawindows.client.errors import from_rpc_error
    from mtawindows.v1 import windows_pb2_grpc as pb_grpc

    # a stalled client that stays connected: HTTP/2 flow control, without BDP probing, holds
    # the server to 64 KiB per stream that the application did not read
    options = [("grpc.http2.bdp_probe", 0)] if mode == "stalled" else []
    chans = [grpc.aio.insecure_channel(target, options=options) for _ in range(channels)]
    stubs = [pb_grpc.WindowServiceStub(ch) for ch in chans]
    calls = []
    for i in range(n):
        call = stubs[i % channels].Subscribe(pb.SubscribeRequest(stream="s", window="w"))
        calls.append(call)
    await asyncio.wait_for(asyncio.gather(*(c.initial_metadata() for c in calls)), budget)
    events = [0]

    async def read(call: Any) -> str:
        try:
            async for _ in call:
                events[0] += 1
        except grpc.RpcError as err:
            e = from_rpc_error(err)
            return f"{e.code}:{e.reason}"
        return "OK"

    readers = [asyncio.ensure_future(read(c)) for c in calls] if mode == "reading" else []
    print("ready", flush=True)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.readline)
    if mode == "stalled":  # now read what the server left for them, briefly
        readers = [asyncio.ensure_future(read(c)) for c in calls]
    done, pending = await asyncio.wait(readers, timeout=10) if readers else (set(), set())
    ends: dict[str, int] = {}
    for t in done:
        ends[t.result()] = ends.get(t.result(), 0) + 1
    if pending:
        ends["still open"] = len(pending)
    for t in pending:
        t.cancel()
    print(f"ends {ends} events {events[0]}", flush=True)
    for ch in chans:
        await ch.close(grace=None)


def helper_main(args: argparse.Namespace) -> None:
    asyncio.run(_helper(args.target, args.n, args.mode, args.channels, args.budget))


# --------------------------------------------------------------------------- experiment 1


def subscribers(
    label: str,
    mode: str,
    n: int,
    appends: int,
    budget: float,
    max_rss: float,
    value_bytes: int,
    tmp: Path,
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []

    def add(metric: str, value: float | str, unit: str) -> None:
        rows.append(
            {
                "label": label,
                "experiment": "append_with_subscribers",
                "mode": mode if value_bytes == 1024 else f"{mode}/{value_bytes}B",
                "subscribers": n,
                "metric": metric,
                "value": value,
                "unit": unit,
            }
        )

    args: tuple[str, ...] = ("--log-level", "warning")
    if n > 1000:
        args += ("--max-subscribers", str(n + 10))
    with LocalServer(tmp / f"{mode}{n}", *args) as srv, WindowClient(srv.target) as c:
        pid = srv.pid
        c.create_stream(
            StreamSpec("s", (Field("v", "DOUBLE"), Field("tag", "STRING")), wall_clock=False)
        )
        c.create_window(WindowSpec("s", "w", SUB_AGGS, Policy.count(1000)))
        tag = "x" * value_bytes
        for i in range(50):  # warm up
            c.stub.Append(one_row("s", i, tag), timeout=10)
        helper = None
        if n:
            helper = subprocess.Popen(
                [
                    *(sys.executable, __file__, "--helper", "--target", srv.target),
                    *("--n", str(n), "--mode", mode, "--channels", str(max(1, n // 100))),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            assert helper.stdout is not None and helper.stdin is not None
            line = helper.stdout.readline()
            if line.strip() != "ready":
                msg = f"helper did not start: {line!r}"
                raise RuntimeError(msg)
        time.sleep(1.0)
        rss0 = rss_mb(pid)
        lat: list[float] = []
        t_start = time.perf_counter()
        stopped = "count"
        for i in range(appends):
            req = one_row("s", 1000 + i, tag)
            t = time.perf_counter()
            c.stub.Append(req, timeout=60)
            lat.append(time.perf_counter() - t)
            if time.perf_counter() - t_start > budget:
                stopped = "time"
                break
            if i % 100 == 99 and rss_mb(pid) > max_rss:
                stopped = "rss"
                break
        elapsed = time.perf_counter() - t_start
        time.sleep(1.0)
        rss1 = rss_mb(pid)
        ends = ""
        if helper is not None:
            assert helper.stdout is not None and helper.stdin is not None
            helper.stdin.write("done\n")
            helper.stdin.flush()
            ends = helper.stdout.readline().strip()
            helper.wait(60)
        time.sleep(2.0)
        c.stub.Append(one_row("s", 10_000_000, tag), timeout=60)  # the server still answers
        rss2 = rss_mb(pid)
        add(
            "result_bytes",
            len(c.stub.Query(pb.QueryRequest(stream="s", window="w")).SerializeToString()),
            "B",
        )
        add("appends", len(lat), "count")
        add("stopped_by", stopped, "")
        add("append_p50", statistics.median(lat) * 1e3, "ms")
        add("append_p99", pct(lat, 0.99) * 1e3, "ms")
        add("append_max", max(lat) * 1e3, "ms")
        add("appends_per_s", len(lat) / elapsed, "1/s")
        add("rss_before", rss0, "MB")
        add("rss_after_appends", rss1, "MB")
        add("rss_growth", rss1 - rss0, "MB")
        add("rss_after_helper_left", rss2, "MB")
        add("subscriptions_ended", ends, "")
    return rows


# --------------------------------------------------------------------------- experiment 2


def cel(label: str, tmp: Path, budget: float) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    cases = {
        "1MB": "total.n > 1 && " * (1024 * 1024 // 15) + "true",
        "parens50": "(" * 50 + "total.n > 1" + ")" * 50,
        "parens100": "(" * 100 + "total.n > 1" + ")" * 100,
        "or_chain200": " || ".join(["total.n > 1"] * 200),
        "int_literal_2^64": "total.n > 18446744073709551616",
    }
    args = ("--log-level", "warning", "--max-message-mb", "16")
    with LocalServer(tmp / "cel", *args) as srv, WindowClient(srv.target, timeout=120) as c:
        pid = srv.pid
        c.create_stream(StreamSpec("s", (Field("v", "DOUBLE"),), wall_clock=False))
        c.create_window(WindowSpec("s", "w", AGGS, Policy.count(1000)))
        c.create_stream(StreamSpec("other", (Field("v", "DOUBLE"),), wall_clock=False))
        c.create_window(WindowSpec("other", "w", AGGS, Policy.count(1000)))
        for k, (name, text) in enumerate(cases.items()):
            stop = threading.Event()
            worst = [0.0]
            ts = [time.time_ns()]

            def appender(
                stop: threading.Event = stop, worst: list[float] = worst, ts: list[int] = ts
            ) -> None:
                with WindowClient(srv.target) as other:
                    while not stop.is_set():
                        ts[0] += 1
                        t = time.perf_counter()
                        other.stub.Append(one_row("other", ts[0]), timeout=120)
                        worst[0] = max(worst[0], time.perf_counter() - t)
                        time.sleep(0.002)

            th = threading.Thread(target=appender, daemon=True)
            th.start()
            time.sleep(0.3)
            worst[0] = 0.0
            rss0, cpu0 = rss_mb(pid), cpu_seconds(pid)
            t = time.perf_counter()
            try:
                c.create_window(WindowSpec("s", f"c{k}", AGGS, Policy.expression(text)))
                answer = "created"
            except MtaWindowsError as e:
                answer = f"{e.code}:{e.reason}"
            secs = time.perf_counter() - t
            time.sleep(0.5)
            stop.set()
            th.join(budget)
            cpu = cpu_seconds(pid) - cpu0
            time.sleep(1.0)
            rss1 = rss_mb(pid)
            for metric, value, unit in (
                ("answer", answer, ""),
                ("expression_bytes", len(text.encode()), "B"),
                ("create_seconds", secs, "s"),
                ("server_cpu_seconds", cpu, "s"),
                ("server_rss_growth_after", rss1 - rss0, "MB"),
                ("other_stream_append_max", worst[0] * 1e3, "ms"),
            ):
                rows.append(
                    {
                        "label": label,
                        "experiment": "cel",
                        "mode": name,
                        "subscribers": 0,
                        "metric": metric,
                        "value": value,
                        "unit": unit,
                    }
                )
        assert srv.health() == "SERVING"
    return rows


# --------------------------------------------------------------------------- main


def fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1e5 else f"{v:.3e}"
    return str(v)


COMPARED = {
    "append_with_subscribers": (
        "append_p50",
        "append_p99",
        "append_max",
        "appends",
        "rss_growth",
        "rss_after_helper_left",
        "subscriptions_ended",
    ),
    "cel": (
        "answer",
        "create_seconds",
        "server_cpu_seconds",
        "server_rss_growth_after",
        "other_stream_append_max",
    ),
}


def compare(path: Path, labels: tuple[str, str]) -> str:
    """A markdown table of two labels of the CSV side by side, per scenario and metric."""
    with path.open() as f:
        rows = list(csv.DictReader(f))
    got: dict[tuple[str, str, str, str], dict[str, str]] = {}
    for r in rows:
        key = (r["experiment"], r["mode"], r["subscribers"], r["metric"])
        unit = f" {r['unit']}" if r["unit"] and r["unit"] != "count" else ""
        got.setdefault(key, {})[r["label"]] = _cell(r["value"]) + unit
    a, b = labels
    out = [
        f"| experiment | mode | subscribers | metric | {a} | {b} |",
        "|---|---|---:|---|---|---|",
    ]
    for exp, metrics in COMPARED.items():
        scenarios = sorted({(m, int(n)) for (e, m, n, _) in got if e == exp})
        for mode, n in scenarios:
            for metric in metrics:
                v = got.get((exp, mode, str(n), metric), {})
                if a in v or b in v:
                    out.append(
                        f"| {exp} | {mode} | {n} | {metric} | {v.get(a, '')} | {v.get(b, '')} |"
                    )
    return "\n".join(out)


def _cell(value: str) -> str:
    try:
        x = float(value)
    except ValueError:
        return value
    return str(int(x)) if x.is_integer() and abs(x) < 1e7 else fmt(x)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--label", default="run", help="a name for this run in the CSV")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", choices=("subscribers", "cel"))
    ap.add_argument("--counts", default="0,100,1000", help="subscriber counts")
    ap.add_argument("--modes", default="stalled,reading")
    ap.add_argument("--appends", type=int, default=0, help="appends per scenario")
    ap.add_argument("--budget", type=float, default=60.0, help="seconds per scenario")
    ap.add_argument("--max-rss-mb", type=float, default=4000.0)
    ap.add_argument("--value-bytes", type=int, default=1024, help="text in each result")
    ap.add_argument(
        "--compare",
        nargs=2,
        metavar=("A", "B"),
        help="print (and write to subscribers.md) labels A and B of the CSV side by side",
    )
    ap.add_argument("--helper", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--target", help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--mode", help=argparse.SUPPRESS)
    ap.add_argument("--channels", type=int, default=1, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.helper:
        args.budget = 120.0
        helper_main(args)
        return
    if args.compare:
        table = compare(OUT / "subscribers.csv", tuple(args.compare))
        (OUT / "subscribers.md").write_text(table + "\n")
        print(table)
        return
    appends = args.appends or (500 if args.quick else 3000)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        if args.only in (None, "subscribers"):
            for mode in args.modes.split(","):
                for n in (int(x) for x in args.counts.split(",")):
                    if n == 0 and mode != args.modes.split(",")[0]:
                        continue  # no subscribers: one scenario is enough
                    print(f"subscribers: {mode} x {n}", flush=True)
                    rows += subscribers(
                        args.label,
                        mode,
                        n,
                        appends,
                        args.budget,
                        args.max_rss_mb,
                        args.value_bytes,
                        Path(tmp),
                    )
        if args.only in (None, "cel"):
            print("cel", flush=True)
            rows += cel(args.label, Path(tmp), args.budget)
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / "subscribers.csv"
    new = not path.exists()
    with path.open("a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        if new:
            w.writeheader()
        w.writerows(rows)
    lines = [
        "| label | experiment | mode | subscribers | metric | value | unit |",
        "|---|---|---|---:|---|---:|---|",
    ]
    lines += [
        f"| {r['label']} | {r['experiment']} | {r['mode']} | {r['subscribers']} | "
        f"{r['metric']} | {fmt(r['value'])} | {r['unit']} |"
        for r in rows
    ]
    table = "\n".join(lines)
    (OUT / "subscribers.md").write_text(table + "\n")
    print(table)


if __name__ == "__main__":
    main()
