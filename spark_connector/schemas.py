"""Spark types against stream types: which DataFrame columns fit a stream's fields, and the
Spark types of a window's outputs (pyspark is imported on first use)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from mtawindows.client import OutputSpec, StreamSpec, WindowSpec

from .connector_errors import ConnectorError

if TYPE_CHECKING:
    from pyspark.sql.types import DataType, StructType

# stream field type -> the Spark types a DataFrame column may have for it
_ACCEPTS: dict[str, tuple[str, ...]] = {
    "DOUBLE": ("double", "float", "long", "int", "short", "byte", "decimal"),
    "INT64": ("long", "int", "short", "byte"),
    "STRING": ("string",),
    "BOOL": ("boolean",),
    "TIMESTAMP": ("timestamp", "timestamp_ntz", "long"),
}


def spark_type_name(dtype: DataType) -> str:
    name = str(dtype.typeName())
    return "decimal" if name.startswith("decimal") else name


def check_columns(
    schema: StructType, spec: StreamSpec, ts_column: str, *, option: str = "timestamp_column"
) -> dict[str, str]:
    """Map DataFrame columns to the stream's fields, or fail naming the column. Returns
    {DataFrame column: stream field}."""
    types = {f.name: spark_type_name(f.dataType) for f in schema.fields}
    ts_col = ts_column or spec.timestamp_field
    if ts_col not in types:
        how = (
            f"option {option!r} is {ts_col!r}"
            if ts_column
            else f"the stream's timestamp field is {ts_col!r}; name the DataFrame's time column "
            f"with option {option!r}"
        )
        msg = f"column {ts_col!r}: the DataFrame has no such column ({how}); its columns are {list(types)}"
        raise ConnectorError(msg)
    if types[ts_col] not in _ACCEPTS["TIMESTAMP"]:
        msg = f"column {ts_col!r}: the timestamp must be a timestamp (or long nanoseconds), got {types[ts_col]}"
        raise ConnectorError(msg)
    mapping = {ts_col: spec.timestamp_field}
    for f in spec.fields:
        if f.name not in types:
            msg = f"column {f.name!r}: stream {spec.name!r} needs a {f.type} column {f.name!r}; the DataFrame's columns are {list(types)}"
            raise ConnectorError(msg)
        if types[f.name] not in _ACCEPTS[str(f.type)]:
            msg = f"column {f.name!r}: stream {spec.name!r} expects {f.type}, the DataFrame has {types[f.name]}; cast it"
            raise ConnectorError(msg)
        mapping[f.name] = f.name
    return mapping


def output_struct_type(
    outputs: Sequence[OutputSpec],
    window: WindowSpec | None = None,
    stream: StreamSpec | None = None,
) -> list[tuple[str, DataType]]:
    """Spark types of a window's outputs: [(name, DataType)]. The outputs of the sketches whose
    results are lists (their OutputSpec says ANY) are typed from the ``window``'s aggregations
    and the ``stream``'s fields: quantiles array<double>, top_k array<struct<item: the field's
    type, count: bigint>> (windows.proto, Aggregation)."""
    from pyspark.sql import types as T

    scalar: dict[str, T.DataType] = {
        "DOUBLE": T.DoubleType(),
        "INT64": T.LongType(),
        "STRING": T.StringType(),
        "BOOL": T.BooleanType(),
        "TIMESTAMP": T.TimestampType(),
    }
    aggs = {a.name: a for a in window.aggregations} if window is not None else {}
    fields = {f.name: str(f.type) for f in stream.fields} if stream is not None else {}
    out: list[tuple[str, T.DataType]] = []
    for o in outputs:
        agg = aggs.get(o.name)
        kind = agg.monoid.lower() if agg is not None and str(o.type) == "ANY" else ""
        if kind == "quantiles":
            out.append((o.name, T.ArrayType(T.DoubleType())))
        elif kind == "top_k":
            item = scalar.get(fields.get(agg.field, "") if agg else "", T.StringType())
            counted = T.StructType(
                [T.StructField("item", item), T.StructField("count", T.LongType())]
            )
            out.append((o.name, T.ArrayType(counted)))
        elif o.parts:
            parts = [
                T.StructField(p.name, scalar.get(str(p.type), T.StringType())) for p in o.parts
            ]
            out.append((o.name, T.StructType(parts)))
        else:
            out.append((o.name, scalar.get(str(o.type), T.StringType())))
    return out


__all__ = ["check_columns", "output_struct_type", "spark_type_name"]
