"""The Spark task at hand and the idempotency key of every chunk it sends (so a retried task or
a replayed micro-batch applies nothing twice)."""

from __future__ import annotations

from .connector_errors import ConnectorError

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

    def following(self, stream: str) -> int:
        """The sequence :meth:`next_sequence` gives next (not taken)."""
        return self.batch_id * CHUNKS_PER_BATCH + self._chunks.get(stream, 0) + 1

    def next_sequence(self, stream: str) -> int:
        n = self._chunks.get(stream, 0)
        if n >= CHUNKS_PER_BATCH:
            msg = f"batch_rows: a partition sent over {CHUNKS_PER_BATCH} chunks to {stream!r} in one batch; raise batch_rows"
            raise ConnectorError(msg)
        self._chunks[stream] = n + 1
        return self.batch_id * CHUNKS_PER_BATCH + n + 1


__all__ = ["CHUNKS_PER_BATCH", "TaskChunks"]
