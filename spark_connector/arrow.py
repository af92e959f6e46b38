"""Arrow helpers of the connector: chunking and sorting a partition's record batches, and Arrow
columns in the stream's types (pyarrow is imported on first use)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from mtawindows.client import StreamSpec

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa


def rechunk(batches: Iterable[pa.RecordBatch], rows: int) -> Iterator[pa.Table]:
    """Arrow tables of ``rows`` rows each (the last one shorter) from record batches."""
    import pyarrow as pa

    pending: list[pa.RecordBatch] = []
    n = 0
    for b in batches:
        if not b.num_rows:
            continue
        pending.append(b)
        n += b.num_rows
        while n >= rows:
            table = pa.Table.from_batches(pending)
            yield table.slice(0, rows)
            rest = table.slice(rows)
            pending, n = rest.to_batches(), rest.num_rows
    if n:
        yield pa.Table.from_batches(pending)


def sorted_batches(batches: Iterable[pa.RecordBatch], order: Sequence[str]) -> list[pa.RecordBatch]:
    """A whole partition's batches, sorted by ``order`` (for DataFrames Spark cannot sort)."""
    import pyarrow as pa

    got = [b for b in batches if b.num_rows]
    if not got:
        return []
    return list(pa.Table.from_batches(got).sort_by([(c, "ascending") for c in order]).to_batches())


def nanos(column: pa.Array | pa.ChunkedArray) -> list[int]:
    """A timestamp column (any unit; or int nanoseconds) as int nanoseconds."""
    out: list[int] = _nanos_column(column).to_pylist()
    return out


def nanos_array(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """:func:`nanos` as a numpy array of int64."""
    import numpy as np

    return np.asarray(_nanos_column(column).to_numpy(zero_copy_only=False), dtype=np.int64)


def _nanos_column(column: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    import pyarrow as pa

    if pa.types.is_timestamp(column.type):
        column = column.cast(pa.timestamp("ns", column.type.tz)).cast(pa.int64())
    return column


def to_stream_table(
    batch: pa.Table | pa.RecordBatch, mapping: Mapping[str, str], spec: StreamSpec
) -> pa.Table:
    """An Arrow table with the stream's columns (renamed, cast) from a DataFrame batch;
    ``mapping`` is {DataFrame column: stream field} (see :func:`~.schemas.check_columns`)."""
    import pyarrow as pa

    types = {f.name: str(f.type) for f in spec.fields}
    arrays = []
    names = []
    for col, field in mapping.items():
        arr = batch.column(col)
        kind = types.get(field, "TIMESTAMP")
        if kind == "TIMESTAMP" and pa.types.is_integer(arr.type):
            arr = arr.cast(pa.int64()).cast(pa.timestamp("ns"))
        elif kind == "DOUBLE" and not pa.types.is_floating(arr.type):
            arr = arr.cast(pa.float64())
        elif kind == "INT64" and arr.type != pa.int64():
            arr = arr.cast(pa.int64())
        arrays.append(arr)
        names.append(field)
    return pa.Table.from_arrays(arrays, names=names)


def arrow_column(kind: str, values: list[Any]) -> pa.Array:
    """Result values of a stream type (DOUBLE, INT64, STRING, BOOL, or TIMESTAMP as int
    nanoseconds) as the Arrow array Spark takes (timestamps in UTC microseconds)."""
    import pyarrow as pa

    if kind == "TIMESTAMP":
        return (
            pa.array(values, pa.int64())
            .cast(pa.timestamp("ns", tz="UTC"))
            .cast(pa.timestamp("us", tz="UTC"), safe=False)
        )
    types = {"DOUBLE": pa.float64(), "INT64": pa.int64(), "STRING": pa.string(), "BOOL": pa.bool_()}
    return pa.array(values, types[kind])


__all__ = ["arrow_column", "nanos", "rechunk", "sorted_batches", "to_stream_table"]
