"""A reply serialized by concatenation (server/transport/wire.py) is the message protobuf
builds: parsed back, it equals the message made field by field, for any windows, Arrow
payloads (empty, small, over the varints' one- and two-byte lengths), rows present, empty
or absent, and a head with or without other fields."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from mtawindows.server.service.row_results import arrow_ipc
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
