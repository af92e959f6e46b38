"""The data source's readers: ``spark.read`` (:class:`ResultsReader`, one row per window with
its current result) and ``spark.readStream`` (:class:`ResultsStreamReader`, every result by its
sequence: offsets ``{"stream/window": sequence}``, kept by the server, so a streaming query sees
every result the server still holds). With ``key_column`` they read every per-key stream of
``stream`` (listed by every member of the cluster), each from the server that holds it."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import UTC, datetime

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    DataType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from mtawindows.client import WindowInfo, WindowResult, key_of_stream

from .clients import client_for, client_of
from .connector_errors import ConnectorError, explained
from .options import ConnectorOptions
from .schemas import output_struct_type
from .streams import is_scratch

Range = tuple[str, str, int, int]  # (stream, window, after sequence, up to sequence)
Offsets = dict[str, int]  # {"stream/window": sequence}

_BASE_COLUMNS = [
    StructField("stream", StringType(), False),
    StructField("key", StringType(), True),
    StructField("window", StringType(), False),
    StructField("sequence", LongType(), False),
    StructField("timestamp", TimestampType(), True),
    StructField("size", LongType(), False),
    StructField("evicted", LongType(), False),
]


# --------------------------------------------------------------------------- what a read covers


def _streams_of(opts: ConnectorOptions) -> list[str]:
    """The streams a read covers: the stream, or with key_column its per-key streams (every
    member of the cluster lists those it owns; the client merges the lists)."""
    client = client_for(opts)
    client.get_stream(opts.stream)  # NOT_FOUND names the stream
    if not opts.key_column:
        return [opts.stream]
    names = [s.spec.name for s in client.list_streams()]
    return sorted(
        n for n in names if key_of_stream(opts.stream, n) is not None and not is_scratch(n)
    )


def _windows_of(opts: ConnectorOptions, streams: Sequence[str]) -> list[WindowInfo]:
    """The windows read (option ``window``, or all), as the first of ``streams`` has them."""
    template = streams[0] if streams else opts.stream
    client = client_of(opts, template)
    windows = client.list_windows(template)
    if opts.window:
        windows = [w for w in windows if w.spec.name == opts.window]
        if not windows:
            names = [w.spec.name for w in client.list_windows(template)]
            msg = f"option 'window': stream {template!r} has no window {opts.window!r}; its windows are {names}"
            raise ConnectorError(msg)
    return windows


def _pairs(opts: ConnectorOptions) -> list[tuple[str, str]]:
    """Every (stream, window) a read covers."""
    out = []
    for s in _streams_of(opts):
        names = [w.spec.name for w in client_of(opts, s).list_windows(s)]
        out += [(s, w) for w in names if not opts.window or w == opts.window]
    return out


def _slices(ranges: list[Range]) -> list[InputPartition]:
    """Partitions of at most 64 windows, each a list of (stream, window, after, upto)."""
    return [InputPartition(ranges[i : i + 64]) for i in range(0, len(ranges), 64)]


# --------------------------------------------------------------------------- rows


def read_schema(opts: ConnectorOptions) -> StructType:
    """The schema of a read with ``opts`` (asked of the servers, on the driver)."""
    with explained(opts, f"reading the windows of stream {opts.stream!r}"):
        windows = _windows_of(opts, _streams_of(opts)[:1])
    return results_schema(opts, windows)


def results_schema(opts: ConnectorOptions, windows: Sequence[WindowInfo]) -> StructType:
    """The base columns, then every window's outputs (one column per output name)."""
    cols = list(_BASE_COLUMNS)
    seen: dict[str, DataType] = {}
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


def _spark_value(dtype: DataType, v: object) -> object:
    """A result value as Spark takes it in a row: timestamps (ns) as datetimes, structs as
    tuples."""
    if v is None:
        return None
    if isinstance(dtype, TimestampType) and isinstance(v, int):
        return datetime.fromtimestamp(v / 1e9, tz=UTC)
    if isinstance(dtype, StructType) and isinstance(v, dict):
        return tuple(_spark_value(f.dataType, v.get(f.name)) for f in dtype.fields)
    return v


def _row(
    schema: StructType, stream: str, opts: ConnectorOptions, r: WindowResult
) -> tuple[object, ...]:
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


# --------------------------------------------------------------------------- the readers


class ResultsReader(DataSourceReader):
    """Batch read: the current result of every window (one partition per 64 windows)."""

    def __init__(self, opts: ConnectorOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema

    def partitions(self) -> list[InputPartition]:
        with explained(self.opts, f"listing the windows of {self.opts.stream!r}"):
            ranges = [(s, w, -1, -1) for s, w in _pairs(self.opts)]
        return _slices(ranges) or [InputPartition([])]

    def read(self, partition: InputPartition) -> Iterator[tuple[object, ...]]:
        for stream, window, _, _ in partition.value:
            with explained(self.opts, f"reading window {stream}/{window}"):
                r = client_of(self.opts, stream).query(stream, window)
            yield _row(self.schema, stream, self.opts, r)


class ResultsStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Follows every window's results by sequence. Offsets: {"stream/window": sequence}."""

    def __init__(self, opts: ConnectorOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema
        self.target: Offsets | None = None

    def _latest(self) -> Offsets:
        out = {}
        with explained(self.opts, f"reading the sequences of {self.opts.stream!r}"):
            for stream, window in _pairs(self.opts):
                _, latest = client_of(self.opts, stream).read_results(
                    stream, window, after_sequence=1 << 62, limit=1
                )
                out[f"{stream}/{window}"] = latest
        return out

    def initialOffset(self) -> Offsets:
        if self.opts.starting_offsets == "earliest":
            return {}
        return self._latest()

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = self._latest()

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_results_per_trigger:
            return ReadMaxRows(self.opts.max_results_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
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

    def partitions(self, start: Offsets, end: Offsets) -> list[InputPartition]:
        ranges = []
        for k, upto in sorted(end.items()):
            after = start.get(k, 0)
            if upto > after:
                stream, _, window = k.rpartition("/")
                ranges.append((stream, window, after, upto))
        return _slices(ranges)

    def read(self, partition: InputPartition) -> Iterator[tuple[object, ...]]:
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

    def commit(self, end: Offsets) -> None:
        pass

    def stop(self) -> None:
        pass


__all__ = ["ResultsReader", "ResultsStreamReader", "read_schema", "results_schema"]
