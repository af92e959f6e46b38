"""Compute (issue 21 item 6, issue 22 item 1): a stream's windows' per-row results over rows of
many keys sent whole, through a real server, against what the row-by-row engine gives the same
rows appended to a fresh keyed stream with PER_ROW results (every monoid, a count and a time
range, first/last/arg-* for order); context rows; refusals that name what was wrong and change
nothing; the stream it reads definitions from stays as it was."""

from __future__ import annotations

import math
import random
import uuid
from datetime import timedelta
from typing import Any

import pyarrow as pa
import pytest

from mtawindows.client import (
    FailedPreconditionError,
    Field,
    InvalidArgumentError,
    NotFoundError,
    Policy,
    StreamSpec,
    WindowClient,
    WindowSpec,
)
from mtawindows.v1.reasons import Reason

from .test_service_e2e import AGGS, S

pytestmark = [pytest.mark.server, pytest.mark.redis]

FIELDS = (Field("x", "DOUBLE"), Field("k", "INT64"), Field("tag", "STRING"))
WINDOWS = {
    "c5": Policy.count(5),
    "t3": Policy.time_range(timedelta(seconds=3)),
    "t0": Policy.time_range(timedelta(milliseconds=1)),  # ties only
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from mtawindows.testing import LocalServer

    with LocalServer(tmp_path_factory.mktemp("srv")) as srv:
        yield srv


@pytest.fixture
def client(server: Any) -> Any:
    with WindowClient(server.target, timeout=60) as c:
        yield c


def _stream(c: WindowClient, keyed: bool = True) -> str:
    name = f"cmp{uuid.uuid4().hex[:10]}"
    fields = (Field("host", "STRING"), *FIELDS)
    c.create_stream(StreamSpec(name, fields, key="host" if keyed else "", wall_clock=False))
    for w, policy in WINDOWS.items():
        c.create_window(WindowSpec(name, w, AGGS, policy))
    return name


def _rows(rng: random.Random, keys: int) -> dict[str, list[Any]]:
    """Each key's rows one run (runs in random key order), timestamps rising within a run
    (ties, gaps), values in quarters and small ints: every sum exact in any order."""
    cols: dict[str, list[Any]] = {"host": [], "ts": [], "x": [], "k": [], "tag": []}
    names = [f"h{i}" for i in range(keys)]
    rng.shuffle(names)
    for h in names:
        t = rng.randint(0, 50) * S
        for _ in range(rng.choice((1, 2, 7, rng.randint(1, 40)))):
            t += rng.choice((0, 0, S // 2, S, 2 * S, 5 * S))
            cols["host"].append(h)
            cols["ts"].append(t)
            cols["x"].append(rng.randint(1, 24) / 4)
            cols["k"].append(rng.randint(-3, 3))
            cols["tag"].append(rng.choice("abcde"))
    return cols


def _table(cols: dict[str, list[Any]]) -> pa.Table:
    return pa.table(
        {
            "host": pa.array(cols["host"], pa.string()),
            "ts": pa.array(cols["ts"], pa.timestamp("ns", tz="UTC")),
            "x": pa.array(cols["x"], pa.float64()),
            "k": pa.array(cols["k"], pa.int64()),
            "tag": pa.array(cols["tag"], pa.string()),
        }
    )


def _same(got: Any, want: Any, where: Any) -> None:
    if isinstance(want, float) and isinstance(got, float):
        assert math.isclose(got, want, rel_tol=1e-12, abs_tol=1e-12), (where, got, want)
    elif isinstance(want, dict):
        assert isinstance(got, dict) and set(got) == set(want), (where, got, want)
        for p in want:
            _same(got[p], want[p], (where, p))
    else:
        assert got == want, (where, got, want)


def _compare(got: pa.Table, want: pa.Table, skip: int = 0) -> None:
    assert got.column_names == want.column_names
    assert got.num_rows == want.num_rows - skip
    assert got.column("_row").to_pylist() == list(range(skip, want.num_rows))
    for name in got.column_names:
        if name == "_row":
            continue
        g = got.column(name).to_pylist()
        w = want.column(name).to_pylist()[skip:]
        for i, (a, b) in enumerate(zip(g, w, strict=True)):
            _same(a, b, (name, i + skip))


@pytest.mark.parametrize("seed", range(6))
def test_compute_gives_what_appending_to_a_fresh_keyed_stream_gives(
    client: WindowClient, seed: int
) -> None:
    rng = random.Random(seed)
    cols = _rows(rng, rng.choice((1, 3, 30)))
    compute_from = _stream(client)
    before = client.get_stream(compute_from)
    got = client.compute(compute_from, _table(cols))
    fresh = _stream(client)
    res = client.append(fresh, cols, results="per_row", arrow=True)
    assert set(got) == set(WINDOWS)
    for w in WINDOWS:
        _compare(got[w], res.row_tables[w])
    after = client.get_stream(compute_from)
    assert (
        (after.rows_appended, after.batches_appended)
        == (
            before.rows_appended,
            before.batches_appended,
        )
        == (0, 0)
    )
    assert client.list_keys(compute_from).keys == []
    # context rows: the first key's first rows sent again only to fill its window
    first = cols["host"][0]
    run = cols["host"].count(first)
    skip = rng.randint(0, run)
    part = client.compute(compute_from, _table(cols), windows=["t3"], context_rows=skip)
    assert set(part) == {"t3"}
    _compare(part["t3"], res.row_tables["t3"], skip)


def test_an_unkeyed_stream_is_one_window_and_a_key_column_splits_it(client: WindowClient) -> None:
    rng = random.Random(7)
    cols = _rows(rng, 1)
    name = _stream(client, keyed=False)
    got = client.compute(name, _table(cols))
    fresh = _stream(client, keyed=False)
    res = client.append(fresh, {k: v for k, v in cols.items()}, results="per_row", arrow=True)
    for w in WINDOWS:
        _compare(got[w], res.row_tables[w])
    # by a key column: the same as the keyed stream's
    many = _rows(rng, 12)
    by_key = client.compute(name, _table(many), key_column="host")
    keyed = _stream(client)
    res = client.append(keyed, many, results="per_row", arrow=True)
    for w in WINDOWS:
        _compare(by_key[w], res.row_tables[w])


def test_refusals_name_what_was_wrong(client: WindowClient) -> None:
    name = _stream(client)
    good = _table(_rows(random.Random(3), 4))
    with pytest.raises(NotFoundError) as nf:
        client.compute("no-such-stream", good)
    assert nf.value.reason == Reason.STREAM_NOT_FOUND
    with pytest.raises(NotFoundError) as nf:
        client.compute(name, good, windows=["nope"])
    assert nf.value.reason == Reason.WINDOW_NOT_FOUND
    client.create_window(WindowSpec(name, "bounded", AGGS[:2], Policy.bounded_sum("x", 10.0)))
    with pytest.raises(FailedPreconditionError) as fp:
        client.compute(name, good)
    assert fp.value.reason == Reason.NOT_COLUMNAR
    assert "bounded" in str(fp.value)
    w = ["c5"]
    apart = _table(
        {"host": ["a", "b", "a"], "ts": [1, 2, 3], "x": [1.0] * 3, "k": [1] * 3, "tag": ["t"] * 3}
    )
    with pytest.raises(InvalidArgumentError) as bad:
        client.compute(name, apart, windows=w)
    assert bad.value.reason == Reason.BAD_VALUES and "rows apart" in str(bad.value)
    back = _table(
        {"host": ["a", "a"], "ts": [5, 3], "x": [1.0] * 2, "k": [1] * 2, "tag": ["t"] * 2}
    )
    with pytest.raises(InvalidArgumentError, match="backwards"):
        client.compute(name, back, windows=w)
    nan = _table({"host": ["a"], "ts": [1], "x": [float("nan")], "k": [1], "tag": ["t"]})
    with pytest.raises(InvalidArgumentError) as bad:
        client.compute(name, nan, windows=w)
    assert bad.value.reason == Reason.BAD_VALUES and "arrow_ipc.x[0]" in str(bad.value)
    wrong = good.set_column(2, "x", pa.array(["1"] * good.num_rows))
    with pytest.raises(InvalidArgumentError) as bad:
        client.compute(name, wrong, windows=w)
    assert bad.value.reason == Reason.SCHEMA_MISMATCH and "expected DOUBLE" in str(bad.value)
    with pytest.raises(InvalidArgumentError) as bad:
        client.compute(name, good.drop_columns(["x"]), windows=w)
    assert bad.value.reason == Reason.SCHEMA_MISMATCH and "missing column 'x'" in str(bad.value)
    with pytest.raises(InvalidArgumentError, match="context_rows"):
        client.compute(name, good, windows=w, context_rows=good.num_rows + 1)
    with pytest.raises(ValueError, match="context_rows"):
        client.compute(name, good, windows=w, context_rows=-1)
    with pytest.raises(TypeError, match="pyarrow Table"):
        client.compute(name, {"x": [1]}, windows=w)
    # nothing changed, the server still answers
    assert client.get_stream(name).rows_appended == 0
    assert set(client.compute(name, good, windows=w)) == {"c5"}


def test_a_large_call_of_many_keys(client: WindowClient) -> None:
    """200,000 rows of 20,000 keys in one call: sizes and sums per key as a fold says."""
    name = _stream(client)
    keys, per = 20_000, 10
    cols = {
        "host": [f"h{i}" for i in range(keys) for _ in range(per)],
        "ts": [j * S for _ in range(keys) for j in range(per)],
        "x": [float((i * 7 + j) % 13 + 1) for i in range(keys) for j in range(per)],
        "k": [1] * (keys * per),
        "tag": ["t"] * (keys * per),
    }
    got = client.compute(name, _table(cols), windows=["t3"])["t3"]
    sizes = got.column("_size").to_pylist()
    sx = got.column("sx").to_pylist()
    assert sizes == [min(j, 2) + 1 for _ in range(keys) for j in range(per)]
    for i in (0, 1, 9_999, keys - 1):
        xs = cols["x"][i * per : (i + 1) * per]
        assert sx[i * per : (i + 1) * per] == [sum(xs[max(0, j - 2) : j + 1]) for j in range(per)]


def test_what_an_outsider_found(client: WindowClient) -> None:
    """Timestamps of one key spanning all of int64, a dictionary (pandas category) key
    column, an empty request, keys a keyed stream refuses: each as Append into a fresh
    keyed stream gives, or refused as it refuses them."""
    name = _stream(client)
    wide = {
        "host": ["a", "a", "b"],
        "ts": [-(2**63) + 1, 2**63 - 1, 0],
        "x": [1.0, 2.0, 3.0],
        "k": [1, 2, 3],
        "tag": ["t", "u", "v"],
    }
    table = pa.table(
        {
            "host": wide["host"],
            "ts": pa.array(wide["ts"], pa.int64()),
            "x": wide["x"],
            "k": wide["k"],
            "tag": wide["tag"],
        }
    )
    got = client.compute(name, table)
    fresh = _stream(client)
    res = client.append(fresh, table, results="per_row", arrow=True)
    for w in WINDOWS:
        _compare(got[w], res.row_tables[w])
    assert got["t3"].column("n").to_pylist() == [1, 1, 1]
    # a dictionary-encoded key column: its values are the keys
    coded = table.set_column(0, "host", table.column("host").dictionary_encode())
    again = client.compute(name, coded)
    for w in WINDOWS:
        _compare(again[w], res.row_tables[w])
    # no rows: empty tables of the outputs' types
    empty = client.compute(name, table.slice(0, 0))
    assert {w: t.num_rows for w, t in empty.items()} == dict.fromkeys(WINDOWS, 0)
    assert empty["c5"].schema.field("n").type == pa.int64()
    # keys a keyed stream refuses
    for bad, what in (("", "at least one character"), ("x" * 1025, "at most 1024 bytes")):
        keys = table.set_column(0, "host", pa.array(["a", bad, bad]))
        with pytest.raises(InvalidArgumentError, match=what) as err:
            client.compute(name, keys, windows=["c5"])
        assert err.value.reason == Reason.BAD_VALUES and "arrow_ipc.host[1]" in str(err.value)
    with pytest.raises(ValueError, match="context_rows"):
        client.compute(name, table, context_rows=2**63)


def test_a_reply_over_the_message_limit_is_refused_by_name(tmp_path: Any) -> None:
    """A Compute whose results would pass --max-message-mb: RESOURCE_EXHAUSTED
    MESSAGE_TOO_LARGE, and the server goes on; an Append whose per-row results would: the
    same reason, saying the batch was applied (metadata applied=true)."""
    from mtawindows.client import ResourceExhaustedError
    from mtawindows.testing import LocalServer

    with LocalServer(tmp_path, "--max-message-mb", "1") as srv, WindowClient(srv.target) as c:
        name = _stream(c)
        n = 600
        rows = {
            "host": ["a"] * n,
            "ts": [i * S for i in range(n)],
            "x": [1.0] * n,
            "k": [1] * n,
            "tag": ["t" * 1500] * n,  # first/last of tag: 900 KB a column
        }
        with pytest.raises(ResourceExhaustedError) as err:
            c.compute(name, _table(rows), windows=["c5"])
        assert err.value.reason == Reason.MESSAGE_TOO_LARGE
        assert "send fewer rows per call" in str(err.value)
        assert set(c.compute(name, _table(rows).slice(0, 10), windows=["c5"])) == {"c5"}
        with pytest.raises(ResourceExhaustedError) as err:
            c.append(name, rows, results="per_row", windows=["c5"], arrow=True)
        assert err.value.reason == Reason.MESSAGE_TOO_LARGE
        assert err.value.metadata["applied"] == "true" and "was applied" in str(err.value)
        assert c.get_stream(name).rows_appended == n
