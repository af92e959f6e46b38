"""``sliding_aggregate``: every input row with its key's window result right after that row.

    out = sliding_aggregate(df, "localhost:50051", "telemetry",
                            key_col="host", ts_col="ts", window="last_10m")

The DataFrame is repartitioned by the key and each partition sorted by (key, timestamp); each
task sends its partition's rows, of all its keys, in Appends of up to ``batch_rows`` rows to a
keyed stream (one window instance per key) through ``mapInArrow`` as Arrow IPC, asking for
per-row results; the answer comes back as Arrow columns beside the input rows (the executors'
part: :mod:`.sliding`). Never a call per key.

Batch DataFrames: each task works on a scratch keyed stream of its own, made from ``stream``
(same fields plus the key, same windows) and deleted when the task ends, so the result is a
pure function of the input: a retried task or a second action recomputes it exactly. Streaming
DataFrames: the rows go to ``stream`` itself, which must be keyed by ``key_col``, so the windows
carry on across micro-batches; chunks carry idempotency keys (query id, batch id, partition,
chunk), so a replayed batch never counts twice, and its rows come back with ``mtaw_applied``
false and null results.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING

from mtawindows.client import StreamSpec, WindowClient, WindowInfo, WindowSpec

from .clients import client_for
from .connector_errors import ConnectorError, explained
from .hopping import hopping_choice, hopping_plan
from .options import ConnectorOptions, split_endpoints
from .schemas import check_columns, output_struct_type
from .sliding import APPLIED, ResultColumn, Sliding
from .streams import check_key, keyed_spec

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import DataType, StructType

WindowChoice = str | WindowSpec | Sequence[str] | None


def sliding_aggregate(
    df: DataFrame,
    endpoint: str,
    stream: str,
    *,
    key_col: str | None = None,
    ts_col: str | None = None,
    window: WindowChoice = None,
    token: str | None = None,
    tls: bool | str | None = None,
    batch_rows: int = 50_000,
    num_partitions: int | None = None,
    scratch_storage: str = "memory",
    timeout: float = 60.0,
    slide: timedelta | int | None = None,
) -> DataFrame:
    """Each row of ``df`` plus the result of ``window`` (of stream ``stream``) after that row.

    ``endpoint`` is ``host:port``, or several comma-separated: seeds of a cluster (servers
    sharing a Redis); the cluster places each task's scratch stream, so the tasks spread over
    its members. ``stream`` must exist on the server with its windows (a :class:`WindowSpec`
    as ``window`` is created on it when missing). ``key_col``: one window state per key value
    (a string or integer column; default the stream's key field, if it is keyed; None on an
    unkeyed stream: one for all rows, in one partition); ``ts_col``: the time column (default
    the stream's timestamp field). Result columns are the window's output names
    (``<window>_<output>`` when several windows are asked for), struct outputs as Spark
    structs, plus ``mtaw_applied`` (false for a row dropped as late or replayed).

    Each task sends its rows, of all its keys, in calls of up to ``batch_rows`` rows.
    Batch DataFrames are computed by ``Compute`` calls (nothing stored on the server; a chunk
    carries again the rows of its first key its windows still reach). Windows only the
    row-by-row engine computes (plugin or sketch monoids, CEL or bounded policies) go through
    a scratch keyed stream per task instead, made from ``stream`` (keyed by ``key_col``) and
    deleted when the task ends; its windows are "redis" ones, as every keyed stream's.
    Without a key, ``scratch_storage`` is where such scratch windows live: "memory" (default:
    nothing to survive, a retried task recomputes) or "redis" (for a window too large for
    the server's memory). Streaming DataFrames append to
    ``stream`` itself, which must then be keyed by ``key_col`` (windows carry on across
    micro-batches).

    ``slide`` (a timedelta, or an int: rows), or a window with a slide: a hopping window,
    one row per (key, boundary) instead of per input row, as Spark's
    ``groupBy(key, window(ts, range, slide))`` (batch DataFrames; see :mod:`.hopping`)."""
    _check_arguments(endpoint, batch_rows, scratch_storage)
    opts = ConnectorOptions(
        endpoint=endpoint,
        stream=stream,
        timestamp_column=ts_col or "",
        token=token,
        tls=tls,
        batch_rows=batch_rows,
        timeout=timeout,
    )
    hopping = hopping_choice(opts, window, slide)
    if hopping is not None:
        return _hopping(df, opts, *hopping, key_col, num_partitions, scratch_storage)
    spec, names, infos = _template(opts, window)
    key_col = key_col or spec.key or None
    columns = df.schema.fieldNames()
    if key_col is not None and key_col not in columns:
        msg = f"key_col: the DataFrame has no column {key_col!r}; its columns are {columns}"
        raise ConnectorError(msg)
    target = _target(spec, key_col, df)
    check_columns(df.schema, target, opts.timestamp_column, option="ts_col")
    results = _result_columns(infos, columns)
    ts = opts.timestamp_column or spec.timestamp_field
    order = [ts] if key_col is None else [key_col, ts]
    # a keyed stream's windows are "redis" (hot keys in memory, cold ones in Redis)
    storage = scratch_storage if key_col is None else "redis"
    scratch = tuple(_scratch_window(infos[n].spec, storage) for n in names)
    fn = Sliding(
        opts, target, df.schema, tuple(names), tuple(results), order, df.isStreaming, scratch
    )
    planned = _plan(df, key_col, order, num_partitions)
    return planned.mapInArrow(fn, _output_schema(df.schema, results, infos, spec))


def _hopping(
    df: DataFrame,
    opts: ConnectorOptions,
    spec: StreamSpec,
    window: WindowSpec,
    key_col: str | None,
    num_partitions: int | None,
    storage: str,
) -> DataFrame:
    """One row per (key, boundary) of hopping window ``window`` (:mod:`.hopping`)."""
    key_col = key_col or spec.key or None
    columns = df.schema.fieldNames()
    if key_col is not None and key_col not in columns:
        msg = f"key_col: the DataFrame has no column {key_col!r}; its columns are {columns}"
        raise ConnectorError(msg)
    fn, schema = hopping_plan(opts, spec, window, df, key_col, storage)
    ts = opts.timestamp_column or spec.timestamp_field
    order = [ts] if key_col is None else [key_col, ts]
    return _plan(df, key_col, order, num_partitions).mapInArrow(fn, schema)


def _target(spec: StreamSpec, key_col: str | None, df: DataFrame) -> StreamSpec:
    """The spec of the stream the rows go to: ``stream`` itself (streaming; keyed by
    ``key_col``) or the template of the tasks' scratch streams (batch; keyed by ``key_col``)."""
    if spec.key:
        check_key(spec, key_col or "", option="key_col")
    if key_col is None:
        return spec
    if df.isStreaming:
        if not spec.key:
            msg = (
                f"key_col: stream {spec.name!r} is not keyed; a streaming sliding_aggregate "
                f"keeps each key's windows in it, so it must be keyed by {key_col!r}: create it "
                f"with StreamSpec(..., key={key_col!r}) and a field {key_col!r}"
            )
            raise ConnectorError(msg)
        return spec
    return keyed_spec(spec, key_col, df.schema)


def _check_arguments(endpoint: str, batch_rows: int, scratch_storage: str) -> None:
    """On the driver, before any call: the arguments no server needs to judge."""
    if scratch_storage not in ("memory", "redis"):
        msg = f"scratch_storage: expected 'memory' or 'redis', got {scratch_storage!r}"
        raise ConnectorError(msg)
    if batch_rows <= 0:
        msg = f"batch_rows: expected > 0, got {batch_rows}"
        raise ConnectorError(msg)
    split_endpoints(endpoint)  # a bad endpoint list fails here, on the driver


def _scratch_window(spec: WindowSpec, storage: str) -> WindowSpec:
    """A template window as a task's scratch window: the same, kept in ``storage`` (never
    durable: nothing of it outlives the task)."""
    return replace(spec, storage=replace(spec.storage, kind=storage, durable=False))


def _template(
    opts: ConnectorOptions, window: WindowChoice
) -> tuple[StreamSpec, list[str], dict[str, WindowInfo]]:
    """The template stream's spec, the names of the windows asked for and their infos; fails
    for a stream that reorders late rows (the results would not follow the input rows)."""
    client = client_for(opts)
    stream = opts.stream
    with explained(opts, f"looking up stream {stream!r}"):
        spec = client.get_stream(stream).spec
        names = _window_names(client, stream, window)
        infos = {n: client.get_window(stream, n) for n in names}
    if spec.allowed_lateness.total_seconds() > 0:
        msg = (
            f"option 'stream': stream {stream!r} reorders late rows (allowed_lateness "
            f"{spec.allowed_lateness}), so results do not follow the input rows; use a stream "
            "without allowed_lateness for sliding_aggregate"
        )
        raise ConnectorError(msg)
    return spec, names, infos


def _plan(
    df: DataFrame, key_col: str | None, order: list[str], num_partitions: int | None
) -> DataFrame:
    """``df`` partitioned by the key (one partition without a key), sorted by ``order``."""
    if key_col is None:
        planned = df.repartition(1)
    else:
        parts = num_partitions or df.sparkSession.sparkContext.defaultParallelism
        planned = df.repartition(parts, key_col)
    if df.isStreaming:  # a micro-batch is sorted in the task (Spark cannot sort it)
        return planned
    return planned.sortWithinPartitions(*order)  # Spark sorts (and spills)


def _window_names(client: WindowClient, stream: str, window: WindowChoice) -> list[str]:
    have = [w.spec.name for w in client.list_windows(stream)]
    if window is None:
        if not have:
            msg = f"window: stream {stream!r} has no windows; create one or pass a WindowSpec"
            raise ConnectorError(msg)
        return have
    if isinstance(window, WindowSpec):
        if window.stream != stream:
            msg = f"window: the WindowSpec is for stream {window.stream!r}, not {stream!r}"
            raise ConnectorError(msg)
        if window.name not in have:
            client.create_window(window)
        return [window.name]
    wanted = [window] if isinstance(window, str) else list(window)
    for w in wanted:
        if w not in have:
            msg = f"window: stream {stream!r} has no window {w!r}; its windows are {have}"
            raise ConnectorError(msg)
    return wanted


def _result_columns(infos: dict[str, WindowInfo], columns: Sequence[str]) -> list[ResultColumn]:
    out = []
    for wname, info in infos.items():
        for o in info.outputs:
            col = o.name if len(infos) == 1 else f"{wname}_{o.name}"
            if col in columns or col == APPLIED:
                msg = f"column {col!r}: the DataFrame already has a column named like the result of window {wname!r}; rename it"
                raise ConnectorError(msg)
            kind = "STRUCT" if o.parts else str(o.type)
            parts = tuple((p.name, str(p.type)) for p in o.parts)
            out.append(ResultColumn(wname, o.name, col, kind, parts))
    return out


def _output_schema(
    schema: StructType,
    results: Sequence[ResultColumn],
    infos: dict[str, WindowInfo],
    stream: StreamSpec | None = None,
) -> StructType:
    from pyspark.sql import types as T

    by_name: dict[tuple[str, str], DataType] = {}
    for wname, info in infos.items():
        for name, dtype in output_struct_type(info.outputs, info.spec, stream):
            by_name[(wname, name)] = dtype
    fields = list(schema.fields)
    fields += [T.StructField(r.column, by_name[(r.window, r.output)], True) for r in results]
    fields.append(T.StructField(APPLIED, T.BooleanType(), False))
    return T.StructType(fields)


__all__ = ["APPLIED", "sliding_aggregate"]
