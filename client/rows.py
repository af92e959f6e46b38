"""Rows as the payload of an Append: typed protobuf columns, or Arrow IPC for pyarrow data.

Rows come as a dict of columns (``{"ts": [...], "load": [...]}``), a list of row dicts, or a
pyarrow Table / RecordBatch (sent as it is, as an Arrow IPC stream).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any, NoReturn, TypeAlias

from mtawindows.v1 import convert
from mtawindows.v1 import windows_pb2 as pb
from mtawindows.v1.types import TS_UNITS, show

if TYPE_CHECKING:
    import pyarrow as pa

Rows: TypeAlias = (
    "Mapping[str, Sequence[Any]] | Iterable[Mapping[str, Any]] | pa.Table | pa.RecordBatch"
)


# 1990-01-01T00:00:00Z in nanoseconds: a plain-number timestamp of a wall-clock stream below
# it was most likely given in a coarser unit than the stream reads (seconds as nanoseconds)
BEFORE_1990 = 631_152_000 * 1_000_000_000
_UNIT_WORDS = {"s": "seconds", "ms": "milliseconds", "us": "microseconds", "ns": "nanoseconds"}


class Schema(dict[str, str]):
    """A stream's column types by name (what :func:`encode_rows` types columns by), and how
    its timestamp field's plain numbers read: in ``ts_unit`` and, for a ``wall_clock``
    stream, refused before 1990. A plain dict as schema: nanoseconds, no refusal."""

    ts_field: str = ""
    ts_unit: str = "ns"
    wall_clock: bool = False


def _timestamps(name: str, values: list[Any], schema: Any) -> list[int]:
    """A timestamp column as int nanoseconds: plain numbers scaled by the stream's unit (a
    float only where the unit is coarser than a nanosecond), everything else by
    :func:`~mtawindows.v1.convert.to_nanos`; a wall-clock stream refuses a plain number
    before 1990 (ValueError naming the row, the unit and the date it would mean)."""
    if isinstance(values, Nanos):  # datetime columns made int nanoseconds already
        return list(values)
    own = isinstance(schema, Schema) and name == schema.ts_field
    unit = schema.ts_unit if own else "ns"
    factor = TS_UNITS[unit]
    guard = own and schema.wall_clock
    out: list[int] = []
    plain: list[int] = []  # rows given as numbers (the guard's)
    try:
        for i, v in enumerate(values):
            if type(v) is int:
                out.append(v * factor)
                plain.append(i)
            elif isinstance(v, float) and factor > 1 and math.isfinite(v):
                out.append(round(Decimal(repr(v)) * factor))  # its shortest decimal, exactly
                plain.append(i)
            elif hasattr(v, "__index__") and type(v) is not bool:  # numpy's ints
                out.append(int(v.__index__()) * factor)
                plain.append(i)
            else:  # datetime, numpy.datetime64, RFC 3339 text: their own units
                out.append(convert.to_nanos(v))
    except TypeError as ex:
        msg = f"column {name!r}: {ex}"
        raise TypeError(msg) from None
    for i in plain:  # past what int64 nanoseconds hold (years 1677 to 2262)
        if not -(2**63) <= out[i] < 2**63:
            msg = (
                f"column {name!r} row {i}: {values[i]!r} read as {_UNIT_WORDS[unit]} (the "
                f"stream's ts_unit {unit!r}) is past the years a timestamp holds (1677 to 2262)"
            )
            raise ValueError(msg)
    if guard and plain:
        first = next((i for i in plain if out[i] < BEFORE_1990), None)
        if first is not None:
            _before_1990(name, first, values[first], out[first], unit)
    return out


def _before_1990(name: str, row: int, value: Any, nanos: int, unit: str) -> NoReturn:
    from .present import rfc3339

    msg = (
        f"column {name!r} row {row}: {value!r} read as {_UNIT_WORDS[unit]} (the stream's "
        f"ts_unit {unit!r}) is {rfc3339(nanos)}, before 1990. If the numbers are in another "
        "unit, create the stream with that ts_unit ('s', 'ms', 'us' or 'ns'; the CLI's "
        "--ts-unit), or send datetimes or RFC 3339 text; a stream whose timestamps are not "
        "dates (sequence numbers) is created with wall_clock=False (--not-wall-clock). "
        "Nothing was sent"
    )
    raise ValueError(msg)


def _arrow_times(table: Any, schema: Any) -> Any:
    """An Arrow table whose timestamp field holds plain integers: scaled by the stream's unit
    and, for a wall-clock stream, refused before 1990 (as :func:`_timestamps`); Arrow
    timestamp columns carry their own unit and pass as they are."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not isinstance(schema, Schema) or schema.ts_field not in table.schema.names:
        return table
    at = table.schema.get_field_index(schema.ts_field)
    col = table.column(at)
    if not pa.types.is_integer(col.type):
        return table
    factor = TS_UNITS[schema.ts_unit]
    if factor != 1:
        col = pc.multiply_checked(col.cast(pa.int64()), factor)
    if schema.wall_clock and len(col):
        low = pc.less(col, BEFORE_1990)
        if pc.any(low).as_py():
            first = pc.index(low, True).as_py()
            value = table.column(at)[first].as_py()
            _before_1990(schema.ts_field, first, value, col[first].as_py(), schema.ts_unit)
    if factor == 1:
        return table
    if not isinstance(table, pa.Table):
        table = pa.Table.from_batches([table])
    return table.set_column(at, schema.ts_field, col)


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
        return Nanos(int(x) for x in index.as_unit("ns").asi8)
    return list(values)


class Nanos(list[int]):
    """A timestamp column already in int nanoseconds (from datetimes), not plain numbers."""


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
        return [], _arrow_ipc(_arrow_times(rows, schema)), int(rows.num_rows)
    out = []
    n = 0
    for name, values in _columns(rows).items():
        n = max(n, len(values))
        kind = (schema or {}).get(name) or _column_kind(values)
        if kind == "TIMESTAMP" or any(isinstance(v, datetime) for v in values[:1]):
            kind = "TIMESTAMP"
            values = _timestamps(name, values, schema)
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
            text = str(ex)
            msg = (
                text
                if text.startswith("column ")
                else f"column {name!r}: expected {kind} values: {text}"
            )
            raise TypeError(msg) from None
    return out, b"", n


__all__ = ["Rows", "encode_rows"]
