"""``sliding_aggregate`` with a slide: one row per (key, boundary) of a hopping window, as
Spark's ``groupBy(key, window(ts, range, slide))`` gives one per (key, window).

    out = sliding_aggregate(df, "localhost:50051", "cpu", key_col="host", ts_col="ts",
                            window="last_1m", slide=timedelta(seconds=10))

Keyed streams hold no hopping window, so each task computes in scratch *unkeyed* streams of
its own, and the question is how to give every key a window of its own there:

* a time slide over a time range (the case of Spark's ``window()``): **one scratch stream for
  all the keys of the task**, each key's rows shifted in time to a stretch of the stream's
  timeline of its own. Key ``k`` starts at least ``range + slide`` after the end of key
  ``k - 1``, shifted by a multiple of the slide (so the boundaries stay where they were), so
  no boundary's range ever holds rows of two keys, and the first row of key ``k`` closes the
  last boundaries of key ``k - 1``. The rows go in Appends of up to ``batch_rows`` rows of
  any number of keys, and each key's boundaries come back shifted back. A task makes a
  handful of calls whatever its keys (one Append per ``batch_rows`` rows, one ReadResults per
  1000 boundaries), where a stream per key would make five calls per key;
* a count range or a slide in rows (where a boundary depends on the rows before it, whichever
  key they were of): a scratch stream per key, its rows in Appends of up to ``batch_rows``.

What a key gives: every boundary whose range holds a row of that key, as Spark's
``window()`` gives every window holding a row; the end of the input closes the last ones (as
a row at the end of time would: for a time range, every boundary up to the last row plus the
range; for a count range, the first boundary after the last row; a slide in rows closes no
boundary past the last full slide of rows). Columns: the key column (with a key), then
``window_start`` and ``window_end`` (Spark timestamps: the end is the boundary, the start the
end minus the range; no start for a count range) for a time slide, or ``boundary`` (the
key's row count) for a slide in rows; then the window's outputs and ``size`` (its rows).

Every Append closes at most :data:`BOUNDARIES_PER_APPEND` boundaries (the rows are cut where
more could close) and its boundaries are read back right after it, before the server's
result history (``--result-history``, 1000 by default) could lose one; a server keeping
fewer fails the task, naming the flag. Rows without a timestamp are skipped (as by Spark's
``window()``).
"""

from __future__ import annotations

import contextlib
import itertools
import uuid
from bisect import bisect_left
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from mtawindows.client import (
    NotFoundError,
    StreamSpec,
    WindowClient,
    WindowInfo,
    WindowResult,
    WindowSpec,
)

from .arrow import arrow_column, rechunk, to_stream_table
from .clients import client_for
from .connector_errors import ConnectorError, explained
from .options import ConnectorOptions
from .readers import _spark_value
from .schemas import check_columns, output_struct_type
from .streams import SCRATCH_MARK, check_key
from .tasks import TaskChunks

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa
    from pyspark.sql import DataFrame
    from pyspark.sql.types import DataType, StructType

BOUNDARIES_PER_APPEND = 1000  # the server's default --result-history
PAGE = 1000  # results per ReadResults call
LANE_END = 1 << 62  # a shared scratch stream's timeline (ns) ends here: the next key opens another
_INT64_MAX = (1 << 63) - 1


def _ns(d: timedelta) -> int:
    return (d.days * 86_400 + d.seconds) * 1_000_000_000 + d.microseconds * 1000


# --------------------------------------------------------------------------- on the driver


def hopping_choice(
    opts: ConnectorOptions, window: Any, slide: timedelta | int | None
) -> tuple[StreamSpec, WindowSpec] | None:
    """The template stream's spec and the hopping window ``sliding_aggregate`` computes
    (``window`` with ``slide`` when given), or None when it computes no hopping window (a
    window unknown to the stream is left for the per-row path to name)."""
    client = client_for(opts)
    stream = opts.stream
    with explained(opts, f"looking up stream {stream!r}"):
        spec = client.get_stream(stream).spec
        if isinstance(window, WindowSpec):
            chosen = [window]
        else:
            have = {w.spec.name: w.spec for w in client.list_windows(stream)}
            names = (
                list(have)
                if window is None
                else [window]
                if isinstance(window, str)
                else list(window)
            )
            if any(n not in have for n in names):
                return None
            chosen = [have[n] for n in names]
    if slide is None and all(w.slide is None for w in chosen):
        return None
    if len(chosen) != 1:
        msg = (
            f"slide: a hopping sliding_aggregate computes one window (one row per key and "
            f"boundary), got {[w.name for w in chosen]}; name one with window="
        )
        raise ConnectorError(msg)
    w = chosen[0]
    if w.stream != stream:
        msg = f"window: the WindowSpec is for stream {w.stream!r}, not {stream!r}"
        raise ConnectorError(msg)
    if slide is not None:
        if w.slide is not None and w.slide != slide:
            msg = f"slide: window {w.name!r} slides by {w.slide!r}, and slide= says {slide!r}; give one"
            raise ConnectorError(msg)
        w = replace(w, slide=slide)
    return spec, w


@dataclass(frozen=True)
class HopColumn:
    """One output of the window as a result column of Spark type ``dtype``."""

    output: str
    dtype: Any  # pyspark DataType (pickled to the workers)


def hopping_plan(
    opts: ConnectorOptions,
    spec: StreamSpec,
    window: WindowSpec,
    df: DataFrame,
    key_col: str | None,
    storage: str,
) -> tuple[Hopping, StructType]:
    """The per-partition function and its output schema; the window's definition is tried
    on a scratch stream first (the server refuses a bad one here, on the driver)."""
    from pyspark.sql import types as T

    if df.isStreaming:
        msg = (
            f"slide: a streaming sliding_aggregate with a slide is not supported (keyed "
            f"streams hold no hopping window yet); append the rows to an unkeyed stream with "
            f"the hopping window and follow its boundaries with spark.readStream (option "
            f"window {window.name!r})"
        )
        raise ConnectorError(msg)
    if spec.key:
        check_key(spec, key_col or "", option="key_col")
    scratch = StreamSpec(
        "",
        spec.fields,
        timestamp_field=spec.timestamp_field,
        ts_unit=spec.ts_unit,
        wall_clock=False,
    )
    check_columns(df.schema, scratch, opts.timestamp_column, option="ts_col")
    win = replace(window, storage=replace(window.storage, kind=storage, durable=False))
    info = _probe(opts, scratch, win)
    columns = [HopColumn(n, t) for n, t in output_struct_type(info.outputs, info.spec, spec)]
    edges = (
        [
            T.StructField("window_start", T.TimestampType()),
            T.StructField("window_end", T.TimestampType()),
        ]
        if isinstance(window.slide, timedelta)
        else [T.StructField("boundary", T.LongType())]
    )
    fields = [f for f in df.schema.fields if f.name == key_col] + edges
    fields += [T.StructField(c.output, c.dtype, True) for c in columns]
    fields.append(T.StructField("size", T.LongType(), False))
    names = [f.name for f in fields]
    clash = sorted({n for n in names if names.count(n) > 1})
    if clash:
        msg = f"window: output {clash[0]!r} of window {window.name!r} clashes with a result column of that name; name the output otherwise"
        raise ConnectorError(msg)
    fn = Hopping(opts, scratch, df.schema, win, tuple(columns), key_col, tuple(names))
    return fn, T.StructType(fields)


def _probe(opts: ConnectorOptions, scratch: StreamSpec, window: WindowSpec) -> WindowInfo:
    """The window's info (its outputs) from a scratch stream made and dropped on the driver."""
    client = client_for(opts)
    name = f"{opts.stream}{SCRATCH_MARK}{uuid.uuid4().hex[:12]}.probe"
    with explained(opts, f"trying window {window.name!r} on scratch stream {name!r}"):
        client.create_stream(replace(scratch, name=name))
        try:
            return client.create_window(replace(window, stream=name))
        finally:
            with contextlib.suppress(NotFoundError):
                client.delete_stream(name)


# --------------------------------------------------------------------------- on the executors


@dataclass
class _Lane:
    """One scratch stream of a task: the keys it holds (their first shifted timestamp,
    shift and last boundary), the rows waiting for an Append, what was read back."""

    name: str
    created: bool = False
    read: int = 0  # the results read back (by sequence)
    newest: int | None = None  # the newest shifted timestamp taken (sent or pending)
    rows: int = 0  # rows taken (sent or pending)
    starts: list[int] = field(default_factory=list)
    keys: list[Any] = field(default_factory=list)
    shifts: list[int] = field(default_factory=list)
    ends: list[int | None] = field(default_factory=list)  # the key's last boundary (shifted)
    cursor: int = 0  # the next key's rows start at or after this (shifted)
    pending: list[pa.Table] = field(default_factory=list)
    pending_rows: int = 0
    pending_bound: int = 0  # at most this many boundaries the pending rows close


class Hopping:
    """The per-partition function of ``mapInArrow`` (pickled to the workers): the partition's
    rows, sorted by (key, timestamp), through scratch streams with the hopping window
    ``window``; one output row per (key, boundary)."""

    def __init__(
        self,
        opts: ConnectorOptions,
        spec: StreamSpec,
        schema: StructType,
        window: WindowSpec,
        columns: tuple[HopColumn, ...],
        key_col: str | None,
        names: Sequence[str],
    ) -> None:
        self.opts = opts
        self.names = list(names)  # the output columns
        self.spec = spec
        self.schema = schema
        self.window = window
        self.columns = columns
        self.key_col = key_col
        self.run_id = uuid.uuid4().hex[:12]
        slide = window.slide
        policy = window.policy
        self.time_slide = isinstance(slide, timedelta)
        self.slide = _ns(slide) if isinstance(slide, timedelta) else int(slide or 1)
        self.range_ns = _ns(policy.range) if policy.kind == "time_range" else 0
        # keys share a scratch stream when a boundary's range is a stretch of time
        self.shared = self.time_slide and self.range_ns > 0
        # the most boundaries a row can close (the first row after a gap)
        self.per_row = (-(-self.range_ns // self.slide) + 1) if self.range_ns else 1

    # -- the partition
    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        task = TaskChunks(self.run_id)
        self.base = (
            f"{self.opts.stream}{SCRATCH_MARK}{self.run_id}.{task.stage}.{task.partition}."
            f"{task.attempt}"
        )
        self.mapping = check_columns(
            self.schema, self.spec, self.opts.timestamp_column, option="ts_col"
        )
        self.ts_col = next(c for c, f in self.mapping.items() if f == self.spec.timestamp_field)
        self.client: WindowClient = client_for(self.opts)
        self.lanes = 0
        self.lane: _Lane | None = None
        self.key: Any = None
        self.key_type: pa.DataType | None = None
        self.row_schema: pa.Schema | None = None  # the rows' fields, as Appends carry them
        self.out: list[tuple[Any, int, WindowResult]] = []
        try:
            for chunk in rechunk(batches, self.opts.batch_rows):
                self._chunk(chunk)
                yield from self._drain()
            self._close_lane()
            yield from self._drain()
        finally:
            self._drop_lane()

    def _chunk(self, chunk: pa.Table) -> None:
        import pyarrow as pa
        import pyarrow.compute as pc

        ts_in = chunk.column(self.ts_col)
        if ts_in.null_count:  # rows without a time are in no window
            chunk = chunk.filter(pc.is_valid(ts_in))
            if not chunk.num_rows:
                return
        rows = to_stream_table(chunk, self.mapping, self.spec)
        ts_name = self.spec.timestamp_field
        col = rows.column(ts_name)
        tz = col.type.tz if pa.types.is_timestamp(col.type) else None
        ts = col.cast(pa.timestamp("ns", tz)).cast(pa.int64()).to_numpy()
        rows = rows.drop_columns([ts_name])
        self.row_schema = rows.schema
        n = chunk.num_rows
        if self.key_col is None:
            runs = [(0, n)]
            keys: list[Any] = [None]
        else:
            kc = chunk.column(self.key_col)
            self.key_type = kc.type
            keys = kc.to_pylist()
            cuts = [0] + [i for i in range(1, n) if keys[i] != keys[i - 1]] + [n]
            runs = list(itertools.pairwise(cuts))
        for i, j in runs:
            key = keys[i]
            if self.lane is None or key != self.key:
                self._start_key(key, int(ts[i]))
            self._take(rows.slice(i, j - i), ts[i:j])

    # -- keys and lanes
    def _start_key(self, key: Any, first: int) -> None:
        lane = self.lane
        if lane is not None and lane.keys:
            self._end_key(lane)
        if lane is None or not self.shared or lane.cursor > LANE_END:
            self._close_lane()
            lane = self.lane = _Lane(f"{self.base}.{self.lanes}")
            self.lanes += 1
            shift = 0
        else:  # after the last key's last boundary, by a multiple of the slide
            shift = -((first - lane.cursor) // self.slide) * self.slide
        self.key = key
        lane.keys.append(key)
        lane.shifts.append(shift)
        lane.starts.append(first + shift)
        lane.ends.append(None)

    def _end_key(self, lane: _Lane) -> None:
        assert lane.newest is not None
        last = lane.newest + self.range_ns
        lane.ends[-1] = last
        lane.cursor = last + self.slide

    def _close_lane(self) -> None:
        """The end of the lane's input closes its last boundaries: a row late enough to close
        them (a time slide); then every boundary is read back and the stream dropped."""
        lane = self.lane
        if lane is None:
            return
        if lane.keys and lane.newest is not None:
            self._end_key(lane)
            if self.time_slide:
                self._take(self._closing_row(), [lane.cursor], shift=0)
        self._flush(lane)
        self._drop_lane()

    def _drop_lane(self) -> None:
        lane, self.lane = self.lane, None
        if lane is not None and lane.created:
            with (
                explained(self.opts, f"dropping scratch stream {lane.name!r}"),
                contextlib.suppress(NotFoundError),
            ):
                self.client.delete_stream(lane.name)

    def _closing_row(self) -> pa.Table:
        """A row of ones (every field, the timestamp apart): it closes boundaries and is in
        none of them."""
        import pyarrow as pa

        ones = {"DOUBLE": 1.0, "INT64": 1, "STRING": "1", "BOOL": True, "TIMESTAMP": 1}
        kinds = {f.name: str(f.type) for f in self.spec.fields}
        assert self.row_schema is not None
        cols = [
            pa.array(
                [ones[kinds[f.name]]], pa.int64() if kinds[f.name] == "TIMESTAMP" else None
            ).cast(f.type)
            for f in self.row_schema
        ]
        return pa.Table.from_arrays(cols, schema=self.row_schema)

    # -- rows to Appends
    def _bounds(self, lane: _Lane, ts: Any, k: int) -> np.ndarray:
        """For each of the first ``k`` rows ``ts``: at most how many boundaries the rows up to
        it close, taken after the lane's rows so far."""
        import numpy as np

        if not self.time_slide:  # a boundary every `slide` rows
            return (lane.rows + np.arange(1, k + 1)) // self.slide - lane.rows // self.slide
        idx = np.asarray(ts[:k]) // self.slide
        prev = idx[0] if lane.newest is None else lane.newest // self.slide
        steps = np.diff(idx, prepend=prev)
        return np.cumsum(np.minimum(steps, self.per_row))

    def _take(self, rows: pa.Table, ts: Any, shift: int | None = None) -> None:
        """Rows of the current key (timestamps ``ts``, shifted by ``shift``: by default the
        key's) into the lane's pending Append, which goes when it is full or could close too
        many boundaries."""
        import numpy as np
        import pyarrow as pa

        lane = self.lane
        assert lane is not None
        if shift is None:
            shift = lane.shifts[-1]
        ts = np.asarray(ts, dtype=np.int64)
        if shift and (int(ts[-1]) > _INT64_MAX - shift - self.range_ns - 2 * self.slide):
            msg = f"ts_col: key {self.key!r}'s timestamps reach too far to shift them into a scratch stream shared with other keys"
            raise ConnectorError(msg)
        ts = ts + shift
        pos, n = 0, len(ts)
        while pos < n:
            room = self.opts.batch_rows - lane.pending_rows
            if room <= 0:
                self._flush(lane)
                continue
            take = min(n - pos, room)
            bounds = lane.pending_bound + self._bounds(lane, ts[pos:], take)
            over = np.flatnonzero(bounds > BOUNDARIES_PER_APPEND)
            if over.size:
                if over[0] == 0 and lane.pending_rows:
                    self._flush(lane)
                    continue
                take = max(int(over[0]), 1)
            part = rows.slice(pos, take).append_column(
                self.spec.timestamp_field,
                pa.array(ts[pos : pos + take], pa.int64()).cast(pa.timestamp("ns")),
            )
            lane.pending.append(part)
            lane.pending_rows += take
            lane.pending_bound = int(bounds[take - 1])
            lane.newest = int(ts[pos + take - 1])
            lane.rows += take
            pos += take

    def _flush(self, lane: _Lane) -> None:
        """The pending rows in one Append, then the boundaries they closed read back."""
        import pyarrow as pa

        if not lane.pending_rows:
            return
        if not lane.created:
            with explained(self.opts, f"creating scratch stream {lane.name!r}"):
                self.client.create_stream(replace(self.spec, name=lane.name))
                lane.created = True
                self.client.create_window(replace(self.window, stream=lane.name))
        batch = pa.concat_tables(lane.pending).combine_chunks()
        lane.pending, lane.pending_rows, lane.pending_bound = [], 0, 0
        with explained(self.opts, f"appending {batch.num_rows} rows to {lane.name!r}"):
            self.client.append(lane.name, batch, results="none")
        self._read(lane)

    def _read(self, lane: _Lane) -> None:
        window = self.window.name
        while True:
            with explained(self.opts, f"reading the boundaries of {lane.name}/{window}"):
                got, latest = self.client.read_results(
                    lane.name, window, after_sequence=lane.read, limit=PAGE
                )
            if not got:
                return
            if got[0].sequence != lane.read + 1:
                msg = (
                    f"reading the boundaries of {lane.name}/{window}: the server kept "
                    f"boundaries from number {got[0].sequence} on, after {lane.read} were "
                    f"read: it keeps fewer than {BOUNDARIES_PER_APPEND} results a window; "
                    f"start it with --result-history {BOUNDARIES_PER_APPEND} or more"
                )
                raise ConnectorError(msg)
            for r in got:
                self._emit(lane, r)
            lane.read = got[-1].sequence
            if lane.read >= latest:
                return

    def _emit(self, lane: _Lane, r: WindowResult) -> None:
        """A boundary to its key, shifted back (a shared lane: the key whose stretch holds it)."""
        if not self.shared:
            self.out.append((lane.keys[0], r.boundary, r))
            return
        i = bisect_left(lane.starts, r.boundary) - 1
        end = lane.ends[i] if i >= 0 else None
        if i < 0 or (end is not None and r.boundary > end):  # pragma: no cover - a gap's
            return
        self.out.append((lane.keys[i], r.boundary - lane.shifts[i], r))

    # -- rows out
    def _drain(self) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa
        from pyspark.sql.pandas.types import to_arrow_type

        out, self.out = self.out, []
        if not out:
            return
        arrays: list[pa.Array] = []
        if self.key_col is not None:
            arrays.append(pa.array([k for k, _, _ in out], self.key_type))
        bs = [b for _, b, _ in out]
        if self.time_slide:
            starts = [b - self.range_ns for b in bs] if self.range_ns else [None] * len(bs)
            arrays += [arrow_column("TIMESTAMP", starts), arrow_column("TIMESTAMP", bs)]
        else:
            arrays.append(pa.array(bs, pa.int64()))
        for c in self.columns:
            dtype: DataType = c.dtype
            vals = [_spark_value(dtype, r.values.get(c.output)) for _, _, r in out]
            arrays.append(pa.array(vals, to_arrow_type(dtype, timezone="UTC")))
        arrays.append(pa.array([r.size for _, _, r in out], pa.int64()))
        yield pa.RecordBatch.from_arrays(arrays, names=self.names)


__all__ = ["BOUNDARIES_PER_APPEND", "HopColumn", "Hopping", "hopping_choice", "hopping_plan"]
