"""What the data source and the transform share: options, clients, per-key streams, types.

Everything here runs on the driver and on the executors' Python workers; nothing holds a gRPC
channel at import or in an object that Spark pickles: :func:`client_for` opens one per worker
process (a module-level cache; Spark reuses workers) the first time a task asks.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from mtawindows.client import (
    AlreadyExistsError,
    MtaWindowsError,
    NotFoundError,
    OutOfOrderError,
    StreamSpec,
    UnavailableError,
    WindowClient,
    WindowInfo,
)


class ConnectorError(RuntimeError):
    """A connector failure; the message names the option or column at fault."""


# --------------------------------------------------------------------------- options

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off", ""}


@dataclass(frozen=True)
class ConnectorOptions:
    """The options of format ``"mtawindows"`` (case-insensitive keys, as Spark passes them).

    endpoint           host:port of ``mtawindows serve`` (required); or several, comma-separated:
                       a shard of servers, each per-key stream on one of them (by a hash of
                       its name), the stream definitions read from the first
    stream             the stream to write to / read from (required)
    timestamp_column   the DataFrame column holding each row's time (default: the stream's
                       timestamp field)
    key_column         write each key's rows to its own stream ``<stream>:<key>`` made from
                       ``stream`` (same schema and windows); read those streams back
    window             read: only this window (default all)
    token / tls        bearer token; "true" (system roots) or a CA file path
    batch_rows         rows per Append (default 10000)
    sort               "true": buffer each partition and send it sorted by (key, timestamp);
                       streaming DataFrames need it (Spark cannot sort them), batch ones can
                       sortWithinPartitions instead (default "false")
    write_id           batch writes: the idempotency id; the same id re-run applies nothing twice
                       (default a new id per write)
    starting_offsets   stream reads: "latest" (default: results from now on) or "earliest" (the
                       results the server still keeps)
    max_results_per_trigger  stream reads: a cap per micro-batch (default none)
    timeout            seconds per call (default 60)
    """

    endpoint: str
    stream: str
    timestamp_column: str = ""
    key_column: str = ""
    window: str = ""
    token: str | None = None
    tls: bool | str | None = None
    batch_rows: int = 10_000
    sort: bool = False
    write_id: str = ""
    starting_offsets: str = "latest"
    max_results_per_trigger: int = 0
    timeout: float = 60.0

    @property
    def endpoints(self) -> tuple[str, ...]:
        """The servers: ``endpoint`` split at commas; the first holds the template stream."""
        return split_endpoints(self.endpoint)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ConnectorOptions:
        opts: dict[str, str] = {}
        for k, v in options.items():
            raw = str(k)
            canon = _ALIASES.get(raw.lower().replace("_", "").replace("-", ""))
            if canon is None:
                msg = f"option {raw!r}: unknown option of format 'mtawindows'; the options are {sorted(set(_ALIASES.values()) - _SPARK_OWN)}"
                raise ConnectorError(msg)
            opts[canon] = str(v)
        endpoint = opts.get("endpoint", "").strip()
        if not endpoint:
            msg = "option 'endpoint': required, e.g. .option('endpoint', 'localhost:50051')"
            raise ConnectorError(msg)
        split_endpoints(endpoint)  # names a bad list here, on the driver
        stream = opts.get("stream", "")
        if not stream:
            msg = "option 'stream': required, the name of an mtawindows stream"
            raise ConnectorError(msg)
        tls_raw = opts.get("tls", "")
        tls: bool | str | None
        if tls_raw.lower() in _TRUE:
            tls = True
        elif tls_raw.lower() in _FALSE:
            tls = None
        else:
            tls = tls_raw
        starting = opts.get("starting_offsets", "latest").lower()
        if starting not in ("latest", "earliest"):
            msg = f"option 'starting_offsets': expected 'latest' or 'earliest', got {starting!r}"
            raise ConnectorError(msg)
        return cls(
            endpoint=endpoint,
            stream=stream,
            timestamp_column=opts.get("timestamp_column", ""),
            key_column=opts.get("key_column", ""),
            window=opts.get("window", ""),
            token=opts.get("token") or None,
            tls=tls,
            batch_rows=_positive_int(opts, "batch_rows", 10_000),
            sort=_flag(opts, "sort"),
            write_id=opts.get("write_id", ""),
            starting_offsets=starting,
            max_results_per_trigger=_positive_int(opts, "max_results_per_trigger", 0, zero=True),
            timeout=float(_positive_int(opts, "timeout", 60)),
        )


# canonical option names by their spelling without case, "_" or "-" (Spark lower-cases keys);
# the camelCase and short forms users write for other sources are accepted too
_ALIASES: dict[str, str] = {
    "endpoint": "endpoint",
    "target": "endpoint",
    "stream": "stream",
    "path": "stream",  # DataFrameWriter.save(name) / load(name)
    "timestampcolumn": "timestamp_column",
    "timestampcol": "timestamp_column",
    "tscol": "timestamp_column",
    "tscolumn": "timestamp_column",
    "keycolumn": "key_column",
    "keycol": "key_column",
    "window": "window",
    "token": "token",
    "tls": "tls",
    "batchrows": "batch_rows",
    "batchsize": "batch_rows",
    "sort": "sort",
    "writeid": "write_id",
    "startingoffsets": "starting_offsets",
    "maxresultspertrigger": "max_results_per_trigger",
    "timeout": "timeout",
    "checkpointlocation": "checkpointlocation",  # Spark's own
}
_SPARK_OWN = {"checkpointlocation"}


def _flag(opts: Mapping[str, str], name: str) -> bool:
    raw = opts.get(name, "").lower()
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    msg = f"option {name!r}: expected true or false, got {raw!r}"
    raise ConnectorError(msg)


def _positive_int(opts: Mapping[str, str], name: str, default: int, *, zero: bool = False) -> int:
    raw = opts.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0 or (value == 0 and not zero):
        msg = f"option {name!r}: expected a whole number {'>= 0' if zero else '> 0'}, got {raw!r}"
        raise ConnectorError(msg)
    return value


# --------------------------------------------------------------------------- clients

_clients: dict[tuple[str, str | None, str], WindowClient] = {}
_clients_lock = threading.Lock()


def split_endpoints(raw: str) -> tuple[str, ...]:
    """``"host:port"`` or ``"a:1,b:2"`` as a tuple of distinct, non-empty endpoints."""
    parts = tuple(p.strip() for p in raw.split(","))
    if not raw.strip() or not all(parts):
        msg = (
            f"option 'endpoint': expected host:port or a comma-separated list of them, got {raw!r}"
        )
        raise ConnectorError(msg)
    if len(set(parts)) != len(parts):
        msg = f"option 'endpoint': a server is listed twice in {raw!r}"
        raise ConnectorError(msg)
    return parts


def owner(opts: ConnectorOptions, stream: str) -> str:
    """The endpoint that holds ``stream``: the first one for the template stream (and with a
    single server), else the one a hash of the stream's name picks (the same in every
    process, so a key's stream always lands on the same server)."""
    eps = opts.endpoints
    if len(eps) == 1 or stream == opts.stream:
        return eps[0]
    h = int.from_bytes(hashlib.sha256(stream.encode()).digest()[:8], "big")
    return eps[h % len(eps)]


def client_for(opts: ConnectorOptions, endpoint: str | None = None) -> WindowClient:
    """This process's client of ``endpoint`` (default: the first of ``opts.endpoint``), one
    channel per server, reused by tasks."""
    target = endpoint or opts.endpoints[0]
    key = (target, opts.token, repr(opts.tls))
    with _clients_lock:
        c = _clients.get(key)
        if c is None:
            c = _clients[key] = WindowClient(
                target, token=opts.token, tls=opts.tls, timeout=opts.timeout
            )
        return c


def client_of(opts: ConnectorOptions, stream: str) -> WindowClient:
    """The client of the server that holds ``stream`` (see :func:`owner`)."""
    return client_for(opts, owner(opts, stream))


@contextmanager
def explained(opts: ConnectorOptions, what: str) -> Iterator[None]:
    """Turn the SDK's errors into a :class:`ConnectorError` naming the option at fault."""
    try:
        yield
    except ConnectorError:
        raise
    except UnavailableError as ex:
        where = ex.target or opts.endpoint  # the one server of several that failed
        msg = (
            f"option 'endpoint': cannot reach mtawindows at {where!r} while {what}: "
            f"{ex}. Is `mtawindows serve` running there?"
        )
        raise ConnectorError(msg) from ex
    except NotFoundError as ex:
        msg = f"option 'stream': {what}: {ex}"
        raise ConnectorError(msg) from ex
    except OutOfOrderError as ex:
        msg = (
            f"{what}: {ex}. mtawindows needs each stream's rows in timestamp order: sort them "
            "(within each key: repartition by the key and sortWithinPartitions(key, timestamp)), "
            "or create the stream with late_policy DROP (late rows skipped and counted)"
        )
        raise ConnectorError(msg) from ex
    except MtaWindowsError as ex:
        msg = f"{what}: {ex}"
        raise ConnectorError(msg) from ex


# --------------------------------------------------------------------------- per-key streams

_SAFE_KEY = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")


def keyed_stream_name(stream: str, key: Any) -> str:
    """The stream holding ``key``'s rows of ``stream``: ``<stream>:<key>`` when the key is made
    of letters, digits, ``_ . -`` (at most 100), else ``<stream>:~<hash of the key>``."""
    text = "" if key is None else str(key)
    if key is not None and _SAFE_KEY.match(text):
        return f"{stream}:{text}"
    digest = hashlib.sha256(("\0null" if key is None else text).encode()).hexdigest()[:24]
    return f"{stream}:~{digest}"


# batch sliding_aggregate's per-task scratch streams end with this, then the run and task ids
SCRATCH_MARK = "~scratch."


def is_scratch(name: str) -> bool:
    return SCRATCH_MARK in name


def key_of_stream(stream: str, name: str) -> str | None:
    """The key part of a per-key stream name (the hash for hashed keys); None for others."""
    prefix = f"{stream}:"
    return name[len(prefix) :] if name.startswith(prefix) else None


class KeyedStreams:
    """Creates per-key streams from the template stream (on the first server) on first use,
    once per process, each on the server that holds it (:func:`owner`)."""

    _known: ClassVar[set[tuple[str, str]]] = set()
    _lock = threading.Lock()

    def __init__(self, opts: ConnectorOptions) -> None:
        self.opts = opts
        self.template = opts.stream
        self._spec: StreamSpec | None = None
        self._windows: list[WindowInfo] | None = None

    def _load(self) -> tuple[StreamSpec, list[WindowInfo]]:
        if self._spec is None or self._windows is None:
            primary = client_for(self.opts)
            self._spec = primary.get_stream(self.template).spec
            self._windows = primary.list_windows(self.template)
        return self._spec, self._windows

    def ensure(self, name: str, *, known: bool = True) -> WindowClient:
        """Make sure stream ``name`` exists with every window of the template; returns the
        client of the server that holds it."""
        client = client_of(self.opts, name)
        marker = (client.target, name)
        if known and marker in self._known:
            return client
        spec, windows = self._load()
        with suppress(AlreadyExistsError):
            client.create_stream(replace(spec, name=name))
        have = set(client.get_stream(name).windows)
        for w in windows:
            if w.spec.name in have:
                continue
            with suppress(AlreadyExistsError):
                client.create_window(replace(w.spec, stream=name))
        with self._lock:
            self._known.add(marker)
        return client


# --------------------------------------------------------------------------- tasks and chunks

CHUNKS_PER_BATCH = 1 << 20  # sequence = batch id * CHUNKS_PER_BATCH + chunk number + 1


class TaskChunks:
    """This Spark task and the idempotency key of every chunk it sends: producer
    ``spark:<query id>:<partition>`` (``query_id`` stands in outside a streaming query) and,
    per target stream, sequence ``batch id * 2**20 + chunk number + 1``. A retried task or a
    replayed micro-batch sends the same keys, so the server applies each chunk once."""

    def __init__(self, query_id: str) -> None:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        self.partition = ctx.partitionId() if ctx else 0
        self.attempt = ctx.attemptNumber() if ctx else 0
        self.stage = ctx.stageId() if ctx else 0
        batch = ctx.getLocalProperty("streaming.sql.batchId") if ctx else None
        self.batch_id = int(batch) if batch else 0
        query = ctx.getLocalProperty("sql.streaming.queryId") if ctx else None
        self.producer = f"spark:{query or query_id}:{self.partition}"
        self._chunks: dict[str, int] = {}

    def next_sequence(self, stream: str) -> int:
        n = self._chunks.get(stream, 0)
        if n >= CHUNKS_PER_BATCH:
            msg = f"batch_rows: a partition sent over {CHUNKS_PER_BATCH} chunks to {stream!r} in one batch; raise batch_rows"
            raise ConnectorError(msg)
        self._chunks[stream] = n + 1
        return self.batch_id * CHUNKS_PER_BATCH + n + 1


def rechunk(batches: Iterable[Any], rows: int) -> Iterator[Any]:
    """Arrow tables of ``rows`` rows each (the last one shorter) from record batches."""
    import pyarrow as pa

    pending: list[Any] = []
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


def sorted_batches(batches: Iterable[Any], order: Sequence[str]) -> list[Any]:
    """A whole partition's batches, sorted by ``order`` (for DataFrames Spark cannot sort)."""
    import pyarrow as pa

    got = [b for b in batches if b.num_rows]
    if not got:
        return []
    return list(pa.Table.from_batches(got).sort_by([(c, "ascending") for c in order]).to_batches())


# --------------------------------------------------------------------------- schemas

# stream field type -> the Spark types a DataFrame column may have for it
_ACCEPTS: dict[str, tuple[str, ...]] = {
    "DOUBLE": ("double", "float", "long", "int", "short", "byte", "decimal"),
    "INT64": ("long", "int", "short", "byte"),
    "STRING": ("string",),
    "BOOL": ("boolean",),
    "TIMESTAMP": ("timestamp", "timestamp_ntz", "long"),
}


def spark_type_name(dtype: Any) -> str:
    name = str(dtype.typeName())
    return "decimal" if name.startswith("decimal") else name


def check_columns(
    schema: Any, spec: StreamSpec, ts_column: str, *, option: str = "timestamp_column"
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


def to_stream_table(batch: Any, mapping: Mapping[str, str], spec: StreamSpec) -> Any:
    """An Arrow table with the stream's columns (renamed, cast) from a DataFrame batch."""
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


def output_struct_type(outputs: Sequence[Any]) -> list[tuple[str, Any]]:
    """Spark types of a window's outputs: [(name, DataType)]."""
    from pyspark.sql import types as T

    scalar: dict[str, T.DataType] = {
        "DOUBLE": T.DoubleType(),
        "INT64": T.LongType(),
        "STRING": T.StringType(),
        "BOOL": T.BooleanType(),
        "TIMESTAMP": T.TimestampType(),
    }
    out: list[tuple[str, T.DataType]] = []
    for o in outputs:
        if o.parts:
            out.append(
                (
                    o.name,
                    T.StructType(
                        [
                            T.StructField(p.name, scalar.get(str(p.type), T.StringType()))
                            for p in o.parts
                        ]
                    ),
                )
            )
        else:
            out.append((o.name, scalar.get(str(o.type), T.StringType())))
    return out


__all__ = [
    "CHUNKS_PER_BATCH",
    "SCRATCH_MARK",
    "ConnectorError",
    "ConnectorOptions",
    "KeyedStreams",
    "TaskChunks",
    "check_columns",
    "client_for",
    "client_of",
    "explained",
    "is_scratch",
    "key_of_stream",
    "keyed_stream_name",
    "output_struct_type",
    "owner",
    "rechunk",
    "sorted_batches",
    "split_endpoints",
    "to_stream_table",
]
