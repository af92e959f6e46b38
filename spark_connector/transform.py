"""``sliding_aggregate``: every input row with its window's result right after that row.

    out = sliding_aggregate(df, "localhost:50051", "telemetry",
                            key_col="host", ts_col="ts", window="last_10m")

The DataFrame is repartitioned by the key and each partition sorted by (key, timestamp); every
key's rows go, in order, to the key's own stream (``<stream>:<key>``, made from ``stream``: same
schema and windows) through ``mapInArrow`` as Arrow IPC, asking for per-row results; the answer
comes back as Arrow columns beside the input rows.

Batch DataFrames: each task works on fresh per-key streams of its own (deleted when it ends), so
the result is a pure function of the input: a retried task or a second action recomputes it
exactly. Streaming DataFrames: the per-key streams persist across micro-batches (the windows
carry on); chunks carry idempotency keys (query id, batch id, partition, chunk), so a replayed
batch never counts twice, and its rows come back with ``mtaw_applied`` false and null results.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from mtawindows.client import NotFoundError, OutputSpec, StreamSpec, WindowClient, WindowSpec

from .common import (
    SCRATCH_MARK,
    ConnectorError,
    ConnectorOptions,
    KeyedStreams,
    TaskChunks,
    check_columns,
    client_for,
    client_of,
    explained,
    keyed_stream_name,
    output_struct_type,
    rechunk,
    sorted_batches,
    split_endpoints,
    to_stream_table,
)
from .datasource import split_by_key

APPLIED = "mtaw_applied"


@dataclass(frozen=True)
class _ResultColumn:
    window: str
    output: str  # output name
    column: str  # DataFrame column
    kind: str  # DOUBLE, INT64, STRING, BOOL, TIMESTAMP or STRUCT
    parts: tuple[tuple[str, str], ...] = ()


def sliding_aggregate(
    df: Any,
    endpoint: str,
    stream: str,
    *,
    key_col: str | None = None,
    ts_col: str | None = None,
    window: str | WindowSpec | Sequence[str] | None = None,
    token: str | None = None,
    tls: bool | str | None = None,
    batch_rows: int = 10_000,
    num_partitions: int | None = None,
    scratch_storage: str = "memory",
    timeout: float = 60.0,
) -> Any:
    """Each row of ``df`` plus the result of ``window`` (of stream ``stream``) after that row.

    ``endpoint`` is ``host:port``, or several comma-separated: the keys are spread over those
    servers (each key's windows on one, by a hash of its stream name) and one server's core
    is no longer the limit; the template lives on the first.
    ``stream`` is the template: it must exist on the server with its windows (a
    :class:`WindowSpec` as ``window`` is created on it when missing). ``key_col``: one window
    state per key value (None: one for all rows, in one partition); ``ts_col``: the time column
    (default the stream's timestamp field). Result columns are the window's output names
    (``<window>_<output>`` when several windows are asked for), struct outputs as Spark structs,
    plus ``mtaw_applied`` (false for a row dropped as late or replayed).

    Batch DataFrames are computed in scratch windows of the server, one key at a time per task
    (each deleted once its key is done); ``scratch_storage`` is where they live: "memory"
    (default: nothing to survive, a retried task recomputes) or "redis" (for a single key's
    window too large for the server's memory). Streaming DataFrames use the per-key streams,
    with the template windows' storage."""
    if scratch_storage not in ("memory", "redis"):
        msg = f"scratch_storage: expected 'memory' or 'redis', got {scratch_storage!r}"
        raise ConnectorError(msg)
    opts = ConnectorOptions(
        endpoint=endpoint,
        stream=stream,
        timestamp_column=ts_col or "",
        key_column=key_col or "",
        token=token,
        tls=tls,
        batch_rows=batch_rows,
        timeout=timeout,
    )
    if batch_rows <= 0:
        msg = f"batch_rows: expected > 0, got {batch_rows}"
        raise ConnectorError(msg)
    split_endpoints(endpoint)  # a bad endpoint list fails here, on the driver
    client = client_for(opts)
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
    check_columns(df.schema, spec, opts.timestamp_column, option="ts_col")
    columns = df.schema.fieldNames()
    if key_col is not None and key_col not in columns:
        msg = f"key_col: the DataFrame has no column {key_col!r}; its columns are {columns}"
        raise ConnectorError(msg)
    results = _result_columns(infos, columns)
    out_schema = _output_schema(df.schema, results, infos)
    ts = opts.timestamp_column or spec.timestamp_field
    streaming = bool(df.isStreaming)
    parts = num_partitions or df.sparkSession.sparkContext.defaultParallelism
    if key_col is not None:
        planned = df.repartition(parts, key_col)
        order = [key_col, ts]
    else:
        planned = df.repartition(1)
        order = [ts]
    if not streaming:  # Spark sorts (and spills); a micro-batch is sorted in the task
        planned = planned.sortWithinPartitions(*order)
    scratch = tuple(
        replace(infos[n].spec, storage=replace(infos[n].spec.storage, kind=scratch_storage))
        for n in names
    )
    fn = _Sliding(opts, spec, df.schema, tuple(names), tuple(results), order, streaming, scratch)
    return planned.mapInArrow(fn, out_schema)


def _window_names(client: Any, stream: str, window: Any) -> list[str]:
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


def _result_columns(infos: dict[str, Any], columns: Sequence[str]) -> list[_ResultColumn]:
    out = []
    for wname, info in infos.items():
        for o in info.outputs:
            col = o.name if len(infos) == 1 else f"{wname}_{o.name}"
            if col in columns or col == APPLIED:
                msg = f"column {col!r}: the DataFrame already has a column named like the result of window {wname!r}; rename it"
                raise ConnectorError(msg)
            kind = "STRUCT" if o.parts else str(o.type)
            out.append(
                _ResultColumn(
                    wname, o.name, col, kind, tuple((p.name, str(p.type)) for p in o.parts)
                )
            )
    return out


def _output_schema(schema: Any, results: Sequence[_ResultColumn], infos: dict[str, Any]) -> Any:
    from pyspark.sql import types as T

    fields = list(schema.fields)
    by_name: dict[tuple[str, str], Any] = {}
    for wname, info in infos.items():
        outs: list[OutputSpec] = info.outputs
        for name, dtype in output_struct_type(outs):
            by_name[(wname, name)] = dtype
    fields += [T.StructField(r.column, by_name[(r.window, r.output)], True) for r in results]
    fields.append(T.StructField(APPLIED, T.BooleanType(), False))
    return T.StructType(fields)


def _arrow_type(kind: str) -> Any:
    import pyarrow as pa

    return {
        "DOUBLE": pa.float64(),
        "INT64": pa.int64(),
        "STRING": pa.string(),
        "BOOL": pa.bool_(),
        "TIMESTAMP": pa.timestamp("us", tz="UTC"),
    }[kind]


def _arrow_column(kind: str, values: list[Any]) -> Any:
    import pyarrow as pa

    if kind == "TIMESTAMP":
        return (
            pa.array(values, pa.int64())
            .cast(pa.timestamp("ns", tz="UTC"))
            .cast(pa.timestamp("us", tz="UTC"), safe=False)
        )
    return pa.array(values, _arrow_type(kind))


class _Sliding:
    """The per-partition function of ``mapInArrow`` (pickled to the workers)."""

    def __init__(
        self,
        opts: ConnectorOptions,
        spec: StreamSpec,
        schema: Any,
        windows: tuple[str, ...],
        results: tuple[_ResultColumn, ...],
        order: list[str],
        streaming: bool,
        scratch_windows: tuple[WindowSpec, ...] = (),
    ) -> None:
        self.opts = opts
        self.spec = spec
        self.schema = schema
        self.windows = windows
        self.results = results
        self.order = order
        self.streaming = streaming
        self.scratch_windows = scratch_windows
        self.run_id = uuid.uuid4().hex[:12]

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        self.task = task = TaskChunks(self.run_id)
        self.mapping = check_columns(
            self.schema, self.spec, self.opts.timestamp_column, option="ts_col"
        )
        self.keyed = KeyedStreams(self.opts)
        # batch: fresh streams of this task attempt, deleted at the end
        self.scratch = (
            None
            if self.streaming
            else f"{SCRATCH_MARK}{self.run_id}.{task.stage}.{task.partition}.{task.attempt}"
        )
        self.created: dict[str, WindowClient] = {}  # scratch streams by name, and their server
        try:
            yield from self._run(batches)
        finally:
            self._drop_scratch(list(self.created))

    def _chunks(self, batches: Iterator[Any]) -> Iterator[Any]:
        if self.streaming:  # one micro-batch's partition: Spark cannot sort it, we do
            batches = iter(sorted_batches(batches, self.order))
        return rechunk(batches, self.opts.batch_rows)

    def _run(self, batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        for chunk in self._chunks(batches):
            parts = (
                list(split_by_key(chunk, self.opts.key_column))
                if self.opts.key_column
                else [(None, chunk)]
            )
            outs = [self._one(key, part) for key, part in parts]
            if self.scratch is not None and len(self.created) > 1:
                # rows come sorted by key: every key before the last one is done
                self._drop_scratch(list(self.created)[:-1])
            table = pa.concat_tables(outs) if len(outs) > 1 else outs[0]
            yield from table.to_batches()

    def _drop_scratch(self, names: list[str]) -> None:
        for name in names:
            with contextlib.suppress(NotFoundError):
                self.created[name].delete_stream(name)
            del self.created[name]

    def _stream_for(self, key: Any) -> tuple[WindowClient, str]:
        """The stream for ``key``'s rows and the client of its server."""
        base = (
            keyed_stream_name(self.opts.stream, key) if self.opts.key_column else self.opts.stream
        )
        if self.scratch is None:
            if not self.opts.key_column:
                return client_for(self.opts), base
            with explained(self.opts, f"creating stream {base!r} for key {key!r}"):
                return self.keyed.ensure(base), base
        name = f"{base}{self.scratch}"
        client = self.created.get(name)
        if client is None:
            # a key's scratch windows go to the server its stream would live on: with several
            # servers in ``endpoint``, the keys of a job are spread over all of them
            client = client_of(self.opts, base if self.opts.key_column else name)
            with explained(self.opts, f"creating scratch stream {name!r}"):
                client.create_stream(replace(self.spec, name=name))
                self.created[name] = client
                for w in self.scratch_windows:
                    client.create_window(replace(w, stream=name))
        return client, name

    def _one(self, key: Any, part: Any) -> Any:
        import pyarrow as pa

        client, stream = self._stream_for(key)
        rows = to_stream_table(part, self.mapping, self.spec)
        producer: str | None = None
        seq: int | None = None
        if self.scratch is None:
            producer, seq = self.task.producer, self.task.next_sequence(stream)
        with explained(self.opts, f"appending {rows.num_rows} rows to stream {stream!r}"):
            res = client.append(
                stream,
                rows,
                producer_id=producer,
                sequence=seq,
                results="per_row",
                windows=self.windows,
            )
        n_rows = part.num_rows
        applied = 0 if res.duplicate else res.rows_applied
        skipped = n_rows - applied  # late rows are a prefix: each key's rows are sorted
        arrays = list(part.columns)
        names = list(part.column_names)
        for r in self.results:
            got = res.row_results.get(r.window, {})
            if r.kind == "STRUCT":
                children = []
                for p, t in r.parts:
                    vals = got.get(f"{r.output}.{p}", [None] * applied)
                    children.append(_arrow_column(t, [None] * skipped + list(vals)))
                mask = pa.array(
                    [True] * skipped
                    + [v is None for v in got.get(f"{r.output}.{r.parts[0][0]}", [None] * applied)]
                )
                arr = pa.StructArray.from_arrays(children, names=[p for p, _ in r.parts], mask=mask)
            else:
                vals = got.get(r.output, [None] * applied)
                arr = _arrow_column(r.kind, [None] * skipped + list(vals))
            arrays.append(arr)
            names.append(r.column)
        arrays.append(pa.array([False] * skipped + [True] * applied, pa.bool_()))
        names.append(APPLIED)
        return pa.Table.from_arrays(arrays, names=names)


__all__ = ["APPLIED", "sliding_aggregate"]
