"""The executors' half of :func:`~.transform.sliding_aggregate`: :class:`Sliding`, the function
``mapInArrow`` runs on every partition, and the result columns it adds beside the input rows.

A partition comes sorted by (key, timestamp); it goes to the server in Appends of up to
``batch_rows`` rows, each holding the rows of any number of keys, asking for per-row results
(in input order: each row gets its own key's window result after that row), which come back as
Arrow columns. Batch DataFrames go through one scratch keyed stream per task attempt (created
on its first rows, deleted when the task ends); streaming ones through the keyed stream itself,
with an idempotency key per chunk.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import TYPE_CHECKING

from mtawindows.client import (
    AppendResult,
    FailedPreconditionError,
    NotFoundError,
    StreamSpec,
    WindowClient,
    WindowSpec,
)
from mtawindows.v1.keys import key_text
from mtawindows.v1.reasons import Reason

from .arrow import arrow_column, nanos, nanos_array, rechunk, sorted_batches, to_stream_table
from .clients import client_for
from .connector_errors import ConnectorError, explained
from .options import ConnectorOptions
from .schemas import check_columns
from .streams import scratch_name
from .tasks import TaskChunks

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

APPLIED = "mtaw_applied"
MAX_COMPUTE_ROWS = 400_000  # rows of one Compute call, context included (servers take 500k)


@dataclass(frozen=True)
class ResultColumn:
    """One result column: ``output`` of ``window`` as DataFrame column ``column``."""

    window: str
    output: str  # output name
    column: str  # DataFrame column
    kind: str  # DOUBLE, INT64, STRING, BOOL, TIMESTAMP or STRUCT
    parts: tuple[tuple[str, str], ...] = ()  # a struct's (name, kind) parts


def _spark_array(r: ResultColumn, col: pa.Array) -> pa.Array:
    """A result column as the server sends it (Arrow, ``WindowRowResults.arrow_ipc``) in the
    type Spark takes for ``r``: timestamps in UTC microseconds, structs' parts too."""
    import pyarrow as pa

    if r.kind == "STRUCT":
        children = [_spark_array(ResultColumn(r.window, p, p, t), col.field(p)) for p, t in r.parts]
        mask = col.is_null() if col.null_count else None
        return pa.StructArray.from_arrays(children, names=[p for p, _ in r.parts], mask=mask)
    if r.kind == "TIMESTAMP":
        return col.cast(pa.timestamp("us", tz="UTC"), safe=False)
    return col


def _result_array(
    r: ResultColumn, table: pa.Table | None, applied: Sequence[bool] | None, n: int
) -> pa.Array:
    """Column ``r`` of a chunk of ``n`` rows from the window's per-row results ``table`` (one
    entry per row sent, its row of the rows sent in ``_row``; None: no result): each row's
    own result, null for the rows not sent (``applied`` False; None: every row was sent)."""
    import numpy as np
    import pyarrow as pa

    if table is None or not table.num_rows:
        return arrow_column(r.kind, [None] * n) if r.kind != "STRUCT" else _null_struct(r, n)
    col = _spark_array(r, table.column(r.output).combine_chunks())
    sent = table.column("_row").to_numpy()
    if (sent < 0).any():  # rows a reorder buffer held from an earlier batch: not these rows'
        ours = sent >= 0
        col = col.filter(pa.array(ours))
        sent = sent[ours]
    if applied is not None:
        sent = np.flatnonzero(np.asarray(applied, dtype=bool))[sent]
    if len(sent) == n and (sent == np.arange(n)).all():
        return col
    where = np.full(n, -1, dtype=np.int64)
    where[sent] = np.arange(len(sent), dtype=np.int64)
    return col.take(pa.array(where, mask=where < 0))


def _null_struct(r: ResultColumn, n: int) -> pa.Array:
    import pyarrow as pa

    children = [arrow_column(t, [None] * n) for _, t in r.parts]
    mask = pa.array([True] * n, pa.bool_())
    return pa.StructArray.from_arrays(children, names=[p for p, _ in r.parts], mask=mask)


def with_results(
    part: pa.Table,
    res: AppendResult,
    results: Sequence[ResultColumn],
    applied: Sequence[bool] | None = None,
) -> pa.Table:
    """The input rows ``part``, then a column per result, then :data:`APPLIED`; ``applied``
    says which rows were sent (None: every row); ``res``: their Append's answer, per-row
    results as Arrow tables (``row_tables``)."""
    import pyarrow as pa

    n = part.num_rows
    arrays = list(part.columns)
    names = list(part.column_names)
    for r in results:
        arrays.append(_result_array(r, res.row_tables.get(r.window), applied, n))
        names.append(r.column)
    arrays.append(pa.array([True] * n if applied is None else list(applied), pa.bool_()))
    names.append(APPLIED)
    return pa.Table.from_arrays(arrays, names=names)


class _Newest:
    """The newest timestamp of every key of a keyed stream (of the stream, unkeyed) as the
    server holds it, kept up to date with the rows sent: which rows a stream with late_policy
    DROP would drop, told before they are sent (only the others are)."""

    def __init__(self, client: WindowClient, spec: StreamSpec) -> None:
        self.key = spec.key
        self.ts = spec.timestamp_field
        self.newest: dict[str, int] = {}
        if self.key:  # ListKeys pages of the most keys a call: a few calls, not one per key
            for k in client.iter_keys(spec.name, page_size=10_000):
                self.newest[k.key] = k.newest_timestamp
        else:
            newest = client.get_stream(spec.name).newest_timestamp
            if newest:
                self.newest[""] = newest

    def on_time(self, rows: pa.Table) -> list[bool]:
        """Which of ``rows`` (each key's in timestamp order) are not late."""
        ts = nanos(rows.column(self.ts))
        keys = (
            [key_text(k) for k in rows.column(self.key).to_pylist()] if self.key else [""] * len(ts)
        )
        newest = self.newest
        out = []
        for k, t in zip(keys, ts, strict=True):
            n = newest.get(k)
            ok = n is None or t >= n
            if ok:
                newest[k] = t
            out.append(ok)
        return out


class Sliding:
    """The per-partition function of ``mapInArrow`` (pickled to the workers). ``spec`` is the
    spec of the stream the rows go to: the keyed stream itself (streaming) or the template of
    the task's scratch stream (batch)."""

    def __init__(
        self,
        opts: ConnectorOptions,
        spec: StreamSpec,
        schema: StructType,
        windows: tuple[str, ...],
        results: tuple[ResultColumn, ...],
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
        # the windows asked for, as the stream defines them but kept where a scratch stream
        # keeps them (their policies also say what Compute's context must carry)
        self.scratch_windows = scratch_windows
        self.run_id = uuid.uuid4().hex[:12]

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        self.task = task = TaskChunks(self.run_id)
        self.mapping = check_columns(
            self.schema, self.spec, self.opts.timestamp_column, option="ts_col"
        )
        self.client = client_for(self.opts)
        self.newest: _Newest | None = None
        if self.streaming:
            self.stream = self.opts.stream
            self.scratch = False
            if self.spec.late_policy == "DROP":
                with explained(self.opts, f"reading the keys of stream {self.stream!r}"):
                    self.newest = _Newest(self.client, self.spec)
        else:  # a fresh stream of this task attempt: the result is a function of the input
            self.stream = scratch_name(
                self.opts.stream, self.run_id, task.stage, task.partition, task.attempt
            )
            self.scratch = True
        self.created = False
        # batch: Compute (stateless, columnar) while the windows allow it; else a scratch stream
        self.computing = not self.streaming
        self.context: pa.Table | None = None  # the last key's rows its windows still reach
        self.warm: pa.Table | None = None  # context the scratch stream takes first
        try:
            for chunk in self._chunks(batches):
                out = self._computed(chunk) if self.computing else None
                if out is None:
                    out = self._one(chunk)
                yield from out.to_batches()
        finally:
            if self.created:
                with contextlib.suppress(NotFoundError):
                    self.client.delete_stream(self.stream)

    def _chunks(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.Table]:
        if self.streaming:  # one micro-batch's partition: Spark cannot sort it, we do
            batches = iter(sorted_batches(batches, self.order))
        return rechunk(batches, self.opts.batch_rows)

    def _computed(self, part: pa.Table) -> pa.Table | None:
        """One chunk's results by Compute (nothing stored on the server): the rows of the
        previous chunk's last key that its windows still reach are sent again first, as
        context. None (and the scratch stream from then on, given that context first) when a
        window needs the row-by-row engine (NOT_COLUMNAR: a plugin monoid, a CEL or bounded
        policy, an INT64 sum near the limits) or the call would carry too many rows."""
        import pyarrow as pa
        import pyarrow.compute as pc

        rows = to_stream_table(part, self.mapping, self.spec)
        key = self.spec.key
        context = self.context
        if (
            context is not None
            and key
            and (not rows.num_rows or context.column(key)[0] != rows.column(key)[0])
        ):
            context = None  # the chunk starts a new key: nothing of the last one reaches it
        send = rows if context is None else pa.concat_tables([context, rows])
        skip = 0 if context is None else context.num_rows
        if send.num_rows > MAX_COMPUTE_ROWS:
            # a key whose windows reach back further than a call should carry: on in a
            # scratch stream, which takes the rows still in reach first (the earlier keys'
            # rows are behind for good: rows of a key come together)
            self.computing = False
            self.warm = context
            return None
        what = f"computing {rows.num_rows} rows' results over stream {self.opts.stream!r}"
        with explained(self.opts, what):
            try:
                got = self.client.compute(
                    self.opts.stream,
                    send,
                    windows=self.windows,
                    key_column=key or None,
                    context_rows=skip,
                )
            except FailedPreconditionError as ex:
                if ex.reason != Reason.NOT_COLUMNAR:
                    raise
                # a window only the row-by-row engine computes (its definition, or an INT64
                # sum these rows may overflow): on in a scratch stream, which takes the rows
                # still in reach first
                self.computing = False
                self.warm = context
                return None
        self.context = self._reach(send)
        res = AppendResult(rows_applied=rows.num_rows)
        for name, table in got.items():
            row = table.column("_row")
            shifted = pc.subtract(row, pa.scalar(skip, pa.int64()))
            res.row_tables[name] = table.set_column(
                table.column_names.index("_row"), "_row", shifted
            )
        return with_results(part, res, self.results)

    def _reach(self, sent: pa.Table) -> pa.Table | None:
        """The rows of ``sent``'s last key that a later row of that key may still have in a
        window: the newest ``size - 1`` of a count window, those newer than the last row's
        timestamp minus a time window's range."""
        import numpy as np
        import pyarrow.compute as pc

        n = sent.num_rows
        if not n:
            return None
        key = self.spec.key
        lo = 0
        if key:
            col = sent.column(key).combine_chunks()
            change = pc.not_equal(col[1:], col[:-1]).to_numpy(zero_copy_only=False)
            starts = np.flatnonzero(change)
            lo = int(starts[-1]) + 1 if len(starts) else 0
        keep = 0
        ts = None
        for w in self.scratch_windows:
            policy = w.policy
            if policy.kind == "count":
                keep = max(keep, policy.size - 1)
            else:
                if ts is None:
                    ts = nanos_array(sent.column(self.spec.timestamp_field).slice(lo))
                reach = policy.range // timedelta(microseconds=1) * 1000
                keep = max(keep, int(np.count_nonzero(ts > ts[-1] - reach)))
        keep = min(keep, n - lo)
        return sent.slice(n - keep) if keep else None

    def _create_scratch(self) -> None:
        # the cluster places the scratch stream by its name: the tasks of a job spread over
        # every member
        name = self.stream
        with explained(self.opts, f"creating scratch stream {name!r}"):
            self.client.create_stream(replace(self.spec, name=name))
            self.created = True
            for w in self.scratch_windows:
                self.client.create_window(replace(w, stream=name))

    def _one(self, part: pa.Table) -> pa.Table:
        """Send one chunk (rows of many keys) in one Append; the rows with their results."""
        if self.scratch and not self.created:
            self._create_scratch()
        rows = to_stream_table(part, self.mapping, self.spec)
        if self.warm is not None:  # rows a Compute call carried: the windows take them first
            warm, self.warm = self.warm, None
            with explained(self.opts, f"appending {warm.num_rows} rows to {self.stream!r}"):
                self.client.append(self.stream, warm)
        producer: str | None = None
        seq: int | None = None
        if not self.scratch:
            producer, seq = self.task.producer, self.task.next_sequence(self.stream)
        applied = None if self.newest is None else self.newest.on_time(rows)
        send = rows if applied is None or all(applied) else rows.filter(applied)
        if not send.num_rows:  # every row late: nothing to send
            return with_results(part, AppendResult(), self.results, applied)
        what = f"appending {send.num_rows} rows to stream {self.stream!r}"
        with explained(self.opts, what):
            res = self.client.append(
                self.stream,
                send,
                producer_id=producer,
                sequence=seq,
                results="per_row",
                windows=self.windows,
                arrow=True,
            )
        if res.duplicate:  # a replayed chunk: applied before, its results are not known
            return with_results(part, res, self.results, [False] * part.num_rows)
        if res.rows_applied != send.num_rows:
            msg = (
                f"{what}: the server applied {res.rows_applied} of them ({res.rows_late} late), "
                "so the per-row results cannot be matched to the rows; another writer may be "
                f"sending rows of the same keys to {self.stream!r} meanwhile"
            )
            raise ConnectorError(msg)
        if applied is not None and all(applied):
            applied = None
        return with_results(part, res, self.results, applied)


__all__ = ["APPLIED", "ResultColumn", "Sliding", "with_results"]
