"""A served window whose state is columnar (issue 22: ``$MTAWINDOWS_COLUMNAR_STATE=1``): its
rows kept as columns in slices, sealed slices in Redis, no engine over lifted rows. Through a
real server, against the naive oracle of the end-to-end tests: every per-row and final result,
query-time ranges by count and by time, for memory, Redis and durable windows; then a graceful
restart and a kill -9 (a durable window replays its journal through the columnar path); a
refused value changes nothing; GetWindow says the path and where the state lives."""

from __future__ import annotations

import math
import random
import time
import urllib.request
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mtawindows.client import (
    Aggregation,
    Field,
    InvalidArgumentError,
    Policy,
    Storage,
    StreamSpec,
    WindowClient,
    WindowSpec,
)
from mtawindows.testing import LocalServer, free_port

from .test_columnar_shadow import _run as _shadow_run
from .test_service_e2e import AGGS, Oracle, S, _close, _newest, expected, make_stream, random_batch

pytestmark = [pytest.mark.server, pytest.mark.redis]

ON = {"MTAWINDOWS_COLUMNAR_STATE": "1"}
# every built-in of the end-to-end tests but the INT64 sum (an engine of Python integers keeps
# that one exact past int64: such a window keeps its algorithm's engine)
COLUMNAR_AGGS = tuple(a for a in AGGS if a.name != "sk")
# a count window holding the newest timestamp (max of ts) keeps its engine (it answers
# query-time ranges by time): the count windows here leave that output out
COUNT_AGGS = tuple(a for a in COLUMNAR_AGGS if a.name != "tsmax")
WINDOWS = [
    ("c7", Policy.count(7), lambda p, a: len(a) - len(p) >= 7, Storage("memory")),
    ("t5", Policy.time_range(timedelta(seconds=5)), lambda p, a: _newest(a) - _newest(p) >= 5 * S, Storage("redis")),
    ("d9", Policy.count(9), lambda p, a: len(a) - len(p) >= 9, Storage("redis", durable=True)),
    ("dt", Policy.time_range(timedelta(seconds=4)), lambda p, a: _newest(a) - _newest(p) >= 4 * S, Storage("redis", durable=True)),
]  # fmt: skip
DURABLE = ("d9", "dt")


def _check_final(
    c: WindowClient, name: str, oracle: Oracle, where: str, *, stream: str = "s"
) -> None:
    got = c.query(stream, name)
    assert got.size == len(oracle.rows), (where, name, got.size, len(oracle.rows))
    if oracle.rows:
        want = expected(oracle.rows)
        for out, v in want.items():
            if out in got.values and out != "sk" and not isinstance(v, dict):
                assert _close(got.values[out], v), (where, name, out, got.values[out], v)


def _check_ranges(
    c: WindowClient, name: str, oracle: Oracle, where: str, *, stream: str = "s"
) -> None:
    rows = oracle.rows
    for count in (1, 3, len(rows)):
        got = c.query(stream, name, count=count)
        part = rows[len(rows) - min(count, len(rows)) :]
        assert got.size == len(part), (where, name, count)
        if part:
            assert _close(got.values["mx"], expected(part)["mx"]), (where, name, count)
            assert _close(got.values["sx"], expected(part)["sx"]), (where, name, count)
    if rows and name.startswith(("t", "dt")):
        newest = rows[-1]["ts"]
        for secs in (1, 2):
            got = c.query(stream, name, range=timedelta(seconds=secs))
            part = [r for r in rows if newest - r["ts"] < secs * S]
            assert got.size == len(part), (where, name, secs, got.size, len(part))
            if part:
                assert _close(got.values["first"], part[0]["tag"]), (where, name, secs)


def _run(
    c: WindowClient,
    oracles: dict[str, Oracle],
    rng: random.Random,
    t: int,
    n: int,
    where: str,
    *,
    stream: str = "s",
) -> int:
    """The shadow tests' run (per-row results against the oracle), then each window's final
    result, and every fifth batch its query-time ranges."""

    def after(b: int, at: str) -> None:
        for name, oracle in oracles.items():
            _check_final(c, name, oracle, at, stream=stream)
            if b % 5 == 4:
                _check_ranges(c, name, oracle, at, stream=stream)

    return _shadow_run(
        c,
        oracles,
        rng,
        t,
        n,
        where,
        max_rows=40,
        skip=("sk", "tsmax"),
        after=after,
        stream=stream,
    )


def test_columnar_windows_answer_as_the_oracle_across_restarts_and_kill_9(
    tmp_path: Path,
) -> None:
    rng = random.Random(2026)
    with LocalServer(tmp_path / "d", env=ON) as srv:
        with srv.client() as c:
            make_stream(c, "s")
            oracles = {}
            for name, policy, pred, storage in WINDOWS:
                aggs = COUNT_AGGS if policy.kind == "count" else COLUMNAR_AGGS
                c.create_window(WindowSpec("s", name, aggs, policy, "AMTA", storage))
                oracles[name] = Oracle(pred)
                info = c.get_window("s", name)
                assert info.path == "columnar", (name, info.path)
                if storage.kind == "redis":
                    assert "columnar" in info.storage, info.storage
            t = _run(c, oracles, rng, 0, 30, "first run")
        srv.restart()  # graceful: every window flushed
        oracles.pop("c7").rows.clear()  # a memory window starts empty
        with srv.client() as c:
            t = _run(c, oracles, rng, t, 10, "after a restart")
        srv.kill()  # kill -9: the durable windows replay their journals
        srv.start()
        with srv.client() as c:
            oracles = {n: o for n, o in oracles.items() if n in DURABLE}
            for name, oracle in oracles.items():
                _check_final(c, name, oracle, "after kill -9")
            _run(c, oracles, rng, t, 10, "after kill -9")


def test_a_refused_value_changes_nothing() -> None:
    with LocalServer(env=ON) as srv, srv.client() as c:
        make_stream(c, "s")
        aggs = tuple(a for a in COLUMNAR_AGGS if a.name in ("n", "mx", "gm"))
        c.create_window(WindowSpec("s", "w", aggs, Policy.count(100), storage=Storage("redis")))
        c.append("s", {"ts": [1, 2], "x": [1.0, 2.0], "k": [0, 0], "tag": ["a", "b"]})
        before = c.query("s", "w")
        # a geometric mean of a negative number: refused before anything changes
        with pytest.raises(InvalidArgumentError, match="window 'w' refused a row"):
            c.append("s", {"ts": [3, 4], "x": [3.0, -1.0], "k": [0, 0], "tag": ["c", "d"]})
        after = c.query("s", "w")
        assert (after.size, after.values) == (before.size, before.values)
        c.append("s", {"ts": [3], "x": [3.0], "k": [0], "tag": ["c"]})
        assert c.query("s", "w").values["mx"] == 3.0


def test_a_columnar_window_moves_to_the_next_owner_when_its_owner_is_killed(
    tmp_path: Path,
) -> None:
    """Two servers sharing Redis: the owner of a stream with a durable columnar window (and a
    window sharing its rows) is killed (-9); the other member takes the stream (the window's
    slices and checkpoint from Redis, the journal after it) and answers every acknowledged
    row, in both windows."""
    from mtawindows.testing import LocalCluster
    from mtawindows.v1.placement import place

    cluster = LocalCluster(2, "--lease-ms", "1000", data_dir=tmp_path, env=ON).start()
    a, b = cluster.servers
    try:
        name = next(s for i in range(1000) if place(s := f"k{i}", [a.target, b.target]) == a.target)
        rng = random.Random(5)
        oracle = Oracle(lambda p, r: len(r) - len(p) >= 500)
        shared = Oracle(lambda p, r: len(r) - len(p) >= 50)  # a window sharing w's rows
        with a.client() as ca:
            fields = (Field("x", "DOUBLE"), Field("k", "INT64"), Field("tag", "STRING"))
            ca.create_stream(StreamSpec(name, fields, wall_clock=False))
            ca.create_window(
                WindowSpec(
                    name,
                    "w",
                    COUNT_AGGS,  # (no max of the timestamps: a count window's state is columnar)
                    Policy.count(500),
                    storage=Storage("redis", durable=True),
                )
            )
            assert ca.get_window(name, "w").path == "columnar"
            assert ca.get_window(name, "w").storage.startswith("redis: columnar;")
            few = tuple(a for a in COLUMNAR_AGGS if a.name in ("n", "mx", "sx", "last"))
            ca.create_window(WindowSpec(name, "w50", few, Policy.count(50)))
            assert "the rows of window 'w'" in ca.get_window(name, "w50").storage
            t = 0
            for _ in range(30):  # 30 x up to 40 rows in slices of 4,096: a tail, then more
                batch, t = random_batch(rng, t, rng.randint(1, 40))
                ca.append(name, batch)
                for vals in zip(*batch.values(), strict=True):
                    oracle.push(dict(zip(batch, vals, strict=True)))
                    shared.push(dict(zip(batch, vals, strict=True)))
        a.kill()
        deadline = time.monotonic() + 30
        with b.client() as cb:
            while True:
                try:
                    got = cb.query(name, "w")
                    break
                except Exception:
                    assert time.monotonic() < deadline
                    time.sleep(0.1)
            assert got.size == len(oracle.rows)
            want = expected(oracle.rows)
            for out in ("n", "mx", "mn", "first", "last", "sx"):
                assert _close(got.values[out], want[out]), (out, got.values[out], want[out])
            # the window sharing its rows moved with it: its position in w's checkpoint,
            # the journal replayed into the shared window once
            got = cb.query(name, "w50")
            assert got.size == len(shared.rows)
            want = expected(shared.rows)
            for out in ("n", "mx", "last", "sx"):
                assert _close(got.values[out], want[out]), (out, got.values[out], want[out])
    finally:
        cluster.close()


def test_the_serve_flag_turns_it_on_and_windows_keep_their_form_across_a_restart(
    tmp_path: Path,
) -> None:
    """``serve --columnar-state`` makes new eligible windows columnar; a window made without
    it keeps its engine after a restart with it (its data is in its form), and the other way
    round; an INT64 sum keeps its engine."""
    with LocalServer(tmp_path / "d", env={"MTAWINDOWS_COLUMNAR_STATE": "0"}) as srv:
        with srv.client() as c:
            make_stream(c, "s")
            aggs = tuple(a for a in COLUMNAR_AGGS if a.name in ("n", "mx"))
            c.create_window(WindowSpec("s", "old", aggs, Policy.count(5), storage=Storage("redis")))
            c.append("s", {"ts": [1, 2], "x": [1.0, 2.0], "k": [0, 0], "tag": ["a", "b"]})
            assert "columnar" not in c.get_window("s", "old").storage
        srv.args.append("--columnar-state")
        srv.restart()
        with srv.client() as c:
            assert "columnar" not in c.get_window("s", "old").storage
            assert c.query("s", "old").values == {"n": 2, "mx": 2.0}
            c.create_window(WindowSpec("s", "new", aggs, Policy.count(5), storage=Storage("redis")))
            sk = tuple(a for a in AGGS if a.name in ("n", "sk"))
            c.create_window(WindowSpec("s", "ints", sk, Policy.count(5), storage=Storage("redis")))
            assert c.get_window("s", "new").storage.startswith("redis: columnar")
            assert "columnar" not in c.get_window("s", "ints").storage
            c.append("s", {"ts": [3, 4], "x": [3.0, 4.0], "k": [2**40, 2**40], "tag": ["c", "d"]})
        srv.args.remove("--columnar-state")
        srv.restart()
        with srv.client() as c:
            assert c.get_window("s", "new").storage.startswith("redis: columnar")
            assert c.query("s", "new").values == {"n": 2, "mx": 4.0}
            assert c.query("s", "old").values == {"n": 4, "mx": 4.0}
            assert c.query("s", "ints").values == {"n": 2, "sk": 2**41}


def test_windows_are_columnar_by_default_but_where_the_engine_answers_more(
    tmp_path: Path,
) -> None:
    """A server started with neither the flag nor the variable makes eligible windows
    columnar; a count window whose aggregations hold the newest timestamp keeps its engine
    (it answers query-time ranges by time), and answers one; ``--no-columnar-state`` makes
    every new window an engine."""
    env = {"MTAWINDOWS_COLUMNAR_STATE": ""}  # unset for the server: the default
    with LocalServer(tmp_path / "d", env=env) as srv:
        with srv.client() as c:
            c.create_stream(StreamSpec("s", (Field("v", "DOUBLE"),), wall_clock=False))
            aggs = (Aggregation("n", "count"), Aggregation("mx", "max", "v"))
            newest = (*aggs, Aggregation("t", "max", "ts"))
            c.create_window(WindowSpec("s", "cnt", aggs, Policy.count(5), storage=Storage("redis")))
            c.create_window(
                WindowSpec(
                    "s",
                    "tr",
                    aggs,
                    Policy.time_range(timedelta(seconds=1)),
                    storage=Storage("redis"),
                )
            )
            c.create_window(
                WindowSpec("s", "ct", newest, Policy.count(5), storage=Storage("redis"))
            )
            assert c.get_window("s", "cnt").storage.startswith("redis: columnar")
            assert c.get_window("s", "tr").storage.startswith("redis: columnar")
            assert "columnar" not in c.get_window("s", "ct").storage
            c.append("s", {"ts": [10_000, 20_000, 30_000], "v": [1.0, 5.0, 2.0]})
            got = c.query("s", "ct", range=timedelta(microseconds=15))  # ts > 15,000 ns
            assert (got.size, got.values["mx"]) == (2, 5.0)
        srv.args.append("--no-columnar-state")
        srv.restart()
        with srv.client() as c:
            assert c.get_window("s", "cnt").storage.startswith("redis: columnar")  # kept
            c.create_window(WindowSpec("s", "e", aggs, Policy.count(5), storage=Storage("redis")))
            assert "columnar" not in c.get_window("s", "e").storage


def _deferred(port: int) -> float:
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
    for line in body.decode().splitlines():
        if line.startswith('mtawindows_append_deferred_total{stream="e"}'):
            return float(line.split()[-1])
    return 0.0


def test_a_small_append_runs_on_the_event_loop_unless_it_must_read_a_slice(
    tmp_path: Path,
) -> None:
    """A columnar window takes one-row appends on the server's event loop (no thread hop);
    one whose window start jumps into slices held only in Redis is deferred to a worker
    (counted in ``mtawindows_append_deferred_total``) before the window changes, and
    answers the same: every result checked against the rows sent, per row and in the end,
    and after a restart."""
    rng = np.random.default_rng(3)
    port = free_port()
    rows_ts: list[int] = []
    rows_v: list[float] = []
    span = 100_000  # the window: the newest 100,000 ns; about 24 slices of 4,096 rows

    def want(k: int) -> tuple[float, float, int]:
        ts = np.array(rows_ts[: k + 1])
        vs = np.array(rows_v[: k + 1])
        keep = ts > ts[-1] - span
        return float(vs[keep].max()), math.fsum(vs[keep].tolist()), int(keep.sum())

    def check(res: Any, first: int) -> None:
        got = res.row_results["w"]
        for j in range(len(got["m"])):
            m, s, n = want(first + j)
            assert got["m"][j] == m and math.isclose(got["s"][j], s, rel_tol=1e-12), j
            assert got["__size"][j] == n, j

    with LocalServer(tmp_path / "d", "--metrics-port", str(port), env=ON) as srv:
        with WindowClient(srv.target) as c:
            c.create_stream(StreamSpec("e", (Field("v", "DOUBLE"),), wall_clock=False))
            c.create_window(
                WindowSpec(
                    "e",
                    "w",
                    (Aggregation("m", "max", "v"), Aggregation("s", "sum", "v")),
                    Policy.time_range(timedelta(microseconds=100)),
                    "AMTA",
                    Storage("redis"),
                )
            )
            assert "columnar" in c.get_window("e", "w").storage
            t = 1_000
            for _ in range(12):  # 120,000 rows, one ns apart: the window's slices sealed
                ts = list(range(t, t + 10_000))
                vs = rng.normal(size=10_000).round(3).tolist()
                c.append("e", {"ts": ts, "v": vs})
                rows_ts.extend(ts)
                rows_v.extend(vs)
                t += 10_000
            # the sealed slices are written at the flush timer's checkpoint (every 0.2 s) or
            # 32 at a time; their columns leave memory (but the oldest few) at the next batch
            deadline = time.monotonic() + 30
            while (st := c.get_window("e", "w").stats)["columnar_unwritten_slices"]:
                assert time.monotonic() < deadline, st
                time.sleep(0.05)
            assert st["columnar_slices"] >= 20, st
            before = _deferred(port)
            for step in (1, 3, 2):  # the start moves a few rows: the slices held locally
                t += step
                v = round(float(rng.normal()), 3)
                res = c.append("e", {"ts": [t], "v": [v]}, results="per_row")
                rows_ts.append(t)
                rows_v.append(v)
                check(res, len(rows_ts) - 1)
            assert _deferred(port) == before  # all three on the event loop
            st = c.get_window("e", "w").stats
            assert st["columnar_local_slices"] < st["columnar_slices"] - 8, st
            t += 40_000  # the start jumps 40,000 rows: into slices only Redis holds
            res = c.append("e", {"ts": [t], "v": [2.5]}, results="per_row")
            rows_ts.append(t)
            rows_v.append(2.5)
            check(res, len(rows_ts) - 1)
            assert _deferred(port) == before + 1
            m, s, n = want(len(rows_ts) - 1)
            got = c.query("e", "w")
            assert (got.values["m"], got.size) == (m, n)
            assert math.isclose(got.values["s"], s, rel_tol=1e-12)
        srv.restart()
        with WindowClient(srv.target) as c:
            got = c.query("e", "w")
            assert (got.values["m"], got.size) == (m, n)
