"""The data source's readers: ``spark.read`` (:class:`ResultsReader`, one row per window with
its current result; of a keyed stream, one row per (key, window)) and ``spark.readStream``
(:class:`ResultsStreamReader`, every result by its sequence: offsets ``{"stream/window":
sequence}``, kept by the server, so a streaming query sees every result the server still holds;
keyed streams keep no such log and are refused).

A keyed stream's read walks its keys with ListKeys pages (10,000 keys a call) on the driver,
one partition per :data:`KEYS_PER_PARTITION` keys, and each task asks GetKey for every key of
its slice (all windows of a key in one call, a few calls in flight at once). Options ``keys`` and
``key_prefix``, and Spark filters on column ``key`` (``=``, ``IN``, ``startswith``: pushed down
by :class:`KeyFilterReader`), narrow the keys before any of that.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    DataType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from mtawindows.client import KeyInfo, NotFoundError, StreamSpec, WindowInfo, WindowResult
from mtawindows.v1.keys import possible_key
from mtawindows.v1.reasons import Reason

from .clients import client_for
from .connector_errors import ConnectorError, explained
from .options import ConnectorOptions
from .schemas import output_struct_type
from .streams import check_key

if TYPE_CHECKING:
    from pyspark.sql.datasource import Filter

Range = tuple[str, int, int]  # (window, after sequence, up to sequence)
Offsets = dict[str, int]  # {"stream/window": sequence}

KEYS_PER_PARTITION = 1000  # keys a batch-read task asks GetKey for
KEYS_PER_PAGE = 10_000  # keys per ListKeys call (the server's most)
GETS_IN_FLIGHT = 8  # GetKey calls a task has in flight at once

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


def _spec_of(opts: ConnectorOptions) -> StreamSpec:
    """The stream's spec (NOT_FOUND names the stream); option key_column must be its key."""
    with explained(opts, f"looking up stream {opts.stream!r}"):
        spec = client_for(opts).get_stream(opts.stream).spec
    check_key(spec, opts.key_column)
    return spec


def _windows_of(opts: ConnectorOptions) -> list[WindowInfo]:
    """The windows read (option ``window``, or all)."""
    with explained(opts, f"reading the windows of stream {opts.stream!r}"):
        windows = client_for(opts).list_windows(opts.stream)
    if opts.window:
        chosen = [w for w in windows if w.spec.name == opts.window]
        if not chosen:
            names = [w.spec.name for w in windows]
            msg = f"option 'window': stream {opts.stream!r} has no window {opts.window!r}; its windows are {names}"
            raise ConnectorError(msg)
        return chosen
    return windows


@dataclass(frozen=True)
class KeyFilter:
    """The keys a read is limited to: exactly ``keys`` (None: any) starting with ``prefix``;
    ``nothing``: no key at all (filters that contradict each other)."""

    keys: frozenset[str] | None = None
    prefix: str = ""
    nothing: bool = False

    @classmethod
    def of(cls, opts: ConnectorOptions) -> KeyFilter:
        keys = None if opts.keys is None else frozenset(opts.keys)
        return cls(keys, opts.key_prefix)

    @property
    def narrowed(self) -> bool:
        return self.nothing or self.keys is not None or bool(self.prefix)

    def only(self, keys: Sequence[str]) -> KeyFilter:
        """Also: the key is one of ``keys``."""
        got = frozenset(keys) if self.keys is None else self.keys & frozenset(keys)
        return replace(self, keys=got)

    def starting(self, prefix: str) -> KeyFilter:
        """Also: the key starts with ``prefix``."""
        if prefix.startswith(self.prefix):
            return replace(self, prefix=prefix)
        if self.prefix.startswith(prefix):
            return self
        return replace(self, nothing=True)

    def listed(self) -> list[str] | None:
        """The keys named outright that pass the prefix, in key order (None: not named)."""
        if self.keys is None:
            return None
        return sorted(k for k in self.keys if k.startswith(self.prefix))


def _keys_of(opts: ConnectorOptions, wanted: KeyFilter) -> list[str]:
    """The keys a read of a keyed stream covers, in key order: those named, or ListKeys pages
    of the keys starting with the prefix."""
    if wanted.nothing:
        return []
    named = wanted.listed()
    if named is not None:
        return named
    client = client_for(opts)
    with explained(opts, f"listing the keys of stream {opts.stream!r}"):
        return [
            k.key
            for k in client.iter_keys(opts.stream, prefix=wanted.prefix, page_size=KEYS_PER_PAGE)
        ]


# --------------------------------------------------------------------------- rows


def read_schema(opts: ConnectorOptions) -> StructType:
    """The schema of a read with ``opts`` (asked of the servers, on the driver)."""
    spec = _spec_of(opts)
    return results_schema(opts, _windows_of(opts), spec)


def results_schema(
    opts: ConnectorOptions, windows: Sequence[WindowInfo], stream: StreamSpec | None = None
) -> StructType:
    """The base columns, then every window's outputs (one column per output name)."""
    cols = list(_BASE_COLUMNS)
    seen: dict[str, DataType] = {}
    for w in windows:
        for name, dtype in output_struct_type(w.outputs, w.spec, stream):
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
    if isinstance(dtype, ArrayType) and isinstance(v, list):  # quantiles, top_k
        return [_spark_value(dtype.elementType, x) for x in v]
    return v


def _row(schema: StructType, stream: str, key: str | None, r: WindowResult) -> tuple[object, ...]:
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


@dataclass(frozen=True)
class _Part:
    """What one batch-read task reads: ``windows`` of the stream, or with ``keys`` (a keyed
    stream) of each of those keys."""

    windows: tuple[str, ...]
    keys: tuple[str, ...] | None = None


class ResultsReader(DataSourceReader):
    """Batch read: the current result of every window; of a keyed stream, of every (key,
    window) the options let through (one partition per :data:`KEYS_PER_PARTITION` keys)."""

    def __init__(self, opts: ConnectorOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema
        self.wanted = KeyFilter.of(opts)

    def partitions(self) -> list[InputPartition]:
        spec = _spec_of(self.opts)
        windows = tuple(w.spec.name for w in _windows_of(self.opts))
        if not spec.key:
            if self.opts.keys is not None or self.opts.key_prefix:
                option = "keys" if self.opts.keys is not None else "key_prefix"
                msg = f"option {option!r}: stream {self.opts.stream!r} is not keyed"
                raise ConnectorError(msg)
            # a filter on column key: null in every row of an unkeyed stream, so none passes
            return [InputPartition(_Part(() if self.wanted.narrowed else windows))]
        int_keys = any(f.name == spec.key and str(f.type) == "INT64" for f in spec.fields)
        # a key filter may name keys no row could make ('' or, on INT64 keys, "007"): no rows
        keys = [k for k in _keys_of(self.opts, self.wanted) if possible_key(k, int_keys)]
        n = KEYS_PER_PARTITION
        parts = [_Part(windows, tuple(keys[i : i + n])) for i in range(0, len(keys), n)]
        return [InputPartition(p) for p in parts] or [InputPartition(_Part(()))]

    def read(self, partition: InputPartition) -> Iterator[tuple[object, ...]]:
        part: _Part = partition.value
        stream = self.opts.stream
        client = client_for(self.opts)
        suffix: dict[str, Any] = {"range": self.opts.range, "count": self.opts.count or None}
        if part.keys is None:
            for window in part.windows:
                with explained(self.opts, f"reading window {stream}/{window}"):
                    r = client.query(stream, window, **suffix)
                yield _row(self.schema, stream, None, r)
            return
        if self.opts.range is not None or self.opts.count:
            yield from self._key_suffixes(client, part, suffix)
            return

        def get(key: str) -> KeyInfo | None:
            try:
                with explained(self.opts, f"reading key {key!r} of stream {stream!r}"):
                    return client.get_key(stream, key)
            except ConnectorError as ex:  # a key gone since it was listed (or never there)
                cause = ex.__cause__
                if isinstance(cause, NotFoundError) and cause.reason == Reason.KEY_NOT_FOUND:
                    return None
                raise

        with ThreadPoolExecutor(GETS_IN_FLIGHT, thread_name_prefix="mtaw-read") as pool:
            for info in pool.map(get, part.keys):
                if info is None:
                    continue
                for window in part.windows:
                    got = info.results.get(window)
                    if got is not None:
                        yield _row(self.schema, stream, info.key, got)

    def _key_suffixes(
        self, client: Any, part: _Part, suffix: dict[str, Any]
    ) -> Iterator[tuple[object, ...]]:
        """Options ``range`` / ``count`` on a keyed stream: each (key, window)'s Query over
        that suffix (GetKey answers whole windows only), a few calls in flight."""
        stream = self.opts.stream

        def query(key: str) -> list[WindowResult]:
            out = []
            for window in part.windows:
                try:
                    with explained(self.opts, f"reading key {key!r} of {stream}/{window}"):
                        out.append(client.query(stream, window, key=key, **suffix))
                except ConnectorError as ex:  # a key gone since it was listed
                    cause = ex.__cause__
                    if isinstance(cause, NotFoundError) and cause.reason == Reason.KEY_NOT_FOUND:
                        return []
                    raise
            return out

        with ThreadPoolExecutor(GETS_IN_FLIGHT, thread_name_prefix="mtaw-read") as pool:
            for key, results in zip(part.keys or (), pool.map(query, part.keys or ()), strict=True):
                for r in results:
                    yield _row(self.schema, stream, key, r)


class KeyFilterReader(ResultsReader):
    """:class:`ResultsReader` that takes Spark's filters on column ``key`` (``=``, ``IN``,
    ``startswith``) as the keys to read (Spark >= 4.1 with
    ``spark.sql.python.filterPushdown.enabled``, which :func:`~.register` turns on)."""

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        from pyspark.sql.datasource import EqualTo, In, StringStartsWith

        for f in filters:
            if getattr(f, "attribute", None) != ("key",):
                yield f
            elif isinstance(f, EqualTo) and isinstance(f.value, str):
                self.wanted = self.wanted.only([f.value])
            elif isinstance(f, In) and all(isinstance(v, str) for v in f.value):
                self.wanted = self.wanted.only(list(f.value))
            elif isinstance(f, StringStartsWith):
                self.wanted = self.wanted.starting(f.value)
            else:
                yield f


class ResultsStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Follows every window's results by sequence. Offsets: {"stream/window": sequence}."""

    def __init__(self, opts: ConnectorOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema
        self.target: Offsets | None = None
        if opts.range is not None or opts.count:
            option = "range" if opts.range is not None else "count"
            msg = (
                f"option {option!r}: a query-time range is for spark.read (each window's "
                "current result over its newest rows); spark.readStream follows every result "
                "of the whole windows"
            )
            raise ConnectorError(msg)
        if _spec_of(opts).key:
            msg = (
                f"option 'stream': stream {opts.stream!r} is keyed, and spark.readStream "
                "follows a window's results by sequence (ReadResults), which a keyed stream "
                "does not keep; read its current results per key with spark.read, or follow "
                "them with WindowClient.subscribe(stream, window, keys=...)"
            )
            raise ConnectorError(msg)

    def _latest(self) -> Offsets:
        out = {}
        stream = self.opts.stream
        client = client_for(self.opts)
        with explained(self.opts, f"reading the sequences of {stream!r}"):
            for w in _windows_of(self.opts):
                window = w.spec.name
                _, latest = client.read_results(stream, window, after_sequence=1 << 62, limit=1)
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
        ranges: list[Range] = []
        for k, upto in sorted(end.items()):
            after = start.get(k, 0)
            if upto > after:
                ranges.append((k.rpartition("/")[2], after, upto))
        # partitions of at most 64 windows
        return [InputPartition(ranges[i : i + 64]) for i in range(0, len(ranges), 64)]

    def read(self, partition: InputPartition) -> Iterator[tuple[object, ...]]:
        stream = self.opts.stream
        client = client_for(self.opts)
        for window, after, upto in partition.value:
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
                    yield _row(self.schema, stream, None, r)
                cursor = got[-1].sequence

    def commit(self, end: Offsets) -> None:
        pass

    def stop(self) -> None:
        pass


__all__ = [
    "KeyFilter",
    "KeyFilterReader",
    "ResultsReader",
    "ResultsStreamReader",
    "read_schema",
    "results_schema",
]
