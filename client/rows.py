"""Rows as the payload of an Append: typed protobuf columns, or Arrow IPC for pyarrow data.

Rows come as a dict of columns (``{"ts": [...], "load": [...]}``), a list of row dicts, or a
pyarrow Table / RecordBatch (sent as it is, as an Arrow IPC stream).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeAlias

from mtawindows.v1 import convert
from mtawindows.v1 import windows_pb2 as pb
from mtawindows.v1.types import show

if TYPE_CHECKING:
    import pyarrow as pa

Rows: TypeAlias = (
    "Mapping[str, Sequence[Any]] | Iterable[Mapping[str, Any]] | pa.Table | pa.RecordBatch"
)


def _column_kind(values: Sequence[Any]) -> str:
    for v in values:
        if isinstance(v, bool):
            return "BOOL"
        if isinstance(v, float):
            return "DOUBLE"
        if isinstance(v, int):
            continue  # ints may still hide a float further down
        if isinstance(v, str):
            return "STRING"
        if isinstance(v, datetime):
            return "TIMESTAMP"
    if any(isinstance(v, float) for v in values):  # pragma: no cover - caught above
        return "DOUBLE"
    return "INT64"


def _arrow_ipc(table: pa.Table | pa.RecordBatch) -> bytes:
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write(table)
    return bytes(sink.getvalue().to_pybytes())


def _listed(values: Any) -> list[Any]:
    """A column's values as a list; numpy / pandas datetimes as int nanoseconds at once."""
    dtype = getattr(values, "dtype", None)
    if dtype is not None and getattr(dtype, "kind", "") == "M":  # datetime64, tz or not
        import pandas as pd

        index = pd.DatetimeIndex(values)
        if index.hasnans:
            msg = "expected timestamps, got NaT (a missing time)"
            raise TypeError(msg)
        if index.tz is not None:
            index = index.tz_convert("UTC").tz_localize(None)
        return [int(x) for x in index.as_unit("ns").asi8]
    return list(values)


def _columns(
    rows: Mapping[str, Sequence[Any]] | Iterable[Mapping[str, Any]],
) -> dict[str, list[Any]]:
    """{name: values}, from a dict of columns or from row dicts (names in order of first use)."""
    if hasattr(rows, "columns") and hasattr(rows, "to_dict"):  # a pandas DataFrame
        rows = {str(c): rows[c] for c in rows.columns}  # type: ignore[index]
    if isinstance(rows, Mapping):
        return {str(k): _listed(v) for k, v in rows.items()}
    listed = list(rows)
    names: list[str] = []
    for r in listed:
        for k in r:
            if k not in names:
                names.append(k)
    return {n: [r.get(n) for r in listed] for n in names}


def encode_rows(
    rows: Rows, schema: Mapping[str, str] | None = None
) -> tuple[list[pb.Column], bytes, int]:
    """Rows as typed protobuf columns, or as Arrow IPC bytes for pyarrow tables; and the count.

    ``schema`` (field -> type name, from the stream) picks each column's type; without it the
    type follows the values. A DOUBLE column takes ints where a double holds them exactly
    (within +-2**53, and some past it); any other int is a TypeError naming column and row,
    as the server refuses it (never rounded)."""
    if hasattr(rows, "schema") and hasattr(rows, "num_rows"):  # pyarrow Table / RecordBatch
        return [], _arrow_ipc(rows), int(rows.num_rows)
    out = []
    n = 0
    for name, values in _columns(rows).items():
        n = max(n, len(values))
        kind = (schema or {}).get(name) or _column_kind(values)
        if kind == "TIMESTAMP" or any(isinstance(v, datetime) for v in values[:1]):
            kind = "TIMESTAMP"
            try:
                values = [v if type(v) is int else convert.to_nanos(v) for v in values]
            except TypeError as ex:
                msg = f"column {name!r}: {ex}"
                raise TypeError(msg) from None
        if kind == "DOUBLE":  # ints only where a double holds them exactly (no rounding)
            inexact = convert.first_inexact_int(values)
            if inexact is not None:
                msg = (
                    f"column {show(name)}: expected DOUBLE values, got int at row {inexact}: "
                    f"{convert.inexact_int_text(values[inexact])}; send a float, or make the "
                    "field INT64"
                )
                raise TypeError(msg)
            values = [
                float(v) if isinstance(v, int) and not isinstance(v, bool) else v for v in values
            ]
        try:
            out.append(convert.column_to_proto(name, kind, values))
        except TypeError as ex:
            msg = f"column {name!r}: expected {kind} values: {ex}"
            raise TypeError(msg) from None
    return out, b"", n


__all__ = ["Rows", "encode_rows"]
