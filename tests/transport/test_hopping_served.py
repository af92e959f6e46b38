"""Hopping windows (issue 25) through a real server: random batches (ties, gaps, bursts) into
windows with a slide, every boundary's result read back (Append FINAL, Query, ReadResults
paging, Subscribe, per-row results) against an oracle of the boundaries' ranges, over
several algorithms as final aggregators, in Redis and in memory; a durable one after kill -9
of the server; and the definitions refused, naming what was wrong."""

from __future__ import annotations

import contextlib
import random
import threading
import time
from datetime import timedelta
from typing import Any

import pytest

from mtawindows.client import (
    Aggregation,
    Field,
    InvalidArgumentError,
    Policy,
    Storage,
    StreamSpec,
    UnavailableError,
    WindowClient,
    WindowSpec,
)
from mtawindows.server.engine.hopping import HopPlan
from mtawindows.testing import LocalServer
from tests.engine.test_hopping import oracle

pytestmark = [pytest.mark.server, pytest.mark.redis]

S = 1_000_000_000
AGGS = (
    Aggregation("hi", "max", "v"),
    Aggregation("n", "count"),
    Aggregation("total", "sum", "k"),
    Aggregation("first", "first", "v"),
    Aggregation("last", "last", "v"),
)
# (slide, policy, the plan the oracle follows)
CASES = [
    (
        timedelta(seconds=10),
        Policy.time_range(timedelta(seconds=60)),
        HopPlan("time", 10 * S, "time", 60 * S),
    ),
    (
        timedelta(seconds=10),
        Policy.time_range(timedelta(seconds=25)),
        HopPlan("time", 10 * S, "time", 25 * S),
    ),
    (timedelta(seconds=7), Policy.count(5), HopPlan("time", 7 * S, "rows", 5)),
    (3, Policy.count(8), HopPlan("rows", 3, "rows", 8)),
    (4, Policy.time_range(timedelta(seconds=30)), HopPlan("rows", 4, "time", 30 * S)),
]
SETUPS = [("AMTA", "redis"), ("LMTA", "memory"), ("FLATFIT", "redis"), ("TWO_STACKS", "memory")]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with LocalServer(tmp_path_factory.mktemp("hop")) as srv:
        yield srv


def _stream(c: WindowClient, name: str) -> None:
    fields = (Field("v", "DOUBLE"), Field("k", "INT64"))
    c.create_stream(StreamSpec(name, fields, ts_unit="s", wall_clock=False))


def _batches(rng: random.Random, n: int) -> list[dict[str, list[Any]]]:
    t, out, i = 0, [], 0
    for _ in range(n):
        size = rng.choice([1, 2, 5, 20, 60])
        ts, v, k = [], [], []
        for _ in range(size):
            t += rng.choice([0, 0, 1, 2, 3, 9, 40, 130])
            ts.append(t)
            v.append(float(rng.randint(-50, 50)))
            k.append(i)
            i += 1
        out.append({"ts": ts, "v": v, "k": k})
    return out


def _want(
    plan: HopPlan, rows: list[tuple[int, float, int]]
) -> list[tuple[int, dict[str, Any], int]]:
    """(boundary, values, size) for each boundary, from the oracle of the engine's tests."""
    got = oracle(
        plan,
        [
            (t * S if plan.slide_kind == "time" or plan.range_kind == "time" else t, i)
            for i, (t, _, _) in enumerate(rows)
        ],
    )
    out = []
    for b, idx in got:
        vs = [rows[i][1] for i in idx]
        out.append(
            (
                b,
                {
                    "hi": max(vs),
                    "n": len(vs),
                    "total": sum(rows[i][2] for i in idx),
                    "first": vs[0],
                    "last": vs[-1],
                },
                len(vs),
            )
        )
    return out


@pytest.mark.parametrize(("algorithm", "storage"), SETUPS)
@pytest.mark.parametrize("case", range(len(CASES)))
def test_boundaries_match_the_oracle(
    server: LocalServer, algorithm: str, storage: str, case: int
) -> None:
    slide, policy, plan = CASES[case]
    stream = f"hop_{algorithm.lower()}_{storage}_{case}"
    rng = random.Random(hash(stream) & 0xFFFF)
    with WindowClient(server.target, timeout=60) as c:
        _stream(c, stream)
        info = c.create_window(
            WindowSpec(stream, "w", AGGS, policy, algorithm, Storage(storage), slide=slide)
        )
        assert info.plan and ("Pairs" in info.plan) == plan.sliced
        rows: list[tuple[int, float, int]] = []
        for batch in _batches(rng, 12):
            mode = rng.choice(["final", "per_row"])
            res = c.append(stream, batch, results=mode)
            before = len(rows)
            rows += list(zip(batch["ts"], batch["v"], batch["k"], strict=True))
            want = _want(plan, rows)
            last = c.query(stream, "w")
            if want:
                b, values, size = want[-1]
                assert (last.boundary, last.values, last.size) == (b, values, size)
                assert last.sequence == len(want)
            else:
                assert last.size == 0 and last.boundary == 0
            if mode == "final":
                assert res.results["w"] == last
            else:  # after each row: the last boundary closed by then
                cols = res.row_results["w"]
                for j in range(len(batch["ts"])):
                    upto = _want(plan, rows[: before + j + 1])
                    assert cols["n"][j] == (upto[-1][1]["n"] if upto else 0)
        # every boundary, paged by sequence
        got, after = [], 0
        while True:
            page, latest = c.read_results(stream, "w", after_sequence=after, limit=7)
            if not page:
                break
            got += page
            after = page[-1].sequence
        want = _want(plan, rows)
        assert latest == len(want)
        assert [(r.boundary, r.values, r.size) for r in got] == want
        assert [r.sequence for r in got] == list(range(1, len(want) + 1))


def test_subscribers_get_every_boundary(server: LocalServer) -> None:
    """A subscriber gets one event per boundary, in order, however many a batch closes."""
    slide, policy, plan = CASES[0]
    rng = random.Random(5)
    batches = _batches(rng, 10)
    rows = [r for b in batches for r in zip(b["ts"], b["v"], b["k"], strict=True)]
    want = _want(plan, rows)
    events: list[Any] = []
    with WindowClient(server.target, timeout=60) as c:
        _stream(c, "hop_sub")
        c.create_window(WindowSpec("hop_sub", "w", AGGS, policy, slide=slide))
        it = c.subscribe("hop_sub", "w", timeout=60)

        def follow() -> None:
            for _, r in it:
                events.append(r)
                if len(events) == len(want):
                    return

        reader = threading.Thread(target=follow, daemon=True)
        reader.start()
        for b in batches:
            c.append("hop_sub", b)
        reader.join(30)
        it.close()
    assert [(r.boundary, r.values, r.size) for r in events] == want
    assert [r.sequence for r in events] == list(range(1, len(want) + 1))


def test_durable_hopping_window_survives_kill_9(tmp_path: Any) -> None:
    """Acknowledged batches are all in the window after kill -9 of its server: the boundaries
    closed after the restart continue the sequence exactly."""
    slide, policy, plan = CASES[1]
    rng = random.Random(9)
    batches = _batches(rng, 16)
    with LocalServer(tmp_path / "d") as srv:
        with WindowClient(srv.target, timeout=60) as c:
            _stream(c, "dur")
            c.create_window(
                WindowSpec(
                    "dur", "w", AGGS, policy, storage=Storage("redis", durable=True), slide=slide
                )
            )
            c.create_window(
                WindowSpec("dur", "nd", AGGS, policy, storage=Storage("redis"), slide=slide)
            )
            for i, b in enumerate(batches[:10]):
                c.append("dur", b, producer_id="p", sequence=i + 1)
        srv.kill()
        srv.start()
        rows = [r for b in batches[:10] for r in zip(b["ts"], b["v"], b["k"], strict=True)]
        with WindowClient(srv.target, timeout=60) as c:
            want = _want(plan, rows)
            last = c.query("dur", "w")
            assert (last.boundary, last.values, last.size, last.sequence) == (*want[-1], len(want))
            for i, b in enumerate(batches[10:], start=10):
                c.append("dur", b, producer_id="p", sequence=i + 1)
                rows += list(zip(b["ts"], b["v"], b["k"], strict=True))
            want = _want(plan, rows)
            last = c.query("dur", "w")
            assert (last.boundary, last.values, last.size, last.sequence) == (*want[-1], len(want))


def test_definitions_refused(server: LocalServer) -> None:
    with WindowClient(server.target, timeout=60) as c:
        _stream(c, "hop_bad")
        bad = WindowSpec(
            "hop_bad", "w", AGGS, Policy.bounded_sum("v", 10.0), slide=timedelta(seconds=1)
        )
        with pytest.raises(InvalidArgumentError, match="count or a time_range"):
            c.create_window(bad)
        expr = WindowSpec("hop_bad", "w", AGGS, Policy.expression("total.n > 3"), slide=2)
        with pytest.raises(InvalidArgumentError, match=r"spec\.slide"):
            c.create_window(expr)
        tiny = WindowSpec(
            "hop_bad",
            "w",
            AGGS,
            Policy.time_range(timedelta(seconds=30)),
            slide=timedelta(microseconds=1),
        )
        with pytest.raises(InvalidArgumentError, match="30,000,000 boundaries per range"):
            c.create_window(tiny)
        assert c.get_stream("hop_bad").windows == []
    with pytest.raises(ValueError, match="slide"):
        WindowSpec("s", "w", AGGS, Policy.count(3), slide=0)
    with pytest.raises(ValueError, match="slide"):
        WindowSpec("s", "w", AGGS, Policy.count(3), slide=timedelta(0))


def _all_boundaries(c: WindowClient, stream: str, window: str) -> list[Any]:
    got, after = [], 0
    while True:
        page, _ = c.read_results(stream, window, after_sequence=after, limit=500)
        if not page:
            return got
        got += page
        after = page[-1].sequence


def test_windows_on_one_stream_share_slices(tmp_path: Any) -> None:
    """Hopping windows of one record and different ranges and slides share one slicing (GetWindow
    says with whom); one created after rows arrived counts from then on, one deleted leaves the
    others exact; each matches its own oracle, and after kill -9 of the server (durable) too."""
    specs = {
        "a": (
            timedelta(seconds=10),
            Policy.time_range(timedelta(seconds=60)),
            HopPlan("time", 10 * S, "time", 60 * S),
        ),
        "b": (
            timedelta(seconds=4),
            Policy.time_range(timedelta(seconds=30)),
            HopPlan("time", 4 * S, "time", 30 * S),
        ),
        "c": (
            timedelta(seconds=7),
            Policy.time_range(timedelta(seconds=100)),
            HopPlan("time", 7 * S, "time", 100 * S),
        ),
        "d": (
            timedelta(seconds=3),
            Policy.time_range(timedelta(seconds=10)),
            HopPlan("time", 3 * S, "time", 10 * S),
        ),
    }
    rng = random.Random(21)
    batches = _batches(rng, 18)
    storage = Storage("redis", durable=True)
    rows: list[tuple[int, float, int]] = []
    joined: dict[str, int] = {}
    with LocalServer(tmp_path / "share") as srv, WindowClient(srv.target, timeout=60) as c:
        _stream(c, "sh")
        for n in ("a", "b", "d"):
            slide, policy, _ = specs[n]
            c.create_window(WindowSpec("sh", n, AGGS, policy, storage=storage, slide=slide))
            joined[n] = 0
        plan = c.get_window("sh", "a").plan
        assert "shared with b, d" in plan, plan
        for i, b in enumerate(batches):
            if i == 5:
                slide, policy, _ = specs["c"]
                c.create_window(WindowSpec("sh", "c", AGGS, policy, storage=storage, slide=slide))
                joined["c"] = len(rows)
            if i == 9:
                c.delete_window("sh", "d")
                assert "shared with b, c" in c.get_window("sh", "a").plan
            if i == 12:
                srv.kill()
                srv.start()
            c.append("sh", b, producer_id="p", sequence=i + 1)
            rows += list(zip(b["ts"], b["v"], b["k"], strict=True))
        for n in ("a", "b", "c"):
            want = _want(specs[n][2], rows[joined[n] :])
            last = c.query("sh", n)
            assert (last.boundary, last.values, last.size, last.sequence) == (
                *want[-1],
                len(want),
            ), n
            # the history since the restart: the newest boundaries
            got = _all_boundaries(c, "sh", n)
            tail = want[len(want) - len(got) :]
            assert [(r.boundary, r.values, r.size) for r in got] == tail, n


def test_keyed_stream_one_result_per_key_and_boundary(tmp_path: Any) -> None:
    """A keyed stream's hopping windows: each key's boundaries are its own oracle's (Query by
    key, per-row results in input order, a subscriber's events per key and boundary), keys
    across the compact-to-tree threshold, and after kill -9 of a durable stream's server."""
    plans = {
        "t": (
            timedelta(seconds=10),
            Policy.time_range(timedelta(seconds=60)),
            HopPlan("time", 10 * S, "time", 60 * S),
        ),
        "r": (3, Policy.count(8), HopPlan("rows", 3, "rows", 8)),
    }
    rng = random.Random(33)
    keys = [f"h{i}" for i in range(12)]
    batches = []
    t = 0
    for _ in range(14):
        ts, v, k, host = [], [], [], []
        for _ in range(rng.choice([5, 30, 80])):
            t += rng.choice([0, 1, 2, 5, 30])
            ts.append(t)
            v.append(float(rng.randint(-9, 9)))
            k.append(rng.randint(0, 100))
            host.append(rng.choice(keys))
        batches.append({"ts": ts, "v": v, "k": k, "host": host})
    fields = (Field("v", "DOUBLE"), Field("k", "INT64"), Field("host", "STRING"))
    rows_of: dict[str, list[tuple[int, float, int]]] = {h: [] for h in keys}
    events: list[Any] = []
    args = ("--key-compact-items", "4")
    with LocalServer(tmp_path / "keyed", *args) as srv, WindowClient(srv.target, timeout=60) as c:
        c.create_stream(StreamSpec("kh", fields, key="host", ts_unit="s", wall_clock=False))
        for name, (slide, policy, _) in plans.items():
            c.create_window(
                WindowSpec(
                    "kh", name, AGGS, policy, storage=Storage("redis", durable=True), slide=slide
                )
            )
        it = c.subscribe("kh", "t", timeout=60)

        def follow() -> None:
            with contextlib.suppress(UnavailableError):  # its server killed below
                events.extend(r for _, r in it)

        reader = threading.Thread(target=follow, daemon=True)
        reader.start()
        for i, b in enumerate(batches):
            if i == 9:
                time.sleep(0.5)  # the subscriber's events so far
                seen = list(events)
                srv.kill()
                srv.start()
            res = c.append("kh", b, producer_id="p", sequence=i + 1, results="per_row")
            for j, (ts, v, k, h) in enumerate(zip(b["ts"], b["v"], b["k"], b["host"], strict=True)):
                rows_of[h].append((ts, v, k))
                upto = _want(plans["r"][2], rows_of[h])
                assert res.row_results["r"]["n"][j] == (upto[-1][1]["n"] if upto else 0)
        for h in keys:
            for name, (_, _, plan) in plans.items():
                want = _want(plan, rows_of[h])
                last = c.query("kh", name, key=h)
                assert last.key == h
                if want:
                    assert (last.boundary, last.values, last.size, last.sequence) == (
                        *want[-1],
                        len(want),
                    ), (h, name)
                else:
                    assert last.size == 0
    # the subscriber, before the kill: per key, a prefix of the key's boundaries, in order
    assert seen
    for h in keys:
        mine = [(r.boundary, r.values, r.size) for r in seen if r.key == h]
        assert mine == _want(plans["t"][2], rows_of[h])[: len(mine)], h


def test_after_kill_9_a_window_without_a_journal_numbers_past_what_readers_saw(
    tmp_path: Any,
) -> None:
    """A hopping window of a stream with no durable window restarts from its last checkpoint
    after kill -9 (the rows of the last flush interval may be lost, as documented): its new
    boundaries are numbered past every number a reader saw, so a reader following by
    sequence gets every boundary the new rows close."""
    slide, policy, _ = CASES[0]
    with LocalServer(tmp_path / "nd") as srv, WindowClient(srv.target, timeout=60) as c:
        _stream(c, "nd")
        c.create_window(WindowSpec("nd", "w", AGGS, policy, storage=Storage("redis"), slide=slide))

        def rows(a: int, b: int) -> dict[str, list[Any]]:
            ts = list(range(a, b))
            return {"ts": ts, "v": [float(t % 13) for t in ts], "k": ts}

        c.append("nd", rows(0, 100))
        time.sleep(1.0)  # a checkpoint
        c.append("nd", rows(100, 200))  # acknowledged, perhaps not checkpointed
        seen = _all_boundaries(c, "nd", "w")
        last = seen[-1].sequence
        srv.kill()
        srv.start()
        c.append("nd", rows(200, 300))
        new = c.read_results("nd", "w", after_sequence=last, limit=1000)[0]
        # the boundaries the new rows close, every one: those of the rows lost after the
        # checkpoint (a non-durable window's last interval) close again, numbered anew too
        # (200 holds no row: its range's rows, before 200, were lost or are older)
        got = [r.boundary // S for r in new]
        assert got[-9:] == list(range(210, 300, 10)), got
        assert all(r.sequence > last for r in new)
        assert [r.values["n"] for r in new[-4:]] == [60] * 4
