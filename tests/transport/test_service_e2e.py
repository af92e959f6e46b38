"""End to end: ``mtawindows serve`` as a subprocess, driven by the SDK and the CLI.

Every built-in monoid and policy (and CEL policies) is checked row by row against a naive
recomputation in plain Python: the window is the list of rows left after evicting, at each
row, the longest prefix the policy's predicate (written here over row lists) allows.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import signal
import statistics
import subprocess
import threading
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from mtawindows.client import (
    Aggregation,
    AsyncWindowClient,
    Field,
    InvalidArgumentError,
    NotFoundError,
    Policy,
    Storage,
    StreamSpec,
    WindowClient,
    WindowSpec,
)
from mtawindows.testing import LocalServer, mtawindows_command

pytestmark = [pytest.mark.server, pytest.mark.redis]

S = 1_000_000_000
Rows = list[dict[str, Any]]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with LocalServer(tmp_path_factory.mktemp("srv")) as srv:
        yield srv


@pytest.fixture
def client(server: LocalServer) -> Any:
    with WindowClient(server.target, timeout=60) as c:
        yield c


# ------------------------------------------------------------------ the naive oracle

AGGS = (
    Aggregation("n", "count"),
    Aggregation("sx", "sum", "x"),
    Aggregation("sk", "sum", "k"),
    Aggregation("mn", "min", "x"),
    Aggregation("mx", "max", "x"),
    Aggregation("mean", "mean", "x"),
    Aggregation("var", "variance", "x"),
    Aggregation("sd", "stddev", "x", {"ddof": "1"}),
    Aggregation("gm", "geomean", "x"),
    Aggregation("first", "first", "tag"),
    Aggregation("last", "last", "tag"),
    Aggregation("amax", "argmax", "x", {"key": "ts"}),
    Aggregation("amin", "argmin", "k", {"key": "tag"}),
    Aggregation("mc", "maxcount", "k"),
    Aggregation("tsmax", "max", "ts"),
)


def _arg(rows: Rows, f: str, key: str, better: Callable[[Any, Any], bool]) -> dict[str, Any]:
    best = rows[0]
    for r in rows[1:]:
        if better(r[f], best[f]) or r[f] == best[f]:  # ties go to the newest
            best = r
    return {"value": best[f], "key": best[key]}


def expected(rows: Rows) -> dict[str, Any]:
    xs = [r["x"] for r in rows]
    ks = [r["k"] for r in rows]
    top = max(ks)
    return {
        "n": len(rows),
        "sx": math.fsum(xs),
        "sk": sum(ks),
        "mn": min(xs),
        "mx": max(xs),
        "mean": statistics.fmean(xs),
        "var": statistics.pvariance(xs),
        "sd": statistics.stdev(xs) if len(xs) > 1 else None,
        "gm": math.exp(statistics.fmean(math.log(x) for x in xs)),
        "first": rows[0]["tag"],
        "last": rows[-1]["tag"],
        "amax": _arg(rows, "x", "ts", lambda a, b: a > b),
        "amin": _arg(rows, "k", "tag", lambda a, b: a < b),
        "mc": {"max": top, "count": ks.count(top)},
        "tsmax": max(r["ts"] for r in rows),
    }


def _newest(rows: Rows) -> int:
    return max(r["ts"] for r in rows)


# (window name, policy, predicate(prefix, all rows) -> may the prefix leave)
POLICIES: list[tuple[str, Policy, Callable[[Rows, Rows], bool]]] = [
    ("by_count", Policy.count(7), lambda p, a: len(a) - len(p) >= 7),
    (
        "by_time",
        Policy.time_range(timedelta(seconds=5)),
        lambda p, a: _newest(a) - _newest(p) >= 5 * S,
    ),
    (
        "by_sum",
        Policy.bounded_sum("x", 20.0),
        lambda p, a: sum(r["x"] for r in a) - sum(r["x"] for r in p) + p[-1]["x"] > 20.0,
    ),
    (
        "by_max",
        Policy.max_sub_window("x", 9),
        lambda p, a: max(r["x"] for r in p) < max(r["x"] for r in a) or len(a) - len(p) >= 9,
    ),
    (
        "by_cel",
        Policy.expression('total.tsmax - old.tsmax >= duration("4s") || total.n - old.n > 6'),
        lambda p, a: _newest(a) - _newest(p) >= 4 * S or len(a) - len(p) > 6,
    ),
    (
        "by_cel_struct",
        Policy.expression("old.amax.value < total.amax.value && double(total.n) > 1.5"),
        lambda p, a: max(r["x"] for r in p) < max(r["x"] for r in a) and len(a) > 1.5,
    ),
]


class Oracle:
    def __init__(self, pred: Callable[[Rows, Rows], bool]) -> None:
        self.pred = pred
        self.rows: Rows = []

    def push(self, row: dict[str, Any]) -> None:
        self.rows.append(row)
        for k in range(len(self.rows), 0, -1):
            if self.pred(self.rows[:k], self.rows):
                del self.rows[:k]
                return


def random_batch(rng: random.Random, t0: int, n: int) -> tuple[dict[str, list[Any]], int]:
    ts, xs, ks, tags = [], [], [], []
    t = t0
    for _ in range(n):
        t += rng.choice((0, 0, S // 2, S, 2 * S, 3 * S))
        ts.append(t)
        xs.append(round(rng.uniform(0.5, 6.0), rng.choice((0, 1, 3))))
        ks.append(rng.randint(-3, 3))
        tags.append(rng.choice("abcde"))
    return {"ts": ts, "x": xs, "k": ks, "tag": tags}, t


def _close(got: Any, want: Any) -> bool:
    if isinstance(want, float) and isinstance(got, int | float):
        return math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-9)
    if isinstance(want, dict):
        return isinstance(got, dict) and all(_close(got.get(k), v) for k, v in want.items())
    return bool(got == want)


def make_stream(c: WindowClient, name: str) -> None:
    fields = (Field("x", "DOUBLE"), Field("k", "INT64"), Field("tag", "STRING"))
    c.create_stream(StreamSpec(name, fields, wall_clock=False))  # timestamps: small numbers


def test_every_monoid_and_policy_matches_the_naive_oracle(client: WindowClient) -> None:
    make_stream(client, "oracle")
    oracles = {}
    for i, (name, policy, pred) in enumerate(POLICIES):
        storage = Storage("redis" if i % 2 == 0 else "memory")
        algorithm = "AMTA" if i % 3 != 1 else "LMTA"
        client.create_window(WindowSpec("oracle", name, AGGS, policy, algorithm, storage))
        oracles[name] = Oracle(pred)
    rng = random.Random(20261122)
    t = 0
    for b in range(8):
        batch, t = random_batch(rng, t, rng.randint(1, 30))
        mode = "per_row" if b % 2 == 0 else "final"
        res = client.append("oracle", batch, results=mode)
        assert res.rows_applied == len(batch["ts"])
        rows = [dict(zip(batch, vals, strict=True)) for vals in zip(*batch.values(), strict=True)]
        for name, oracle in oracles.items():
            per_row: list[dict[str, Any]] = []
            for row in rows:
                oracle.push(row)
                per_row.append(expected(oracle.rows) | {"__size": len(oracle.rows)})
            if mode == "per_row":
                cols = res.row_results[name]
                for i, want in enumerate(per_row):
                    for out, value in want.items():
                        if isinstance(value, dict):
                            for part, v in value.items():
                                got = cols[f"{out}.{part}"][i]
                                assert _close(got, v), (name, b, i, f"{out}.{part}", got, v)
                        else:
                            got = cols[out][i]
                            assert _close(got, value), (name, b, i, out, got, value)
            else:
                final = res.results[name]
                assert final.size == len(oracle.rows)
                for out, value in per_row[-1].items():
                    if out != "__size":
                        assert _close(final.values[out], value), (name, b, out)
            q = client.query("oracle", name)
            assert q.size == len(oracle.rows)
            assert all(_close(q.values[o], v) for o, v in expected(oracle.rows).items())
    info = client.get_window("oracle", "by_time")
    assert info.stats["size"] == len(oracles["by_time"].rows)
    assert [o.name for o in info.outputs] == [a.name for a in AGGS]


def test_idempotent_replays_are_acknowledged_not_applied(client: WindowClient) -> None:
    make_stream(client, "idem")
    client.create_window(WindowSpec("idem", "w", AGGS[:3], Policy.count(100)))
    batch = {"ts": [1, 2, 3], "x": [1.0, 2.0, 3.0], "k": [1, 1, 1], "tag": ["a"] * 3}
    first = client.append("idem", batch, producer_id="p1", sequence=1, results="final")
    again = client.append("idem", batch, producer_id="p1", sequence=1, results="final")
    assert not first.duplicate and again.duplicate
    assert again.rows_applied == 0
    assert again.results["w"].values == first.results["w"].values == {"n": 3, "sx": 6.0, "sk": 3}
    older = client.append("idem", {**batch, "ts": [4, 5, 6]}, producer_id="p1", sequence=0 + 1)
    assert older.duplicate
    nxt = client.append("idem", {**batch, "ts": [4, 5, 6]}, producer_id="p1", sequence=2)
    assert not nxt.duplicate
    other = client.append("idem", {**batch, "ts": [7, 8, 9]}, producer_id="p2", sequence=1)
    assert not other.duplicate
    assert client.query("idem", "w").values["n"] == 9
    s = client.get_stream("idem")
    assert (s.batches_appended, s.batches_duplicate, s.rows_appended) == (3, 2, 9)


def test_subscribe_delivers_every_batch_in_order(client: WindowClient) -> None:
    make_stream(client, "sub")
    client.create_window(WindowSpec("sub", "w", AGGS[:2], Policy.count(1000)))
    got: list[tuple[int, Any]] = []
    it = client.subscribe("sub", "w", timeout=60)  # returns once the server registered it

    def follow() -> None:
        for batch, result in it:
            got.append((batch, result))
            if len(got) == 25:
                return

    th = threading.Thread(target=follow)
    th.start()
    for i in range(25):
        client.append("sub", {"ts": [i], "x": [float(i)], "k": [i], "tag": ["a"]})
    th.join(30)
    assert not th.is_alive()
    assert [r.values["n"] for _, r in got] == list(range(1, 26))
    assert [r.values["sx"] for _, r in got] == [sum(range(i + 1)) for i in range(25)]
    batches = [b for b, _ in got]
    assert batches == sorted(batches) and len(set(batches)) == 25


def test_read_results_follows_each_window_by_sequence(server: LocalServer) -> None:
    """Every result carries the stream's batch sequence and newest timestamp; ReadResults
    returns those after a sequence, oldest first, within the kept history (--result-history)."""
    with WindowClient(server.target) as client:
        make_stream(client, "seqs")
        client.create_window(WindowSpec("seqs", "w", AGGS[:2], Policy.count(3)))
        finals = []
        for i in range(8):
            res = client.append(
                "seqs", {"ts": [i * 10], "x": [float(i)], "k": [i], "tag": ["a"]}, results="final"
            )
            finals.append(res.results["w"])
        assert [r.sequence for r in finals] == list(range(1, 9))
        assert [r.timestamp for r in finals] == [i * 10 for i in range(8)]
        got, latest = client.read_results("seqs", "w", after_sequence=3, limit=2)
        assert latest == 8 and got == finals[3:5]
        got, _ = client.read_results("seqs", "w", after_sequence=5)
        assert got == finals[5:]
        assert client.read_results("seqs", "w", after_sequence=8) == ([], 8)
        now = client.query("seqs", "w")
        assert (now.values, now.sequence, now.timestamp) == (
            finals[-1].values,
            8,
            70,
        )
        # a window created later starts at the stream's sequence, and moves with it
        client.create_window(WindowSpec("seqs", "late", AGGS[:2], Policy.count(3)))
        (empty,), latest = client.read_results("seqs", "late")  # no history yet: the current
        assert (empty.sequence, empty.size, empty.values["n"], latest) == (8, 0, 0, 8)
        assert client.read_results("seqs", "late", after_sequence=8) == ([], 8)
        client.append("seqs", {"ts": [100], "x": [1.0], "k": [1], "tag": ["a"]})
        (only,), latest = client.read_results("seqs", "late")
        assert (only.sequence, only.size, latest) == (9, 1, 9)
        with pytest.raises(InvalidArgumentError, match="after_sequence"):
            client.read_results("seqs", "w", after_sequence=-1)
        with pytest.raises(NotFoundError):
            client.read_results("seqs", "nope")


def test_result_history_keeps_the_last_results(tmp_path: Path) -> None:
    with LocalServer(tmp_path, "--result-history", "4") as srv, WindowClient(srv.target) as c:
        make_stream(c, "h")
        c.create_window(WindowSpec("h", "w", AGGS[:2], Policy.count(100)))
        for i in range(10):
            c.append("h", {"ts": [i], "x": [float(i)], "k": [i], "tag": ["a"]})
        got, latest = c.read_results("h", "w")
        assert latest == 10 and [r.sequence for r in got] == [7, 8, 9, 10]  # the gap shows


def test_async_client_and_batching_writer(server: LocalServer, client: WindowClient) -> None:
    make_stream(client, "writer")
    client.create_window(WindowSpec("writer", "w", AGGS[:3], Policy.count(10**6)))
    with client.writer("writer", batch_rows=700, producer_id="wr", max_pending=2) as wr:
        for i in range(5000):
            wr.write({"ts": i, "x": 1.0, "k": 2, "tag": "t"})
    assert wr.batches == math.ceil(5000 / 700)
    assert client.query("writer", "w").values == {"n": 5000, "sx": 5000.0, "sk": 10000}

    async def go() -> Any:
        async with AsyncWindowClient(server.target) as ac:
            await ac.append("writer", [{"ts": 10**6, "x": 2.5, "k": 1, "tag": "u"}])
            names = [s.spec.name for s in await ac.list_streams()]
            return await ac.query("writer", "w"), names

    result, names = asyncio.run(go())
    assert result.values == {"n": 5001, "sx": 5002.5, "sk": 10001}
    assert "writer" in names


def test_drop_policy_counts_late_rows_and_reorders_within_lateness(client: WindowClient) -> None:
    fields = (Field("x", "DOUBLE"),)
    client.create_stream(StreamSpec("late", fields, late_policy="DROP", wall_clock=False))
    client.create_window(WindowSpec("late", "w", (Aggregation("n", "count"),), Policy.count(100)))
    r = client.append("late", {"ts": [5, 3, 6, 6, 1], "x": [1.0] * 5})
    assert (r.rows_applied, r.rows_late) == (3, 2)
    assert client.get_window("late", "w").stats["late_rows"] == 2
    client.create_stream(
        StreamSpec(
            "reorder",
            fields,
            late_policy="DROP",
            allowed_lateness=timedelta(seconds=2),
            wall_clock=False,
        )
    )
    client.create_window(
        WindowSpec("reorder", "w", (Aggregation("f", "first", "x"),), Policy.count(100))
    )
    r = client.append("reorder", {"ts": [3 * S, 1 * S, 2 * S], "x": [3.0, 1.0, 2.0]})
    assert (r.rows_applied, r.rows_buffered) == (1, 2)  # only ts <= 3s - 2s left the buffer
    assert client.query("reorder", "w").values["f"] == 1.0
    r = client.append("reorder", {"ts": [10 * S], "x": [10.0]})
    assert r.rows_applied == 2 and r.rows_buffered == 1


def test_per_row_results_of_released_rows_name_their_request_rows(client: WindowClient) -> None:
    """A reorder buffer releases rows of earlier batches with a batch's own: each per-row
    result names its request row, -1 for a row an earlier batch brought (``_row`` of the
    Arrow tables, ``row_positions`` of the protobuf ones); an outside tester got 0, 1 for
    two rows of earlier batches in reply to a batch of one row, itself held back."""
    fields = (Field("x", "DOUBLE"),)
    lateness = timedelta(seconds=5)
    for arrow in (False, True):
        name = f"released{int(arrow)}"
        spec = StreamSpec(
            name, fields, late_policy="DROP", allowed_lateness=lateness, wall_clock=False
        )
        client.create_stream(spec)
        client.create_window(
            WindowSpec(name, "w", (Aggregation("l", "last", "x"),), Policy.count(100))
        )
        client.append(name, {"ts": [10 * S, 8 * S], "x": [10.0, 8.0]})
        client.append(name, {"ts": [12 * S], "x": [12.0]})
        r = client.append(name, {"ts": [16 * S], "x": [16.0]}, results="per_row", arrow=arrow)
        assert (r.rows_applied, r.rows_buffered) == (2, 2)  # 8 and 10 left; 12 and 16 wait
        first = r.row_tables["w"].column("_row").to_pylist() if arrow else r.row_positions
        assert first == [-1, -1]  # neither is this request's row
        r = client.append(
            name, {"ts": [30 * S, 25 * S], "x": [30.0, 25.0]}, results="per_row", arrow=arrow
        )
        assert r.rows_applied == 3  # 12 and 16 (earlier batches), then 25 (this one's row 1)
        if arrow:
            table = r.row_tables["w"]
            assert table.column("l").to_pylist() == [12.0, 16.0, 25.0]
            assert table.column("_row").to_pylist() == [-1, -1, 1]
        else:
            assert r.row_results["w"]["l"] == [12.0, 16.0, 25.0]
            assert r.row_positions == [-1, -1, 1]


def _cli(target: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*mtawindows_command(), *args, "--target", target, "--json", "--raw"]
        if args[0] not in ("serve",)
        else [*mtawindows_command(), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_cli_creates_appends_and_queries(server: LocalServer, tmp_path: Path) -> None:
    t = server.target
    r = _cli(
        t,
        "streams",
        "create",
        "clistream",
        "--field",
        "load:DOUBLE",
        "--field",
        "host:STRING",
        "--not-wall-clock",
    )
    assert r.returncode == 0, r.stderr
    r = _cli(
        t,
        "windows",
        "create",
        "clistream",
        "w",
        "--agg",
        "n=count",
        "--agg",
        "peak=argmax:load:key=ts",
        "--agg",
        "m=mean:load",
        "--policy",
        "count:3",
    )
    assert r.returncode == 0, r.stderr
    csv_file = tmp_path / "rows.csv"
    loads = [0.5, 2.5, 1.0, 4.0, 3.0]
    csv_file.write_text("ts,load,host\n" + "".join(f"{i},{v},h{i}\n" for i, v in enumerate(loads)))
    r = _cli(t, "append", "clistream", str(csv_file), "--batch-rows", "2")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["rows_sent"] == 5
    jl = "".join(
        json.dumps({"ts": "1970-01-01T00:00:01Z", "load": 1.5, "host": "j"}) + "\n" for _ in "x"
    )
    r = _cli(t, "append", "clistream", "-", "--format", "jsonl", stdin=jl)
    assert r.returncode == 0, r.stderr
    r = _cli(t, "query", "clistream", "w")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["values"]["n"] == 3
    assert out["values"]["peak"] == {"value": 4.0, "key": 3}
    assert math.isclose(out["values"]["m"], (4.0 + 3.0 + 1.5) / 3)
    r = _cli(t, "windows", "create", "clistream", "bad", "--agg", "n=count", "--policy", "cel:foo")
    assert r.returncode == 1
    assert "INVALID_ARGUMENT" in r.stderr and "column 1" in r.stderr
    r = _cli(t, "query", "clistream", "nope")
    assert r.returncode == 1 and "NOT_FOUND" in r.stderr


@pytest.mark.parametrize(
    "cmd",
    [
        ["--help"],
        ["serve", "--help"],
        ["streams", "create", "--help"],
        ["windows", "create", "--help"],
        ["append", "--help"],
        ["query", "--help"],
        ["watch", "--help"],
    ],
)
def test_cli_help(cmd: list[str]) -> None:
    r = subprocess.run(
        [*mtawindows_command(), *cmd], capture_output=True, text=True, timeout=60, check=False
    )
    assert r.returncode == 0, r.stderr
    assert "usage: mtawindows" in r.stdout
    if cmd != ["--help"]:
        assert "examples:" in r.stdout


def test_cli_watch_follows_subscribe(server: LocalServer, client: WindowClient) -> None:
    make_stream(client, "watched")
    client.create_window(WindowSpec("watched", "w", AGGS[:1], Policy.count(10**6)))
    proc = subprocess.Popen(
        [*mtawindows_command(), "watch", "watched", "w", "--target", server.target, "--json"],
        stdout=subprocess.PIPE,
        text=True,
    )
    stop = threading.Event()

    def feed() -> None:  # keep appending (bounded) until the watcher has printed three batches
        for i in range(600):
            if stop.wait(0.1):
                return
            client.append("watched", {"ts": [i], "x": [1.0], "k": [1], "tag": ["a"]})

    feeder = threading.Thread(target=feed)
    feeder.start()
    try:
        assert proc.stdout is not None
        lines = [json.loads(proc.stdout.readline()) for _ in range(3)]
        ns = [line["values"]["n"] for line in lines]
        assert ns == sorted(ns) and len(set(ns)) == 3
    finally:
        stop.set()
        feeder.join(30)
        proc.send_signal(signal.SIGINT)
        proc.wait(10)


def test_restart_keeps_results(tmp_path: Path) -> None:
    """Graceful stop and start: same results; then kill -9 of server and Redis with a durable
    window: every acknowledged batch is there."""
    srv = LocalServer(tmp_path / "restart").start()
    try:
        with WindowClient(srv.target) as c:
            make_stream(c, "r")
            c.create_window(WindowSpec("r", "tiered", AGGS, Policy.count(50)))
            c.create_window(
                WindowSpec("r", "durable", AGGS, Policy.count(50), storage=Storage(durable=True))
            )
            rng = random.Random(7)
            t = 0
            for i in range(10):
                batch, t = random_batch(rng, t, 40)
                c.append("r", batch, producer_id="loader", sequence=i + 1)
            before = {w: c.query("r", w) for w in ("tiered", "durable")}
        assert srv.stop() == 0
        srv.start()
        with WindowClient(srv.target) as c:
            for w in ("tiered", "durable"):
                assert c.query("r", w) == before[w]
            s = c.get_stream("r")
            assert s.rows_appended == 400
            batch, t = random_batch(rng, t, 5)
            c.append("r", batch, producer_id="loader", sequence=11)
            again = c.append("r", batch, producer_id="loader", sequence=11)
            assert again.duplicate
            acked = c.query("r", "durable")
        srv.kill_all()
        srv.start()
        with WindowClient(srv.target) as c:
            got = c.query("r", "durable")
            assert (got.values, got.size) == (acked.values, acked.size)
            # a stream with a durable window journals its appends: its state (batch count,
            # result sequence, newest timestamp) comes back exactly
            assert got.sequence == acked.sequence
            assert c.get_stream("r").rows_appended == 405
            assert c.append("r", batch, producer_id="loader", sequence=11).duplicate
    finally:
        srv.stop()


def test_health_and_reflection(server: LocalServer) -> None:
    import grpc
    from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
        ProtoReflectionDescriptorDatabase,
    )

    assert server.health() == "SERVING"
    assert server.health("mtawindows.v1.WindowService") == "SERVING"
    with grpc.insecure_channel(server.target) as ch:
        db = ProtoReflectionDescriptorDatabase(ch)
        services = set(db.get_services())
        assert {"mtawindows.v1.WindowService", "grpc.health.v1.Health"} <= services
        from google.protobuf.descriptor_pool import DescriptorPool

        pool = DescriptorPool(db)
        service = pool.FindServiceByName("mtawindows.v1.WindowService")
        assert "Append" in [m.name for m in service.methods]
        assert service.file.name == "mtawindows/v1/windows.proto"
