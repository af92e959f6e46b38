"""The mean of an INT64 field through a real server, over epoch nanoseconds (~1.8e18, past
2^53: a double holds them to 256): every per-row result and ``Query`` is the exact mean
rounded once, on the per-row engine (a window that also has an INT64 sum keeps it; a CEL
policy has no columnar path at all) as on the columnar path, across a graceful restart and a
kill -9 after a checkpoint. A window stored by the release before (its INT64 mean in the
old ``"qd"`` layout) reopens, keeps that layout and answers."""

from __future__ import annotations

import random
import uuid
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import redis

from mtawindows.client import (
    Aggregation,
    Field,
    Policy,
    Storage,
    StreamSpec,
    WindowClient,
    WindowSpec,
)
from mtawindows.testing import LocalServer
from tests.support.waiting import wait_until

from .test_service_e2e import Oracle, S

pytestmark = [pytest.mark.server, pytest.mark.redis]

EPOCH = 1_767_225_600 * S  # 2026-01-01 in ns
FIELDS = (Field("ns", "INT64"), Field("k", "INT64"))
MEAN_SUM = (
    Aggregation("mean", "mean", "ns"),
    Aggregation("sk", "sum", "k"),  # an INT64 sum: the window keeps its per-row engine
    Aggregation("n", "count"),
)
DURABLE = Storage("redis", durable=True)
# (name, aggregations, policy, which rows it holds: prefix, rows -> may the prefix leave)
WINDOWS = [
    ("eng", MEAN_SUM, Policy.count(7), lambda p, a: len(a) - len(p) >= 7),
    ("cel", MEAN_SUM, Policy.expression("total.n - old.n >= 6"), lambda p, a: len(a) - len(p) >= 6),
    ("col", MEAN_SUM[::2], Policy.count(7), lambda p, a: len(a) - len(p) >= 7),
]  # fmt: skip


def _exact(rows: list[dict[str, Any]]) -> float:
    """The exact mean of the rows' ``ns``, rounded once."""
    return float(Fraction(sum(r["ns"] for r in rows), len(rows)))


def _batch(rng: random.Random, t: int, n: int) -> tuple[dict[str, list[int]], int]:
    ts, ns, k = [], [], []
    for _ in range(n):
        t += S
        ts.append(t)
        ns.append(EPOCH + rng.randrange(-(2**40), 2**40))
        k.append(rng.randint(-3, 3))
    return {"ts": ts, "ns": ns, "k": k}, t


def _append(
    c: WindowClient, stream: str, oracles: dict[str, Oracle], batch: dict[str, list[int]], at: str
) -> None:
    """One batch with per-row results: each window's every mean is the exact one."""
    res = c.append(stream, batch, results="per_row")
    rows = [dict(zip(batch, v, strict=True)) for v in zip(*batch.values(), strict=True)]
    for name, oracle in oracles.items():
        means = res.row_results[name]["mean"]
        for j, row in enumerate(rows):
            oracle.push(row)
            assert means[j] == _exact(oracle.rows), (at, name, j, means[j], _exact(oracle.rows))


def _check_query(c: WindowClient, stream: str, oracles: dict[str, Oracle], at: str) -> None:
    """Each window's result, and a count window's newest 3 rows (a query-time range)."""
    for name, oracle in oracles.items():
        got = c.query(stream, name)
        assert got.size == len(oracle.rows), (at, name)
        assert got.values["mean"] == _exact(oracle.rows), (at, name, got.values["mean"])
        if name != "cel":
            got = c.query(stream, name, count=3)
            assert got.values["mean"] == _exact(oracle.rows[-3:]), (at, name, "range")


def test_an_int64_mean_is_exact_on_the_engine_across_restarts_and_kill_9(
    tmp_path: Path, redis_url: str
) -> None:
    rng = random.Random(64)
    stream = f"i{uuid.uuid4().hex[:8]}"
    r = redis.Redis.from_url(redis_url)
    with LocalServer(tmp_path / "d", redis_url=redis_url) as srv:
        with srv.client() as c:
            c.create_stream(StreamSpec(stream, FIELDS, wall_clock=False))
            oracles = {}
            for name, aggs, policy, pred in WINDOWS:
                c.create_window(WindowSpec(stream, name, aggs, policy, storage=DURABLE))
                oracles[name] = Oracle(pred)
            # the INT64 sum keeps "eng" on its engine (its shadow may give per-row results);
            # "cel" has no columnar path; "col" (no INT64 sum) is columnar
            assert not c.get_window(stream, "eng").storage.startswith("redis: columnar")
            assert c.get_window(stream, "cel").path.startswith("general: ")
            assert c.get_window(stream, "col").storage.startswith("redis: columnar")
            t = 0
            for b in range(4):
                batch, t = _batch(rng, t, rng.randint(1, 12))
                _append(c, stream, oracles, batch, f"first run {b}")
            _check_query(c, stream, oracles, "first run")
        srv.restart()  # SIGTERM: every window flushed, reopened from its checkpoint
        with srv.client() as c:
            _check_query(c, stream, oracles, "after a restart")
            # the engine's shadow is new and empty: the engine gives these per-row results
            batch, t = _batch(rng, t, 3)
            _append(c, stream, oracles, batch, "after a restart")
            assert c.get_window(stream, "eng").stats["columnar_batches"] == 0
            state = f"mtaw:svc:{{{stream}}}:state"
            before = r.get(state)
            batch, t = _batch(rng, t, 5)
            _append(c, stream, oracles, batch, "before the checkpoint")
            wait_until(lambda: r.get(state) != before, "a checkpoint after the batch")
            batch, t = _batch(rng, t, 4)  # in the journal only
            _append(c, stream, oracles, batch, "after the checkpoint")
        srv.kill()  # kill -9: the checkpoint, then the journal's last batch replayed
        srv.start()
        with srv.client() as c:
            _check_query(c, stream, oracles, "after kill -9")
            for b in range(3):
                batch, t = _batch(rng, t, rng.randint(1, 9))
                _append(c, stream, oracles, batch, f"after kill -9 {b}")
            _check_query(c, stream, oracles, "at the end")
            c.delete_stream(stream)


def _old_format(
    redis_url: str, stream: str, spec: WindowSpec, rows: list[dict[str, Any]]
) -> tuple[float, str]:
    """Window ``spec`` of ``stream`` (made by the server, still empty) written again as the
    release before exact INT64 means stored it: its mean the float ``Mean`` (the same
    definition: ``describe()`` has no ``integers``) in the ``"qd"`` layout, its INT64 sum an
    int64 (``"q"``), ``rows`` in it.
    Its mean after the rows (the old release's answer) and its meta key."""
    from mtawindows.server.engine import AmortizedMTA, Mean, Record
    from mtawindows.server.service.window_builder import build_window
    from mtawindows.server.storage.codecs import StructCodec
    from mtawindows.server.storage.redis_store import RedisStore

    r = redis.Redis.from_url(redis_url)
    metas = list(r.scan_iter(match=f"mtaw:{{{stream}}}:w:*:meta"))
    assert len(metas) == 1, metas
    window_id = metas[0].decode().split(":w:")[1].removesuffix(":meta")
    r.delete(*r.scan_iter(match=f"mtaw:{{{stream}}}:w:{window_id}:*"))
    built = build_window(StreamSpec(stream, FIELDS, wall_clock=False), spec)
    new = built.monoid
    old = Record({n: Mean(m.field) if isinstance(m, Mean) else m for n, m in new.fields.items()})
    layout = tuple(  # (an INT64 sum was an int64, "q", then: now 128 bits, "w")
        "qd" if isinstance(m, Mean) else "q" if part == "w" else part
        for m, part in zip(new.monoids, new.codec.layout, strict=True)  # type: ignore[attr-defined]
    )
    old.codec = StructCodec(layout)  # type: ignore[attr-defined]
    # small blocks: most of the window's pairs in Redis, in the old records
    store = RedisStore(
        redis_url, window_id=window_id, tag=stream, block_size=2, cache_size=2, refill_at=1
    )
    w = AmortizedMTA(old, built.policy, store=store)
    w.extend(rows)
    answer = w.query()["mean"]
    w.flush()
    w.close()
    blocks = list(r.scan_iter(match=f"mtaw:{{{stream}}}:w:{window_id}:b:*"))
    assert blocks, "the window's pairs are in Redis blocks"
    meta = f"mtaw:{{{stream}}}:w:{window_id}:meta"
    assert r.hget(meta, "codec") == f"struct/1:{layout!r}".encode()
    return answer, meta


def test_a_window_stored_in_the_old_format_reopens_and_answers(
    tmp_path: Path, redis_url: str
) -> None:
    """The server makes the window; while it is stopped, the window is written again as the
    release before would have (through the store, the old layout: no server of that release
    here). It reopens in its old layout and answers as before; new rows are stored in that
    layout too (each value as a double: the old accuracy, a few ulps), so a restart reopens
    it again."""
    rng = random.Random(7)
    stream = f"o{uuid.uuid4().hex[:8]}"
    spec = WindowSpec(stream, "w", MEAN_SUM, Policy.count(5), storage=Storage("redis"))
    r = redis.Redis.from_url(redis_url)
    with LocalServer(tmp_path / "d", redis_url=redis_url) as srv:
        with srv.client() as c:
            c.create_stream(StreamSpec(stream, FIELDS, wall_clock=False))
            c.create_window(spec)
        srv.stop()
        batch, t = _batch(rng, 0, 9)
        rows = [dict(zip(batch, v, strict=True)) for v in zip(*batch.values(), strict=True)]
        answer, meta_key = _old_format(redis_url, stream, spec, rows)
        codec = r.hget(meta_key, "codec")
        oracle = Oracle(lambda p, a: len(a) - len(p) >= 5)
        for row in rows:
            oracle.push(row)
        srv.start()
        with srv.client() as c:
            got = c.query(stream, "w")
            assert got.size == 5 and got.values["mean"] == answer
            assert abs(got.values["mean"] - _exact(oracle.rows)) <= 2**11  # a few ulps
            batch, t = _batch(rng, t, 5)  # the old rows leave one by one, new ones come
            res = c.append(stream, batch, results="per_row")
            means = res.row_results["w"]["mean"]
            for j, row in enumerate(zip(*batch.values(), strict=True)):
                oracle.push(dict(zip(batch, row, strict=True)))
                assert abs(means[j] - _exact(oracle.rows)) <= 2**11, (j, means[j])
            got = c.query(stream, "w")
            assert got.size == 5 and abs(got.values["mean"] - _exact(oracle.rows)) <= 2**11
        srv.restart()
        assert r.hget(meta_key, "codec") == codec  # still the old layout
        with srv.client() as c:
            got = c.query(stream, "w")
            assert got.size == 5 and abs(got.values["mean"] - _exact(oracle.rows)) <= 2**11
            batch, t = _batch(rng, t, 6)
            res = c.append(stream, batch, results="per_row")
            for j, row in enumerate(zip(*batch.values(), strict=True)):
                oracle.push(dict(zip(batch, row, strict=True)))
                got_j = res.row_results["w"]["mean"][j]
                assert abs(got_j - _exact(oracle.rows)) <= 2**11, (j, got_j)
            c.delete_stream(stream)
