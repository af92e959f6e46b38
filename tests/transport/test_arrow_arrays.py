"""An Arrow batch into a stream whose windows all keep their state as columns
(``Stream.takes_arrays``): its numbers go from the Arrow buffers to the windows as numpy
arrays, never as Python lists. The same batches as Arrow and as protobuf lists (the list path)
must give the same answers and the same refusals: a real server with ``--columnar-state``,
one stream fed both forms in turn, against the naive oracle of the end-to-end tests; the
lateness rules (REJECT, DROP), non-finite values, ints a DOUBLE field would round, a durable
window's journal replayed after kill -9; and a stream that gains a window lifting rows goes
back to lists."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pyarrow as pa
import pytest

from mtawindows.client import (
    MtaWindowsError,
    Policy,
    Storage,
    StreamSpec,
    WindowClient,
    WindowSpec,
)
from mtawindows.client.errors import from_rpc_error
from mtawindows.server.service.columns import Schema
from mtawindows.server.service.reorder import Reorder
from mtawindows.server.service.state import StreamState
from mtawindows.server.transport.decode import arrow_columns
from mtawindows.testing import LocalServer
from mtawindows.v1 import convert
from mtawindows.v1 import windows_pb2 as pb
from mtawindows.v1 import windows_pb2_grpc as pb_grpc
from mtawindows.v1.types import Field

from .test_columnar_shadow import _check
from .test_columnar_shadow import _run as _shadow_run
from .test_columnar_state import COLUMNAR_AGGS, ON
from .test_service_e2e import AGGS, Oracle, expected, random_batch

pytestmark = [pytest.mark.server, pytest.mark.redis]

FIELDS = (Field("x", "DOUBLE"), Field("k", "INT64"), Field("tag", "STRING"))


def _arrow(batch: dict[str, list[Any]]) -> pa.Table:
    return pa.table(
        {
            "ts": pa.array(batch["ts"], pa.int64()),
            "x": pa.array(batch["x"], pa.float64()),
            "k": pa.array(batch["k"], pa.int64()),
            "tag": pa.array(batch["tag"], pa.string()),
        }
    )


def _said(ex: MtaWindowsError) -> tuple[str, str, list[Any], dict[str, str]]:
    """What a refusal says: its reason, message, violations and metadata."""
    violations = sorted((v.field, v.description) for v in ex.violations)
    return ex.reason, ex.message, violations, dict(ex.metadata)


def _refusal(
    c: WindowClient, stream: str, batch: Any
) -> tuple[str, str, list[Any], dict[str, str]]:
    with pytest.raises(MtaWindowsError) as info:
        c.append(stream, batch, results="per_row")
    return _said(info.value)


def _raw_refusal(
    target: str, batch: dict[str, list[Any]]
) -> tuple[str, str, list[Any], dict[str, str]]:
    """A batch of lists refused by the server, sent as protobuf columns by a raw stub (x as
    INT64 values: the SDK refuses ints a double would round before sending)."""
    kinds = {"ts": "INT64", "x": "INT64", "k": "INT64", "tag": "STRING"}
    request = pb.AppendRequest(
        stream="s",
        columns=[convert.column_to_proto(n, kinds[n], v) for n, v in batch.items()],
        results=pb.PER_ROW,
    )
    with grpc.insecure_channel(target) as ch, pytest.raises(grpc.RpcError) as info:
        pb_grpc.WindowServiceStub(ch).Append(request, timeout=30)
    return _said(from_rpc_error(info.value, target))


def _feed(
    c: WindowClient, oracles: dict[str, Oracle], rng: random.Random, t: int, n: int, where: str
) -> int:
    """``n`` random batches, each as Arrow or as lists in turn, every per-row result against
    the oracle (the shadow tests' run)."""
    return _shadow_run(
        c, oracles, rng, t, n, where, max_rows=60, skip=("sk",),
        form=lambda b, batch: _arrow(batch) if b % 2 == 0 else batch,
    )  # fmt: skip


def test_arrow_and_lists_give_the_same_answers_and_refusals_across_kill_9(
    tmp_path: Path,
) -> None:
    rng = random.Random(2611)
    windows = {
        "c9": (Policy.count(9), lambda p, a: len(a) - len(p) >= 9, Storage("redis")),
        "d7": (Policy.count(7), lambda p, a: len(a) - len(p) >= 7, Storage("redis", durable=True)),
    }
    with LocalServer(tmp_path / "d", env=ON) as srv:
        with srv.client() as c:
            c.create_stream(StreamSpec("s", FIELDS, wall_clock=False))
            oracles = {}
            for name, (policy, pred, storage) in windows.items():
                c.create_window(WindowSpec("s", name, COLUMNAR_AGGS, policy, "AMTA", storage))
                assert c.get_window("s", name).path == "columnar"
                oracles[name] = Oracle(pred)
            t = _feed(c, oracles, rng, 0, 16, "first run")
            before = {n: c.query("s", n) for n in oracles}
            # each refusal the same in both forms, and nothing changed by either
            newest = t
            bad_batches = {
                "a row older than the newest": {
                    "ts": [newest + 1, newest - 5],
                    "x": [1.0, 2.0],
                    "k": [0, 0],
                    "tag": ["a", "b"],
                },
                "out of order within the batch": {
                    "ts": [newest + 5, newest + 9, newest + 7],
                    "x": [1.0, 2.0, 3.0],
                    "k": [0, 0, 0],
                    "tag": ["a", "b", "c"],
                },
                "a NaN": {
                    "ts": [newest + 1, newest + 2],
                    "x": [1.0, float("nan")],
                    "k": [0, 0],
                    "tag": ["a", "b"],
                },
                "an infinity": {
                    "ts": [newest + 1, newest + 2, newest + 3],
                    "x": [1.0, 2.0, float("-inf")],
                    "k": [0, 0, 0],
                    "tag": ["a", "b", "c"],
                },
            }
            for what, bad in bad_batches.items():
                from_lists = _refusal(c, "s", bad)
                from_arrow = _refusal(c, "s", _arrow(bad))
                assert from_arrow == from_lists, (what, from_arrow, from_lists)
            # ints for the DOUBLE field: exact ones taken, one past 2**53 refused, alike
            inexact = {"ts": [newest + 1, newest + 2], "x": [3, 2**53 + 1], "k": [0, 0]}
            inexact["tag"] = ["a", "b"]
            as_arrow = pa.table(
                {
                    "ts": pa.array(inexact["ts"], pa.int64()),
                    "x": pa.array(inexact["x"], pa.int64()),
                    "k": pa.array(inexact["k"], pa.int64()),
                    "tag": pa.array(inexact["tag"]),
                }
            )
            from_lists = _raw_refusal(srv.target, inexact)  # the SDK would refuse it first
            assert from_lists[0] == "BAD_VALUES" and "9007199254740993" in from_lists[1]
            assert _refusal(c, "s", as_arrow) == from_lists
            for n, q in before.items():
                got = c.query("s", n)
                assert (got.size, got.values) == (q.size, q.values), n
            exact = as_arrow.set_column(1, "x", pa.array([3, 2**53], pa.int64()))
            res = c.append("s", exact, results="per_row")
            for name, oracle in oracles.items():
                per_row = []
                for i in range(2):
                    oracle.push({"ts": newest + 1 + i, "x": float([3, 2**53][i]), "k": 0})
                    oracle.rows[-1]["tag"] = ["a", "b"][i]
                    want = expected(oracle.rows) | {"__size": len(oracle.rows)}
                    per_row.append({k: v for k, v in want.items() if k != "sk"})
                _check(res, name, per_row, "exact ints")
            t = newest + 2
            t = _feed(c, oracles, rng, t, 6, "after the refusals")
        srv.kill()  # kill -9: the durable window replays its journal (Arrow batches in it)
        srv.start()
        with srv.client() as c:
            oracles = {"d7": oracles["d7"]}
            _feed(c, oracles, rng, t, 6, "after kill -9")


def test_dropped_late_rows_are_the_same_in_both_forms() -> None:
    """late_policy DROP: rows older than the newest before them leave the batch (counted),
    whichever form it came in; the rest as the oracle says."""
    rng = random.Random(7)
    with LocalServer(env=ON) as srv, srv.client() as c:
        for s in ("a", "l", "r"):
            c.create_stream(StreamSpec(s, FIELDS, wall_clock=False, late_policy="DROP"))
            c.create_window(WindowSpec(s, "w", COLUMNAR_AGGS, Policy.count(12)))
        oracle = {s: Oracle(lambda p, a: len(a) - len(p) >= 12) for s in ("a", "l")}
        newest: int | None = None
        applied = 0  # rows stream "r" took so far
        for b in range(12):
            n = rng.randint(1, 30)
            base = 0 if newest is None else newest
            ts = [base + rng.randint(-6, 20) for _ in range(n)]  # late rows, ties, bursts
            batch = {
                "ts": ts,
                "x": [float(rng.randint(1, 9)) for _ in ts],  # > 0: a geometric mean
                "k": [rng.randint(0, 3) for _ in ts],
                "tag": [rng.choice("xyz") for _ in ts],
            }
            kept = []
            for i, v in enumerate(ts):
                if newest is None or v >= newest:
                    kept.append(i)
                    newest = v
            for s, form in (("a", _arrow(batch)), ("l", batch)):
                res = c.append(s, form, results="per_row")
                assert (res.rows_applied, res.rows_late) == (len(kept), n - len(kept)), (s, b)
                # each result's request row, when some rows left (as Arrow results too)
                assert res.row_positions == (kept if len(kept) < n else None), (s, b)
                per_row = []
                for i in kept:
                    oracle[s].push({k: batch[k][i] for k in batch})
                    want = expected(oracle[s].rows) | {"__size": len(oracle[s].rows)}
                    per_row.append({k: v for k, v in want.items() if k != "sk"})
                _check(res, "w", per_row, f"{s} batch {b}")
            # and as Arrow results: "_row" the request's row of each, sizes as the oracle's
            res = c.append("r", _arrow(batch), results="per_row", arrow=True)
            table = res.row_tables["w"]
            assert table.column("_row").to_pylist() == kept, b
            assert res.row_positions == (kept if len(kept) < n else None), b
            sizes = [min(12, applied + j + 1) for j in range(len(kept))]
            assert table.column("_size").to_pylist() == sizes, b
            applied += len(kept)
        assert c.get_stream("a").rows_late == c.get_stream("l").rows_late > 0


def test_a_window_that_lifts_rows_sends_the_stream_back_to_lists() -> None:
    """A stream whose windows all keep columns takes arrays; a window that lifts rows (an
    INT64 sum keeps its engine) makes it take lists again, and both windows answer right."""
    with LocalServer(env=ON) as srv, srv.client() as c:
        c.create_stream(StreamSpec("s", FIELDS, wall_clock=False))
        aggs = tuple(a for a in COLUMNAR_AGGS if a.name in ("n", "mx", "sx"))
        c.create_window(WindowSpec("s", "col", aggs, Policy.count(50)))
        rng = random.Random(3)
        batch, t = random_batch(rng, 0, 40)
        c.append("s", _arrow(batch))
        sums = tuple(a for a in AGGS if a.name in ("n", "sk"))
        c.create_window(WindowSpec("s", "eng", sums, Policy.count(50)))
        assert "columnar" not in c.get_window("s", "eng").storage  # its state: the engine
        more, t = random_batch(rng, t, 30)
        c.append("s", _arrow(more))
        rows = [dict(zip(more, v, strict=True)) for v in zip(*more.values(), strict=True)]
        got = c.query("s", "eng")
        assert got.size == 30 and got.values["sk"] == sum(r["k"] for r in rows)
        every = [dict(zip(batch, v, strict=True)) for v in zip(*batch.values(), strict=True)]
        got = c.query("s", "col")
        assert got.size == 50
        assert got.values["mx"] == max(r["x"] for r in (every + rows)[-50:])


# --------------------------------------------------------------------------- in process


def test_arrow_numbers_decode_as_arrays_only_when_asked() -> None:
    table = pa.table(
        {
            "ts": pa.array([1, 2], pa.timestamp("ns")),
            "x": pa.array([1.5, 2.5]),
            "k": pa.array([1, 2], pa.int32()),
            "tag": pa.array(["a", "b"]),
            "ok": pa.array([True, False]),
        }
    )
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    payload = sink.getvalue().to_pybytes()
    as_lists = arrow_columns(payload, 10)
    as_arrays = arrow_columns(payload, 10, arrays=True)
    assert all(isinstance(v, list) for _, v in as_lists.values())
    for name in ("ts", "x", "k"):
        kind, values = as_arrays[name]
        assert isinstance(values, np.ndarray) and kind == as_lists[name][0]
        assert values.tolist() == as_lists[name][1]
    assert as_arrays["tag"] == as_lists["tag"] and as_arrays["ok"] == as_lists["ok"]


def test_the_schema_and_the_lateness_rule_read_arrays_as_lists() -> None:
    """What the schema's checks and the lateness rule make of a column is the same for its
    list and its array (random columns with NaN, infinities, big ints, late rows)."""
    rng = random.Random(11)
    spec = StreamSpec("s", (Field("x", "DOUBLE"), Field("i", "INT64")), wall_clock=False)
    schema = Schema(spec)
    specials = [float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1e308]
    for _ in range(300):
        n = rng.randint(0, 12)
        xs = [rng.choice(specials) if rng.random() < 0.1 else rng.uniform(-9, 9) for _ in range(n)]
        ints = [rng.choice((3, -(2**53), 2**53 + 1, 2**62, 7)) for _ in range(n)]
        ts = [rng.randint(0, 30) for _ in range(n)]
        for x_kind, x_values in (("DOUBLE", xs), ("INT64", ints)):
            cols = {"ts": ("TIMESTAMP", ts), "x": (x_kind, x_values), "i": ("INT64", ints)}
            arrs = {k: (kind, np.asarray(v)) for k, (kind, v) in cols.items()}
            for form in ("lists", "arrays"):
                try:
                    got = schema.decode(cols if form == "lists" else arrs)
                    out = ("ok", got[0], [list(map(float, c)) for c in got[1]])
                except Exception as ex:
                    out = ("refused", type(ex).__name__, str(ex))
                if form == "lists":
                    want = out
                else:
                    assert out == want or (out[0] == "ok" and _same_floats(out[2], want[2])), (
                        cols,
                        out,
                        want,
                    )
        for policy in ("REJECT", "DROP"):
            reorder = Reorder(StreamSpec("s", (), wall_clock=False, late_policy=policy))
            newest = rng.choice((None, 0, 10, 31))
            answers = []
            for form in (ts, np.asarray(ts, dtype=np.int64)):
                st = StreamState()
                st.newest = newest
                try:
                    answers.append(reorder.admit(st, form))
                except Exception as ex:
                    answers.append(("refused", str(ex)))
            assert answers[0] == answers[1], (policy, newest, ts, answers)


def _same_floats(a: list[list[float]], b: list[list[float]]) -> bool:
    return all(
        len(x) == len(y) and all(u == v or (u != u and v != v) for u, v in zip(x, y, strict=True))
        for x, y in zip(a, b, strict=True)
    )
