"""Every algorithm of ``CreateWindow`` served end to end (issue 24): windows of each one on a
real server, checked row by row against the naive oracle of ``test_service_e2e``; durable
ones back exactly after kill -9 of the server and its Redis; moved to another member of a
cluster when their owner is killed; ``GetWindow`` saying where each keeps its state; and a
monoid an algorithm cannot run refused at creation, naming what is missing.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import pytest

from mtawindows.client import (
    InvalidArgumentError,
    Policy,
    Storage,
    WindowClient,
    WindowSpec,
)
from mtawindows.testing import LocalCluster, LocalServer
from mtawindows.v1.types import ALGORITHMS
from tests.transport.test_service_e2e import (
    AGGS,
    POLICIES,
    Oracle,
    _close,
    expected,
    make_stream,
    random_batch,
)

pytestmark = [pytest.mark.server, pytest.mark.redis]

# SlickDeque runs outputs whose inverse is exact (count, a sum of INT64 k) or selections:
# not maxcount, nor the float statistics (a float inverse drifts without bound)
SLICK_AGGS = tuple(
    a
    for a in AGGS
    if a.monoid not in ("maxcount", "mean", "variance", "stddev", "geomean") and a.name != "sx"
)


def _aggs(algorithm: str) -> tuple[Any, ...]:
    return SLICK_AGGS if algorithm == "SLICKDEQUE" else AGGS


def _rows(batch: dict[str, list[Any]]) -> list[dict[str, Any]]:
    return [dict(zip(batch, vals, strict=True)) for vals in zip(*batch.values(), strict=True)]


def _check(got: Any, rows: list[dict[str, Any]], algorithm: str, where: Any) -> None:
    want = expected(rows) if rows else {}
    assert got.size == len(rows), where
    names = {a.name for a in _aggs(algorithm)}
    for out, value in want.items():
        if out in names:
            assert _close(got.values[out], value), (where, out, got.values[out], value)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with LocalServer(tmp_path_factory.mktemp("algos")) as srv:
        yield srv


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_each_algorithm_matches_the_oracle_row_by_row(server: LocalServer, algorithm: str) -> None:
    """Count, time, bounded-sum, max-sub-window and CEL policies, per-row and final results,
    Redis-backed and in memory, every output of AGGS (SlickDeque: all but maxcount)."""
    stream = f"alg_{algorithm.lower()}"
    with WindowClient(server.target, timeout=60) as c:
        make_stream(c, stream)
        oracles = {}
        for i, (name, policy, pred) in enumerate(POLICIES):
            storage = Storage("redis" if i % 2 == 0 else "memory", durable=i % 4 == 0)
            spec = WindowSpec(stream, name, _aggs(algorithm), policy, algorithm, storage)
            if algorithm == "SLICKDEQUE" and name == "by_sum":
                # the bounded sum reads a float sum of x, which SlickDeque cannot take back
                with pytest.raises(InvalidArgumentError, match="the policy's own sum"):
                    c.create_window(spec)
                continue
            c.create_window(spec)
            oracles[name] = Oracle(pred)
        rng = random.Random(f"served-{algorithm}")
        t = 0
        for b in range(6):
            batch, t = random_batch(rng, t, rng.randint(1, 40))
            mode = "per_row" if b % 2 == 0 else "final"
            res = c.append(stream, batch, results=mode)
            rows = _rows(batch)
            for name, oracle in oracles.items():
                sizes = []
                for row in rows:
                    oracle.push(row)
                    sizes.append(len(oracle.rows))
                if mode == "per_row":
                    assert list(res.row_results[name]["__size"]) == sizes, (name, b)
                else:
                    _check(res.results[name], oracle.rows, algorithm, (name, b))
                _check(c.query(stream, name), oracle.rows, algorithm, (name, b, "query"))
        info = c.get_window(stream, POLICIES[0][0])
        assert info.spec.algorithm == algorithm
        if algorithm in ("AMTA", "LMTA"):
            assert info.storage.startswith("redis: middle levels in Redis"), info.storage
        else:
            assert info.storage.startswith("redis: all in the process"), info.storage
        memory = c.get_window(stream, POLICIES[1][0])
        assert memory.storage.startswith("memory"), memory.storage


def test_an_algorithm_refuses_a_monoid_it_cannot_run(server: LocalServer) -> None:
    with WindowClient(server.target) as c:
        make_stream(c, "refuse_slick")
        with pytest.raises(InvalidArgumentError) as err:
            c.create_window(WindowSpec("refuse_slick", "w", AGGS, Policy.count(5), "SLICKDEQUE"))
        assert err.value.reason == "INVALID_DEFINITION"
        assert "these are neither: sx (sum of DOUBLE values" in err.value.message, err.value
        assert "mc (maxcount)" in err.value.message and "n (count)" not in err.value.message
        assert [v.field for v in err.value.violations] == ["spec.algorithm"]
        assert c.list_windows("refuse_slick") == []  # nothing was created


def test_durable_windows_of_every_algorithm_survive_kill_9(tmp_path: Path) -> None:
    """kill -9 of the server and its Redis: each algorithm's durable window (checkpointed
    items plus the stream's journal) comes back with every acknowledged batch."""
    srv = LocalServer(tmp_path / "kill").start()
    try:
        oracles: dict[str, Oracle] = {}
        with WindowClient(srv.target) as c:
            make_stream(c, "k9")
            _, policy, pred = POLICIES[1]  # by time
            for algorithm in ALGORITHMS:
                w = f"w_{algorithm.lower()}"
                c.create_window(
                    WindowSpec("k9", w, _aggs(algorithm), policy, algorithm, Storage(durable=True))
                )
                oracles[w] = Oracle(pred)
            rng = random.Random(9)
            t = 0
            for i in range(12):
                batch, t = random_batch(rng, t, 25)
                c.append("k9", batch, producer_id="p", sequence=i + 1)
                for row in _rows(batch):
                    for o in oracles.values():
                        o.push(row)
                if i == 7:  # a flush (every 0.2 s) checkpoints the windows' items: the
                    time.sleep(1.0)  # batches after it come back from the journal on top
        srv.kill_all()
        srv.start()
        with WindowClient(srv.target) as c:
            for algorithm in ALGORITHMS:
                w = f"w_{algorithm.lower()}"
                _check(c.query("k9", w), oracles[w].rows, algorithm, (w, "after kill -9"))
            assert c.get_stream("k9").rows_appended == 300
    finally:
        srv.stop()


def test_windows_of_every_algorithm_move_to_another_member(tmp_path: Path) -> None:
    """A two-member cluster; the owner of a stream with a durable window of each algorithm
    is killed: the other member loads them from Redis and answers exactly."""
    with (
        LocalCluster(2, "--lease-ms", "1000", data_dir=tmp_path) as cluster,
        cluster.client() as c,
    ):
        make_stream(c, "mv")
        _, policy, pred = POLICIES[0]  # by count
        oracles = {}
        for algorithm in ALGORITHMS:
            w = f"w_{algorithm.lower()}"
            c.create_window(
                WindowSpec("mv", w, _aggs(algorithm), policy, algorithm, Storage(durable=True))
            )
            oracles[w] = Oracle(pred)
        rng = random.Random(11)
        t = 0
        for i in range(6):
            batch, t = random_batch(rng, t, 20)
            c.append("mv", batch, producer_id="p", sequence=i + 1)
            for row in _rows(batch):
                for o in oracles.values():
                    o.push(row)
            if i == 3:  # checkpointed, then two batches in the journal only
                time.sleep(1.0)
        owner = cluster.owner("mv")
        cluster.kill(cluster.servers.index(owner))
        for algorithm in ALGORITHMS:
            w = f"w_{algorithm.lower()}"
            _check(c.query("mv", w), oracles[w].rows, algorithm, (w, "moved"))
        assert cluster.owner("mv") is not owner


def test_keyed_windows_of_every_algorithm(tmp_path: Path) -> None:
    """A keyed stream's window per algorithm: each key's instance grows from the compact form
    into the algorithm's full form (past --key-compact-items 3), answers as the oracle of its
    own rows, and comes back after kill -9 (durable: the group journals)."""
    srv = LocalServer(tmp_path / "keyed", "--key-compact-items", "3").start()
    try:
        from mtawindows.client import Field, StreamSpec

        aggs = tuple(a for a in SLICK_AGGS if a.monoid not in ("argmin",))  # keyed: no tags
        want: dict[str, list[float]] = {}
        with WindowClient(srv.target) as c:
            fields = (Field("host", "STRING"), Field("x", "DOUBLE"), Field("k", "INT64"),
                      Field("tag", "STRING"))  # fmt: skip
            c.create_stream(StreamSpec("kk", fields, key="host", wall_clock=False))
            for algorithm in ALGORITHMS:
                c.create_window(
                    WindowSpec("kk", algorithm.lower(), aggs, Policy.count(6), algorithm,
                               Storage(durable=True))
                )  # fmt: skip
            rng = random.Random(5)
            t = 0
            for i in range(8):
                batch, t = random_batch(rng, t, 30)
                batch["host"] = [rng.choice("ab") for _ in batch["ts"]]
                c.append("kk", batch, producer_id="p", sequence=i + 1)
                for h, x in zip(batch["host"], batch["x"], strict=True):
                    want.setdefault(h, []).append(x)
        srv.kill_all()
        srv.start()
        with WindowClient(srv.target) as c:
            for algorithm in ALGORITHMS:
                for host in "ab":
                    xs = want[host][-6:]
                    got = c.query("kk", algorithm.lower(), key=host)
                    assert got.size == len(xs) and got.values["n"] == len(xs), (algorithm, host)
                    assert got.values["mx"] == max(xs) and got.values["mn"] == min(xs)
                    assert got.values["first"] is not None, (algorithm, host)
    finally:
        srv.stop()
