"""The sliding sketches served (issue 25, part 3): distinct, quantiles and top_k outputs on a
real server, per-row and final results against the exact answer over the window's rows within
each sketch's bound (as tests/engine/test_sketches.py defines them), on every engine that takes
them, Redis-backed and in memory, keyed; the same answers after the server restarts on its
Redis; GetWindow saying the general path; bad params refused naming the param and what was
expected.
"""

from __future__ import annotations

import random
from typing import Any

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
from mtawindows.server.engine.sketches import TopK
from mtawindows.testing import LocalServer
from tests.engine.test_sketches import distinct_ok, quantiles_ok, top_ok

pytestmark = [pytest.mark.server, pytest.mark.redis]

FRACTIONS = (0.1, 0.5, 0.9, 0.99)
AGGS = (
    Aggregation("n", "count"),
    Aggregation("users", "distinct", "user"),
    Aggregation("lat", "quantiles", "latency", {"fractions": "0.1,0.5,0.9,0.99"}),
    Aggregation("top", "top_k", "page", {"k": "4"}),
)
WINDOW = 500
TOP = TopK(k=4)  # the bounds of top_k's defaults (lg_map_size 10)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with LocalServer(tmp_path_factory.mktemp("sketches")) as srv:
        yield srv


def make_stream(c: WindowClient, name: str, *, key: str = "") -> None:
    fields = (
        Field("user", "INT64"),
        Field("latency", "DOUBLE"),
        Field("page", "STRING"),
        Field("region", "STRING"),
    )
    c.create_stream(StreamSpec(name, fields, wall_clock=False, key=key))


def batch(rng: random.Random, t: int, n: int, regions: int = 1) -> tuple[dict[str, list[Any]], int]:
    cols: dict[str, list[Any]] = {"ts": [], "user": [], "latency": [], "page": [], "region": []}
    for i in range(n):
        cols["ts"].append(t + i)
        cols["user"].append(rng.randint(0, 2000) if rng.random() < 0.7 else rng.randint(0, 50))
        cols["latency"].append(rng.lognormvariate(3, 0.8))
        cols["page"].append(f"/p{min(int(rng.paretovariate(1.3)), 300)}")
        cols["region"].append(f"r{rng.randrange(regions)}")
    return cols, t + n


def rows_of(cols: dict[str, list[Any]]) -> list[dict[str, Any]]:
    return [dict(zip(cols, vals, strict=True)) for vals in zip(*cols.values(), strict=True)]


def check(values: dict[str, Any], inside: list[dict[str, Any]], where: Any) -> None:
    assert values["n"] == len(inside), where
    assert distinct_ok(12, values["users"], [r["user"] for r in inside]), (where, values["users"])
    assert quantiles_ok(200, FRACTIONS, values["lat"], [r["latency"] for r in inside]), where
    pages = len({r["page"] for r in inside})
    assert isinstance(values["top"], list) and len(values["top"]) == min(4, pages), where
    assert top_ok(TOP, values["top"], [r["page"] for r in inside]), (where, values["top"])


@pytest.mark.parametrize("algorithm", ["AMTA", "LMTA", "TWO_STACKS_LITE", "DABA", "FLATFIT"])
def test_three_sketches_per_row_and_final_against_the_exact_window(
    server: LocalServer, algorithm: str
) -> None:
    """3,000 rows in batches through a window of 500 rows (2,500 leave it), Redis-backed and
    in memory: each row's result and each batch's final one within the bounds."""
    stream = f"sk_{algorithm.lower()}"
    with WindowClient(server.target, timeout=60) as c:
        make_stream(c, stream)
        for storage in ("redis", "memory"):
            spec = WindowSpec(
                stream, storage, AGGS, Policy.count(WINDOW), algorithm, Storage(storage)
            )
            c.create_window(spec)
        info = c.get_window(stream, "redis")
        assert info.path.startswith("general:") and "no columnar kernel" in info.path, info.path
        assert [(o.name, o.type) for o in info.outputs] == [
            ("n", "INT64"),
            ("users", "DOUBLE"),
            ("lat", "ANY"),
            ("top", "ANY"),
        ]
        rng = random.Random(algorithm)
        seen: list[dict[str, Any]] = []
        t = 0
        for b in range(12):
            cols, t = batch(rng, t, rng.randint(150, 350))
            per_row = b % 3 == 0
            res = c.append(stream, cols, results="per_row" if per_row else "final")
            start = len(seen)
            seen += rows_of(cols)
            for w in ("redis", "memory"):
                if per_row:
                    got = res.row_results[w]
                    for i in range(0, len(cols["ts"]), 37):
                        end = start + i + 1
                        values = {k: got[k][i] for k in ("n", "users", "lat", "top")}
                        check(values, seen[max(0, end - WINDOW) : end], (w, b, i))
                else:
                    check(res.results[w].values, seen[-WINDOW:], (w, b))
        final = c.query(stream, "redis")
        check(final.values, seen[-WINDOW:], "query")
        assert all(type(x) is float for x in final["lat"])
        assert all(type(e["item"]) is str and type(e["count"]) is int for e in final["top"])


def test_a_redis_window_answers_the_same_after_a_restart(tmp_path: Any) -> None:
    with LocalServer(tmp_path) as srv:
        with WindowClient(srv.target, timeout=60) as c:
            make_stream(c, "restart")
            for alg in ("AMTA", "LMTA"):
                spec = WindowSpec(
                    "restart", alg.lower(), AGGS, Policy.count(WINDOW), alg, Storage("redis")
                )
                c.create_window(spec)
            rng = random.Random(7)
            t, seen = 0, []
            for _ in range(6):
                cols, t = batch(rng, t, 400)
                c.append("restart", cols, results="none")
                seen += rows_of(cols)
            before = {w: c.query("restart", w).values for w in ("amta", "lmta")}
        srv.restart()
        with WindowClient(srv.target, timeout=60) as c:
            for w in ("amta", "lmta"):
                after = c.query("restart", w).values
                # the server may combine stored sketches anew: frequent items under its map's
                # capacity are exact, the same; HLL (a copy fed values keeps its HIP estimate,
                # a union does not) and KLL (it compacts at random) within their bounds
                same = ("n", "top")
                assert {k: after[k] for k in same} == {k: before[w][k] for k in same}, w
                check(after, seen[-WINDOW:], w)
            # and it goes on sliding from there
            cols, t = batch(rng, t, 300)
            res = c.append("restart", cols, results="final")
            seen += rows_of(cols)
            for w in ("amta", "lmta"):
                check(res.results[w].values, seen[-WINDOW:], (w, "after"))


def test_a_keyed_stream_has_sketches_per_key(server: LocalServer) -> None:
    with WindowClient(server.target, timeout=60) as c:
        make_stream(c, "sk_keyed", key="region")
        c.create_window(WindowSpec("sk_keyed", "w", AGGS, Policy.count(200)))
        rng = random.Random(11)
        t, seen = 0, []
        for _ in range(4):
            cols, t = batch(rng, t, 600, regions=3)
            c.append("sk_keyed", cols, results="none")
            seen += rows_of(cols)
        for region in ("r0", "r1", "r2"):
            inside = [r for r in seen if r["region"] == region][-200:]
            check(c.query("sk_keyed", "w", key=region).values, inside, region)


def test_an_empty_window_and_a_bool_top_k(server: LocalServer) -> None:
    with WindowClient(server.target) as c:
        fields = (Field("ok", "BOOL"), Field("v", "DOUBLE"))
        c.create_stream(StreamSpec("sk_empty", fields, wall_clock=False))
        aggs = (
            Aggregation("d", "distinct", "ok"),
            Aggregation("q", "quantiles", "v"),
            Aggregation("top", "top_k", "ok", {"k": "2"}),
        )
        c.create_window(WindowSpec("sk_empty", "w", aggs, Policy.count(10)))
        assert c.query("sk_empty", "w").values == {"d": 0.0, "q": None, "top": None}
        c.append("sk_empty", {"ts": [1, 2, 3], "ok": [True, False, True], "v": [1.0, 2.0, 3.0]})
        got = c.query("sk_empty", "w").values
        assert got == {
            "d": 2.0,
            "q": [2.0, 3.0, 3.0],  # default fractions 0.5, 0.9, 0.99: exact below k values
            "top": [{"item": True, "count": 2}, {"item": False, "count": 1}],
        }


@pytest.mark.parametrize(
    ("agg", "where", "expected"),
    [
        (Aggregation("q", "quantiles", "latency", {"fractions": "0.5,1.2"}), "params.fractions", "from 0 to 1"),
        (Aggregation("q", "quantiles", "latency", {"fractions": "half"}), "params.fractions", "from 0 to 1"),
        (Aggregation("q", "quantiles", "latency", {"k": "4"}), "params.k", "from 8 to 65535"),
        (Aggregation("q", "quantiles", "page"), "field", "DOUBLE/INT64"),
        (Aggregation("d", "distinct", "user", {"lg_k": "25"}), "params.lg_k", "from 4 to 21"),
        (Aggregation("d", "distinct", ""), "field", "needs a field"),
        (Aggregation("t", "top_k", "page", {"k": "0"}), "params.k", "from 1 to 10000"),
        (Aggregation("t", "top_k", "page", {"k": "500", "lg_map_size": "8"}), "params.lg_map_size", "fewer than k = 500"),
        (Aggregation("t", "top_k", "latency"), "field", "STRING/INT64/BOOL"),
        (Aggregation("t", "top_k", "page", {"n": "3"}), "params", "only ['k', 'lg_map_size']"),
    ],
)  # fmt: skip
def test_bad_params_are_refused_naming_the_param_and_what_was_expected(
    server: LocalServer, agg: Aggregation, where: str, expected: str
) -> None:
    with WindowClient(server.target) as c:
        if "sk_bad" not in {s.spec.name for s in c.list_streams()}:
            make_stream(c, "sk_bad")
        with pytest.raises(InvalidArgumentError) as err:
            c.create_window(WindowSpec("sk_bad", "w", (agg,), Policy.count(10)))
        assert err.value.reason == "INVALID_DEFINITION"
        assert f"spec.aggregations[0].{where}" in str(err.value), err.value
        assert expected in str(err.value), err.value
        assert c.list_windows("sk_bad") == []  # nothing made


def test_slickdeque_refuses_sketches(server: LocalServer) -> None:
    with WindowClient(server.target) as c:
        make_stream(c, "sk_slick")
        with pytest.raises(InvalidArgumentError) as err:
            c.create_window(WindowSpec("sk_slick", "w", AGGS, Policy.count(10), "SLICKDEQUE"))
        assert err.value.reason == "INVALID_DEFINITION"
        assert "users" in str(err.value) and "lat" in str(err.value), err.value
