"""The columnar shadow of a served window (issue 22): a window of built-in monoids over a count
or a time range keeps a columnar copy of its rows beside its engine, and gives the per-row
results when it holds what the engine holds. Checked through a real server against the naive
oracle of the end-to-end tests, every monoid, Redis-backed and durable windows included; then
across a restart: no shadow until a batch asks for per-row results, then an empty one without
the engine's restored rows, so the engine gives the results until those rows have left, and the
shadow again after that (GetWindow's ``columnar_rows`` and ``columnar_batches`` say which did).
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from mtawindows.client import (
    Aggregation,
    Field,
    Policy,
    Storage,
    StreamSpec,
    UnavailableError,
    WindowClient,
    WindowSpec,
)
from mtawindows.testing import LocalServer

from .test_service_e2e import AGGS, Oracle, S, _close, _newest, expected, make_stream, random_batch

pytestmark = [pytest.mark.server, pytest.mark.redis]

WINDOWS = [
    ("c7", Policy.count(7), lambda p, a: len(a) - len(p) >= 7, Storage("memory")),
    ("t5", Policy.time_range(timedelta(seconds=5)), lambda p, a: _newest(a) - _newest(p) >= 5 * S, Storage("redis")),
    ("d9", Policy.count(9), lambda p, a: len(a) - len(p) >= 9, Storage("redis", durable=True)),
    # not a count or a time range: no shadow, the engine answers every row
    ("s20", Policy.bounded_sum("x", 20.0), lambda p, a: sum(r["x"] for r in a) - sum(r["x"] for r in p) + p[-1]["x"] > 20.0, Storage("memory")),
]  # fmt: skip


def _check(res: Any, name: str, per_row: list[dict[str, Any]], where: str) -> None:
    cols = res.row_results[name]
    for i, want in enumerate(per_row):
        for out, value in want.items():
            if isinstance(value, dict):
                for part, v in value.items():
                    got = cols[f"{out}.{part}"][i]
                    assert _close(got, v), (where, name, i, f"{out}.{part}", got, v)
            else:
                got = cols[out][i]
                assert _close(got, value), (where, name, i, out, got, value)


def _run(
    c: WindowClient,
    oracles: dict[str, Oracle],
    rng: random.Random,
    t: int,
    batches: int,
    where: str,
    *,
    max_rows: int = 25,
    skip: tuple[str, ...] = (),
    after: Callable[[int, str], None] | None = None,
    form: Callable[[int, dict[str, list[Any]]], Any] | None = None,
    stream: str = "s",
) -> int:
    """``batches`` random batches of ``stream`` with per-row results, each window's checked
    against its oracle (but the outputs ``skip``); ``after(b, where)`` after each batch;
    ``form(b, batch)``: what batch ``b`` is sent as (the dict of lists by default)."""
    for b in range(batches):
        batch, t = random_batch(rng, t, rng.randint(1, max_rows))
        res = c.append(stream, form(b, batch) if form else batch, results="per_row")
        assert res.rows_applied == len(batch["ts"])
        rows = [dict(zip(batch, vals, strict=True)) for vals in zip(*batch.values(), strict=True)]
        for name, oracle in oracles.items():
            per_row = []
            for row in rows:
                oracle.push(row)
                want = expected(oracle.rows) | {"__size": len(oracle.rows)}
                per_row.append({k: v for k, v in want.items() if k not in skip})
            _check(res, name, per_row, f"{where} batch {b}")
        if after is not None:
            after(b, f"{where} batch {b}")
    return t


def _stats(c: WindowClient, name: str) -> tuple[int, int]:
    st = c.get_window("s", name).stats
    return st["columnar_rows"], st["columnar_batches"]


def test_the_shadow_answers_per_row_as_the_engine_and_after_a_restart(tmp_path: Path) -> None:
    rng = random.Random(22)
    with LocalServer(tmp_path / "d") as srv:
        with srv.client() as c:
            make_stream(c, "s")
            oracles = {}
            for name, policy, pred, storage in WINDOWS:
                c.create_window(WindowSpec("s", name, AGGS, policy, "AMTA", storage))
                oracles[name] = Oracle(pred)
            t = _run(c, oracles, rng, 0, 12, "first run")
            for name in ("c7", "t5", "d9"):
                rows, batches = _stats(c, name)
                assert rows == len(oracles[name].rows) and batches == 12, (name, rows, batches)
            assert _stats(c, "s20") == (-1, 0)
        srv.restart()
        with srv.client() as c:
            # the durable window came back with its rows; its new shadow holds none of them
            d9 = oracles["d9"]
            oracles = {"d9": d9}
            assert c.get_window("s", "d9").stats["size"] == len(d9.rows) > 0
            assert _stats(c, "d9") == (-1, 0)  # none until a batch asks for per-row results
            t = _run(c, oracles, rng, t, 1, "after the restart")
            rows, batches = _stats(c, "d9")
            assert 0 < rows <= len(d9.rows) and batches == 0  # the engine answered
            t = _run(c, oracles, rng, t, 6, "later")  # nine rows on, the old ones have left
            rows, batches = _stats(c, "d9")
            assert rows == len(d9.rows) and batches > 0, (rows, batches)


def _first_and_sum(c: WindowClient, v: float, ts: int) -> tuple[Any, Any]:
    """One row appended (idempotent: retried while the store comes back), its result."""
    deadline = time.monotonic() + 60
    while True:
        try:
            r = c.append(
                "s", {"ts": [ts], "v": [v]}, results="per_row", producer_id="p", sequence=ts
            )
            return r.row_results["w"]["first"][-1], r.row_results["w"]["sum"][-1]
        except UnavailableError:
            assert time.monotonic() < deadline
            time.sleep(0.2)


def test_the_shadow_starts_anew_when_the_engine_reloads_behind_it() -> None:
    """The embedded Redis killed: the durable window reloads its checkpoint and replays its
    journal in place. The shadow took the replayed rows once before: it must not give results
    over them twice (a count window checks no timestamps, so its length alone would agree)."""
    with LocalServer(flush_interval=3.0) as srv, srv.client() as c:
        c.create_stream(StreamSpec("s", (Field("v", "DOUBLE"),), wall_clock=False))
        aggs = (Aggregation("first", "first", "v"), Aggregation("sum", "sum", "v"))
        storage = Storage("redis", durable=True)
        c.create_window(WindowSpec("s", "w", aggs, Policy.count(5), storage=storage))
        for i in range(1, 6):
            _first_and_sum(c, float(i), i)
        time.sleep(4)  # a checkpoint holds rows 1..5
        for i in range(6, 9):
            _first_and_sum(c, float(i), i)
        os.kill(srv.redis_pid, signal.SIGKILL)  # type: ignore[arg-type]  # it restarts it
        deadline = time.monotonic() + 60
        while True:
            try:
                assert c.query("s", "w").values == {"first": 4.0, "sum": 30.0}
                break
            except AssertionError:
                raise
            except Exception:
                assert time.monotonic() < deadline
                time.sleep(0.2)
        assert _first_and_sum(c, 9.0, 9) == (5.0, 35.0)
        assert _first_and_sum(c, 10.0, 10) == (6.0, 40.0)


def test_text_and_large_integers_come_back_as_the_engine_gives_them() -> None:
    """Text keeps its trailing NULs; an INT64 sum the shadow could only carry as doubles is
    the engine's to give (exact), never a failed call."""
    with LocalServer() as srv, srv.client() as c:
        c.create_stream(
            StreamSpec("s", (Field("k", "STRING"), Field("i", "INT64")), wall_clock=False)
        )
        aggs = (Aggregation("last", "last", "k"), Aggregation("sum", "sum", "i"))
        c.create_window(WindowSpec("s", "w", aggs, Policy.count(1)))
        r = c.append("s", {"ts": [1, 2], "k": ["a\x00", "\x00"], "i": [1, 2]}, results="per_row")
        assert r.row_results["w"]["last"] == ["a\x00", "\x00"]
        for t in range(3, 6):
            r = c.append("s", {"ts": [t], "k": ["x"], "i": [2**62]}, results="per_row")
            assert r.row_results["w"]["sum"] == [2**62]
