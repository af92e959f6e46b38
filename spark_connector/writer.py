"""The data source's writers: ``df.write`` (:class:`MtaBatchWriter`) and ``df.writeStream``
(:class:`StreamWriter`) push each partition's rows as Arrow IPC, in idempotent chunks of
``batch_rows`` (:class:`Pusher`), and report what every task did (:class:`MtaCommitMessage`).

With ``key_column`` the stream is a keyed stream (keyed by that column): a chunk holds rows of
any number of keys, each key's rows in timestamp order, and the server keeps one window
instance per key.

Each chunk carries an idempotency key: producer ``spark:<query id>:<partition>`` and sequence
``batch id * 2**20 + chunk number`` (:class:`~.tasks.TaskChunks`), so a retried task or a
replayed micro-batch is acknowledged as a duplicate, not applied twice (a keyed stream tells
duplicates per key group). Rows of one stream (of one key) must come in timestamp order (see the
README's ordering contract).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from mtawindows.client import AppendResult, StreamSpec

from .arrow import rechunk, sorted_batches, to_stream_table
from .clients import client_for
from .connector_errors import explained
from .options import ConnectorOptions
from .schemas import check_columns
from .tasks import TaskChunks

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger("mtawindows.spark_connector")


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
        self.msg = MtaCommitMessage(self.task.partition, self.task.attempt)

    def send(self, chunk: pa.Table) -> None:
        """One Append of ``chunk`` to the stream (of a keyed stream: rows of any keys)."""
        self.send_all([chunk])

    def send_all(self, chunks: Iterable[pa.Table]) -> None:
        """The chunks to the stream in order, pipelined over one call (``append_batches``:
        the next chunks are converted and sent while the server applies one), each with its
        idempotency key (consecutive sequences)."""
        client = client_for(self.opts)
        stream = self.opts.stream
        sizes: deque[int] = deque()

        def tables() -> Iterator[pa.Table]:
            for chunk in chunks:
                self.task.next_sequence(stream)  # (counted: the sequence append_batches gives)
                rows = to_stream_table(chunk, self.mapping, self.spec)
                sizes.append(rows.num_rows)
                yield rows

        first = self.task.following(stream)
        with explained(self.opts, f"appending rows to stream {stream!r}"):
            answers = client.append_batches(
                stream, tables(), producer_id=self.task.producer, start_sequence=first
            )
            for res in answers:
                self._count(stream, sizes.popleft(), res)

    def _count(self, stream: str, rows: int, res: AppendResult) -> None:
        """One chunk of ``rows`` rows answered ``res``."""
        m = self.msg
        m.chunks += 1
        m.rows_sent += rows
        if res.duplicate:
            m.chunks_duplicate += 1
            m.rows_duplicate += rows
        m.rows_applied += res.rows_applied
        m.rows_late += res.rows_late
        if stream not in m.streams:
            m.streams.append(stream)


def push(pusher: Pusher, batches: Iterator[pa.RecordBatch]) -> MtaCommitMessage:
    """Send a partition's Arrow batches in chunks of ``batch_rows`` (sorted first by (key,
    timestamp) with option ``sort``; a keyed stream's key is its key field), pipelined."""
    opts = pusher.opts
    if opts.sort:
        order = [pusher.spec.key] if pusher.spec.key else []
        batches = iter(sorted_batches(batches, [*order, pusher.ts_column]))
    pusher.send_all(rechunk(batches, opts.batch_rows))
    return pusher.msg


def _summary(messages: Sequence[WriterCommitMessage | None]) -> dict[str, int]:
    done = [m for m in messages if isinstance(m, MtaCommitMessage)]
    return {
        "partitions": len(done),
        "rows_sent": sum(m.rows_sent for m in done),
        "rows_applied": sum(m.rows_applied for m in done),
        "rows_late": sum(m.rows_late for m in done),
        "chunks_duplicate": sum(m.chunks_duplicate for m in done),
    }


class _Pushing:
    """What both writers hold (the options, the stream's spec, the DataFrame's schema) and do:
    each task pushes its partition with a ``pusher_class`` (tests swap in a flaky one)."""

    pusher_class: type[Pusher] = Pusher

    def __init__(self, opts: ConnectorOptions, spec: StreamSpec, schema: StructType) -> None:
        self.opts = opts
        self.spec = spec
        self.schema = schema

    def _push(self, batches: Iterator[pa.RecordBatch], query_id: str) -> MtaCommitMessage:
        return push(self.pusher_class(self.opts, self.spec, self.schema, query_id), batches)


class MtaBatchWriter(_Pushing, DataSourceArrowWriter):
    """``df.write``: one write, ``write_id`` its idempotency id (re-run with the same id, it
    applies nothing twice)."""

    def __init__(
        self, opts: ConnectorOptions, spec: StreamSpec, schema: StructType, write_id: str
    ) -> None:
        super().__init__(opts, spec, schema)
        self.write_id = write_id

    def write(self, iterator: Iterator[pa.RecordBatch]) -> MtaCommitMessage:
        return self._push(iterator, self.write_id)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        log.info(
            "write %s to %s committed: %s", self.write_id, self.opts.stream, _summary(messages)
        )

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        log.warning(
            "write %s to %s aborted after %s; re-run it with option write_id=%s to resume "
            "without applying any chunk twice",
            self.write_id,
            self.opts.stream,
            _summary(messages),
            self.write_id,
        )


class StreamWriter(_Pushing, DataSourceStreamArrowWriter):
    """``df.writeStream``: every micro-batch, its chunks keyed by the query and batch ids."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> MtaCommitMessage:
        return self._push(iterator, "stream")

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.info("batch %d to %s committed: %s", batchId, self.opts.stream, _summary(messages))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("batch %d to %s aborted: %s", batchId, self.opts.stream, _summary(messages))


__all__ = ["MtaBatchWriter", "MtaCommitMessage", "Pusher", "StreamWriter", "push"]
