"""Query-time ranges served (issue 25, part 2): ``Query(range=...)`` and ``Query(count=...)``
through a real server on a loopback port, against a naive model of the rows each window keeps,
for every algorithm that answers (AMTA, LMTA with tiny Redis blocks and head caches, FLATFAT,
BINT, FLATFIT), Redis-backed and in memory, on an unkeyed and a keyed stream (keys in their
compact form and grown into their full one); the refusals: RANGE_NOT_SUPPORTED naming the
algorithm (and a time range on a window without a timestamp aggregate), INVALID_ARGUMENT
naming the field (both set, a negative one, a range past int64 nanoseconds), each leaving
the window as it was.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
from datetime import timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from mtawindows.client import (
    Aggregation,
    FailedPreconditionError,
    Field,
    InvalidArgumentError,
    MtaWindowsError,
    Policy,
    Storage,
    StreamSpec,
    WindowClient,
    WindowSpec,
)
from mtawindows.client.errors import from_rpc_error
from mtawindows.testing import LocalServer, mtawindows_command
from mtawindows.v1 import windows_pb2 as pb
from mtawindows.v1 import windows_pb2_grpc as pb_grpc

pytestmark = [pytest.mark.server, pytest.mark.redis]

ANSWERING = ("AMTA", "LMTA", "FLATFAT", "BINT", "FLATFIT")
BASE = 1_800_000_000  # seconds since the epoch: the streams read plain numbers as seconds
RANGE = 60  # seconds: the time window's policy
COUNT = 40  # rows: the count window's policy
AGGS = (
    Aggregation("n", "count"),
    Aggregation("s", "sum", "x"),
    Aggregation("first", "first", "x"),  # the order matters: first and last do not commute
    Aggregation("last", "last", "x"),
    Aggregation("mx", "max", "x"),
)
# the count window also keeps the newest timestamp (its policy does not): time ranges too
COUNT_AGGS = (*AGGS, Aggregation("newest", "max", "ts"))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    # keys grow out of their compact form past 4 items: both forms answer
    with LocalServer(tmp_path_factory.mktemp("ranges"), "--key-compact-items", "4") as srv:
        yield srv


def storage(algorithm: str, where: str) -> Storage:
    if where == "memory":
        return Storage("memory")
    if algorithm in ("AMTA", "LMTA"):  # tiny blocks and head caches: the middle in Redis
        return Storage("redis", block_size=2, cache_size=2)
    return Storage("redis")


def make(c: WindowClient, stream: str, algorithm: str, where: str, *, keyed: bool) -> None:
    fields = (Field("x", "INT64"), Field("k", "STRING"))
    c.create_stream(StreamSpec(stream, fields, key="k" if keyed else "", ts_unit="s"))
    st = storage(algorithm, where)
    c.create_window(
        WindowSpec(
            stream, "by_time", AGGS, Policy.time_range(timedelta(seconds=RANGE)), algorithm, st
        )
    )
    c.create_window(WindowSpec(stream, "by_count", COUNT_AGGS, Policy.count(COUNT), algorithm, st))


class Model:
    """The rows a window keeps, (ts in seconds, x), oldest first."""

    def __init__(self, count: int | None = None, seconds: int | None = None) -> None:
        self.count = count
        self.seconds = seconds
        self.rows: list[tuple[int, int]] = []

    def push(self, ts: int, x: int) -> None:
        self.rows.append((ts, x))
        if self.count is not None:
            del self.rows[: max(0, len(self.rows) - self.count)]
        else:
            self.rows = [r for r in self.rows if ts - r[0] < self.seconds]  # type: ignore[operator]

    def suffix(self, *, count: int | None = None, seconds: float | None = None) -> list[int]:
        if count is not None:
            return [x for _, x in self.rows[max(0, len(self.rows) - count) :]]
        newest = self.rows[-1][0] if self.rows else 0
        return [x for ts, x in self.rows if newest - ts < seconds]  # the policy's rule


def check(got: Any, xs: list[int], where: Any) -> None:
    assert got.size == len(xs), where
    assert got.values["n"] == len(xs), where
    if xs:
        assert got.values["s"] == sum(xs), where
        assert got.values["first"] == xs[0], where
        assert got.values["last"] == xs[-1], where
        assert got.values["mx"] == max(xs), where
    else:
        assert got.values["first"] is None and got.values["mx"] is None, where


def ask(
    c: WindowClient, rng: random.Random, stream: str, models: dict[str, Model], key: str | None
) -> None:
    """Random counts and ranges (seconds, with fractions) of both windows vs the models."""
    for name, model in models.items():
        n = len(model.rows)
        for count in {1, n, n + 5, rng.randint(1, n + 2), rng.randint(1, max(1, n // 2))}:
            got = c.query(stream, name, key=key, count=count)
            check(got, model.suffix(count=count), (name, key, "count", count))
        for secs in (0, 0.5, 1, rng.randint(1, 90), rng.uniform(0, 70), 10**6):
            got = c.query(stream, name, key=key, range=timedelta(seconds=secs))
            check(got, model.suffix(seconds=secs), (name, key, "range", secs))
        whole = c.query(stream, name, key=key)
        check(whole, model.suffix(count=n), (name, key, "whole"))


@pytest.mark.parametrize("where", ["redis", "memory"])
@pytest.mark.parametrize("algorithm", ANSWERING)
def test_ranges_and_counts_match_the_model_unkeyed(
    server: LocalServer, algorithm: str, where: str
) -> None:
    stream = f"r_{algorithm.lower()}_{where}"
    rng = random.Random(stream)
    with WindowClient(server.target, timeout=60) as c:
        make(c, stream, algorithm, where, keyed=False)
        models = {"by_time": Model(seconds=RANGE), "by_count": Model(count=COUNT)}
        t = BASE
        for _ in range(8):
            t += rng.choice([0, 1, 5, 30, 90])  # a gap past the range: a bulk eviction
            n = rng.randint(1, 30)
            ts, xs = [], []
            for _ in range(n):
                t += rng.choice([0, 1, 1, 2, 3])
                ts.append(t)
                xs.append(rng.randint(-50, 50))
            c.append(stream, {"ts": ts, "x": xs, "k": ["a"] * n})
            for m in models.values():
                for a, b in zip(ts, xs, strict=True):
                    m.push(a, b)
            ask(c, rng, stream, models, None)


@pytest.mark.parametrize("algorithm", ANSWERING)
def test_ranges_and_counts_match_the_model_per_key(server: LocalServer, algorithm: str) -> None:
    """Key ``a`` takes most rows (its window grows into the full form), ``c`` a few (compact),
    ``b`` in between: each key's suffix against its own model (a keyed stream's windows are
    Redis-backed: cold keys live there)."""
    where = "redis"
    stream = f"rk_{algorithm.lower()}"
    rng = random.Random(stream)
    with WindowClient(server.target, timeout=60) as c:
        make(c, stream, algorithm, where, keyed=True)
        models = {
            k: {"by_time": Model(seconds=RANGE), "by_count": Model(count=COUNT)} for k in "abc"
        }
        t = BASE
        for _ in range(6):
            t += rng.choice([0, 1, 30, 90])
            n = rng.randint(5, 40)
            ts, xs, ks = [], [], []
            for _ in range(n):
                t += rng.choice([0, 1, 2])
                k = rng.choices("abc", weights=[8, 3, 1])[0]
                ts.append(t)
                xs.append(rng.randint(-50, 50))
                ks.append(k)
                for m in models[k].values():
                    m.push(t, xs[-1])
            c.append(stream, {"ts": ts, "x": xs, "k": ks})
            for k in "abc":
                if models[k]["by_count"].rows:
                    ask(c, rng, stream, models[k], k)


def rpc(stub: Any, **fields: Any) -> Any:
    try:
        return stub.Query(pb.QueryRequest(**fields), timeout=30)
    except grpc.RpcError as err:
        raise from_rpc_error(err) from None


def test_refusals_name_what_was_wrong_and_change_nothing(server: LocalServer) -> None:
    with WindowClient(server.target, timeout=60) as c:
        make(c, "r_refusals", "AMTA", "redis", keyed=False)
        c.create_window(WindowSpec("r_refusals", "daba", AGGS, Policy.count(10), "DABA"))
        c.create_window(WindowSpec("r_refusals", "no_ts", AGGS, Policy.count(10), "FLATFAT"))
        c.append("r_refusals", {"ts": [BASE, BASE + 1, BASE + 2], "x": [1, 2, 3], "k": ["a"] * 3})
        before = {w: c.query("r_refusals", w) for w in ("by_time", "daba", "no_ts")}

        # an algorithm that answers no suffix
        with pytest.raises(FailedPreconditionError) as err:
            c.query("r_refusals", "daba", count=2)
        assert err.value.reason == "RANGE_NOT_SUPPORTED"
        assert err.value.metadata["algorithm"] == "DABA"
        assert err.value.metadata["window"] == "daba"
        assert "DABA" in err.value.message
        # a time range where no aggregate holds the newest timestamp: a count answers
        with pytest.raises(FailedPreconditionError) as err:
            c.query("r_refusals", "no_ts", range=timedelta(seconds=1))
        assert err.value.reason == "RANGE_NOT_SUPPORTED"
        assert c.query("r_refusals", "no_ts", count=2).values["s"] == 5

        channel = grpc.insecure_channel(server.target)
        stub = pb_grpc.WindowServiceStub(channel)
        try:
            bad: list[tuple[dict[str, Any], str]] = [
                ({"count": 2, "range": Duration(seconds=1)}, "range"),
                ({"count": -1}, "count"),
                ({"range": Duration(seconds=-1)}, "range"),
                ({"range": Duration(seconds=1, nanos=-5)}, "range"),
                ({"range": Duration(seconds=10**10)}, "range"),  # past int64 nanoseconds
            ]
            for fields, field in bad:
                with pytest.raises(InvalidArgumentError) as bad_err:
                    rpc(stub, stream="r_refusals", window="by_time", **fields)
                assert bad_err.value.reason == "INVALID_ARGUMENT", fields
                assert [v.field for v in bad_err.value.violations] == [field], fields
            # nanoseconds are the timestamps' unit: a range finer than a microsecond is fine
            got = rpc(stub, stream="r_refusals", window="by_time", range=Duration(nanos=1))
            assert got.size == 1
            # not a keyed stream: a key is refused as before
            with pytest.raises(MtaWindowsError):
                rpc(stub, stream="r_refusals", window="by_time", key="a", count=1)
        finally:
            channel.close()
        assert {w: c.query("r_refusals", w) for w in before} == before


def test_the_sdk_refuses_before_sending(server: LocalServer) -> None:
    with WindowClient(server.target) as c:
        with pytest.raises(ValueError, match="not both"):
            c.query("s", "w", range=timedelta(seconds=1), count=1)
        with pytest.raises(ValueError, match="count must be >= 1"):
            c.query("s", "w", count=0)
        with pytest.raises(ValueError, match="range must be >= 0"):
            c.query("s", "w", range=timedelta(seconds=-1))
        with pytest.raises(TypeError, match="range must be a timedelta"):
            c.query("s", "w", range=5)  # type: ignore[arg-type]


def test_keyed_refusal_comes_before_the_key(server: LocalServer) -> None:
    """A keyed window of an algorithm without suffixes refuses whatever form the key is in,
    and before the key is looked up (an unknown key gets the same answer)."""
    with WindowClient(server.target) as c:
        make(c, "rk_refusals", "AMTA", "redis", keyed=True)
        c.create_window(
            WindowSpec("rk_refusals", "two", AGGS, Policy.count(10), "TWO_STACKS", Storage("redis"))
        )
        c.append("rk_refusals", {"ts": [BASE] * 6, "x": list(range(6)), "k": list("aaaaab")})
        for key in ("a", "b", "nobody"):
            with pytest.raises(FailedPreconditionError) as err:
                c.query("rk_refusals", "two", key=key, count=1)
            assert err.value.reason == "RANGE_NOT_SUPPORTED"
            assert err.value.metadata["algorithm"] == "TWO_STACKS"
        assert c.query("rk_refusals", "by_count", key="a", count=2).values["s"] == 3 + 4


def test_a_fifo_engine_on_redis_comes_back_with_its_suffixes(tmp_path: Path) -> None:
    """A durable FlatFIT window restarted: its items come back from the checkpoint and the
    journal, and its suffixes with them."""
    with LocalServer(tmp_path) as srv, WindowClient(srv.target, timeout=60) as c:
        c.create_stream(StreamSpec("dur", (Field("x", "INT64"),), ts_unit="s"))
        c.create_window(
            WindowSpec(
                "dur", "w", COUNT_AGGS, Policy.count(100), "FLATFIT", Storage("redis", durable=True)
            )
        )
        c.append("dur", {"ts": [BASE + i for i in range(50)], "x": list(range(50))})
        want = c.query("dur", "w", count=7)
        srv.restart()
        with WindowClient(srv.target, timeout=60) as c2:
            assert c2.query("dur", "w", count=7).values == want.values
            assert c2.query("dur", "w", range=timedelta(seconds=3)).values["first"] == 47


def cli(target: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MTAWINDOWS_")}
    return subprocess.run(
        [*mtawindows_command(), *args, "--target", target],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )


def test_the_cli_queries_a_range_or_a_count(server: LocalServer) -> None:
    """``mtawindows query STREAM WINDOW --range 5s`` / ``--count N``: the suffix's result as
    JSON; both at once, or a count of 0, is a usage error (exit 2); an algorithm without
    suffixes names its reason."""
    with WindowClient(server.target) as c:
        make(c, "r_cli", "LMTA", "redis", keyed=False)
        c.create_window(WindowSpec("r_cli", "daba", AGGS, Policy.count(10), "DABA"))
        c.append(
            "r_cli", {"ts": [BASE + i for i in range(10)], "x": list(range(10)), "k": ["a"] * 10}
        )
    r = cli(server.target, "query", "r_cli", "by_time", "--range", "3s", "--json")
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["size"] == 3 and got["values"]["first"] == 7 and got["values"]["s"] == 7 + 8 + 9
    r = cli(server.target, "query", "r_cli", "by_count", "--count", "4", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["values"]["first"] == 6
    r = cli(server.target, "query", "r_cli", "by_count", "--count", "4")
    assert r.returncode == 0 and "4" in r.stdout, r.stderr
    for bad in (["--range", "3s", "--count", "2"], ["--count", "0"], ["--range", "soon"]):
        r = cli(server.target, "query", "r_cli", "by_time", *bad)
        assert r.returncode == 2, (bad, r.stdout, r.stderr)
    r = cli(server.target, "query", "r_cli", "daba", "--count", "2", "--json")
    assert r.returncode != 0
    assert json.loads(r.stderr)["error"]["reason"] == "RANGE_NOT_SUPPORTED", r.stderr


def test_a_hopping_window_refuses_ranges(server: LocalServer) -> None:
    """A window with a slide answers its last closed boundary: a range or a count of it is
    refused (``RANGE_NOT_SUPPORTED``), whatever its algorithm."""
    with WindowClient(server.target) as c:
        c.create_stream(StreamSpec("r_hop", (Field("x", "INT64"),), ts_unit="s"))
        c.create_window(
            WindowSpec(
                "r_hop",
                "hop",
                AGGS,
                Policy.time_range(timedelta(seconds=30)),
                slide=timedelta(seconds=10),
            )
        )
        c.append("r_hop", {"ts": [BASE + i for i in range(25)], "x": list(range(25))})
        before = c.query("r_hop", "hop")
        for asked in ({"count": 2}, {"range": timedelta(seconds=5)}):
            with pytest.raises(FailedPreconditionError) as err:
                c.query("r_hop", "hop", **asked)  # type: ignore[arg-type]
            assert err.value.reason == "RANGE_NOT_SUPPORTED"
            assert "hopping" in err.value.message
        assert c.query("r_hop", "hop") == before
