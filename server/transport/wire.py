"""Replies carrying per-row results as Arrow IPC, serialized by concatenation.

protobuf's encoder copies a large ``bytes`` field several times (measured: 1.2 ms for an
``AppendResponse`` holding four windows' 330 KB Arrow streams, where joining the same bytes
takes 0.04 ms). The protobuf wire format is a concatenation of fields, and a message's
serialized form followed by more fields of it parses as the message with those fields too;
so a reply is written as the serialized small part (counts, final results) followed by one
length-delimited ``WindowRowResults`` per window, built around the Arrow bytes as they came
from the IPC writer: one copy, in the final join.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mtawindows.v1 import windows_pb2 as pb

__all__ = ["RowResultsPart", "with_row_results"]

_LEN = 2  # the wire type of a length-delimited field
_ARROW_IPC = pb.WindowRowResults.DESCRIPTOR.fields_by_name["arrow_ipc"].number

# (window, its results as one Arrow IPC stream: bytes or a pyarrow Buffer, the request's row
# of each result or None)
RowResultsPart = tuple[str, Any, "pb.Int64List | None"]


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low = n & 0x7F
        n >>= 7
        if n:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _tag(field: int) -> bytes:
    return _varint(field << 3 | _LEN)


def with_row_results(head: Any, field: str, parts: Sequence[RowResultsPart]) -> bytes:
    """``head`` (a message without its ``field`` entries) serialized, followed by one
    ``WindowRowResults`` entry of ``field`` per part, in order: the bytes protobuf would give
    for ``head`` with those entries appended (tests/transport/test_wire.py parses them back)."""
    number = head.DESCRIPTOR.fields_by_name[field].number
    pieces: list[Any] = [head.SerializeToString()]
    inner_tag = _tag(_ARROW_IPC)
    outer_tag = _tag(number)
    for window, ipc, rows in parts:
        small = pb.WindowRowResults(window=window, rows=rows).SerializeToString()
        size = memoryview(ipc).nbytes
        ipc_len = _varint(size)
        pieces += [
            outer_tag,
            _varint(len(small) + len(inner_tag) + len(ipc_len) + size),
            small,
            inner_tag,
            ipc_len,
            ipc,
        ]
    return b"".join(pieces)
