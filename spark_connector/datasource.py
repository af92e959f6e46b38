"""The Python Data Source ``"mtawindows"``: push rows into streams, pull window results back.

    spark.dataSource.register(MtaWindowsDataSource)        # or mtawindows.spark_connector.register
    df.write.format("mtawindows").option("endpoint", "localhost:50051") \\
        .option("stream", "telemetry").option("timestamp_column", "ts").mode("append").save()
    spark.read.format("mtawindows").option("endpoint", ...).option("stream", "telemetry").load()

Push (writer, streamWriter): every partition opens its client inside ``write()``, sends its rows
as Arrow IPC in chunks of ``batch_rows`` and returns a :class:`MtaCommitMessage` with counts.
Each chunk carries an idempotency key: producer ``spark:<query id>:<partition>`` and sequence
``batch id * 2**20 + chunk number``, so a retried task or a replayed micro-batch is acknowledged
as a duplicate, not applied twice. Rows of one stream must come in timestamp order (see the
README's ordering contract).

Pull (reader, streamReader): one row per window with the window's current result; the stream
reader follows each window's results by their sequence (offsets ``{"stream/window": sequence}``,
kept by the server), so a streaming query sees every result the server still holds.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from mtawindows.client import StreamSpec, WindowClient, WindowInfo, WindowResult

from .common import (
    ConnectorError,
    ConnectorOptions,
    KeyedStreams,
    TaskChunks,
    check_columns,
    client_for,
    client_of,
    explained,
    is_scratch,
    key_of_stream,
    keyed_stream_name,
    output_struct_type,
    owner,
    rechunk,
    sorted_batches,
    to_stream_table,
)

log = logging.getLogger("mtawindows.spark_connector")


def _spark_value(dtype: Any, v: Any) -> Any:
    """A result value as Spark takes it in a row: timestamps (ns) as datetimes, structs as
    tuples."""
    if v is None:
        return None
    if isinstance(dtype, TimestampType) and isinstance(v, int):
        return datetime.fromtimestamp(v / 1e9, tz=UTC)
    if isinstance(dtype, StructType) and isinstance(v, dict):
        return tuple(_spark_value(f.dataType, v.get(f.name)) for f in dtype.fields)
    return v


@dataclass
class MtaCommitMessage(WriterCommitMessage):
    """What one partition's task did: rows sent, applied, dropped as late, and chunks that the
    server had already applied (a retried task or a replayed batch)."""

    partition_id: int
    attempt: int
    rows_sent: int = 0
    rows_applied: int = 0
    rows_late: int = 0
    chunks: int = 0
    chunks_duplicate: int = 0
    rows_duplicate: int = 0
    streams: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- the source


class MtaWindowsDataSource(DataSource):
    """Format ``"mtawindows"``; the options are those of :class:`ConnectorOptions`."""

    @classmethod
    def name(cls) -> str:
        return "mtawindows"

    def schema(self) -> StructType:
        opts = ConnectorOptions.parse(self.options)
        client = client_for(opts)
        with explained(opts, f"reading the windows of stream {opts.stream!r}"):
            windows = _windows_of(client, opts, list(_streams_of(client, opts))[:1])
        return results_schema(opts, windows)

    def reader(self, schema: StructType) -> DataSourceReader:
        return ResultsReader(ConnectorOptions.parse(self.options), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return ResultsStreamReader(ConnectorOptions.parse(self.options), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        opts = ConnectorOptions.parse(self.options)
        _refuse_overwrite(overwrite)
        spec = _check_write(opts, schema)
        return BatchWriter(opts, spec, schema, opts.write_id or uuid.uuid4().hex)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamArrowWriter:
        opts = ConnectorOptions.parse(self.options)
        _refuse_overwrite(overwrite)
        spec = _check_write(opts, schema)
        return StreamWriter(opts, spec, schema)


def _refuse_overwrite(overwrite: bool) -> None:
    if overwrite:
        msg = "mode 'overwrite': an mtawindows stream is append-only; use mode('append')"
        raise ConnectorError(msg)


def _check_write(opts: ConnectorOptions, schema: StructType) -> StreamSpec:
    """On the driver, before any task: the stream exists and the columns fit it."""
    client = client_for(opts)
    with explained(opts, f"looking up stream {opts.stream!r}"):
        spec = client.get_stream(opts.stream).spec
    check_columns(schema, spec, opts.timestamp_column)
    if opts.key_column and opts.key_column not in schema.fieldNames():
        msg = f"option 'key_column': the DataFrame has no column {opts.key_column!r}; its columns are {schema.fieldNames()}"
        raise ConnectorError(msg)
    return spec


# --------------------------------------------------------------------------- push


class Pusher:
    """Sends one task's rows in idempotent chunks (one producer per task and stream)."""

    def __init__(
        self, opts: ConnectorOptions, spec: StreamSpec, schema: StructType, query_id: str
    ) -> None:
        self.task = TaskChunks(query_id)
        self.opts = opts
        self.spec = spec
        self.mapping = check_columns(schema, spec, opts.timestamp_column)
        self.ts_column = next(iter(self.mapping))
        self.keyed = KeyedStreams(opts) if opts.key_column else None
        self.msg = MtaCommitMessage(self.task.partition, self.task.attempt)

    def send(self, chunk: Any) -> None:
        if self.keyed is None:
            self._append(client_for(self.opts), self.opts.stream, chunk)
            return
        for key, part in split_by_key(chunk, self.opts.key_column):
            name = keyed_stream_name(self.opts.stream, key)
            with explained(self.opts, f"creating stream {name!r} for key {key!r}"):
                client = self.keyed.ensure(name)
            self._append(client, name, part)

    def _append(self, client: WindowClient, stream: str, chunk: Any) -> None:
        seq = self.task.next_sequence(stream)
        rows = to_stream_table(chunk, self.mapping, self.spec)
        with explained(self.opts, f"appending {rows.num_rows} rows to stream {stream!r}"):
            res = client.append(stream, rows, producer_id=self.task.producer, sequence=seq)
        m = self.msg
        m.chunks += 1
        m.rows_sent += rows.num_rows
        if res.duplicate:
            m.chunks_duplicate += 1
            m.rows_duplicate += rows.num_rows
        m.rows_applied += res.rows_applied
        m.rows_late += res.rows_late
        if stream not in m.streams:
            m.streams.append(stream)


def split_by_key(table: Any, key_column: str) -> Iterator[tuple[Any, Any]]:
    """(key, rows of that key in their order) for each key of ``table``, keys sorted."""
    import pyarrow.compute as pc

    keys = table.column(key_column)
    if table.num_rows == 0:
        return
    order = pc.sort_indices(keys)  # stable: rows of a key keep their order
    sorted_table = table.take(order)
    runs = pc.run_end_encode(sorted_table.column(key_column).combine_chunks())
    ends = runs.run_ends.to_pylist()
    values = runs.values.to_pylist()
    start = 0
    for end, key in zip(ends, values, strict=True):
        yield key, sorted_table.slice(start, end - start)
        start = end


def _summary(messages: Sequence[Any]) -> dict[str, int]:
    done = [m for m in messages if isinstance(m, MtaCommitMessage)]
    return {
        "partitions": len(done),
        "rows_sent": sum(m.rows_sent for m in done),
        "rows_applied": sum(m.rows_applied for m in done),
        "rows_late": sum(m.rows_late for m in done),
        "chunks_duplicate": sum(m.chunks_duplicate for m in done),
    }


def push(pusher: Pusher, batches: Iterator[Any]) -> MtaCommitMessage:
    """Send a partition's Arrow batches in chunks of ``batch_rows`` (sorted first by (key,
    timestamp) with option ``sort``)."""
    opts = pusher.opts
    if opts.sort:
        order = [opts.key_column] if opts.key_column else []
        batches = iter(sorted_batches(batches, [*order, pusher.ts_column]))
    for chunk in rechunk(batches, opts.batch_rows):
        pusher.send(chunk)
    return pusher.msg


class BatchWriter(DataSourceArrowWriter):
    pusher_class: type[Pusher] = Pusher

    def __init__(
        self, opts: ConnectorOptions, spec: StreamSpec, schema: StructType, write_id: str
    ) -> None:
        self.opts = opts
        self.spec = spec
        self.schema = schema
        self.write_id = write_id

    def write(self, iterator: Iterator[Any]) -> MtaCommitMessage:
        return push(self.pusher_class(self.opts, self.spec, self.schema, self.write_id), iterator)

    def commit(self, messages: list[Any]) -> None:
        log.info(
            "write %s to %s committed: %s", self.write_id, self.opts.stream, _summary(messages)
        )

    def abort(self, messages: list[Any]) -> None:
        log.warning(
            "write %s to %s aborted after %s; re-run it with option write_id=%s to resume "
            "without applying any chunk twice",
            self.write_id,
            self.opts.stream,
            _summary(messages),
            self.write_id,
        )


class StreamWriter(DataSourceStreamArrowWriter):
    pusher_class: type[Pusher] = Pusher

    def __init__(self, opts: ConnectorOptions, spec: StreamSpec, schema: StructType) -> None:
        self.opts = opts
        self.spec = spec
        self.schema = schema

    def write(self, iterator: Iterator[Any]) -> MtaCommitMessage:
        return push(self.pusher_class(self.opts, self.spec, self.schema, "stream"), iterator)

    def commit(self, messages: list[Any], batchId: int) -> None:
        log.info("batch %d to %s committed: %s", batchId, self.opts.stream, _summary(messages))

    def abort(self, messages: list[Any], batchId: int) -> None:
        log.warning("batch %d to %s aborted: %s", batchId, self.opts.stream, _summary(messages))


# --------------------------------------------------------------------------- pull

_BASE_COLUMNS = [
    StructField("stream", StringType(), False),
    StructField("key", StringType(), True),
    StructField("window", StringType(), False),
    StructField("sequence", LongType(), False),
    StructField("timestamp", TimestampType(), True),
    StructField("size", LongType(), False),
    StructField("evicted", LongType(), False),
]


def _streams_of(client: WindowClient, opts: ConnectorOptions) -> list[str]:
    """The streams a read covers: the stream, or with key_column its per-key streams (on
    every server of ``endpoint``, each where :func:`owner` puts it)."""
    client.get_stream(opts.stream)  # NOT_FOUND names the stream
    if not opts.key_column:
        return [opts.stream]
    prefix = f"{opts.stream}:"
    found = set()
    for ep in opts.endpoints:
        for s in client_for(opts, ep).list_streams():
            name = s.spec.name
            if name.startswith(prefix) and not is_scratch(name) and owner(opts, name) == ep:
                found.add(name)
    return sorted(found)


def _windows_of(
    client: WindowClient, opts: ConnectorOptions, streams: Sequence[str]
) -> list[WindowInfo]:
    template = streams[0] if streams else opts.stream
    client = client_of(opts, template)
    windows: list[WindowInfo] = client.list_windows(template)
    if opts.window:
        windows = [w for w in windows if w.spec.name == opts.window]
        if not windows:
            names = [w.spec.name for w in client.list_windows(template)]
            msg = f"option 'window': stream {template!r} has no window {opts.window!r}; its windows are {names}"
            raise ConnectorError(msg)
    return windows


def results_schema(opts: ConnectorOptions, windows: Sequence[WindowInfo]) -> StructType:
    """The base columns, then every window's outputs (one column per output name)."""
    cols = list(_BASE_COLUMNS)
    seen: dict[str, Any] = {}
    for w in windows:
        for name, dtype in output_struct_type(w.outputs):
            if name in seen:
                if seen[name] != dtype:
                    msg = f"option 'window': windows of {opts.stream!r} have an output {name!r} of two types ({seen[name].simpleString()} and {dtype.simpleString()}); read one window at a time"
                    raise ConnectorError(msg)
                continue
            if name in {c.name for c in _BASE_COLUMNS}:
                msg = f"option 'window': output {name!r} clashes with the result column {name!r}; read with a window whose outputs are named otherwise"
                raise ConnectorError(msg)
            seen[name] = dtype
            cols.append(StructField(name, dtype, True))
    return StructType(cols)


def _row(
    schema: StructType, stream: str, opts: ConnectorOptions, r: WindowResult
) -> tuple[Any, ...]:
    key = key_of_stream(opts.stream, stream) if opts.key_column else None
    base = (
        stream,
        key,
        r.window,
        r.sequence,
        datetime.fromtimestamp(r.timestamp / 1e9, tz=UTC) if r.timestamp else None,
        r.size,
        r.evicted,
    )
    rest = [
        _spark_value(f.dataType, r.values.get(f.name)) for f in schema.fields[len(_BASE_COLUMNS) :]
    ]
    return (*base, *rest)


def _slices(ranges: list[tuple[str, str, int, int]]) -> list[InputPartition]:
    """Partitions of at most 64 windows, each a list of (stream, window, after, upto)."""
    return [InputPartition(ranges[i : i + 64]) for i in range(0, len(ranges), 64)]


class ResultsReader(DataSourceReader):
    """Batch read: the current result of every window (one partition per 64 windows)."""

    def __init__(self, opts: ConnectorOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema

    def partitions(self) -> list[InputPartition]:
        client = client_for(self.opts)
        with explained(self.opts, f"listing the windows of {self.opts.stream!r}"):
            ranges = [(s, w, -1, -1) for s, w in _pairs(client, self.opts)]
        return _slices(ranges) or [InputPartition([])]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        for stream, window, _, _ in partition.value:
            with explained(self.opts, f"reading window {stream}/{window}"):
                r = client_of(self.opts, stream).query(stream, window)
            yield _row(self.schema, stream, self.opts, r)


def _pairs(client: WindowClient, opts: ConnectorOptions) -> list[tuple[str, str]]:
    streams = _streams_of(client, opts)
    out = []
    for s in streams:
        names = [w.spec.name for w in client_of(opts, s).list_windows(s)]
        out += [(s, w) for w in names if not opts.window or w == opts.window]
    return out


class ResultsStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Follows every window's results by sequence. Offsets: {"stream/window": sequence}."""

    def __init__(self, opts: ConnectorOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema
        self.target: dict[str, int] | None = None

    def _latest(self) -> dict[str, int]:
        client = client_for(self.opts)
        out = {}
        with explained(self.opts, f"reading the sequences of {self.opts.stream!r}"):
            for stream, window in _pairs(client, self.opts):
                _, latest = client_of(self.opts, stream).read_results(
                    stream, window, after_sequence=1 << 62, limit=1
                )
                out[f"{stream}/{window}"] = latest
        return out

    def initialOffset(self) -> dict[str, int]:
        if self.opts.starting_offsets == "earliest":
            return {}
        return self._latest()

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = self._latest()

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_results_per_trigger:
            return ReadMaxRows(self.opts.max_results_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        latest = self.target if self.target is not None else self._latest()
        budget = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        end = dict(start)
        for k, upto in sorted(latest.items()):
            have = start.get(k, 0)
            if upto <= have:
                continue
            take = upto - have
            if budget is not None:
                take = min(take, budget)
                budget -= take
            end[k] = have + take
            if budget == 0:
                break
        return end

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        ranges = []
        for k, upto in sorted(end.items()):
            after = start.get(k, 0)
            if upto > after:
                stream, _, window = k.rpartition("/")
                ranges.append((stream, window, after, upto))
        return _slices(ranges)

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        for stream, window, after, upto in partition.value:
            client = client_of(self.opts, stream)
            cursor = after
            while cursor < upto:
                with explained(self.opts, f"reading results of {stream}/{window}"):
                    got, _ = client.read_results(
                        stream, window, after_sequence=cursor, limit=min(1000, upto - cursor)
                    )
                got = [r for r in got if r.sequence <= upto]
                if not got:
                    break
                for r in got:
                    yield _row(self.schema, stream, self.opts, r)
                cursor = got[-1].sequence

    def commit(self, end: dict[str, int]) -> None:
        pass

    def stop(self) -> None:
        pass


__all__ = [
    "BatchWriter",
    "MtaCommitMessage",
    "MtaWindowsDataSource",
    "ResultsReader",
    "ResultsStreamReader",
    "StreamWriter",
    "results_schema",
    "split_by_key",
]
