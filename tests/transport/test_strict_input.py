"""Strict input against a real server (issue 13, parts 4 and 6): authentication fails closed,
internal errors carry an id and never the exception's text, and every out-of-bounds input
(non-finite values, unknown enum numbers, durations, policy numbers, lengths, list sizes) is
refused as INVALID_ARGUMENT with its reason and field, before anything changes.

Each refusal is checked three ways: the status code, the ErrorInfo reason (never the message
text, except to prove what it must not carry) and the server's state before == after (every
stream's counters, every window's result, size, sequence and newest timestamp, the latest
sequence ReadResults reports).
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from mtawindows.client import (
    Aggregation,
    Field,
    MtaWindowsError,
    OutputSpec,
    Policy,
    Storage,
    StreamSpec,
    WindowClient,
    WindowSpec,
)
from mtawindows.client.errors import from_rpc_error
from mtawindows.testing import LocalServer, free_port, mtawindows_command
from mtawindows.v1 import convert
from mtawindows.v1 import windows_pb2 as pb
from mtawindows.v1.types import MAX_DURATION, SpecError

pytestmark = [pytest.mark.server, pytest.mark.redis]

AGGS = (Aggregation("n", "count"), Aggregation("s", "sum", "x"), Aggregation("m", "max", "x"))
STREAMS = ("s", "b")
LONG = "a" * 100_000  # far past every limit, and past gRPC's 16 KiB metadata limit if echoed
HUGE = "n" * 1_000_000  # the 10^6-character name


# --------------------------------------------------------------------------- helpers


def rpc(call: Callable[[], Any]) -> Any:
    """A raw stub call; its failure as the SDK's typed error."""
    try:
        return call()
    except grpc.RpcError as err:
        raise from_rpc_error(err) from None


def snapshot(c: WindowClient, streams: tuple[str, ...] = STREAMS) -> dict[Any, Any]:
    """Everything a refusal must leave as it was."""
    out: dict[Any, Any] = {"streams": sorted(s.spec.name for s in c.list_streams())}
    for name in streams:
        s = c.get_stream(name)
        out[name] = (
            s.rows_appended,
            s.rows_late,
            s.batches_appended,
            s.batches_duplicate,
            s.newest_timestamp,
            s.rows_buffered,
            sorted(s.windows),
        )
        for w in s.windows:
            r = c.query(name, w)
            _, latest = c.read_results(name, w)
            out[name, w] = (r.values, r.size, r.sequence, r.timestamp, latest)
    return out


def refused(
    server: LocalServer,
    c: WindowClient,
    action: Callable[[], Any],
    reason: str,
    code: str = "INVALID_ARGUMENT",
    streams: tuple[str, ...] = STREAMS,
) -> MtaWindowsError:
    """Run ``action``: it must fail with ``code`` and ``reason`` and change nothing."""
    before = snapshot(c, streams)
    with pytest.raises(MtaWindowsError) as info:
        action()
    e = info.value
    assert (e.code, e.reason) == (code, reason), e
    assert server.health() == "SERVING"
    assert snapshot(c, streams) == before
    return e


def fields_of(e: MtaWindowsError) -> list[str]:
    return [v.field for v in e.violations]


def no_long_echo(e: MtaWindowsError) -> None:
    """The error echoes at most ~64 characters of any input and stays small."""
    text = " ".join([e.message, *(f"{v.field} {v.description}" for v in e.violations)])
    text += " ".join(e.metadata.values())
    assert not re.search(r"(.)\1{80}", text), text[:300]
    assert len(e.message) <= 1100


def columns(**cols: tuple[str, list[Any]]) -> list[pb.Column]:
    out = []
    for name, (kind, values) in cols.items():
        col = pb.Column(name=name)
        getattr(col, kind).values.extend(values)
        out.append(col)
    return out


def row_s(t: int, x: float = 1.0) -> list[pb.Column]:
    return columns(
        ts=("timestamps", [t]), x=("doubles", [x]), k=("ints", [1]), tag=("strings", ["a"])
    )


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    with LocalServer(tmp_path_factory.mktemp("strict")) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server: LocalServer) -> Iterator[WindowClient]:
    with WindowClient(server.target, timeout=120) as c:
        fields = (Field("x", "DOUBLE"), Field("k", "INT64"), Field("tag", "STRING"))
        c.create_stream(StreamSpec("s", fields, wall_clock=False))
        c.create_window(WindowSpec("s", "w", AGGS, Policy.count(100)))
        c.create_window(WindowSpec("s", "wm", AGGS, Policy.count(3), storage=Storage("memory")))
        c.append(
            "s",
            {"ts": [1, 2, 3], "x": [1.0, 5.0, 2.0], "k": [1, 2, 3], "tag": ["a", "b", "c"]},
            producer_id="p",
            sequence=1,
        )
        c.create_stream(
            StreamSpec("b", (Field("x", "DOUBLE"), Field("k", "INT64")), wall_clock=False)
        )
        c.create_window(WindowSpec("b", "bx", AGGS, Policy.bounded_sum("x", 10.0)))
        bk = (Aggregation("n", "count"), Aggregation("sk", "sum", "k"))
        c.create_window(WindowSpec("b", "bk", bk, Policy.bounded_sum("k", 10)))
        c.append("b", {"ts": [1, 2], "x": [4.0, 5.0], "k": [3, 4]})
        yield c


@pytest.fixture
def stub(client: WindowClient) -> Any:
    return client.stub


# --------------------------------------------------------------------------- non-finite values


@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan], ids=["+inf", "-inf", "nan"])
def test_non_finite_values_are_refused_in_a_double_field(
    server: LocalServer, client: WindowClient, bad: float
) -> None:
    batch = {"ts": [10, 11], "x": [1.0, bad], "k": [1, 2], "tag": ["a", "b"]}
    e = refused(server, client, lambda: client.append("s", batch), "BAD_VALUES")
    assert fields_of(e) == ["columns[x][1]"]


def test_non_finite_values_are_refused_in_arrow_batches_too(
    server: LocalServer, client: WindowClient
) -> None:
    pa = pytest.importorskip("pyarrow")
    table = pa.table({"ts": pa.array([10], pa.int64()), "x": [math.inf], "k": [1], "tag": ["a"]})
    e = refused(server, client, lambda: client.append("s", table), "BAD_VALUES")
    assert fields_of(e) == ["columns[x][0]"]


def test_allow_nan_lets_every_non_finite_value_in(server: LocalServer) -> None:
    with WindowClient(server.target) as c:
        c.create_stream(
            StreamSpec("nan_ok", (Field("x", "DOUBLE", allow_nan=True),), wall_clock=False)
        )
        c.create_window(WindowSpec("nan_ok", "w", (Aggregation("n", "count"),), Policy.count(9)))
        res = c.append("nan_ok", {"ts": [1, 2, 3], "x": [math.inf, -math.inf, math.nan]})
        assert res.rows_applied == 3
        assert c.query("nan_ok", "w").values == {"n": 3}


@pytest.mark.parametrize("columnar", [False, True], ids=["engine", "columnar-state"])
def test_a_value_a_window_refuses_is_named_by_row_and_column(tmp_path: Any, columnar: bool) -> None:
    """A NaN where the field allows it but a max cannot order it: BAD_VALUES naming the
    window, the row and the column (in the violation and the metadata), whichever path the
    window takes; nothing applied."""
    env = {"MTAWINDOWS_COLUMNAR_STATE": "1" if columnar else "0"}
    with LocalServer(tmp_path, env=env) as srv, srv.client() as c:
        c.create_stream(StreamSpec("n", (Field("x", "DOUBLE", allow_nan=True),), wall_clock=False))
        aggs = (Aggregation("n", "count"), Aggregation("m", "max", "x"))
        c.create_window(WindowSpec("n", "w", aggs, Policy.count(9)))
        c.append("n", {"ts": [1], "x": [5.0]})
        batch = {"ts": [2, 3, 4], "x": [1.0, math.nan, 2.0]}
        e = refused(srv, c, lambda: c.append("n", batch), "BAD_VALUES", streams=("n",))
        assert "window 'w'" in e.message and "(row 1)" in e.message, e.message
        if not columnar:  # the engine's lift: the column and the row in the violation too
            assert fields_of(e) == ["columns[x][1]"], e.violations
            assert (e.metadata["column"], e.metadata["row"]) == ("x", "1"), e.metadata
        assert c.query("n", "w").values == {"n": 1, "m": 5.0}
        # late rows dropped first: the row named is the request's (2), not the kept rows' (1)
        c.create_stream(
            StreamSpec(
                "d", (Field("x", "DOUBLE", allow_nan=True),), wall_clock=False, late_policy="DROP"
            )
        )
        c.create_window(WindowSpec("d", "w", aggs, Policy.count(9)))
        c.append("d", {"ts": [10], "x": [5.0]})
        late_first = {"ts": [5, 11, 12], "x": [1.0, 2.0, math.nan]}
        e = refused(srv, c, lambda: c.append("d", late_first), "BAD_VALUES", streams=("d",))
        assert "(row 2)" in e.message, e.message
        if not columnar:
            assert fields_of(e) == ["columns[x][2]"] and e.metadata["row"] == "2", e.violations


# --------------------------------------------------------------------------- unknown enums


def _stream_spec(**kw: Any) -> pb.StreamSpec:
    spec = pb.StreamSpec(
        name="e1", timestamp_field="ts", fields=[pb.FieldSpec(name="x", type=pb.DOUBLE)]
    )
    for k, v in kw.items():
        if k == "field_type":
            spec.fields[0].type = v
        elif isinstance(v, Duration):
            getattr(spec, k).CopyFrom(v)
        else:
            setattr(spec, k, v)
    return spec


def _window_spec(stream: str = "s", **kw: Any) -> pb.WindowSpec:
    spec = pb.WindowSpec(
        stream=stream,
        name="e1",
        aggregations=[pb.Aggregation(name="n", monoid="count")],
        policy=pb.SlidePolicy(count=pb.CountPolicy(size=3)),
    )
    for k, v in kw.items():
        if k == "policy":
            spec.policy.CopyFrom(v)
        elif k == "aggregations":
            del spec.aggregations[:]
            spec.aggregations.extend(v)
        elif k.startswith("storage_"):
            setattr(spec.storage, k[len("storage_") :], v)
        else:
            setattr(spec, k, v)
    return spec


ENUM_CASES = [
    ("stream-late-policy-7", "CreateStream", _stream_spec(late_policy=7), "spec.late_policy"),
    ("stream-field-type-9", "CreateStream", _stream_spec(field_type=9), "spec.fields[0].type"),
    (
        "stream-field-type-unset",
        "CreateStream",
        _stream_spec(field_type=pb.FIELD_TYPE_UNSPECIFIED),
        "spec.fields[0].type",
    ),
    ("window-algorithm-99", "CreateWindow", _window_spec(algorithm=99), "spec.algorithm"),
    ("window-storage-kind-7", "CreateWindow", _window_spec(storage_kind=7), "spec.storage.kind"),
]


@pytest.mark.parametrize(
    ("method", "spec", "field"), [c[1:] for c in ENUM_CASES], ids=[c[0] for c in ENUM_CASES]
)
def test_unknown_enum_numbers_are_refused_on_the_wire(
    server: LocalServer, stub: Any, client: WindowClient, method: str, spec: Any, field: str
) -> None:
    req = (pb.CreateStreamRequest if method == "CreateStream" else pb.CreateWindowRequest)(
        spec=spec
    )
    e = refused(server, client, lambda: rpc(lambda: getattr(stub, method)(req, timeout=30)),
                "UNKNOWN_ENUM_VALUE")  # fmt: skip
    assert fields_of(e) == [field]


def test_unknown_result_mode_is_refused(
    server: LocalServer, stub: Any, client: WindowClient
) -> None:
    req = pb.AppendRequest(stream="s", columns=row_s(10), results=7)
    e = refused(server, client, lambda: rpc(lambda: stub.Append(req, timeout=30)),
                "UNKNOWN_ENUM_VALUE")  # fmt: skip
    assert fields_of(e) == ["results"]


# --------------------------------------------------------------------------- durations


DURATION_CASES = [
    # (id, method, spec, reason, field)
    ("lateness-negative", _stream_spec(late_policy=pb.DROP, allowed_lateness=Duration(seconds=-1))),
    ("lateness-1e15s", _stream_spec(late_policy=pb.DROP, allowed_lateness=Duration(seconds=10**15))),
    (
        "lateness-over-100y",
        _stream_spec(
            late_policy=pb.DROP,
            allowed_lateness=Duration(seconds=(MAX_DURATION.days + 1) * 86_400),
        ),
    ),
    ("lateness-sub-microsecond", _stream_spec(late_policy=pb.DROP,
                                              allowed_lateness=Duration(nanos=1500))),
    ("lateness-mixed-signs", _stream_spec(late_policy=pb.DROP,
                                          allowed_lateness=Duration(seconds=1, nanos=-5))),
]  # fmt: skip


@pytest.mark.parametrize("spec", [c[1] for c in DURATION_CASES], ids=[c[0] for c in DURATION_CASES])
def test_out_of_range_lateness_is_refused(
    server: LocalServer, stub: Any, client: WindowClient, spec: pb.StreamSpec
) -> None:
    req = pb.CreateStreamRequest(spec=spec)
    e = refused(server, client, lambda: rpc(lambda: stub.CreateStream(req, timeout=30)),
                "INVALID_ARGUMENT")  # fmt: skip
    assert fields_of(e) == ["spec.allowed_lateness"]


def _time_range(d: Duration) -> pb.SlidePolicy:
    return pb.SlidePolicy(time_range=pb.TimeRangePolicy(range=d))


POLICY_CASES = [
    ("range-negative", _time_range(Duration(seconds=-1)), "spec.policy.time_range.range"),
    ("range-zero", _time_range(Duration()), "spec.policy.time_range.range"),
    ("range-1e15s", _time_range(Duration(seconds=10**15)), "spec.policy.time_range.range"),
    (
        "range-over-100y",
        _time_range(Duration(seconds=(MAX_DURATION.days + 1) * 86_400)),
        "spec.policy.time_range.range",
    ),
    ("range-500ns", _time_range(Duration(nanos=500)), "spec.policy.time_range.range"),
    ("count-0", pb.SlidePolicy(count=pb.CountPolicy(size=0)), "spec.policy.count.size"),
    ("count-negative", pb.SlidePolicy(count=pb.CountPolicy(size=-1)), "spec.policy.count.size"),
] + [
    (
        f"bound-{bound}",
        pb.SlidePolicy(bounded_sum=pb.BoundedSumPolicy(field="x", bound=bound)),
        "spec.policy.bounded_sum.bound",
    )
    for bound in (-math.inf, math.inf, math.nan, -1.0)
] + [
    (
        "max-size-negative",
        pb.SlidePolicy(max_sub_window=pb.MaxSubWindowPolicy(field="x", max_size=-1)),
        "spec.policy.max_sub_window.max_size",
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    ("policy", "field"), [c[1:] for c in POLICY_CASES], ids=[c[0] for c in POLICY_CASES]
)
def test_bad_policy_numbers_are_invalid_argument_not_internal(
    server: LocalServer, stub: Any, client: WindowClient, policy: pb.SlidePolicy, field: str
) -> None:
    req = pb.CreateWindowRequest(spec=_window_spec(policy=policy))
    e = refused(server, client, lambda: rpc(lambda: stub.CreateWindow(req, timeout=30)),
                "INVALID_DEFINITION")  # fmt: skip
    assert fields_of(e) == [field]


def test_bad_storage_numbers_are_refused(
    server: LocalServer, stub: Any, client: WindowClient
) -> None:
    req = pb.CreateWindowRequest(spec=_window_spec(storage_block_size=-1))
    e = refused(server, client, lambda: rpc(lambda: stub.CreateWindow(req, timeout=30)),
                "INVALID_DEFINITION")  # fmt: skip
    assert fields_of(e) == ["spec.storage.block_size"]


# --------------------------------------------------------------------------- bounded sums


@pytest.mark.parametrize(
    ("batch", "field", "row"),
    [
        ({"ts": [10, 11, 12], "x": [1.0, 0.0, -0.5], "k": [1, 1, 1]}, "columns[x][2]", "2"),
        ({"ts": [10, 11], "x": [1.0, 1.0], "k": [-3, 1]}, "columns[k][0]", "0"),
        ({"ts": [10], "x": [-math.inf], "k": [1]}, "columns[x][0]", "0"),
    ],
    ids=["negative-double", "negative-int", "minus-inf"],
)
def test_bounded_sum_fields_refuse_negative_values(
    server: LocalServer, client: WindowClient, batch: dict[str, Any], field: str, row: str
) -> None:
    e = refused(server, client, lambda: client.append("b", batch), "BAD_VALUES")
    assert fields_of(e) == [field]
    if "inf" not in str(batch["x"]):
        assert e.metadata["row"] == row


def test_bounded_sum_fields_take_zero(client: WindowClient) -> None:
    before = client.query("b", "bx")
    res = client.append("b", {"ts": [20], "x": [0.0], "k": [0]})
    assert res.rows_applied == 1
    assert client.query("b", "bx").size == before.size + 1


# --------------------------------------------------------------------------- empty batches


def test_an_empty_batch_changes_nothing(server: LocalServer, client: WindowClient) -> None:
    """Acknowledged (not a duplicate, nothing applied), and no counter, result or sequence
    moves: the stream looks as if it never came."""
    empty: dict[str, list[Any]] = {"ts": [], "x": [], "k": [], "tag": []}
    before = snapshot(client)
    for mode in ("none", "final", "per_row"):
        res = client.append("s", empty, results=mode)
        assert (res.rows_applied, res.rows_late, res.duplicate) == (0, 0, False)
        if mode == "final":
            assert {n: r.sequence for n, r in res.results.items()} == {
                n: before["s", n][2] for n in ("w", "wm")
            }
        if mode == "per_row":
            assert res.row_results["w"]["__size"] == []
    assert snapshot(client) == before


def test_an_empty_batch_does_not_take_its_producers_sequence(client: WindowClient) -> None:
    empty: dict[str, list[Any]] = {"ts": [], "x": [], "k": [], "tag": []}
    assert not client.append("s", empty, producer_id="empty-p", sequence=1).duplicate
    assert not client.append("s", empty, producer_id="empty-p", sequence=1).duplicate
    t = client.get_stream("s").newest_timestamp + 1
    res = client.append(
        "s", {"ts": [t], "x": [1.0], "k": [1], "tag": ["z"]}, producer_id="empty-p", sequence=1
    )
    assert (res.rows_applied, res.duplicate) == (1, False)
    assert client.get_stream("s").batches_duplicate == 0


def test_an_empty_batch_is_still_checked_against_the_schema(
    server: LocalServer, client: WindowClient
) -> None:
    e = refused(server, client, lambda: client.append("s", {"ts": [], "x": []}), "SCHEMA_MISMATCH")
    assert "columns[k]" in fields_of(e)


# --------------------------------------------------------------------------- lengths first


def _append(**kw: Any) -> pb.AppendRequest:
    return pb.AppendRequest(**{"stream": "s", "columns": row_s(100), **kw})


def _agg(**kw: Any) -> pb.WindowSpec:
    return _window_spec(aggregations=[pb.Aggregation(**{"name": "v", "monoid": "sum",
                                                        "field": "x", **kw})])  # fmt: skip


LENGTH_CASES: list[tuple[str, str, Any, str, int]] = [
    ("get-stream-1e6", "GetStream", pb.GetStreamRequest(name=HUGE), "name", 255),
    ("delete-stream", "DeleteStream", pb.DeleteStreamRequest(name=LONG), "name", 255),
    ("create-stream-name", "CreateStream",
     pb.CreateStreamRequest(spec=_stream_spec(name=LONG)), "spec.name", 255),
    ("create-stream-ts", "CreateStream",
     pb.CreateStreamRequest(spec=_stream_spec(timestamp_field=LONG)), "spec.timestamp_field", 64),
    ("create-stream-field", "CreateStream",
     pb.CreateStreamRequest(spec=pb.StreamSpec(name="e1", timestamp_field="ts", fields=[
         pb.FieldSpec(name="ok", type=pb.DOUBLE), pb.FieldSpec(name=LONG, type=pb.DOUBLE)])),
     "spec.fields[1].name", 64),
    ("create-window-stream", "CreateWindow",
     pb.CreateWindowRequest(spec=_window_spec(stream=LONG)), "spec.stream", 255),
    ("create-window-name", "CreateWindow",
     pb.CreateWindowRequest(spec=_window_spec(name=LONG)), "spec.name", 64),
    ("output-name", "CreateWindow", pb.CreateWindowRequest(spec=_agg(name=LONG)),
     "spec.aggregations[0].name", 64),
    ("monoid-name", "CreateWindow", pb.CreateWindowRequest(spec=_agg(monoid=LONG)),
     "spec.aggregations[0].monoid", 128),
    ("aggregation-field", "CreateWindow", pb.CreateWindowRequest(spec=_agg(field=LONG)),
     "spec.aggregations[0].field", 64),
    ("param-key", "CreateWindow", pb.CreateWindowRequest(spec=_agg(params={LONG: "1"})),
     "spec.aggregations[0].params (a key)", 64),
    ("param-value", "CreateWindow", pb.CreateWindowRequest(spec=_agg(params={"ddof": LONG})),
     "spec.aggregations[0].params.ddof", 256),
    ("bounded-sum-field", "CreateWindow", pb.CreateWindowRequest(spec=_window_spec(
        policy=pb.SlidePolicy(bounded_sum=pb.BoundedSumPolicy(field=LONG, bound=1.0)))),
     "spec.policy.bounded_sum.field", 64),
    ("max-sub-window-field", "CreateWindow", pb.CreateWindowRequest(spec=_window_spec(
        policy=pb.SlidePolicy(max_sub_window=pb.MaxSubWindowPolicy(field=LONG)))),
     "spec.policy.max_sub_window.field", 64),
    ("delete-window", "DeleteWindow", pb.DeleteWindowRequest(stream="s", name=LONG), "name", 64),
    ("get-window", "GetWindow", pb.GetWindowRequest(stream=LONG, name="w"), "stream", 255),
    ("list-windows", "ListWindows", pb.ListWindowsRequest(stream=LONG), "stream", 255),
    ("append-stream", "Append", _append(stream=LONG), "stream", 255),
    ("producer-id-1e6", "Append", _append(producer_id="p" * 1_000_000, sequence=5),
     "producer_id", 256),
    ("append-windows", "Append", _append(windows=["w", LONG]), "windows[1]", 64),
    ("column-name", "Append", _append(columns=[*row_s(100), pb.Column(
        name=LONG, doubles=pb.DoubleList(values=[1.0]))]), "columns[4].name", 64),
    ("query", "Query", pb.QueryRequest(stream="s", window=LONG), "window", 64),
    ("read-results", "ReadResults", pb.ReadResultsRequest(stream=LONG, window="w"), "stream", 255),
    # keys are limited in bytes of UTF-8: 513 two-byte characters are 1,026 bytes
    ("get-key-bytes", "GetKey", pb.GetKeyRequest(stream="s", key="é" * 513), "key", 1024),
    ("query-key-bytes", "Query", pb.QueryRequest(stream="s", window="w", key="é" * 513), "key",
     1024),
    ("list-keys-prefix", "ListKeys", pb.ListKeysRequest(stream="s", prefix="k" * 1025),
     "prefix", 1024),
]  # fmt: skip


@pytest.mark.parametrize(
    ("method", "request_", "field", "limit"),
    [c[1:] for c in LENGTH_CASES],
    ids=[c[0] for c in LENGTH_CASES],
)
def test_strings_over_their_limit_are_refused_first_without_echo(
    server: LocalServer,
    stub: Any,
    client: WindowClient,
    method: str,
    request_: Any,
    field: str,
    limit: int,
) -> None:
    e = refused(server, client, lambda: rpc(lambda: getattr(stub, method)(request_, timeout=60)),
                "VALUE_TOO_LONG")  # fmt: skip
    assert fields_of(e) == [field]
    assert int(e.metadata["limit"]) == limit
    assert int(e.metadata["length"]) > limit
    unit = "bytes of UTF-8" if field in ("key", "prefix") else "characters"
    assert f"at most {limit} {unit}, got {e.metadata['length']}" in str(e), e
    no_long_echo(e)


def test_a_key_over_its_limit_is_refused_without_echo(
    server: LocalServer, client: WindowClient
) -> None:
    """A keyed stream's key of 10 KB (and of a megabyte, and an empty one): BAD_VALUES naming
    the key column and the row, echoing a few dozen characters of it, nothing applied."""
    client.create_stream(
        StreamSpec("keyed", (Field("host", "STRING"),), key="host", wall_clock=False)
    )
    client.create_window(WindowSpec("keyed", "w", (Aggregation("n", "count"),), Policy.count(9)))
    for key in ("k" * 10_240, HUGE, ""):
        batch = {"ts": [1, 1, 1], "host": ["ok", "ok2", key]}  # the bad key at row 2
        e = refused(
            server, client, lambda b=batch: client.append("keyed", b), "BAD_VALUES", streams=()
        )  # fmt: skip
        assert fields_of(e) == ["columns[host][2]"] and e.metadata["row"] == "2", e
        assert "row 2" in e.message
        no_long_echo(e)
        if not key:
            assert client.get_stream("keyed").keys == 0
            continue
        assert str(len(key)) in e.message
        assert client.get_stream("keyed").keys == 0  # nothing applied
    # a subscription to a key no row could make: refused, naming it
    request = pb.SubscribeRequest(stream="keyed", window="w", keys=["a", ""])
    e = refused(
        server, client, lambda: rpc(lambda: list(client.stub.Subscribe(request, timeout=30))),
        "INVALID_ARGUMENT", streams=(),
    )  # fmt: skip
    assert fields_of(e) == ["keys[1]"], e.violations


def test_subscribe_checks_lengths_first(
    server: LocalServer, stub: Any, client: WindowClient
) -> None:
    def subscribe() -> None:
        rpc(lambda: list(stub.Subscribe(pb.SubscribeRequest(stream="s", window=LONG), timeout=30)))

    e = refused(server, client, subscribe, "VALUE_TOO_LONG")
    assert fields_of(e) == ["window"]
    no_long_echo(e)


def test_arrow_column_names_are_checked_before_the_rows(
    server: LocalServer, client: WindowClient
) -> None:
    pa = pytest.importorskip("pyarrow")
    table = pa.table({"ts": pa.array([100], pa.int64()), LONG: [1.0]})
    e = refused(server, client, lambda: client.append("s", table), "VALUE_TOO_LONG")
    assert fields_of(e) == ["arrow_ipc.columns[1].name"]
    no_long_echo(e)


def test_duplicate_arrow_columns_are_refused(server: LocalServer, client: WindowClient) -> None:
    pa = pytest.importorskip("pyarrow")
    table = pa.Table.from_arrays(
        [pa.array([100], pa.int64()), pa.array([1.0]), pa.array([2.0])], names=["ts", "x", "x"]
    )
    e = refused(server, client, lambda: client.append("s", table), "SCHEMA_MISMATCH")
    assert fields_of(e) == ["arrow_ipc.columns[2]"]


COUNT_CASES = [
    ("fields", "CreateStream", pb.CreateStreamRequest(spec=pb.StreamSpec(
        name="e1", timestamp_field="ts",
        fields=[pb.FieldSpec(name=f"f{i}", type=pb.DOUBLE) for i in range(1025)])),
     "spec.fields"),
    ("aggregations", "CreateWindow", pb.CreateWindowRequest(spec=_window_spec(aggregations=[
        pb.Aggregation(name=f"a{i}", monoid="count") for i in range(257)])),
     "spec.aggregations"),
    ("params", "CreateWindow", pb.CreateWindowRequest(spec=_agg(
        params={f"p{i}": "1" for i in range(17)})), "spec.aggregations[0].params"),
    ("append-windows", "Append", _append(windows=["w"] * 257), "windows"),
    ("columns", "Append", _append(columns=[
        pb.Column(name=f"c{i}", doubles=pb.DoubleList(values=[1.0])) for i in range(1026)]),
     "columns"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("method", "request_", "field"), [c[1:] for c in COUNT_CASES], ids=[c[0] for c in COUNT_CASES]
)
def test_lists_over_their_limit_are_refused(
    server: LocalServer, stub: Any, client: WindowClient, method: str, request_: Any, field: str
) -> None:
    e = refused(server, client, lambda: rpc(lambda: getattr(stub, method)(request_, timeout=60)),
                "TOO_MANY_ITEMS")  # fmt: skip
    assert fields_of(e) == [field]


def test_an_error_with_a_thousand_violations_still_fits_in_the_trailers(
    server: LocalServer, stub: Any, client: WindowClient
) -> None:
    """1000 unknown columns of 60 characters: each a violation. Unbounded, the status would
    pass gRPC's metadata limit and the client would see only "Stream removed"."""
    extra = [pb.Column(name=f"{i:04d}" + "u" * 56, doubles=pb.DoubleList(values=[1.0]))
             for i in range(1000)]  # fmt: skip
    req = _append(columns=[*row_s(100), *extra])
    e = refused(server, client, lambda: rpc(lambda: stub.Append(req, timeout=60)),
                "SCHEMA_MISMATCH")  # fmt: skip
    assert 1 <= len(e.violations) <= 64
    no_long_echo(e)


def test_log_lines_stay_bounded(server: LocalServer, stub: Any, client: WindowClient) -> None:
    refused(server, client, lambda: rpc(lambda: stub.GetStream(pb.GetStreamRequest(name=HUGE))),
            "VALUE_TOO_LONG")  # fmt: skip
    longest = max(len(line) for line in server.log.read_text().splitlines())
    assert longest < 8192


# --------------------------------------------------------------------------- internal errors

PLUGIN = """
import asyncio

SECRET = "s3cret-internal-detail /var/lib/mtaw"


class Boom:
    identity = 0.0
    commutative = True

    def __init__(self, field):
        self.field = field

    def lift(self, row):
        v = row[self.field]
        if v == 13.0:
            raise RuntimeError(SECRET + " " + "z" * 100_000)
        return v

    def combine(self, older, newer):
        return older + newer

    def lower(self, agg):
        return agg


def factory(field, params):
    if "boom" in params:
        raise RuntimeError(SECRET)
    if "base" in params:
        raise BaseException(SECRET)
    raising = {
        "exit": SystemExit,
        "interrupt": KeyboardInterrupt,
        "genexit": GeneratorExit,
        "cancel": asyncio.CancelledError,
    }
    for name, kind in raising.items():
        if name in params:
            raise kind(SECRET)
    boom = Boom(field)
    if "opaque" in params:  # a result with no wire form (its repr holds an address)
        boom.lower = lambda agg: object()
    if "lower_interrupt" in params:  # on whatever thread lowers the result

        def lower(agg):
            raise KeyboardInterrupt(SECRET)

        boom.lower = lower
    return boom
"""


@pytest.fixture(scope="module")
def plugin_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    """A server with a real monoid plugin (an entry point in mtawindows.monoids) that raises
    RuntimeError, which nothing in the server expects."""
    root = tmp_path_factory.mktemp("plugin")
    site = root / "site"
    (site / "boom_plugin-0.1.dist-info").mkdir(parents=True)
    (site / "boom_plugin.py").write_text(PLUGIN)
    (site / "boom_plugin-0.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: boom-plugin\nVersion: 0.1\n"
    )
    (site / "boom_plugin-0.1.dist-info" / "entry_points.txt").write_text(
        "[mtawindows.monoids]\nboom = boom_plugin:factory\n"
    )
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    with LocalServer(root / "srv", env={"PYTHONPATH": path}) as srv:
        yield srv


SECRET = "s3cret-internal-detail"


def _internal(e: MtaWindowsError) -> str:
    error_id = str(e.metadata["error_id"])
    assert re.fullmatch(r"[0-9a-f]{16}", error_id)
    assert e.message == f"internal error, id {error_id}"
    everything = " ".join([e.message, *e.metadata.values(), *map(str, e.violations)])
    assert SECRET not in everything and "RuntimeError" not in everything
    return error_id


def test_internal_errors_carry_an_id_and_no_exception_text(plugin_server: LocalServer) -> None:
    srv = plugin_server
    with WindowClient(srv.target, timeout=60) as c:
        c.create_stream(StreamSpec("p", (Field("x", "DOUBLE"),), wall_clock=False))
        aggs = (Aggregation("n", "count"), Aggregation("b", "boom", "x"))
        c.create_window(WindowSpec("p", "w", aggs, Policy.count(10), storage=Storage("memory")))
        c.append("p", {"ts": [1], "x": [2.0]})
        assert c.query("p", "w").values["b"] == 2.0  # the plugin works

        bad = WindowSpec("p", "w2", (Aggregation("b", "boom", "x", {"boom": "1"}),),
                         Policy.count(3), storage=Storage("memory"))  # fmt: skip
        e = refused(srv, c, lambda: c.create_window(bad), "INTERNAL", "INTERNAL", ("p",))
        id1 = _internal(e)
        e = refused(srv, c, lambda: c.append("p", {"ts": [5], "x": [13.0]}), "INTERNAL",
                    "INTERNAL", ("p",))  # fmt: skip
        id2 = _internal(e)
        ids = [id1, id2]
        for kind in ("base", "exit", "interrupt", "genexit", "cancel"):  # no Exception: still an
            # answer (never a hang, never the server's end)
            bad = WindowSpec("p", f"w_{kind}", (Aggregation("b", "boom", "x", {kind: "1"}),),
                             Policy.count(3), storage=Storage("memory"))  # fmt: skip
            e = refused(srv, c, lambda b=bad: c.create_window(b), "INTERNAL", "INTERNAL", ("p",))
            ids.append(_internal(e))
        assert c.query("p", "w").values["b"] == 2.0  # and the server goes on
        opaque = WindowSpec("p", "w_opaque", (Aggregation("b", "boom", "x", {"opaque": "1"}),),
                            Policy.count(3), storage=Storage("memory"))  # fmt: skip
        c.create_window(opaque)
        c.append("p", {"ts": [6], "x": [1.0]})
        interrupt = WindowSpec("p", "w_interrupt",
                               (Aggregation("b", "boom", "x", {"lower_interrupt": "1"}),),
                               Policy.count(3), storage=Storage("memory"))  # fmt: skip
        c.create_window(interrupt)
        for results in ("none", "final"):  # every append lowers every window's result
            with pytest.raises(MtaWindowsError) as info:
                c.append("p", {"ts": [7], "x": [1.0]}, results=results, windows=["w_interrupt"])
            assert (info.value.code, info.value.reason) == ("INTERNAL", "INTERNAL")
            ids.append(_internal(info.value))
            assert srv.health() == "SERVING"
        c.delete_window("p", "w_interrupt")
        with pytest.raises(MtaWindowsError) as info:  # a result with no wire form: no repr
            c.query("p", "w_opaque")
        assert (info.value.code, info.value.reason) == ("INTERNAL", "INTERNAL")
        assert "object at 0x" not in str(info.value)
        opaque_id = _internal(info.value)
        # nothing went in: a lower that raises refuses the batch before any window takes it
        assert c.query("p", "w").values["b"] == 3.0
        assert srv.health() == "SERVING"
    assert len({*ids, opaque_id}) == len(ids) + 1  # a fresh id per error
    log = srv.log.read_text()
    assert "no wire form" in next(line for line in log.splitlines() if opaque_id in line)
    for error_id in ids:  # the log explains what the caller only names (its traceback)
        line = next(line for line in log.splitlines() if error_id in line)
        assert "Traceback" in line or SECRET in line
    assert sum(SECRET in line for line in log.splitlines() if "internal error" in line) >= 4
    assert max(len(line) for line in log.splitlines()) < 16_384  # the 100k text clipped


def _boom(*args: Any) -> Any:
    raise RuntimeError(f"{SECRET} at /var/lib/mtaw/secret.key")


FAILING_CALLS = {
    "GetStream": ("GetStream", pb.GetStreamRequest(name="s")),
    "screen": ("GetStream", pb.GetStreamRequest(name="screen")),
    "Subscribe": ("Subscribe", pb.SubscribeRequest(stream="s", window="w")),
    "Subscribe late": ("Subscribe", pb.SubscribeRequest(stream="s", window="late")),
}


async def _fails(call: Any) -> tuple[MtaWindowsError, list[Any]]:
    """The SDK's error for an aio call that must fail, with the events a stream sent first."""
    events: list[Any] = []
    try:
        if hasattr(call, "__aiter__"):
            async for event in call:
                events.append(event)  # noqa: PERF401 - one by one: the error comes after some
        else:
            await call
    except grpc.aio.AioRpcError as err:
        return from_rpc_error(err), events
    raise AssertionError(f"the call succeeded: {events}")


async def _internal_errors_in_process(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Every path of an in-process server fails with :func:`_boom`: unary and streaming
    handlers (a Subscribe before its first event and after it), the request screen, and the
    auth interceptor. Call name -> the SDK's error (with the events a stream sent first)."""
    from mtawindows.server.service import Registry
    from mtawindows.server.transport import servicer as servicer_module
    from mtawindows.server.transport.auth import TokenAuth
    from mtawindows.server.transport.metrics import Metrics
    from mtawindows.server.transport.servicer import WindowServicer, add_servicer
    from mtawindows.v1 import windows_pb2_grpc as pb_grpc

    servicer = WindowServicer(  # the Redis is never reached: every call fails before
        Registry("redis://127.0.0.1:1/0"), Metrics(lambda: iter(())), workers=1
    )
    monkeypatch.setattr(servicer.registry, "stream", _boom)
    monkeypatch.setattr(servicer.registry, "window", _boom)
    screen = servicer_module.check_request
    monkeypatch.setattr(  # the screen of a request fails for the name "screen"
        servicer_module,
        "check_request",
        lambda r: _boom() if getattr(r, "name", "") == "screen" else screen(r),
    )
    subscribe = servicer.Subscribe

    async def late_boom(request: Any, context: Any) -> AsyncIterator[bytes]:
        if request.window == "late":  # after an event went out
            yield pb.SubscribeEvent(batch=7).SerializeToString()
            _boom()
        async for event in subscribe(request, context):
            yield event

    monkeypatch.setattr(servicer, "Subscribe", late_boom)
    auth = TokenAuth(["t0ken"])
    monkeypatch.setattr(auth, "_ok", _boom)
    plain, guarded = grpc.aio.server(), grpc.aio.server(interceptors=[auth])
    out: dict[str, Any] = {}
    try:
        for server in (plain, guarded):
            add_servicer(servicer, server)
        ports = [s.add_insecure_port("127.0.0.1:0") for s in (plain, guarded)]
        for server in (plain, guarded):
            await server.start()
        for port, where in zip(ports, ("", "auth "), strict=True):
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = pb_grpc.WindowServiceStub(channel)
                for name, (method, request) in FAILING_CALLS.items():
                    out[where + name] = await _fails(getattr(stub, method)(request))
    finally:
        await asyncio.gather(plain.stop(None), guarded.stop(None))
        servicer.pool.shutdown(wait=False)
    return out


def test_internal_errors_on_every_path_carry_only_an_id(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An exception nothing expects, wherever it escapes (a unary handler, a Subscribe stream
    before or after its first event, the request screen, the auth interceptor), ends the call
    as INTERNAL with an error id and nothing else; the log has its text under the same id."""
    with caplog.at_level(logging.INFO, logger="mtawindows.server"):
        errors = asyncio.run(_internal_errors_in_process(monkeypatch))
    assert sorted(errors) == sorted([*FAILING_CALLS, *(f"auth {c}" for c in FAILING_CALLS)])
    assert [len(events) for _, events in errors.values()].count(1) == 1  # the late one's event
    ids = set()
    for name, (e, _) in errors.items():
        assert (e.code, e.reason) == ("INTERNAL", "INTERNAL"), (name, e)
        error_id = _internal(e)
        ids.add(error_id)
        logged = [r for r in caplog.records if getattr(r, "error_id", None) == error_id]
        assert len(logged) == 1, name
        assert SECRET in logging.Formatter().format(logged[0]), name
    assert len(ids) == len(errors)  # a fresh id per error


# --------------------------------------------------------------------------- authentication


def _serve_fails(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> str:
    """``mtawindows serve`` with ``args`` must exit non-zero before serving; its stderr."""
    port_file = tmp_path / "port"
    cmd = [*mtawindows_command(), "serve", "--port", str(free_port()), "--port-file", str(port_file),
           "--data-dir", str(tmp_path / "data"), *args]  # fmt: skip
    base = {k: v for k, v in os.environ.items() if not k.startswith("MTAWINDOWS_")}
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env={**base, **(env or {})})
    assert r.returncode != 0
    assert not port_file.exists()
    return r.stderr


@pytest.mark.parametrize(
    "content",
    ["", "\n\n", "# only a comment\n   \n# another\n", "  # indented comment\n"],
    ids=["empty", "blank-lines", "comments", "indented-comment"],
)
def test_a_tokens_file_without_tokens_stops_the_server(tmp_path: Path, content: str) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(content)
    err = _serve_fails(tmp_path, "--tokens-file", str(tokens))
    assert "--tokens-file" in err


@pytest.mark.parametrize(
    ("args", "env", "source"),
    [
        ((), {"MTAWINDOWS_TOKENS": ""}, "MTAWINDOWS_TOKENS"),
        ((), {"MTAWINDOWS_TOKENS": " , ,"}, "MTAWINDOWS_TOKENS"),
        ((), {"MTAWINDOWS_TOKENS_FILE": ""}, "--tokens-file"),
        (("--tokens-file", "/nonexistent/tokens"), {}, "--tokens-file"),
    ],
    ids=["env-empty", "env-commas", "file-env-empty", "file-missing"],
)
def test_every_given_tokens_source_must_hold_a_token(
    tmp_path: Path, args: tuple[str, ...], env: dict[str, str], source: str
) -> None:
    assert source in _serve_fails(tmp_path, *args, env=env)


def test_a_line_that_is_no_token_stops_the_server_without_echoing_it(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("good-token\nhalf of-a-secret\n")
    err = _serve_fails(tmp_path, "--tokens-file", str(tokens))
    assert "line 2" in err and "half of-a-secret" not in err


def test_token_auth_refuses_to_be_built_open() -> None:
    from mtawindows.server.transport.auth import TokenAuth

    for tokens in (set(), {""}, {"two words"}, {"tab\there"}):
        with pytest.raises(ValueError, match="TokenAuth"):
            TokenAuth(tokens)


@pytest.fixture(scope="module")
def auth_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    root = tmp_path_factory.mktemp("auth")
    (root / "tokens").write_text("# ops\n  s3cret-token  \nother-token\n")
    with LocalServer(root, "--tokens-file", str(root / "tokens")) as srv:
        yield srv


HEADERS = [
    ("two-spaces", [("authorization", "Bearer  s3cret-token")]),
    ("trailing-space", [("authorization", "Bearer s3cret-token ")]),
    ("leading-space", [("authorization", " Bearer s3cret-token")]),
    ("no-space", [("authorization", "Bearers3cret-token")]),
    ("empty-token", [("authorization", "Bearer ")]),
    ("other-scheme", [("authorization", "Basic s3cret-token")]),
    ("token-only", [("authorization", "s3cret-token")]),
    ("prefix-of-a-token", [("authorization", "Bearer s3cret")]),
    ("token-plus-suffix", [("authorization", "Bearer s3cret-token2")]),
    ("two-headers", [("authorization", "Bearer s3cret-token"), ("authorization", "Bearer x")]),
    ("none", []),
]


@pytest.mark.parametrize("metadata", [h[1] for h in HEADERS], ids=[h[0] for h in HEADERS])
def test_the_bearer_header_must_be_exact(
    auth_server: LocalServer, metadata: list[tuple[str, str]]
) -> None:
    with WindowClient(auth_server.target, token="s3cret-token") as good:
        before = snapshot(good, ())
        req = pb.CreateStreamRequest(
            spec=pb.StreamSpec(
                name="sneaky", timestamp_field="ts", fields=[pb.FieldSpec(name="x", type=1)]
            )
        )
        with pytest.raises(MtaWindowsError) as info:
            rpc(lambda: good.stub.CreateStream(req, metadata=metadata, timeout=30))
        assert (info.value.code, info.value.reason) == ("UNAUTHENTICATED", "UNAUTHENTICATED")
        assert snapshot(good, ()) == before


@pytest.mark.parametrize(
    "header", ["Bearer s3cret-token", "bearer other-token", "BEARER s3cret-token"]
)
def test_the_scheme_is_case_insensitive_and_file_tokens_are_trimmed(
    auth_server: LocalServer, header: str
) -> None:
    with WindowClient(auth_server.target) as c:
        m = c.stub.ListStreams(
            pb.ListStreamsRequest(), metadata=[("authorization", header)], timeout=30
        )
        assert isinstance(m, pb.ListStreamsResponse)


# --------------------------------------------------------------------------- SDK dataclasses


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: Field("x", "FLOAT"), "type"),
        (lambda: Field("x", "INT64", allow_nan=True), "allow_nan"),
        (lambda: StreamSpec("s", late_policy="IGNORE", wall_clock=False), "late_policy"),
        (lambda: StreamSpec("s", late_policy=7, wall_clock=False), "late_policy"),
        (
            lambda: StreamSpec("s", allowed_lateness=timedelta(seconds=-1), wall_clock=False),
            "allowed_lateness",
        ),
        (lambda: WindowSpec("s", "w", AGGS, Policy.count(1), algorithm="FOO"), "algorithm"),
        (lambda: Storage("disk"), "kind"),
        (lambda: Storage("memory", durable=True), "durable"),
        (lambda: Storage(block_size=-1), "block_size"),
        (lambda: Policy("sliding"), "kind"),
        (lambda: Policy.count(0), "size"),
        (lambda: Policy.count(-5), "size"),
        (lambda: Policy.time_range(timedelta(0)), "range"),
        (lambda: Policy.time_range(MAX_DURATION + timedelta(days=1)), "range"),
        (lambda: Policy.bounded_sum("x", math.inf), "bound"),
        (lambda: Policy.bounded_sum("x", -math.inf), "bound"),
        (lambda: Policy.bounded_sum("x", math.nan), "bound"),
        (lambda: Policy.bounded_sum("x", -1.0), "bound"),
        (lambda: Policy.max_sub_window("x", -1), "max_size"),
        (lambda: OutputSpec("o", "FLOAT"), "type"),
    ],
)
def test_sdk_dataclasses_refuse_bad_values_at_construction(
    make: Callable[[], Any], field: str
) -> None:
    with pytest.raises(ValueError) as info:
        make()
    assert isinstance(info.value, SpecError) and info.value.field == field


def test_sdk_enum_errors_name_the_allowed_values() -> None:
    with pytest.raises(SpecError) as info:
        WindowSpec("s", "w", AGGS, Policy.count(1), algorithm="FOO")
    assert info.value.reason == "UNKNOWN_ENUM_VALUE"
    assert "AMTA" in str(info.value) and "LMTA" in str(info.value)


def test_sdk_enum_names_are_case_insensitive_and_canonical() -> None:
    assert Field("x", "double").type == "DOUBLE"
    assert StreamSpec("s", late_policy="drop", wall_clock=False).late_policy == "DROP"
    assert WindowSpec("s", "w", AGGS, Policy.count(1), algorithm="lmta").algorithm == "LMTA"
    assert Storage("MEMORY").kind == "memory"


def test_sdk_never_sends_an_unspecified_enum() -> None:
    spec = WindowSpec("s", "w", AGGS, Policy.count(1), algorithm="lmta", storage=Storage("Memory"))
    m = convert.window_spec_to_proto(spec)
    assert (m.algorithm, m.storage.kind) == (pb.LMTA, pb.MEMORY)
    s = convert.stream_spec_to_proto(
        StreamSpec("s", (Field("x", "int64"),), late_policy="drop", wall_clock=False)
    )
    assert (s.late_policy, s.fields[0].type) == (pb.DROP, pb.INT64)


def test_sdk_refuses_unknown_enum_numbers_from_the_wire() -> None:
    info = pb.WindowInfo(
        spec=convert.window_spec_to_proto(WindowSpec("s", "w", AGGS, Policy.count(1))),
        outputs=[pb.OutputSpec(name="n", type=42)],
    )
    with pytest.raises(SpecError) as e:
        convert.window_info_from_proto(info)
    assert e.value.field == "outputs[0].type"
    info.outputs[0].type = pb.INT64
    info.spec.algorithm = 99
    with pytest.raises(SpecError) as e:
        convert.window_info_from_proto(info)
    assert e.value.field == "algorithm"


def test_stored_definitions_of_earlier_releases_still_load() -> None:
    """A count of 0 rows and an infinite bound were accepted before; a server restoring them
    must not fail (the class methods and the server's creation checks refuse new ones)."""
    for policy in (
        pb.SlidePolicy(count=pb.CountPolicy(size=0)),
        pb.SlidePolicy(bounded_sum=pb.BoundedSumPolicy(field="x", bound=math.inf)),
    ):
        spec = _window_spec(policy=policy)
        assert convert.window_spec_from_proto(spec).policy.kind in ("count", "bounded_sum")
    from mtawindows.server.service.window_builder import build_window

    stream = StreamSpec("s", (Field("x"),), wall_clock=False)
    for policy_ in (Policy("count", size=0), Policy("bounded_sum", field="x", bound=math.inf)):
        build_window(stream, WindowSpec("s", "w", AGGS, policy_))


def test_sdk_refuses_a_token_no_server_could_accept() -> None:
    for token in ("two words", "line\nbreak", "tab\t"):
        with pytest.raises(ValueError, match="token"):
            WindowClient("127.0.0.1:1", token=token)


def test_show_bounds_what_errors_echo() -> None:
    from mtawindows.v1.types import show

    assert show("abc") == "'abc'"
    out = show("x" * 10**6)
    assert out.endswith("... (1000000 chars)") and len(out) < 100
    assert show("é\x00") == "'\\xe9\\x00'"  # ASCII only, control characters escaped


def test_rich_status_is_bounded_whatever_it_is_given() -> None:
    from mtawindows.server.transport.status import rich_status

    st = rich_status(
        "INVALID_ARGUMENT",
        "X",
        "m" * 10**6,
        [(f"f{i}" * 100, "d" * 10**4) for i in range(10_000)],
        {f"k{i}": "v" * 10**4 for i in range(1000)},
    )
    size = sum(len(v) for _, v in st.trailing_metadata) + len(st.details)
    assert size < 8192


def test_a_per_row_int64_sum_past_int64_refuses_the_batch_and_changes_nothing(
    server: LocalServer, client: WindowClient
) -> None:
    """An INT64 sum on the engine holds exact integers, past int64 too, but a per-row result
    carries it as INT64: a batch whose per-row sum would pass int64 is refused before it is
    applied (BAD_VALUES, naming the window, the sum and the row), as the same batch asking
    for final results or none is applied (the result past int64 answered as a double). It
    was answered INTERNAL after the batch had been applied (an outside tester)."""
    c = client
    c.create_stream(StreamSpec("i64", (Field("x", "INT64"),), wall_clock=False))
    aggs = (Aggregation("s", "sum", "x"), Aggregation("m", "mean", "x"))
    c.create_window(WindowSpec("i64", "w", aggs, Policy.count(2)))
    c.append("i64", {"ts": [1], "x": [5]})
    rows = {"ts": [2, 3, 4], "x": [2**62, 2**62, -(2**62)]}  # sums 2**62+5, 2**63 (!), 0
    for arrow in (False, True):
        e = refused(
            server,
            c,
            lambda a=arrow: c.append(  # type: ignore[misc]
                "i64", rows, results="per_row", arrow=a, producer_id="p", sequence=7
            ),
            "BAD_VALUES",
            streams=("i64",),
        )
        assert "window 'w': its sum 's' would be 9223372036854775808 after row 1" in str(e)
        assert "nothing was applied" in str(e)
        assert c.query("i64", "w").values == {"s": 5, "m": 5.0}
    got = c.append("i64", rows, results="final", producer_id="p", sequence=7)
    assert (got.rows_applied, got.duplicate) == (3, False)
    assert got.results["w"].values == {"s": 0, "m": 0.0}  # [2**62, -2**62]
    assert c.get_stream("i64").rows_appended == 4
    ok = c.append("i64", {"ts": [5, 6], "x": [7, 8]}, results="per_row")  # sums fit: answered
    assert ok.row_results["w"]["s"] == [-(2**62) + 7, 15]


def keyed_snapshot(c: WindowClient, stream: str, keys: list[str]) -> dict[Any, Any]:
    """What a refused keyed batch must leave as it was: the stream's counters, its keys, and
    each key's counters and results (GetKey and Query of every window)."""
    s = c.get_stream(stream)
    out: dict[Any, Any] = {
        "stream": (s.rows_appended, s.rows_late, s.batches_appended, s.newest_timestamp),
        "keys": [k.key for k in c.list_keys(stream).keys],
    }
    for key in keys:
        info = c.get_key(stream, key)
        out[key] = (info.rows_appended, info.newest_timestamp, info.last_append_ms, info.results)
        for w in sorted(s.windows):
            out[key, w] = c.query(stream, w, key=key)
    return out


def test_a_keyed_per_row_int64_sum_past_int64_refuses_the_batch_and_changes_nothing(
    tmp_path: Path,
) -> None:
    """A keyed stream's per-row INT64 sum past int64 is refused before anything changes, as
    an unkeyed stream's is (BAD_VALUES, naming the window, the sum, the key and the
    request's first row past int64), whatever form the key's window has (compact: at most
    --key-compact-items items; full: its tree); keys that fit change no more than the one
    that does not. It was answered INTERNAL after the batch had been applied. Then a valid
    batch (the refused one's producer and sequence: not taken) gives the oracle's results,
    also after a kill -9 (durable: a refused batch reached no journal).

    window w, count(4), by key, before the refused batches:

        a    [5]                     compact, sum 5
        big  [2**62, 2**62-1]        compact, sum 2**63-1 (fits, just)
        neg  [-2**62, -2**62]        compact, sum -2**63 (fits, just)
        full [2, 3, 4, 5]            full (past 3 items), sum 14
    """
    last = 4
    hist: dict[str, list[int]] = {}  # every key's values applied, in order (the oracle)
    t = 0

    def rows(*pairs: tuple[str, int]) -> dict[str, list[Any]]:
        nonlocal t
        ts = list(range(t + 1, t + 1 + len(pairs)))
        t += len(pairs)
        return {"ts": ts, "k": [k for k, _ in pairs], "x": [x for _, x in pairs]}

    def took(batch: dict[str, list[Any]]) -> list[tuple[int, int]]:
        """The oracle's (sum, size) of window w after each row of ``batch``, applied."""
        out = []
        for k, x in zip(batch["k"], batch["x"], strict=True):
            hist.setdefault(k, []).append(x)
            held = hist[k][-last:]
            out.append((sum(held), len(held)))
        return out

    others = [f"k{i}" for i in range(20)]
    with LocalServer(tmp_path / "d", "--key-compact-items", "3") as srv:
        with srv.client() as c:
            fields = (Field("k", "STRING"), Field("x", "INT64"))
            c.create_stream(StreamSpec("k64", fields, key="k", wall_clock=False))
            durable = Storage(durable=True)
            aggs = (Aggregation("s", "sum", "x"), Aggregation("n", "count"))
            c.create_window(WindowSpec("k64", "w", aggs, Policy.count(last), storage=durable))
            count = (Aggregation("n", "count"),)
            c.create_window(WindowSpec("k64", "c", count, Policy.count(100), storage=durable))
            first = rows(
                ("a", 5),
                ("big", 2**62),
                ("big", 2**62 - 1),
                ("neg", -(2**62)),
                ("neg", -(2**62)),
                *((k, i) for i, k in enumerate(others)),
                *(("full", x) for x in (1, 2, 3, 4, 5)),
            )
            took(first)
            c.append("k64", first)
            keys = sorted(hist)
            before = keyed_snapshot(c, "k64", keys)
            assert before["full", "w"].values == {"s": 14, "n": 4}
            assert before["big", "w"].values == {"s": 2**63 - 1, "n": 2}

            refusals = [
                # past int64 in the middle, in two keys: the first row past it is named (the
                # full key's; the compact key's at row 4 comes later)
                (
                    rows(
                        ("k0", 1),
                        ("full", 2**62),
                        ("a", 2**62),
                        ("full", 2**62),
                        ("a", 2**62),
                        ("k1", 2),
                        ("a", -(2**62)),
                    ),
                    "full",
                    3,
                    2**63 + 9,
                ),
                # one key of many passes it, by one
                (rows(*((k, 1) for k in others[:10]), ("big", 1), ("a", 1)), "big", 10, 2**63),
                # below int64, by one
                (rows(("a", 1), ("neg", -1), ("k2", 1)), "neg", 1, -(2**63) - 1),
            ]
            for batch, key, row, value in refusals:
                for arrow in (False, True):
                    with pytest.raises(MtaWindowsError) as info:
                        c.append(
                            "k64",
                            batch,
                            results="per_row",
                            arrow=arrow,
                            producer_id="p",
                            sequence=1,
                        )
                    e = info.value
                    assert (e.code, e.reason) == ("INVALID_ARGUMENT", "BAD_VALUES"), e
                    assert (
                        f"window 'w': its sum 's' (key {key!r}) would be {value} after row "
                        f"{row} of this batch" in e.message
                    ), e
                    assert "nothing was applied" in e.message
                    assert (e.metadata["key"], e.metadata["row"]) == (key, str(row))
                    assert srv.health() == "SERVING"
                    assert keyed_snapshot(c, "k64", keys) == before

            # the refused batch's producer and sequence were not taken; the results are the
            # oracle's, as if the refused batches never came
            good = rows(
                ("big", -5),
                ("full", 7),
                ("a", 9),
                ("neg", 3),
                ("k3", 4),
                ("fresh", 2**62),
                ("big", -(2**62)),
                ("fresh", 2**62 - 1),
            )
            want = took(good)
            got = c.append("k64", good, results="per_row", producer_id="p", sequence=1)
            assert (got.rows_applied, got.duplicate) == (len(good["ts"]), False)
            assert got.row_results["w"]["s"] == [s for s, _ in want]
            assert got.row_results["w"]["n"] == [n for _, n in want]
            assert c.get_stream("k64").rows_appended == sum(map(len, hist.values()))

            def answers() -> None:
                for key, xs in hist.items():
                    held = xs[-last:]
                    got = c.query("k64", "w", key=key)
                    assert (got.values, got.size) == ({"s": sum(held), "n": len(held)}, len(held))
                    assert c.query("k64", "c", key=key).values == {"n": len(xs)}
                    assert c.get_key("k64", key).rows_appended == len(xs)

            answers()
        srv.kill_all()  # kill -9: the journal replays what was applied, nothing refused
        srv.start()
        with srv.client() as c:
            answers()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
