"""Reads of hopping windows (a window with a slide): one row per boundary, paged through
ReadResults (the server keeps each window's last ``--result-history`` boundaries, 1000 by
default: a read gives those).

    spark.read.format("mtawindows").option("endpoint", ...).option("stream", "cpu") \\
        .option("window", "every_10s").load()

A read whose windows (option ``window``, or all of the stream's) are all hopping gives the
columns of :data:`BOUNDARY_COLUMNS`, then the windows' outputs: ``boundary`` as the server
numbers it (nanoseconds since the epoch for a time slide, the stream's row count for a slide
in rows), ``window_end`` (= the boundary, a time slide) and ``window_start`` (the boundary
minus the range, a time range) as Spark timestamps, the rows in it (``size``). A read mixing
hopping and other windows gives one row per window as any read does (each hopping window's
last closed boundary). ``spark.readStream`` of hopping windows follows their boundaries by
sequence with the same columns.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import DataType, LongType, StringType, StructField, StructType, TimestampType

from mtawindows.client import WindowClient, WindowInfo, WindowResult, WindowSpec

from .clients import client_for
from .connector_errors import ConnectorError, explained
from .options import ConnectorOptions
from .readers import ResultsStreamReader, _spark_value, _spec_of, _windows_of
from .schemas import output_struct_type

PAGE = 1000  # results per ReadResults call (the server's default history)

BOUNDARY_COLUMNS = [
    StructField("stream", StringType(), False),
    StructField("window", StringType(), False),
    StructField("sequence", LongType(), False),
    StructField("boundary", LongType(), False),
    StructField("window_start", TimestampType(), True),
    StructField("window_end", TimestampType(), True),
    StructField("size", LongType(), False),
]
_BOUNDARY_NAMES = frozenset(c.name for c in BOUNDARY_COLUMNS)


@dataclass(frozen=True)
class Edges:
    """How a window's boundary becomes ``window_start`` / ``window_end``: for a time slide
    the end is the boundary (ns), the start the end minus ``range_ns`` (0: a count range, no
    start); a slide in rows has neither."""

    time_slide: bool
    range_ns: int

    @classmethod
    def of(cls, spec: WindowSpec) -> Edges:
        rng = spec.policy.range if spec.policy.kind == "time_range" else timedelta(0)
        return cls(isinstance(spec.slide, timedelta), _ns(rng))

    def times(self, boundary: int) -> tuple[datetime | None, datetime | None]:
        if not self.time_slide:
            return None, None
        end = _when(boundary)
        return (_when(boundary - self.range_ns) if self.range_ns else None), end


def _ns(d: timedelta) -> int:
    return (d.days * 86_400 + d.seconds) * 1_000_000_000 + d.microseconds * 1000


def _when(ns: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=ns // 1000)


def hopping_windows(opts: ConnectorOptions) -> list[WindowInfo] | None:
    """The windows of a read when it reads hopping windows only (one row per boundary);
    None for any other read."""
    if _spec_of(opts).key:  # a keyed stream holds no hopping window
        return None
    windows = _windows_of(opts)
    if not windows or any(w.spec.slide is None for w in windows):
        return None
    return windows


def boundaries_schema(opts: ConnectorOptions, windows: Sequence[WindowInfo]) -> StructType:
    """:data:`BOUNDARY_COLUMNS`, then every window's outputs."""
    stream = _spec_of(opts)
    cols = list(BOUNDARY_COLUMNS)
    seen: dict[str, DataType] = {c.name: c.dataType for c in BOUNDARY_COLUMNS}
    for w in windows:
        for name, dtype in output_struct_type(w.outputs, w.spec, stream):
            if name in seen and seen[name] == dtype and name not in _BOUNDARY_NAMES:
                continue
            if name in seen:
                msg = f"option 'window': output {name!r} of window {w.spec.name!r} clashes with a column of that name ({seen[name].simpleString()}); read one window at a time, or one whose outputs are named otherwise"
                raise ConnectorError(msg)
            seen[name] = dtype
            cols.append(StructField(name, dtype, True))
    return StructType(cols)


def boundary_row(
    schema: StructType, stream: str, edges: Edges, r: WindowResult
) -> tuple[object, ...]:
    start, end = edges.times(r.boundary)
    base = (stream, r.window, r.sequence, r.boundary, start, end, r.size)
    rest = schema.fields[len(BOUNDARY_COLUMNS) :]
    return (*base, *(_spark_value(f.dataType, r.values.get(f.name)) for f in rest))


def page_results(
    opts: ConnectorOptions, client: WindowClient, window: str, after: int, upto: int
) -> Iterator[WindowResult]:
    """The results of ``window`` numbered ``after + 1`` to ``upto`` that the server still
    keeps, oldest first, :data:`PAGE` a call."""
    stream = opts.stream
    cursor = after
    while cursor < upto:
        with explained(opts, f"reading the boundaries of {stream}/{window}"):
            got, _ = client.read_results(
                stream, window, after_sequence=cursor, limit=min(PAGE, upto - cursor)
            )
        got = [r for r in got if r.sequence <= upto]
        if not got:
            return
        yield from got
        cursor = got[-1].sequence


def _edges(windows: Sequence[WindowInfo]) -> dict[str, Edges]:
    return {w.spec.name: Edges.of(w.spec) for w in windows}


class BoundariesReader(DataSourceReader):
    """Batch read of hopping windows: every boundary the server keeps, up to the latest when
    the read is planned (one partition per window)."""

    def __init__(
        self, opts: ConnectorOptions, schema: StructType, windows: Sequence[WindowInfo]
    ) -> None:
        self.opts = opts
        self.schema = schema
        self.edges = _edges(windows)

    def partitions(self) -> list[InputPartition]:
        client = client_for(self.opts)
        parts = []
        for window in self.edges:
            with explained(self.opts, f"reading the sequence of {self.opts.stream}/{window}"):
                _, latest = client.read_results(
                    self.opts.stream, window, after_sequence=1 << 62, limit=1
                )
            parts.append(InputPartition((window, latest)))
        return parts

    def read(self, partition: InputPartition) -> Iterator[tuple[object, ...]]:
        window, latest = partition.value
        client = client_for(self.opts)
        edges = self.edges[window]
        for r in page_results(self.opts, client, window, 0, latest):
            yield boundary_row(self.schema, self.opts.stream, edges, r)


class BoundariesStreamReader(ResultsStreamReader):
    """``spark.readStream`` of hopping windows: every boundary by its sequence, with the
    columns of :class:`BoundariesReader`."""

    def __init__(
        self, opts: ConnectorOptions, schema: StructType, windows: Sequence[WindowInfo]
    ) -> None:
        super().__init__(opts, schema)
        self.edges = _edges(windows)

    def read(self, partition: InputPartition) -> Iterator[tuple[object, ...]]:
        client = client_for(self.opts)
        for window, after, upto in partition.value:
            edges = self.edges[window]
            for r in page_results(self.opts, client, window, after, upto):
                yield boundary_row(self.schema, self.opts.stream, edges, r)


__all__ = [
    "BOUNDARY_COLUMNS",
    "BoundariesReader",
    "BoundariesStreamReader",
    "Edges",
    "boundaries_schema",
    "boundary_row",
    "hopping_windows",
    "page_results",
]
