"""The Python Data Source ``"mtawindows"``: push rows into streams, pull window results back.

    spark.dataSource.register(MtaWindowsDataSource)        # or mtawindows.spark_connector.register
    df.write.format("mtawindows").option("endpoint", "localhost:50051") \\
        .option("stream", "telemetry").option("timestamp_column", "ts").mode("append").save()
    spark.read.format("mtawindows").option("endpoint", ...).option("stream", "telemetry").load()

This module ties the parts to the format: the options (:class:`~.options.ConnectorOptions`),
the writers (:mod:`.writer`: idempotent chunks, :class:`MtaCommitMessage` per task) and the
readers (:mod:`.readers`: current results, per key of a keyed stream, or every result by its
sequence; :mod:`.boundaries`: hopping windows, one row per boundary).
:class:`KeyFilterDataSource` is the same format whose batch reader takes Spark's filters on
column ``key`` (Spark >= 4.1, filter pushdown on: :func:`~.register` picks it).
"""

from __future__ import annotations

import uuid

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
)
from pyspark.sql.types import StructType

from mtawindows.client import StreamSpec

from .boundaries import (
    BoundariesReader,
    BoundariesStreamReader,
    boundaries_schema,
    hopping_windows,
)
from .clients import client_for
from .connector_errors import ConnectorError, explained
from .options import ConnectorOptions
from .readers import (
    KeyFilterReader,
    ResultsReader,
    ResultsStreamReader,
    read_schema,
    results_schema,
)
from .schemas import check_columns
from .streams import check_key
from .writer import MtaBatchWriter, MtaCommitMessage, Pusher, StreamWriter, push


class MtaWindowsDataSource(DataSource):
    """Format ``"mtawindows"``; the options are those of :class:`ConnectorOptions`."""

    @classmethod
    def name(cls) -> str:
        return "mtawindows"

    def schema(self) -> StructType:
        opts = ConnectorOptions.parse(self.options)
        hopping = hopping_windows(opts)  # hopping windows only: a row per boundary
        if hopping is not None:
            return boundaries_schema(opts, hopping)
        return read_schema(opts)

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = ConnectorOptions.parse(self.options)
        hopping = hopping_windows(opts)
        if hopping is not None:
            _no_suffix(opts)
            return BoundariesReader(opts, schema, hopping)
        return ResultsReader(opts, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        opts = ConnectorOptions.parse(self.options)
        hopping = hopping_windows(opts)
        if hopping is not None:
            return BoundariesStreamReader(opts, schema, hopping)
        return ResultsStreamReader(opts, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        opts = ConnectorOptions.parse(self.options)
        spec = _check_write(opts, schema, overwrite)
        return MtaBatchWriter(opts, spec, schema, opts.write_id or uuid.uuid4().hex)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamArrowWriter:
        opts = ConnectorOptions.parse(self.options)
        spec = _check_write(opts, schema, overwrite)
        return StreamWriter(opts, spec, schema)


class KeyFilterDataSource(MtaWindowsDataSource):
    """Format ``"mtawindows"`` whose batch reads push Spark's filters on column ``key`` down
    (``=``, ``IN``, ``startswith``): registered by :func:`~.register` on Spark >= 4.1, which
    refuses a reader that takes filters while ``spark.sql.python.filterPushdown.enabled`` is
    off."""

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = ConnectorOptions.parse(self.options)
        hopping = hopping_windows(opts)
        if hopping is not None:  # no column key to filter on
            _no_suffix(opts)
            return BoundariesReader(opts, schema, hopping)
        return KeyFilterReader(opts, schema)


def _no_suffix(opts: ConnectorOptions) -> None:
    """Options ``range`` and ``count`` are refused for hopping windows (a row per boundary:
    the server answers no query-time range of one)."""
    if opts.range is not None or opts.count:
        option = "range" if opts.range is not None else "count"
        msg = (
            f"option {option!r}: hopping windows answer per slide boundary, not query-time "
            "ranges; read a window without a slide, or leave the option out"
        )
        raise ConnectorError(msg)


def _check_write(opts: ConnectorOptions, schema: StructType, overwrite: bool) -> StreamSpec:
    """On the driver, before any task: append mode, the stream exists (keyed by option
    ``key_column`` when given), the columns fit it."""
    if overwrite:
        msg = "mode 'overwrite': an mtawindows stream is append-only; use mode('append')"
        raise ConnectorError(msg)
    client = client_for(opts)
    with explained(opts, f"looking up stream {opts.stream!r}"):
        spec = client.get_stream(opts.stream).spec
    check_key(spec, opts.key_column)
    if opts.key_column and opts.key_column not in schema.fieldNames():
        msg = f"option 'key_column': the DataFrame has no column {opts.key_column!r}; its columns are {schema.fieldNames()}"
        raise ConnectorError(msg)
    check_columns(schema, spec, opts.timestamp_column)
    return spec


__all__ = [
    "KeyFilterDataSource",
    "MtaBatchWriter",
    "MtaCommitMessage",
    "MtaWindowsDataSource",
    "Pusher",
    "ResultsReader",
    "ResultsStreamReader",
    "StreamWriter",
    "push",
    "results_schema",
]
