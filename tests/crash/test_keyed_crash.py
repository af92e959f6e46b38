"""kill -9 of a real ``mtawindows serve`` holding a keyed stream with durable windows, several
times, against a model of what was acknowledged (the keyed variant of
tests/support/crash_harness.py).

One campaign, reproducible from its seed: a producer thread appends batches of 500-2000 rows
over many keys (new ones, a few hot keys that grow into full MTAs, earlier ones), each with
``producer_id``/``sequence`` and retried with the same sequence until acknowledged; the
server is killed (SIGKILL, its embedded Redis with it or, now and then, SIGKILL of the Redis
first) at a random moment, restarted on the same data dir, and checked:

* the batch in flight at the kill (its fate unknown to the client) is resent with its
  sequence: applied exactly once whatever happened to it (per key group), then part of the
  model;
* the stream holds exactly the model's keys and rows;
* for a sample of ~300 keys plus every key of the last acknowledged batch, each window's
  result for the key (GetKey) equals the naive recomputation over the key's rows in the model
  (a count window with first/last: non-commutative; a time window with sum/count/max; a
  window that is not durable, recovered through the stream's journal);
* the last acknowledged sequence resent is a duplicate.

Over the run at least 10,000 distinct keys exist. Replay a failure with its seed::

    MTAWINDOWS_KEYED_CRASH_SEED=1234 .venv/bin/pytest tests/crash/test_keyed_crash.py
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from mtawindows.client import (
    Aggregation,
    Field,
    MtaWindowsError,
    Policy,
    Storage,
    StreamSpec,
    WindowClient,
    WindowSpec,
)
from mtawindows.testing import LocalServer
from tests.support.keyed_oracle import OWin, close_values, expected

pytestmark = [pytest.mark.slow, pytest.mark.server, pytest.mark.redis]

STREAM = "hosts"
PRODUCER = "keyed-crash"
MS = 1_000_000  # ns
RANGE_MS = 200
HOT_KEYS = [f"hot-{i:02d}" for i in range(12)]
WINDOWS = (
    (
        WindowSpec(
            STREAM,
            "cnt",
            (
                Aggregation("f", "first", "v"),
                Aggregation("l", "last", "v"),
                Aggregation("s", "sum", "v"),
                Aggregation("n", "count"),
            ),
            Policy.count(8),
            "AMTA",
            Storage(durable=True, block_size=4, cache_size=4),
        ),
        OWin("cnt", "count", 8, {"f": "first", "l": "last", "s": "sum", "n": "count"}),
    ),
    (
        WindowSpec(
            STREAM,
            "rng",
            (
                Aggregation("s", "sum", "v"),
                Aggregation("n", "count"),
                Aggregation("mx", "max", "v"),
            ),
            Policy.time_range(timedelta(milliseconds=RANGE_MS)),
            "LMTA",
            Storage(durable=True),
        ),
        OWin("rng", "time", RANGE_MS * MS, {"s": "sum", "n": "count", "mx": "max"}),
    ),
    (  # not durable itself: the stream's journal (of the durable ones) recovers it too
        WindowSpec(STREAM, "plain", (Aggregation("s", "sum", "v"),), Policy.count(3)),
        OWin("plain", "count", 3, {"s": "sum"}),
    ),
)
OWINS = {o.name: o for _, o in WINDOWS}
MIN_KEYS = 10_000


@dataclass
class Model:
    """Every acknowledged batch's rows by key, and the batch in flight (fate unknown)."""

    rows: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    batches: list[dict[str, list[Any]]] = field(default_factory=list)
    in_flight: tuple[int, dict[str, list[Any]]] | None = None
    clock: int = 1_000 * MS
    next_key: int = 0
    total_rows: int = 0

    @property
    def sequence(self) -> int:
        return len(self.batches)

    def acknowledge(self, seq: int, batch: dict[str, list[Any]]) -> None:
        assert seq == len(self.batches) + 1, (seq, len(self.batches))
        self.batches.append(batch)
        for t, k, v in zip(batch["ts"], batch["host"], batch["v"], strict=True):
            self.rows.setdefault(k, []).append((t, v))
        self.total_rows += len(batch["ts"])


def make_batch(rnd: random.Random, model: Model, known: list[str]) -> dict[str, list[Any]]:
    """500-2000 rows: new keys, hot keys (they grow into full MTAs), earlier keys; time goes
    forward (ties too), so every key's rows are in order."""
    n = rnd.randint(500, 2000)
    ts, keys, vs = [], [], []
    t = model.clock
    for _ in range(n):
        r = rnd.random()
        if r < 0.6 or not known:
            k = f"k{model.next_key:06d}"
            model.next_key += 1
            known.append(k)
        elif r < 0.7:
            k = rnd.choice(HOT_KEYS)
        else:
            k = rnd.choice(known)
        t += rnd.choice((0, 0, MS // 10, MS))
        if rnd.random() < 0.001:
            t += 2 * RANGE_MS * MS  # a silence: every time window empties but for the new
        ts.append(t)
        keys.append(k)
        vs.append(float(rnd.randint(-100, 100)))  # integers: every sum exact
    model.clock = t + MS
    return {"ts": ts, "host": keys, "v": vs}


def produce(
    target: str,
    rnd: random.Random,
    model: Model,
    known: list[str],
    stop: threading.Event,
    errors: list[BaseException],
) -> None:
    """Append until ``stop``; a batch not acknowledged when the server dies stays in flight."""
    try:
        with WindowClient(target, timeout=5, retries=1) as cl:
            while not stop.is_set():
                if model.in_flight is None:
                    batch = make_batch(rnd, model, known)
                    model.in_flight = (model.sequence + 1, batch)
                seq, batch = model.in_flight
                while True:  # retried as a producer would: the same sequence
                    try:
                        cl.append(STREAM, batch, producer_id=PRODUCER, sequence=seq)
                        break
                    except MtaWindowsError:
                        if stop.is_set():
                            return
                        time.sleep(0.05)
                model.acknowledge(seq, batch)
                model.in_flight = None
    except BaseException as ex:  # pragma: no cover - reported by the campaign
        errors.append(ex)


def check(c: WindowClient, model: Model, rnd: random.Random, log: list[str]) -> int:
    """The server equals the model (after settling the batch in flight); returns the keys
    checked."""
    if model.in_flight is not None:
        seq, batch = model.in_flight
        res = c.append(STREAM, batch, producer_id=PRODUCER, sequence=seq, timeout=60)
        log.append(f"in flight {seq}: {'found applied' if res.duplicate else 'applied now'}")
        model.acknowledge(seq, batch)
        model.in_flight = None
    info = c.get_stream(STREAM)
    assert (info.keys, info.rows_appended) == (len(model.rows), model.total_rows), (
        f"the stream holds {info.keys} keys and {info.rows_appended} rows, the model "
        f"{len(model.rows)} and {model.total_rows}"
    )
    # ~300 keys at random and the hot ones, window by window (Query); every key of the last
    # acknowledged batch, all its windows at once (GetKey)
    sample = set(rnd.sample(sorted(model.rows), min(300, len(model.rows))))
    sample |= set(HOT_KEYS) & set(model.rows)
    for key in sorted(sample):
        rows = model.rows[key]
        for name, ow in OWINS.items():
            _same(key, name, ow, rows, c.query(STREAM, name, key=key, timeout=30))
    last_keys = set(model.batches[-1]["host"]) if model.batches else set()
    for key in sorted(last_keys):
        rows = model.rows[key]
        got = c.get_key(STREAM, key, timeout=30)
        assert (got.rows_appended, got.newest_timestamp) == (len(rows), rows[-1][0]), (
            f"key {key!r}: {got.rows_appended} rows, newest {got.newest_timestamp}; the model "
            f"{len(rows)}, {rows[-1][0]}"
        )
        for name, ow in OWINS.items():
            _same(key, name, ow, rows, got.results[name])
    if model.sequence:
        last = model.batches[-1]
        res = c.append(STREAM, last, producer_id=PRODUCER, sequence=model.sequence, timeout=60)
        assert res.duplicate and res.rows_applied == 0, "the last acknowledged batch applied again"
    return len(sample | last_keys)


def _same(key: str, name: str, ow: OWin, rows: list[tuple[int, float]], r: Any) -> None:
    values, size = expected(ow, rows)
    assert r.size == size and close_values(r.values, values), (
        f"key {key!r} window {name}: got {r.values} size {r.size}, the model {values} size "
        f"{size} ({len(rows)} rows)"
    )
    assert (r.key, r.timestamp) == (key, rows[-1][0]), (key, name, r)


@dataclass
class Campaign:
    kills: int = 0
    checks: int = 0
    keys_checked: int = 0
    log: list[str] = field(default_factory=list)


def _kill(srv: LocalServer, mode: str) -> None:
    if mode == "both":  # the machine dies: its Redis first
        srv.kill_all()
    else:
        srv.kill()
    deadline = time.monotonic() + 10
    while srv.redis_pid is not None and time.monotonic() < deadline:
        time.sleep(0.02)  # the embedded Redis dies with its server (PR_SET_PDEATHSIG)
    assert srv.redis_pid is None, "the embedded Redis outlived its server"


def run_campaign(data_dir: Path, *, seed: int, kills: int, deadline: float) -> Campaign:
    rnd = random.Random(seed)
    model = Model()
    known: list[str] = []
    camp = Campaign()
    flags = (
        "--key-compact-items",
        str(rnd.choice((4, 6))),
        "--key-cache-mb",
        str(rnd.choice((4, 16, 64))),  # 4: the hot keys' trees leave memory and come back
    )
    flush = rnd.choice((0.05, 0.3, 1.0))
    groups = rnd.choice((0, 16, 64))
    camp.log.append(f"seed {seed}: {flags}, flush interval {flush}, key groups {groups}")
    srv = LocalServer(data_dir, *flags, flush_interval=flush)
    srv.start()
    try:
        with WindowClient(srv.target, timeout=30) as c:
            c.create_stream(
                StreamSpec(
                    STREAM,
                    (Field("host", "STRING"), Field("v", "DOUBLE")),
                    key="host",
                    key_groups=groups,
                    wall_clock=False,
                )
            )
            for spec, _ in WINDOWS:
                c.create_window(spec)
        k = 0
        while k < kills or len(model.rows) < MIN_KEYS:
            if time.monotonic() > deadline and k >= 2:
                break
            mode = rnd.choice(("server", "server", "both"))
            run_for = rnd.uniform(0.3, 1.5)
            camp.log.append(f"seed {seed} kill {k}: {mode} after {run_for:.2f}s")
            stop = threading.Event()
            errors: list[BaseException] = []
            t = threading.Thread(
                target=produce, args=(srv.target, rnd, model, known, stop, errors), daemon=True
            )
            t.start()
            time.sleep(run_for)
            _kill(srv, mode)
            stop.set()
            t.join(60)
            assert not t.is_alive(), "the producer did not stop"
            if errors:
                raise errors[0]
            camp.kills += 1
            t0 = time.monotonic()
            srv.start()
            srv.wait_serving()
            t1 = time.monotonic()
            with WindowClient(srv.target, timeout=60) as c:
                try:
                    camp.keys_checked += check(c, model, rnd, camp.log)
                except AssertionError as ex:
                    msg = f"seed {seed}, after kill {k} ({mode}): {ex}; log {camp.log[-4:]}"
                    raise AssertionError(msg) from None
            camp.checks += 1
            camp.log.append(
                f"  {model.sequence} batches, {len(model.rows)} keys; restart "
                f"{t1 - t0:.1f}s, check {time.monotonic() - t1:.1f}s"
            )
            k += 1
    finally:
        srv.kill_all()
    camp.log.append(f"{len(model.rows)} keys, {model.total_rows} rows, {model.sequence} batches")
    assert len(model.rows) >= MIN_KEYS, camp.log[-1]
    return camp


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A data dir with a short path (the embedded Redis's unix socket lives in it)."""
    d = Path(tempfile.mkdtemp(prefix="mtawk-"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_kill_9_loses_no_acknowledged_row_of_any_key(short_dir: Path) -> None:
    seed = int(os.environ.get("MTAWINDOWS_KEYED_CRASH_SEED") or 20261125)
    camp = run_campaign(short_dir, seed=seed, kills=6, deadline=time.monotonic() + 75)
    print("\n".join(camp.log))
    assert camp.kills >= 2 and camp.checks == camp.kills, camp.log
    assert camp.keys_checked >= 300 * camp.checks, camp.keys_checked
