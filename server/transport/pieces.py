"""AppendStream: one batch sent as pieces, put together as it comes (:class:`Assembly`).

gRPC's Python server holds a unary request about three times over while it hands it to the
handler (its byte buffer, a bytearray of the slices, the bytes made of it: a 16 MB Append
grows the process by 48 MB before any work, measured on an echo server). A client stream's
messages come one at a time: each piece's columns are copied into columns reserved once for
the whole batch (``AppendRequest.rows``, told by the first message) and the piece is let
go, so a batch costs about its own size. The last message repeats ``rows`` (the end mark): a
call cancelled midway, or a dead client's, ends its messages as a whole one does, and only
the count and the mark tell them apart. Fixed-width columns without nulls are copied
as bytes; any other column (text, bools, a column with nulls) keeps its pieces' Arrow arrays
and is read as Append reads it. The table made at the end is what an Append of the same rows
would have decoded: every check and refusal after it is Append's own.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from mtawindows.v1.reasons import Reason

from ..service.refusals import ServiceError, batch_too_large, invalid
from . import decode

__all__ = ["IDLE", "PIECES_MESSAGES", "Assembly", "later_piece"]

IDLE = 60.0  # seconds an AppendStream may wait for its next piece
PIECES_MESSAGES = 4  # an AppendStream's pieces hold at most this many messages' bytes in all


class Assembly:
    """The batch of an AppendStream, piece by piece: :meth:`add` each piece's Arrow bytes,
    then :meth:`table`. ``max_rows``: the server's limit per batch; ``told``: the rows the
    first message announced; ``max_bytes``: the most the pieces' Arrow bytes may add up to."""

    def __init__(self, max_rows: int, told: int, max_bytes: int) -> None:
        if told < 0:
            raise invalid("rows", f"expected the batch's rows (0 or more), got {told}")
        if told > max_rows:
            raise batch_too_large(told, max_rows)
        self.max_rows = max_rows
        self.told = told
        self.max_bytes = max_bytes
        self.bytes = 0
        self.rows = 0
        self.pieces = 0
        self.schema: pa.Schema | None = None
        self._bytes: dict[int, np.ndarray] = {}  # column -> its values' bytes, reserved
        self._width: dict[int, int] = {}
        self._fill: dict[int, int] = {}  # column -> rows in its bytes
        self._arrays: dict[int, list[pa.Array]] = {}  # column -> its pieces' arrays

    def add(self, payload: Any) -> None:
        """The next piece (an Arrow IPC stream); refused (nothing kept of the call) when it
        is not one, its schema is not the first piece's, or the rows pass a limit."""
        self.pieces += 1
        if not payload:
            return
        self.bytes += len(payload)
        if self.bytes > self.max_bytes:  # text columns: rows alone do not bound the bytes
            raise ServiceError(
                "RESOURCE_EXHAUSTED",
                Reason.MESSAGE_TOO_LARGE,
                f"the AppendStream's pieces hold {self.bytes} bytes so far, over the server's "
                f"limit of {self.max_bytes} bytes for one batch in pieces ({PIECES_MESSAGES} "
                "times --max-message-mb): send fewer rows per batch",
                metadata={"limit_bytes": str(self.max_bytes), "size_bytes": str(self.bytes)},
            )
        table = decode.arrow_table(payload, self.max_rows)
        n = table.num_rows
        total = self.rows + n
        if total > self.max_rows:
            raise batch_too_large(total, self.max_rows)
        if total > self.told:
            raise invalid(
                "rows",
                f"the first message of an AppendStream tells the batch's rows in all; it told "
                f"{self.told}, the pieces so far hold {total}",
            )
        if self.schema is None:
            self.schema = table.schema
            for j, field in enumerate(table.schema):
                width = _byte_width(field.type)
                if width:  # the told rows, reserved once (pages taken as they fill)
                    self._width[j] = width
                    self._bytes[j] = np.empty(self.told * width, dtype=np.uint8)
                    self._fill[j] = 0
                else:
                    self._arrays[j] = []
        elif _fields(table.schema) != _fields(self.schema):  # nullable or not: the same
            raise ServiceError(
                "INVALID_ARGUMENT",
                Reason.SCHEMA_MISMATCH,
                f"arrow_ipc of piece {self.pieces}: expected the first piece's schema "
                f"({_names(self.schema)}), got ({_names(table.schema)})",
            )
        for j, col in enumerate(table.columns):
            for chunk in col.chunks:
                self._take(j, chunk)
        self.rows = total

    def _take(self, j: int, chunk: pa.Array) -> None:
        if j in self._bytes and chunk.null_count:  # read as Append reads it (its refusal)
            self._arrays[j] = [self._array(j)]
            del self._bytes[j]
        if j not in self._bytes:
            self._arrays[j].append(chunk)
            return
        w = self._width[j]
        buf = self._bytes[j]
        at = self._fill[j]
        end = at + len(chunk)
        data = chunk.buffers()[1]
        src = np.frombuffer(data, dtype=np.uint8, count=len(chunk) * w, offset=chunk.offset * w)
        buf[at * w : end * w] = src
        self._fill[j] = end

    def _array(self, j: int) -> pa.Array:
        assert self.schema is not None
        n = self._fill[j]
        data = self._bytes[j][: n * self._width[j]]
        return pa.Array.from_buffers(self.schema.field(j).type, n, [None, pa.py_buffer(data)])

    def table(self, marked: bool) -> pa.Table | None:
        """The batch (None: no piece held a row or a schema), once the messages ended:
        refused unless the pieces held the rows told and the stream was ``marked`` ended (its
        last message repeats ``rows``; a stream of one message needs no mark). A cancelled
        call's, or a dead client's, messages end as a whole stream's do (gRPC tells the
        handler no difference): the count and the mark tell a whole batch from a cut one, so
        a batch cut short is never applied."""
        if self.rows != self.told:
            raise invalid(
                "rows",
                f"the AppendStream ended after {self.rows} of the {self.told} rows its first "
                "message told (cancelled, or its producer stopped): nothing was applied",
            )
        if not marked:
            raise invalid(
                "rows",
                f"the AppendStream's {self.pieces} messages ended without its end mark (the "
                "last message repeats rows): cancelled, or its producer stopped before the "
                "end; nothing was applied",
            )
        if self.schema is None:
            return None
        cols: list[Any] = []
        for j, field in enumerate(self.schema):
            if j in self._bytes:
                cols.append(self._array(j))
            else:
                cols.append(pa.chunked_array(self._arrays[j], type=field.type))
        return pa.Table.from_arrays(cols, schema=self.schema)


def later_piece(message: Any, index: int, told: int) -> bool:
    """A message after the first holds only its rows (arrow_ipc), and the last one repeats
    ``rows`` (the end mark: whether this is it); refuse any other field."""
    given = [fd.name for fd, _ in message.ListFields() if fd.name != "rows"]
    if given:
        raise invalid(
            given[0],
            f"message {index} of an AppendStream holds only arrow_ipc (the next rows) and, "
            f"the last one, rows; the first message says the rest, got {', '.join(given)}",
        )
    if not message.rows:  # (a batch of 0 rows needs no mark: nothing to apply)
        return False
    if message.rows != told:
        raise invalid(
            "rows",
            f"message {index} of an AppendStream marks its end with rows {message.rows}; "
            f"expected the {told} rows its first message told",
        )
    return True


def _byte_width(t: pa.DataType) -> int:
    """Bytes per value of a fixed-width number or timestamp (0: read as Arrow arrays)."""
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_timestamp(t):
        return int(t.bit_width) // 8
    return 0


def _fields(schema: pa.Schema) -> list[tuple[str, pa.DataType]]:
    return [(f.name, f.type) for f in schema]


def _names(schema: pa.Schema) -> str:
    return ", ".join(f"{f.name}: {f.type}" for f in schema)
