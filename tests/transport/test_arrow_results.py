"""Per-row results as Arrow IPC (issue 22): ``append(..., results="per_row", arrow=True)``
gives each window's results as a ``pyarrow.Table`` (``AppendResult.row_tables``), sent by the
server as one Arrow IPC stream per window (``AppendRequest.arrow_results``).

Checked through a real server: twin streams take the same random batches, one answered as
protobuf columns, one as Arrow; every entry of the Arrow table equals the columns' entry and the
naive oracle's (every built-in monoid: struct outputs as struct columns, timestamps as
``timestamp[ns, UTC]``, nulls where the output has no value), for windows the columnar shadow
answers and one the engine answers; ``_size`` and ``_row`` (late rows dropped: the rows that
have an entry) as the columns' sizes and row positions; and the refusals of a wrong request.
"""

from __future__ import annotations

import random
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from mtawindows.client import Field, Policy, Storage, StreamSpec, WindowClient, WindowSpec
from mtawindows.testing import LocalServer

from .test_columnar_shadow import WINDOWS, _check
from .test_service_e2e import AGGS, Oracle, expected, make_stream, random_batch

pytestmark = [pytest.mark.server, pytest.mark.redis]


def flatten(table: pa.Table) -> dict[str, list[Any]]:
    """An Arrow per-row table in the columns' form: structs split into ``name.part``,
    timestamps as int nanoseconds, ``_size`` as ``__size`` (``_row`` left out)."""
    out: dict[str, list[Any]] = {}
    for field, col in zip(table.schema, table.columns, strict=True):
        if field.name == "_row":
            continue
        if field.name == "_size":
            out["__size"] = col.to_pylist()
            continue
        if pa.types.is_struct(field.type):
            for i in range(field.type.num_fields):
                part = field.type.field(i)
                out[f"{field.name}.{part.name}"] = _plain(part.type, col.combine_chunks().field(i))
            # a struct is null as a whole where its parts are
            nulls = col.is_null().to_pylist()
            for i in range(field.type.num_fields):
                key = f"{field.name}.{field.type.field(i).name}"
                out[key] = [None if z else v for v, z in zip(out[key], nulls, strict=True)]
            continue
        out[field.name] = _plain(field.type, col)
    return out


def _plain(t: pa.DataType, col: Any) -> list[Any]:
    if pa.types.is_timestamp(t):
        assert t == pa.timestamp("ns", tz="UTC"), t
        return col.cast(pa.int64()).to_pylist()  # type: ignore[no-any-return]
    return col.to_pylist()  # type: ignore[no-any-return]


def test_arrow_tables_equal_the_columns_and_the_oracle(tmp_path: Path) -> None:
    rng = random.Random(2204)
    with LocalServer(tmp_path / "d") as srv, srv.client() as c:
        oracles = {}
        for s in ("cols", "arrow"):
            make_stream(c, s)
            for name, policy, pred, storage in WINDOWS:
                c.create_window(WindowSpec(s, name, AGGS, policy, "AMTA", storage))
                if s == "arrow":
                    oracles[name] = Oracle(pred)
        t = 0
        for b in range(14):
            batch, t = random_batch(rng, t, rng.randint(1, 30))
            want = c.append("cols", batch, results="per_row")
            got = c.append("arrow", batch, results="per_row", arrow=True)
            assert got.rows_applied == want.rows_applied == len(batch["ts"])
            assert got.row_results == {} and set(got.row_tables) == set(want.row_results)
            rows = [dict(zip(batch, v, strict=True)) for v in zip(*batch.values(), strict=True)]
            for name, table in got.row_tables.items():
                assert isinstance(table, pa.Table)
                assert table.column("_row").to_pylist() == list(range(len(rows)))
                assert table.schema.field("_size").type == pa.int64()
                assert table.schema.field("n").type == pa.int64()
                assert table.schema.field("sx").type == pa.float64()
                assert table.schema.field("first").type == pa.string()
                assert table.schema.field("tsmax").type == pa.timestamp("ns", tz="UTC")
                amax = table.schema.field("amax").type
                assert pa.types.is_struct(amax) and [amax.field(i).name for i in range(2)] == [
                    "value",
                    "key",
                ]
                flat = flatten(table)
                assert flat == dict(want.row_results[name]), (b, name)
                per_row = []
                for row in rows:
                    oracles[name].push(row)
                    per_row.append(expected(oracles[name].rows))
                _check(type("R", (), {"row_results": {name: flat}})(), name, per_row, f"b{b}")
        # the shadow answered the count and time-range windows, the engine the bounded sum,
        # and GetWindow says which path each takes and why
        assert c.get_window("arrow", "c7").stats["columnar_batches"] == 14
        assert c.get_window("arrow", "c7").path == "columnar"
        s20 = c.get_window("arrow", "s20")
        assert s20.stats["columnar_rows"] == -1
        assert s20.path == "general: its policy is not a count or a time range"


def test_late_rows_of_a_keyed_stream_have_no_entry_and_row_says_which_did(
    tmp_path: Path,
) -> None:
    fields = (Field("x", "DOUBLE"), Field("host", "STRING"))
    with LocalServer(tmp_path / "d") as srv, srv.client() as c:
        for s in ("cols", "arrow"):
            c.create_stream(StreamSpec(s, fields, key="host", late_policy="DROP", wall_clock=False))
            c.create_window(
                WindowSpec(
                    s,
                    "w",
                    (*AGGS[:2], AGGS[4]),
                    Policy.time_range(timedelta(seconds=3)),
                    "AMTA",
                    Storage("redis"),
                )
            )
        first = {"ts": [5, 6, 9], "host": ["a", "b", "a"], "x": [1.0, 2.0, 3.0]}
        late = {"ts": [4, 10, 5, 11], "host": ["a", "a", "b", "b"], "x": [9.0, 4.0, 9.0, 5.0]}
        for batch in (first, late):
            batch = {**batch, "ts": [t * 1_000_000_000 for t in batch["ts"]]}
            want = c.append("cols", batch, results="per_row")
            got = c.append("arrow", batch, results="per_row", arrow=True)
            assert got.rows_late == want.rows_late
            table = got.row_tables["w"]
            positions = want.row_positions or list(range(len(batch["ts"])))
            assert table.column("_row").to_pylist() == positions
            assert flatten(table) == dict(want.row_results["w"])
        assert got.rows_late == 2 and table.column("_row").to_pylist() == [1, 3]
        assert c.get_window("arrow", "w").path.startswith("general: a keyed stream's windows")
        # key a holds 9 s and 10 s; key b only 11 s (6 s is 3 s older or more)
        assert table.column("n").to_pylist() == [2, 1]
        assert table.column("mx").to_pylist() == [4.0, 5.0]


def test_arrow_needs_per_row_results_and_a_bool(mtawindows_server: LocalServer) -> None:
    with mtawindows_server.client() as client:
        _refusals(client)


def _refusals(client: WindowClient) -> None:
    make_stream(client, "s")
    batch = {"ts": [1], "x": [1.0], "k": [1], "tag": ["a"]}
    with pytest.raises(ValueError, match='results="per_row"'):
        client.append("s", batch, results="final", arrow=True)
    with pytest.raises(TypeError, match="arrow: expected True or False"):
        client.append("s", batch, results="per_row", arrow="yes")  # type: ignore[arg-type]
    assert client.get_stream("s").rows_appended == 0  # nothing was sent
    # FINAL and NONE answers are the same with or without it on the wire (ignored there)
    res = client.append("s", batch, results="final")
    assert res.row_tables == {} and res.row_results == {}


def test_one_large_arrow_batch_answers_as_its_pieces(tmp_path: Path) -> None:
    """150,000 rows in one Arrow Append (kept as a view of the request's buffer, applied by the
    windows' columnar state in chunks of 65,536 rows, answered as chunked Arrow) against the
    same rows in 10,000-row Appends into a twin stream: every per-row result equal, every
    built-in (struct, text and timestamp outputs), a count and a time-range window in Redis."""
    import numpy as np

    n = 150_000
    rng = np.random.default_rng(7)
    ts = np.cumsum(rng.integers(0, 3, n)).astype(np.int64)
    rows = pa.table(
        {
            "ts": pa.array(ts, pa.int64()),
            "x": rng.integers(1, 50, n).astype(float),  # > 0: a geometric mean
            "k": rng.integers(0, 9, n),
            "tag": pa.array([f"t{i % 13}" for i in range(n)]),
        }
    )
    # the built-ins whose windows keep their state as columns (not a count window holding
    # the newest timestamp, nor an INT64 sum: those keep their engine)
    aggs = tuple(a for a in AGGS if a.name not in ("tsmax", "sk"))
    windows = (
        ("c", Policy.count(20_000)),
        ("t", Policy.time_range(timedelta(microseconds=30))),  # 30,000 ns: ~30,000 rows
    )
    with LocalServer(tmp_path / "d") as srv, srv.client(timeout=120) as c:
        for s in ("whole", "pieces"):
            make_stream(c, s)
            for name, policy in windows:
                c.create_window(WindowSpec(s, name, aggs, policy, "AMTA", Storage("redis")))
        got = c.append("whole", rows, results="per_row", arrow=True)
        parts = [
            c.append("pieces", rows.slice(a, 10_000), results="per_row", arrow=True)
            for a in range(0, n, 10_000)
        ]
        assert got.rows_applied == n
        for name, _ in windows:
            assert "columnar" in c.get_window("whole", name).storage
            whole = got.row_tables[name]
            want = pa.concat_tables([p.row_tables[name] for p in parts])
            assert whole.num_rows == want.num_rows == n
            for col in whole.column_names:
                if col == "_row":  # each piece counts its own rows
                    assert whole.column(col).to_pylist() == list(range(n))
                    continue
                if col in ("mean", "var", "sd", "gm"):  # rounding: the blocks differ
                    a = whole.column(col).to_numpy(zero_copy_only=False)
                    b = want.column(col).to_numpy(zero_copy_only=False)
                    assert np.allclose(a, b, rtol=1e-9, atol=0, equal_nan=True), (name, col)
                    continue
                assert whole.column(col).equals(want.column(col)), (name, col)
            final, pieces = c.query("whole", name).values, c.query("pieces", name).values
            assert final.keys() == pieces.keys()
            for k, v in final.items():
                if k in ("mean", "var", "sd", "gm"):
                    assert v == pytest.approx(pieces[k], rel=1e-9), (name, k)
                else:
                    assert v == pieces[k], (name, k)
