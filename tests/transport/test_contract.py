"""The wire contract read from ``windows.proto`` alone, as a client in another language reads it
(issue 20, item 6), and held against a real server: one ``mtawindows serve`` process on a
loopback port with an embedded Redis of its own, called through raw gRPC stubs (the SDK and
the CLI where they are the subject).

* ``enum ErrorReason`` lists exactly the reasons of :class:`mtawindows.v1.reasons.Reason`,
  each value named as its reason, each documented with its gRPC code and metadata keys; real
  refusals come with that code and no undocumented key;
* ``GetClusterMap`` answers NOT_FOUND for a stream no member knows, an empty owner only for a
  stream between owners; the SDK raises NotFoundError for a typo at once, and still creates a
  stream whose name is held by a dead member's lease;
* an int that no double holds exactly is refused from a DOUBLE field on every path (protobuf
  ints, Arrow int64, the SDK, the CLI), naming column and row; exact ints still widen;
* struct outputs are flattened in per-row results as the .proto documents (``peak.value``);
* every rpc's comment says what it returns, its errors and its idempotency.

The comments are read the way any protobuf tool reads them: protoc's source info.
"""

from __future__ import annotations

import asyncio
import decimal
import fractions
import functools
import json
import math
import re
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pyarrow as pa
import pytest
import redis
from google.protobuf import descriptor_pb2
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from mtawindows.client import (
    AsyncWindowClient,
    Field,
    NotFoundError,
    StreamSpec,
    WindowClient,
)
from mtawindows.testing import LocalServer, free_port, mtawindows_command
from mtawindows.v1 import generate
from mtawindows.v1 import windows_pb2 as pb
from mtawindows.v1 import windows_pb2_grpc as pb_grpc
from mtawindows.v1.reasons import DOMAIN, UNSPECIFIED, Reason, mismatch

KEY_PREFIX = "mtaw"  # the server's Redis key prefix (README: mtaw:svc:*)
MAX_WINDOWS = 3
MAX_BATCH_ROWS = 1000

# --------------------------------------------------------------------------- the .proto, read


@functools.cache
def described() -> descriptor_pb2.FileDescriptorProto:
    """windows.proto compiled by protoc with its comments (source info), as any language's
    generator sees it."""
    import grpc_tools
    from grpc_tools import protoc

    include = str(Path(grpc_tools.__file__).parent / "_proto")
    with tempfile.TemporaryDirectory() as out:
        target = Path(out) / "set.bin"
        args = [
            "protoc",
            f"-I{generate.PROTO_DIR}",
            f"-I{include}",
            "--include_source_info",
            f"--descriptor_set_out={target}",
            str(generate.PROTO_DIR / generate.PROTO),
        ]
        assert protoc.main(args) == 0
        files = descriptor_pb2.FileDescriptorSet.FromString(target.read_bytes())
    (fd,) = files.file
    return fd


def comment(*path: int) -> str:
    """The leading comment of the element at ``path`` (protoc's SourceCodeInfo path), with the
    trailing one after it."""
    for loc in described().source_code_info.location:
        if tuple(loc.path) == path:
            return str(loc.leading_comments + loc.trailing_comments)
    return ""


_MESSAGE, _ENUM, _SERVICE = 4, 5, 6  # FileDescriptorProto fields
_ENUM_VALUE = _METHOD = 2  # EnumDescriptorProto.value, ServiceDescriptorProto.method


def message_comment(name: str) -> str:
    i = next(i for i, m in enumerate(described().message_type) if m.name == name)
    return comment(_MESSAGE, i)


@functools.cache
def documented_reasons() -> dict[str, tuple[str, frozenset[str]]]:
    """ErrorReason value -> (gRPC code, metadata keys), from each value's comment
    ``code: <CODE>; metadata: <keys or none>``."""
    fd = described()
    i = next(i for i, e in enumerate(fd.enum_type) if e.name == "ErrorReason")
    out: dict[str, tuple[str, frozenset[str]]] = {}
    for j, v in enumerate(fd.enum_type[i].value):
        if v.name == UNSPECIFIED:
            continue
        text = comment(_ENUM, i, _ENUM_VALUE, j)
        m = re.search(r"code: ([A-Z_]+); metadata: ([a-z_, ]+)\s*$", text)
        assert m, f"ErrorReason.{v.name}: no 'code: ...; metadata: ...' line in {text!r}"
        keys = frozenset() if m[2].strip() == "none" else frozenset(re.split(r",\s*", m[2]))
        out[v.name] = (m[1], keys)
    return out


# --------------------------------------------------------------------------- a real server


@pytest.fixture(scope="module")
def redis_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from mtawindows.server.storage.embedded import EmbeddedRedis

    store = EmbeddedRedis(tmp_path_factory.mktemp("contract") / "redis").start()
    yield store
    store.stop()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, redis_store: Any) -> Iterator[LocalServer]:
    """One member of a cluster on a Redis the test can reach too (to play a dead member)."""
    port = free_port()
    srv = LocalServer(
        tmp_path_factory.mktemp("server"),
        "--port", str(port),
        "--advertise", f"127.0.0.1:{port}",
        "--redis-url", redis_store.url,
        "--lease-ms", "2000",
        "--max-windows", str(MAX_WINDOWS),
        "--max-batch-rows", str(MAX_BATCH_ROWS),
    )  # fmt: skip
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def stub(server: LocalServer) -> Iterator[pb_grpc.WindowServiceStub]:
    with grpc.insecure_channel(server.target) as ch:
        yield pb_grpc.WindowServiceStub(ch)


def new_name(prefix: str = "k") -> str:
    return f"{prefix}{uuid.uuid4().hex[:10]}"


def refusal(err: grpc.RpcError) -> tuple[str, str, dict[str, str], list[tuple[str, str]]]:
    """(code name, ErrorInfo reason, metadata, BadRequest violations) of a failed call."""
    status = rpc_status.from_call(err)
    assert status is not None, err
    reason, meta, violations = "", {}, []
    for d in status.details:
        if d.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            d.Unpack(info)
            assert info.domain == DOMAIN
            reason, meta = info.reason, dict(info.metadata)
        elif d.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            d.Unpack(bad)
            violations = [(v.field, v.description) for v in bad.field_violations]
    return err.code().name, reason, meta, violations


def refused(call: Any, *args: Any) -> tuple[str, str, dict[str, str], list[tuple[str, str]]]:
    with pytest.raises(grpc.RpcError) as info:
        call(*args, timeout=10)
    return refusal(info.value)


def spec(name: str, *fields: tuple[str, Any]) -> pb.StreamSpec:
    return pb.StreamSpec(
        name=name,
        timestamp_field="ts",
        fields=[pb.FieldSpec(name=f, type=t) for f, t in fields or (("x", pb.DOUBLE),)],
        not_wall_clock=True,  # timestamps: small numbers
    )


def window(stream: str, name: str, *aggs: pb.Aggregation, **policy: Any) -> pb.WindowSpec:
    return pb.WindowSpec(
        stream=stream,
        name=name,
        aggregations=aggs or (pb.Aggregation(name="n", monoid="count"),),
        policy=pb.SlidePolicy(**(policy or {"count": pb.CountPolicy(size=100)})),
    )


def ts_column(values: list[int]) -> pb.Column:
    return pb.Column(name="ts", timestamps=pb.Int64List(values=values))


def arrow_ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write(table)
    return bytes(sink.getvalue().to_pybytes())


# --------------------------------------------------------------------------- 1. the reasons


def test_the_proto_lists_every_reason_with_its_code_and_metadata_keys() -> None:
    """The reasons are listed once, in the .proto: Reason names exactly its ErrorReason
    values, each spelled as the ErrorInfo.reason string, each with a gRPC code and its keys.
    A reason added on one side only fails here (add the other line)."""
    assert mismatch() == {}, f"Reason and windows.proto's ErrorReason differ: {mismatch()}"
    assert pb.ErrorReason.Name(0) == UNSPECIFIED
    for number in pb.ErrorReason.values():
        name = pb.ErrorReason.Name(number)
        assert name == UNSPECIFIED or Reason[name].value == name  # Name(v) is the reason
    docs = documented_reasons()
    assert set(docs) == set(Reason.__members__)
    for name, (code, _keys) in docs.items():
        assert code in grpc.StatusCode.__members__, (name, code)
    # the block above the enum names the domain every ErrorInfo carries
    i = next(i for i, e in enumerate(described().enum_type) if e.name == "ErrorReason")
    assert f'"{DOMAIN}"' in comment(_ENUM, i)


@pytest.mark.server
@pytest.mark.redis
def test_real_refusals_carry_the_code_and_only_the_metadata_keys_the_proto_documents(
    server: LocalServer, stub: pb_grpc.WindowServiceStub
) -> None:
    s = new_name()
    stub.CreateStream(pb.CreateStreamRequest(spec=spec(s)), timeout=10)
    stub.CreateWindow(pb.CreateWindowRequest(spec=window(s, "w")), timeout=10)
    full = new_name()
    stub.CreateStream(pb.CreateStreamRequest(spec=spec(full)), timeout=10)
    for i in range(MAX_WINDOWS):
        stub.CreateWindow(pb.CreateWindowRequest(spec=window(full, f"w{i}")), timeout=10)

    def append(**kw: Any) -> pb.AppendRequest:
        return pb.AppendRequest(stream=s, **kw)

    def xs(ts: list[int], values: list[Any], kind: str = "doubles") -> list[pb.Column]:
        lists = {"doubles": pb.DoubleList, "strings": pb.StringList}
        return [ts_column(ts), pb.Column(name="x", **{kind: lists[kind](values=values)})]

    cel = pb.SlidePolicy(expression=pb.ExpressionPolicy(cel="total.n >"))
    big_cel = pb.SlidePolicy(expression=pb.ExpressionPolicy(cel="true" + " || true" * 700))
    raw_channel = grpc.insecure_channel(server.target)  # bytes as they are: no serializer
    raw_get_stream = raw_channel.unary_unary("/mtawindows.v1.WindowService/GetStream")
    cases: list[tuple[str, Any, Any]] = [
        ("STREAM_NOT_FOUND", stub.GetStream, pb.GetStreamRequest(name=new_name())),
        ("WINDOW_NOT_FOUND", stub.Query, pb.QueryRequest(stream=s, window="nope")),
        ("STREAM_EXISTS", stub.CreateStream, pb.CreateStreamRequest(spec=spec(s))),
        ("WINDOW_EXISTS", stub.CreateWindow, pb.CreateWindowRequest(spec=window(s, "w"))),
        ("TOO_MANY_WINDOWS", stub.CreateWindow, pb.CreateWindowRequest(spec=window(full, "x"))),
        ("VALUE_TOO_LONG", stub.GetStream, pb.GetStreamRequest(name="s" * 300)),
        (
            "TOO_MANY_ITEMS",
            stub.GetClusterMap,
            pb.GetClusterMapRequest(streams=[f"s{i}" for i in range(1001)]),
        ),
        (
            "UNKNOWN_ENUM_VALUE",
            stub.CreateStream,
            pb.CreateStreamRequest(spec=pb.StreamSpec(name=new_name(), late_policy=99)),  # type: ignore[arg-type]
        ),
        ("MALFORMED_REQUEST", raw_get_stream, b"\x0a\x05ab"),
        (
            "INVALID_DEFINITION",
            stub.CreateWindow,
            pb.CreateWindowRequest(spec=window(s, "c0", count=pb.CountPolicy(size=0))),
        ),
        (
            "UNKNOWN_FIELD",
            stub.CreateWindow,
            pb.CreateWindowRequest(
                spec=window(s, "u", pb.Aggregation(name="m", monoid="max", field="nope"))
            ),
        ),
        (
            "UNKNOWN_MONOID",
            stub.CreateWindow,
            pb.CreateWindowRequest(
                spec=window(s, "u", pb.Aggregation(name="m", monoid="nope", field="x"))
            ),
        ),
        (
            "INVALID_EXPRESSION",
            stub.CreateWindow,
            pb.CreateWindowRequest(spec=window(s, "e", expression=cel.expression)),
        ),
        (
            "CEL_TOO_LARGE",
            stub.CreateWindow,
            pb.CreateWindowRequest(spec=window(s, "e", expression=big_cel.expression)),
        ),
        ("SCHEMA_MISMATCH", stub.Append, append(columns=xs([1], ["a"], "strings"))),
        ("BAD_VALUES", stub.Append, append(columns=xs([1], [math.nan]))),
        ("OUT_OF_ORDER", stub.Append, append(columns=xs([5, 3], [1.0, 2.0]))),
        (
            "BATCH_TOO_LARGE",
            stub.Append,
            append(columns=xs(list(range(MAX_BATCH_ROWS + 1)), [1.0] * (MAX_BATCH_ROWS + 1))),
        ),
        (
            "AMBIGUOUS_BATCH",
            stub.Append,
            append(columns=xs([1], [1.0]), arrow_ipc=arrow_ipc(pa.table({"x": [1.0]}))),
        ),
        ("BAD_ARROW", stub.Append, append(arrow_ipc=b"not an arrow stream")),
        ("INVALID_ARGUMENT", stub.Append, append(columns=xs([1], [1.0]), producer_id="p")),
    ]
    docs = documented_reasons()
    seen = []
    for want, call, request in cases:
        code, reason, meta, _ = refused(call, request)
        assert reason == want, (want, code, reason, meta)
        doc_code, doc_keys = docs[reason]
        assert code == doc_code, f"{reason}: sent {code}, the .proto says {doc_code}"
        assert set(meta) <= doc_keys, f"{reason}: keys {set(meta) - doc_keys} not documented"
        seen.append(reason)
    raw_channel.close()
    assert len(seen) == len(cases)


# --------------------------------------------------------------------------- 2. GetClusterMap


@pytest.mark.server
@pytest.mark.redis
def test_the_cluster_map_tells_a_stream_no_one_knows_from_one_between_owners(
    server: LocalServer, stub: pb_grpc.WindowServiceStub, redis_store: Any
) -> None:
    """A typo is NOT_FOUND (a client retrying on owner "" would retry it forever); a stream
    held by a dead member's lease is answered with owner "" (moving) until the lease goes,
    and calls about it are STREAM_MOVING. The SDK raises NotFoundError for the typo at once,
    and CreateStream waits out a dead member's lease on a new name (its owner is not looked
    up: the map has none for a stream not created yet)."""
    from mtawindows.server.storage.leases import Leases

    known, typo = new_name(), new_name("typo")
    stub.CreateStream(pb.CreateStreamRequest(spec=spec(known)), timeout=10)
    got = stub.GetClusterMap(pb.GetClusterMapRequest(streams=[known]), timeout=10)
    assert [(o.stream, o.address) for o in got.owners] == [(known, server.target)]

    for asked in ([typo], [known, typo]):
        code, reason, meta, _ = refused(stub.GetClusterMap, pb.GetClusterMapRequest(streams=asked))
        assert (code, reason, meta) == ("NOT_FOUND", "STREAM_NOT_FOUND", {"stream": typo})
        assert documented_reasons()[reason] == ("NOT_FOUND", frozenset({"stream"}))

    with WindowClient(server.target, retry_time=10) as c:
        t0 = time.monotonic()
        with pytest.raises(NotFoundError) as info:
            c.owner(typo)
        assert info.value.reason == "STREAM_NOT_FOUND" and time.monotonic() - t0 < 3

    async def async_owner() -> None:
        async with AsyncWindowClient(server.target, retry_time=10) as c:
            with pytest.raises(NotFoundError):
                await c.owner(typo)

    asyncio.run(async_owner())

    # a dead member (one that never heartbeats) takes the stream's lease: it is moving
    client = redis.Redis.from_url(redis_store.url)
    ghost = Leases(client, KEY_PREFIX, "ghost:1", "ghost", "ghost:1", ttl_ms=60_000)
    taken, _ = ghost.acquire(known, force=True)
    assert taken is not None
    try:
        deadline = time.monotonic() + 15
        probe = pb.AppendRequest(stream=known, columns=[ts_column([1])])  # refused, never written
        while True:  # the server finds out at its next renewal (until then it serves it)
            code, reason, meta, _ = refused(stub.Append, probe)
            if reason != "SCHEMA_MISMATCH":
                break
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert (code, reason) == ("UNAVAILABLE", "STREAM_MOVING")
        assert set(meta) <= documented_reasons()[reason][1] and meta["stream"] == known
        got = stub.GetClusterMap(pb.GetClusterMapRequest(streams=[known]), timeout=10)
        (owner,) = got.owners
        assert (owner.stream, owner.member, owner.address, owner.token) == (known, "", "", 0)
        with WindowClient(server.target) as c:
            assert c.owner(known) == server.target  # moving: where placement puts it
    finally:
        ghost.release(known, taken.token)

    # a new name whose lease a dead member holds for a moment: CreateStream waits it out
    fresh = new_name()
    held, _ = Leases(client, KEY_PREFIX, "ghost:1", "ghost", "ghost:1", ttl_ms=1500).acquire(fresh)
    assert held is not None
    with WindowClient(server.target, retry_time=10) as c:
        code, reason, _, _ = refused(stub.CreateStream, pb.CreateStreamRequest(spec=spec(fresh)))
        assert (code, reason) == ("UNAVAILABLE", "STREAM_MOVING")
        created = c.create_stream(StreamSpec(fresh, (Field("x", "DOUBLE"),), wall_clock=False))
        assert created.spec.name == fresh
        assert c.get_stream(known).spec.name == known  # back with an owner once the lease went
    client.close()


# --------------------------------------------------------------------------- 3. ints as doubles


@pytest.mark.server
@pytest.mark.redis
def test_an_int_no_double_holds_is_refused_from_a_double_field_on_every_path(
    server: LocalServer, stub: pb_grpc.WindowServiceStub, tmp_path: Path
) -> None:
    """2**53 + 1 would round to 2**53: refused (INVALID_ARGUMENT, BAD_VALUES) naming column
    and row, as protobuf ints, as Arrow int64, by the SDK before any call and by the CLI;
    nothing is applied. Ints a double holds (within +-2**53, and 2**60) still widen, exactly."""
    s = new_name()
    stub.CreateStream(pb.CreateStreamRequest(spec=spec(s)), timeout=10)
    aggs = (
        pb.Aggregation(name="hi", monoid="max", field="x"),
        pb.Aggregation(name="lo", monoid="min", field="x"),
    )
    stub.CreateWindow(pb.CreateWindowRequest(spec=window(s, "w", *aggs)), timeout=10)
    inexact = 2**53 + 1
    assert float(inexact) != inexact

    ints = [1, -(2**53), inexact]
    as_ints = pb.AppendRequest(
        stream=s,
        columns=[ts_column([1, 2, 3]), pb.Column(name="x", ints=pb.Int64List(values=ints))],
    )
    table = pa.table(
        {"ts": pa.array([1, 2, 3], pa.timestamp("ns")), "x": pa.array(ints, pa.int64())}
    )
    as_arrow = pb.AppendRequest(stream=s, arrow_ipc=arrow_ipc(table))
    for request in (as_ints, as_arrow):
        code, reason, _, violations = refused(stub.Append, request)
        assert (code, reason) == ("INVALID_ARGUMENT", "BAD_VALUES")
        field, description = violations[0]
        assert field == "columns[x][2]"  # column x, row 2
        assert "DOUBLE" in description and str(inexact) in description

    with WindowClient(server.target) as c:
        with pytest.raises(TypeError, match=r"column 'x'.*row 1.*9007199254740993"):
            c.append(s, {"ts": [1, 2], "x": [1.5, inexact]})
        # a whole Decimal or Fraction is an int written another way: refused alike
        for other in (decimal.Decimal(inexact), fractions.Fraction(inexact)):
            with pytest.raises(TypeError, match=r"column 'x'.*row 1.*9007199254740993"):
                c.append(s, {"ts": [1, 2], "x": [1.5, other]})
        with pytest.raises(Exception) as info:  # Arrow goes as it is: the server refuses it
            c.append(s, table)
        assert getattr(info.value, "reason", None) == "BAD_VALUES"
        assert info.value.violations[0].field == "columns[x][2]"  # type: ignore[attr-defined]

        data = tmp_path / "rows.jsonl"
        data.write_text(json.dumps({"ts": 1, "x": 1}) + "\n" + json.dumps({"ts": 2, "x": inexact}))
        out = subprocess.run(
            [
                *mtawindows_command(),
                "append",
                s,
                str(data),
                "--target",
                server.target,
                "--no-progress",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert out.returncode == 1 and "line 2: column 'x'" in out.stderr, out.stderr
        assert c.get_stream(s).rows_appended == 0  # nothing of any of them was applied

        exact = [2**53, -(2**53), 2**60, 3]
        c.append(s, {"ts": [1, 2, 3, 4], "x": exact})
        raw = stub.Append(
            pb.AppendRequest(
                stream=s,
                columns=[ts_column([5]), pb.Column(name="x", ints=pb.Int64List(values=[-(2**60)]))],
                results=pb.FINAL,
            ),
            timeout=10,
        )
        values = raw.results[0].values
        assert (values["hi"].double_value, values["lo"].double_value) == (2.0**60, -(2.0**60))
        assert c.get_stream(s).rows_appended == 5


# --------------------------------------------------------------------------- 4. struct outputs


@pytest.mark.server
@pytest.mark.redis
def test_struct_outputs_are_flattened_in_per_row_results_as_the_proto_documents(
    stub: pb_grpc.WindowServiceStub,
) -> None:
    rule = '"<output>.<part>"'
    assert rule in message_comment("WindowRowResults")
    assert "struct_value" in message_comment("WindowResult")
    s = new_name()
    stub.CreateStream(
        pb.CreateStreamRequest(spec=spec(s, ("load", pb.DOUBLE), ("host", pb.STRING))),
        timeout=10,
    )
    aggs = (
        pb.Aggregation(name="n", monoid="count"),
        pb.Aggregation(name="peak", monoid="argmax", field="load", params={"key": "host"}),
        pb.Aggregation(name="mc", monoid="maxcount", field="load"),
        pb.Aggregation(name="lo", monoid="min", field="load"),
    )
    info = stub.CreateWindow(pb.CreateWindowRequest(spec=window(s, "w", *aggs)), timeout=10)
    # the documented rule, applied to the outputs as GetWindow / CreateWindow give them
    documented = [
        (f"{o.name}.{p.name}", p.type) if o.parts else (o.name, o.type)
        for o in info.outputs
        for p in (o.parts or [None])
    ]
    assert documented == [
        ("n", pb.INT64),
        ("peak.value", pb.DOUBLE),
        ("peak.key", pb.STRING),
        ("mc.max", pb.DOUBLE),
        ("mc.count", pb.INT64),
        ("lo", pb.DOUBLE),
    ]
    got = stub.Append(
        pb.AppendRequest(
            stream=s,
            columns=[
                ts_column([1, 2, 3]),
                pb.Column(name="load", doubles=pb.DoubleList(values=[0.5, 0.9, 0.7])),
                pb.Column(name="host", strings=pb.StringList(values=["a", "b", "c"])),
            ],
            results=pb.PER_ROW,
        ),
        timeout=10,
    )
    (rows,) = got.row_results
    kinds = {pb.DOUBLE: "doubles", pb.INT64: "ints", pb.STRING: "strings"}
    assert [(c.name, c.WhichOneof("data")) for c in rows.columns] == [
        (name, kinds[t]) for name, t in documented
    ]
    columns = {c.name: list(getattr(c, c.WhichOneof("data")).values) for c in rows.columns}
    assert columns == {
        "n": [1, 2, 3],
        "peak.value": [0.5, 0.9, 0.9],
        "peak.key": ["a", "b", "b"],
        "mc.max": [0.5, 0.9, 0.9],
        "mc.count": [1, 1, 1],
        "lo": [0.5, 0.5, 0.5],
    }
    assert list(rows.sizes.values) == [1, 2, 3]
    # a window's result keeps a struct whole: one Value, a struct_value of its parts
    result = stub.Query(pb.QueryRequest(stream=s, window="w"), timeout=10)
    peak = result.values["peak"].struct_value.fields
    assert (peak["value"].double_value, peak["key"].string_value) == (0.9, "b")


# --------------------------------------------------------------------------- the rpc comments


def test_every_rpc_says_what_it_returns_its_errors_and_whether_it_is_idempotent() -> None:
    (service,) = described().service
    assert "Idempotency" in comment(_SERVICE, 0)
    for j, method in enumerate(service.method):
        text = " ".join(comment(_SERVICE, 0, _METHOD, j).split())
        assert re.search(r"\b(Returns|Streams)\b", text), (method.name, text)
        assert "Errors" in text, (method.name, text)
        assert re.search(r"Read-only|[Ii]dempotent", text), (method.name, text)
