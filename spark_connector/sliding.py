"""The executors' half of :func:`~.transform.sliding_aggregate`: :class:`Sliding`, the function
``mapInArrow`` runs on every partition, and the result columns it adds beside the input rows.

Per chunk of a partition (sorted by key and timestamp), each key's rows go to the key's stream
(``<stream>:<key>``) asking for per-row results, which come back as Arrow columns. Batch
DataFrames use scratch streams of the task attempt (deleted as soon as a key is done);
streaming ones the per-key streams, with idempotency keys per chunk.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from mtawindows.client import (
    AppendResult,
    NotFoundError,
    StreamSpec,
    WindowClient,
    WindowSpec,
    keyed_stream_name,
)

from .arrow import arrow_column, rechunk, sorted_batches, split_by_key, to_stream_table
from .clients import client_for, client_of
from .connector_errors import explained
from .options import ConnectorOptions
from .schemas import check_columns
from .streams import KeyedStreams, scratch_suffix
from .tasks import TaskChunks

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

APPLIED = "mtaw_applied"


@dataclass(frozen=True)
class ResultColumn:
    """One result column: ``output`` of ``window`` as DataFrame column ``column``."""

    window: str
    output: str  # output name
    column: str  # DataFrame column
    kind: str  # DOUBLE, INT64, STRING, BOOL, TIMESTAMP or STRUCT
    parts: tuple[tuple[str, str], ...] = ()  # a struct's (name, kind) parts


def _result_array(
    r: ResultColumn, got: dict[str, list[Any]], skipped: int, applied: int
) -> pa.Array:
    """Column ``r`` of a chunk: null for the ``skipped`` rows (late or replayed, a prefix),
    then the per-row results ``got`` of the ``applied`` ones."""
    import pyarrow as pa

    def values(name: str) -> list[Any]:
        return [None] * skipped + list(got.get(name, [None] * applied))

    if r.kind != "STRUCT":
        return arrow_column(r.kind, values(r.output))
    children = [arrow_column(t, values(f"{r.output}.{p}")) for p, t in r.parts]
    mask = pa.array([v is None for v in values(f"{r.output}.{r.parts[0][0]}")])
    return pa.StructArray.from_arrays(children, names=[p for p, _ in r.parts], mask=mask)


def with_results(part: pa.Table, res: AppendResult, results: Sequence[ResultColumn]) -> pa.Table:
    """The input rows ``part``, then a column per result, then :data:`APPLIED`."""
    import pyarrow as pa

    applied = 0 if res.duplicate else res.rows_applied
    skipped = part.num_rows - applied  # late rows are a prefix: each key's rows are sorted
    arrays = list(part.columns)
    names = list(part.column_names)
    for r in results:
        arrays.append(_result_array(r, res.row_results.get(r.window, {}), skipped, applied))
        names.append(r.column)
    arrays.append(pa.array([False] * skipped + [True] * applied, pa.bool_()))
    names.append(APPLIED)
    return pa.Table.from_arrays(arrays, names=names)


class Sliding:
    """The per-partition function of ``mapInArrow`` (pickled to the workers)."""

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
        self.scratch_windows = scratch_windows
        self.run_id = uuid.uuid4().hex[:12]

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        self.task = task = TaskChunks(self.run_id)
        self.mapping = check_columns(
            self.schema, self.spec, self.opts.timestamp_column, option="ts_col"
        )
        self.keyed = KeyedStreams(self.opts)
        # batch: fresh streams of this task attempt, deleted at the end
        self.scratch = (
            None
            if self.streaming
            else scratch_suffix(self.run_id, task.stage, task.partition, task.attempt)
        )
        self.created: dict[str, WindowClient] = {}  # scratch streams by name, and their server
        try:
            yield from self._run(batches)
        finally:
            self._drop_scratch(list(self.created))

    def _chunks(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.Table]:
        if self.streaming:  # one micro-batch's partition: Spark cannot sort it, we do
            batches = iter(sorted_batches(batches, self.order))
        return rechunk(batches, self.opts.batch_rows)

    def _run(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
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

    def _stream_for(self, key: object) -> tuple[WindowClient, str]:
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
            # the cluster places each scratch stream by its name: the keys of a job spread
            # over every member
            client = client_of(self.opts, name)
            with explained(self.opts, f"creating scratch stream {name!r}"):
                client.create_stream(replace(self.spec, name=name))
                self.created[name] = client
                for w in self.scratch_windows:
                    client.create_window(replace(w, stream=name))
        return client, name

    def _one(self, key: object, part: pa.Table) -> pa.Table:
        """Send one key's rows of a chunk; the rows with their results."""
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
        return with_results(part, res, self.results)


__all__ = ["APPLIED", "ResultColumn", "Sliding", "with_results"]
