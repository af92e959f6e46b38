"""The service's crash harness: real ``mtawindows serve`` processes with durable windows, kill -9
of the server and/or its embedded Redis at random moments, many times, against a model of what
was acknowledged.

One campaign (``run_campaign``), reproducible from its seed:

    start server ──> check ──> append batches (sizes around block/cache sizes) ──> kill -9 ─┐
         ^                                                                                  │
         └──────────────────────────────────────────────────────────────────────────────────┘

* **model**: every batch the server acknowledged, in order, plus at most one batch in flight
  when the kill landed (its fate is unknown: the client never got an answer);
* **check** after every restart: the in-flight batch is re-sent with its sequence (applied
  once, whatever happened to it), then every window equals a naive recomputation over the
  model's rows (count, sum, max, first/last: a non-commutative pair), the stream's counters
  and newest timestamp equal the model's, a re-sent acknowledged sequence is a duplicate, and
  a row older than the newest acknowledged one is refused (REJECT stream);
* **kills**: the server alone (its Redis must die with it), its Redis alone (the server must
  restart it and recover), or both.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from mtawindows.client import (
    Aggregation,
    Field,
    MtaWindowsError,
    OutOfOrderError,
    Policy,
    Storage,
    StreamSpec,
    WindowClient,
    WindowSpec,
)
from mtawindows.testing import LocalServer

STREAM = "crash"
PRODUCER = "harness"
S = 1_000_000_000
AGGS = (
    Aggregation("n", "count"),
    Aggregation("sum", "sum", "v"),
    Aggregation("max", "max", "v"),
    Aggregation("first", "first", "v"),
    Aggregation("last", "last", "v"),
    Aggregation("newest", "max", "ts"),
)
COUNT = 5000  # rows kept by the count windows
RANGE_S = 40  # seconds kept by the time windows
# batch sizes around the block and cache sizes of the windows below (16, 512) and their halves
SIZES = (1, 2, 7, 15, 16, 17, 31, 255, 256, 257, 511, 512, 513, 1024, 3000)
WINDOWS = (
    # name, algorithm, count or time window, storage (small blocks: many flushes and refills)
    ("amta_count", "AMTA", "count", Storage(durable=True, block_size=16, cache_size=16)),
    ("lmta_time", "LMTA", "time", Storage(durable=True, block_size=16, cache_size=16)),
    ("amta_time", "AMTA", "time", Storage(durable=True)),
    ("plain", "AMTA", "count", Storage()),  # not durable, on the same (journaled) stream
)


def _windows() -> list[WindowSpec]:
    out = []
    for name, alg, kind, storage in WINDOWS:
        pol = (
            Policy.count(COUNT)
            if kind == "count"
            else Policy.time_range(timedelta(seconds=RANGE_S))
        )
        out.append(WindowSpec(STREAM, name, AGGS, pol, alg, storage))
    return out


@dataclass
class Model:
    """What the server acknowledged: batches in sequence order, and one in flight."""

    batches: list[dict[str, list[Any]]] = field(default_factory=list)
    in_flight: tuple[int, dict[str, list[Any]]] | None = None
    newest: int = 0
    next_ts: int = S

    @property
    def sequence(self) -> int:
        return len(self.batches)

    def rows(self) -> list[tuple[int, float]]:
        return [(t, v) for b in self.batches for t, v in zip(b["ts"], b["v"], strict=True)]

    def acknowledge(self, seq: int, batch: dict[str, list[Any]]) -> None:
        assert seq == len(self.batches) + 1
        self.batches.append(batch)
        self.newest = max(self.newest, batch["ts"][-1])


def expected(rows: list[tuple[int, float]], name: str) -> dict[str, Any]:
    """The naive recomputation of window ``name`` over every row of the model."""
    if dict((w[0], w[2]) for w in WINDOWS)[name] == "count":
        kept = rows[-COUNT:]
    else:
        newest = rows[-1][0] if rows else 0
        kept = [r for r in rows if r[0] > newest - RANGE_S * S]
    vs = [v for _, v in kept]
    return {
        "n": len(kept),
        "sum": float(sum(vs)),
        "max": max(vs) if vs else None,
        "first": vs[0] if vs else None,
        "last": vs[-1] if vs else None,
        "newest": kept[-1][0] if kept else None,
    }


def make_batch(rnd: random.Random, model: Model) -> dict[str, list[Any]]:
    n = rnd.choice(SIZES)
    ts, vs = [], []
    t = model.next_ts
    for _ in range(n):
        t += rnd.choice((0, S // 100, S // 10, S // 10, S))
        if rnd.random() < 0.002:
            t += 60 * S  # a silence: the time windows evict everything at once
        ts.append(t)
        vs.append(float(rnd.randint(-1000, 1000)))  # integers: sums are exact in any order
    model.next_ts = t
    return {"ts": ts, "v": vs}


@dataclass
class Campaign:
    kills: int = 0
    by_mode: dict[str, int] = field(default_factory=dict)
    acknowledged_batches: int = 0
    acknowledged_rows: int = 0
    checks: int = 0
    in_flight_applied: int = 0
    log: list[str] = field(default_factory=list)


def _valkey_pids(data_dir: Path, server_pid: int | None) -> list[int]:
    out = subprocess.run(
        ["pgrep", "-f", f"{data_dir / 'data'}"], capture_output=True, text=True, check=False
    ).stdout.split()
    return [int(p) for p in out if int(p) not in (server_pid, os.getpid())]


def _outliving_valkeys(data_dir: Path, grace: float = 5.0) -> list[int]:
    """The embedded Redis processes of a killed server still alive ``grace`` seconds later.

    A Redis the server's supervisor was starting when the server died is, for a few tens of
    milliseconds, the small Python launcher of
    ``mtawindows.server.storage.processes.dying_with_parent`` (its command line
    already names the data directory): it sees its owner gone and exits, without becoming a
    Redis. The check waits for that a bounded moment; a process left after it is a leak."""
    deadline = time.monotonic() + grace
    while True:
        left = _valkey_pids(data_dir, None)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def _kill(srv: LocalServer, mode: str) -> None:
    pid = srv.pid
    if mode in ("redis", "both"):
        for vp in _valkey_pids(srv.data_dir, pid):
            os.kill(vp, signal.SIGKILL)
    if mode in ("server", "both"):
        srv.stop(signal.SIGKILL)


def _produce(
    target: str,
    rnd: random.Random,
    model: Model,
    camp: Campaign,
    stop: threading.Event,
    errors: list[BaseException],
) -> None:
    """Append batches until ``stop`` or the server dies under us (the batch then stays in
    flight: the model does not know whether it was applied)."""
    try:
        with WindowClient(target, timeout=2, retries=1) as cl:
            while not stop.is_set():
                batch = make_batch(rnd, model)
                seq = model.sequence + 1
                model.in_flight = (seq, batch)
                while True:  # short deadlines, retried as a producer would (same sequence)
                    try:
                        cl.append(STREAM, batch, producer_id=PRODUCER, sequence=seq)
                        break
                    except MtaWindowsError:
                        if stop.is_set():
                            return
                        time.sleep(0.05)
                model.acknowledge(seq, batch)
                model.in_flight = None
                camp.acknowledged_batches += 1
                camp.acknowledged_rows += len(batch["ts"])
    except BaseException as ex:  # pragma: no cover - reported by the campaign
        errors.append(ex)


def check(c: WindowClient, model: Model, camp: Campaign, rnd: random.Random) -> None:
    """The server's state equals the model's (after settling the batch in flight)."""
    if model.in_flight is not None:
        seq, batch = model.in_flight
        res = c.append(STREAM, batch, producer_id=PRODUCER, sequence=seq)
        camp.in_flight_applied += int(res.duplicate)
        model.acknowledge(seq, batch)
        model.in_flight = None
    rows = model.rows()
    info = c.get_stream(STREAM)
    assert (info.rows_appended, info.batches_appended) == (len(rows), model.sequence), (
        f"stream holds {info.rows_appended} rows in {info.batches_appended} batches, the model "
        f"{len(rows)} in {model.sequence} (last batch sizes {[len(b['ts']) for b in model.batches[-6:]]})"
    )
    assert info.newest_timestamp == model.newest, (info.newest_timestamp, model.newest)
    for spec in _windows():
        got = c.query(STREAM, spec.name)
        want = expected(rows, spec.name)
        values = {k: got.values.get(k) for k in want}
        assert got.size == want["n"], (spec.name, got.size, want["n"], camp.log[-3:])
        assert values == want, (spec.name, values, want, camp.log[-3:])
    # every acknowledged sequence is a duplicate when retried (the last, and a few others)
    for seq in {model.sequence, *(rnd.randint(1, model.sequence) for _ in range(3))}:
        if seq >= 1:
            res = c.append(STREAM, model.batches[seq - 1], producer_id=PRODUCER, sequence=seq)
            assert res.duplicate, f"acknowledged sequence {seq} applied again"
    # a row older than the newest acknowledged one is refused, and changes nothing
    if model.newest:
        try:
            c.append(STREAM, {"ts": [model.newest - 1], "v": [1.0]})
        except OutOfOrderError:
            pass
        else:
            msg = f"a late row (ts {model.newest - 1} < {model.newest}) was accepted"
            raise AssertionError(msg)
    camp.checks += 1


def run_campaign(
    data_dir: Path,
    *,
    seed: int,
    kills: int,
    modes: tuple[str, ...] = ("server", "redis", "both"),
    max_run: float = 1.2,
    deadline: float | None = None,
    progress: Callable[[Campaign], None] | None = None,
) -> Campaign:
    """``kills`` rounds of append-then-kill; returns what was checked. Raises AssertionError
    (with the seed in the message) at the first difference from the model."""
    rnd = random.Random(seed)
    model = Model()
    camp = Campaign()
    # every kill of Redis alone is one restart of it by the server: allow the campaign's
    srv = LocalServer(
        data_dir,
        "--redis-restarts",
        str(kills + 1),
        flush_interval=rnd.choice((0.05, 0.2, 1.0)),
    )
    srv.start()
    try:
        with WindowClient(srv.target, timeout=30) as c:
            c.create_stream(StreamSpec(STREAM, (Field("v", "DOUBLE"),), wall_clock=False))
            for spec in _windows():
                c.create_window(spec)
        for k in range(kills):
            if deadline is not None and time.monotonic() > deadline:
                break
            mode = rnd.choice(modes)
            run_for = rnd.uniform(0.05, max_run)
            camp.log.append(f"seed {seed} round {k}: {mode} after {run_for:.2f}s")
            stop = threading.Event()
            errors: list[BaseException] = []

            t = threading.Thread(
                target=_produce, args=(srv.target, rnd, model, camp, stop, errors), daemon=True
            )
            t.start()
            time.sleep(run_for)
            _kill(srv, mode)
            if mode == "redis":  # the producer goes on retrying while the server recovers
                time.sleep(rnd.uniform(0.0, 2.0))
            stop.set()
            t.join(60)
            assert not t.is_alive(), "producer did not stop"
            if errors:
                raise errors[0]
            camp.kills += 1
            camp.by_mode[mode] = camp.by_mode.get(mode, 0) + 1
            if progress is not None:
                progress(camp)
            if mode in ("server", "both"):
                leftover = _outliving_valkeys(srv.data_dir)
                assert not leftover, f"embedded Redis outlived its server: pids {leftover}"
                srv.start()
            srv.wait_serving()
            with WindowClient(srv.target, timeout=30) as c:
                try:
                    check(c, model, camp, rnd)
                except AssertionError as ex:
                    msg = f"seed {seed}, after kill {k} ({mode}): {ex}"
                    raise AssertionError(msg) from None
    finally:
        srv.stop(signal.SIGKILL)
        for vp in _valkey_pids(srv.data_dir, None):
            os.kill(vp, signal.SIGKILL)
    return camp
