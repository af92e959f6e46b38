"""A reply serialized by concatenation (server/transport/wire.py) is the message protobuf
builds: parsed back, it equals the message made field by field, for any windows, Arrow
payloads (empty, small, over the varints' one- and two-byte lengths), rows present, empty
or absent, and a head with or without other fields."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from mtawindows.server.service.row_results import arrow_ipc
from mtawindows.server.transport import decode
from mtawindows.server.transport.wire import with_row_results
from mtawindows.v1 import windows_pb2 as pb

_rows = st.one_of(
    st.none(),
    st.lists(st.integers(-(2**63), 2**63 - 1), max_size=40).map(lambda v: pb.Int64List(values=v)),
)
_part = st.tuples(st.text(max_size=30), st.binary(max_size=20_000), _rows)


@settings(max_examples=200, deadline=None)
@given(
    parts=st.lists(_part, max_size=5),
    applied=st.integers(0, 2**40),
    late=st.integers(0, 5),
    duplicate=st.booleans(),
    final=st.booleans(),
)
def test_append_response_parses_as_built(
    parts: list, applied: int, late: int, duplicate: bool, final: bool
) -> None:
    head = pb.AppendResponse(rows_applied=applied, rows_late=late, duplicate=duplicate)
    if final:
        head.results.append(pb.WindowResult(window="w", size=3))
    data = with_row_results(head, "row_results", parts)

    want = pb.AppendResponse()
    want.CopyFrom(head)
    for window, ipc, rows in parts:
        want.row_results.append(pb.WindowRowResults(window=window, arrow_ipc=ipc, rows=rows))
    got = pb.AppendResponse.FromString(data)
    assert got == want
    for g, (_, _, rows) in zip(got.row_results, parts, strict=True):
        assert g.HasField("rows") == (rows is not None)  # present-and-empty is not absent
    assert with_row_results(head, "row_results", []) == head.SerializeToString()


def test_compute_response_with_arrow_buffers() -> None:
    """The Arrow writer's buffers go in as they are (no copy to bytes first) and read back."""
    tables = [
        pa.table({"x": list(range(n)), "y": [float(i) / 3 for i in range(n)]})
        for n in (0, 1, 70_000)
    ]
    parts = [(f"w{i}", arrow_ipc(t), None) for i, t in enumerate(tables)]
    got = pb.ComputeResponse.FromString(with_row_results(pb.ComputeResponse(), "results", parts))
    assert [r.window for r in got.results] == ["w0", "w1", "w2"]
    for r, t in zip(got.results, tables, strict=True):
        assert pa.ipc.open_stream(r.arrow_ipc).read_all().equals(t)
        assert not r.HasField("rows")


_requests = st.builds(
    lambda stream, ipc, producer, seq, windows, cols, cont, arrow: pb.AppendRequest(
        stream=stream,
        arrow_ipc=ipc,
        producer_id=producer,
        sequence=seq,
        windows=windows,
        columns=[pb.Column(name=c, doubles=pb.DoubleList(values=[1.5] * k)) for c, k in cols],
        continuation=cont,
        arrow_results=arrow,
    ),
    st.text(max_size=20),
    st.binary(max_size=3_000),
    st.text(max_size=10),
    st.integers(-(2**63), 2**63 - 1),
    st.lists(st.text(max_size=8), max_size=3),
    st.lists(st.tuples(st.text(max_size=5), st.integers(0, 300)), max_size=3),
    st.booleans(),
    st.booleans(),
)


@settings(max_examples=300, deadline=None)
@given(request=_requests, repeat=st.binary(max_size=50))
def test_a_request_parsed_without_its_arrow_bytes_is_the_request(
    request: pb.AppendRequest, repeat: bytes
) -> None:
    """``carrying_parser``: the rest of the request parsed as protobuf, the Arrow bytes a view
    of the buffer (the last value when the field comes twice, as protobuf takes it); a
    request without them parsed as it is; ``with_payload`` (a forwarded call) gives back
    bytes that parse as the request."""
    data = request.SerializeToString()
    if repeat:  # the field again, later: the last one counts
        data += pb.AppendRequest(arrow_ipc=repeat).SerializeToString()
    want = pb.AppendRequest.FromString(data)
    got = decode.carrying_parser(pb.AppendRequest)(data)
    if not want.arrow_ipc:
        assert got == want  # nothing carried: the message as protobuf parses it
        return
    assert isinstance(got, decode.Carried)
    assert isinstance(got.payload, memoryview) and got.payload.obj is data  # no copy
    assert bytes(got.payload) == want.arrow_ipc
    assert got.message.arrow_ipc == b""
    whole = pb.AppendRequest()
    whole.CopyFrom(got.message)
    whole.arrow_ipc = bytes(got.payload)
    assert whole == want
    token = decode.ARROW.set(got.payload)
    try:
        assert decode.arrow_payload(got.message) is got.payload
        assert pb.AppendRequest.FromString(decode.with_payload(got.message)) == want
    finally:
        decode.ARROW.reset(token)
    assert decode.arrow_payload(got.message) == b""  # outside the call: the message's own


@given(junk=st.binary(max_size=200))
def test_bytes_that_are_not_a_request_are_refused_as_before(junk: bytes) -> None:
    """Whatever the bytes, the carrying parser answers as protobuf's would: the request, or
    ``Malformed`` (never an exception, never a payload cut from bytes protobuf refuses)."""
    try:
        want: Any = pb.AppendRequest.FromString(junk)
    except Exception:
        want = None
    got = decode.carrying_parser(pb.AppendRequest)(junk)
    if want is None:
        assert isinstance(got, decode.Malformed)
    elif isinstance(got, decode.Carried):
        whole = pb.AppendRequest()
        whole.CopyFrom(got.message)
        whole.arrow_ipc = bytes(got.payload)
        assert whole == want
    else:
        assert got == want
