"""The SDK's :class:`BatchWriter`: rows in, idempotent batches out, in order, from one
background sender thread, with back-pressure (made by :meth:`WindowClient.writer`)."""

from __future__ import annotations

import queue
import threading
import uuid
from collections.abc import Iterable, Mapping
from typing import Any, Protocol


class Appender(Protocol):
    """What the writer needs of its client (:class:`~mtawindows.client.WindowClient`)."""

    def append(
        self, stream: str, rows: Any, *, producer_id: str | None = ..., sequence: int | None = ...
    ) -> Any: ...


class BatchWriter:
    """Rows in, batches out, in order, from one background sender thread."""

    def __init__(
        self,
        client: Appender,
        stream: str,
        batch_rows: int,
        producer_id: str | None,
        start_sequence: int,
        max_pending: int,
    ) -> None:
        if batch_rows <= 0:
            msg = f"batch_rows must be > 0, got {batch_rows}"
            raise ValueError(msg)
        self.client = client
        self.stream = stream
        self.batch_rows = batch_rows
        self.producer_id = producer_id or f"writer-{uuid.uuid4().hex[:12]}"
        self.sequence = start_sequence
        self.rows: list[Mapping[str, Any]] = []
        self.sent_rows = 0
        self.batches = 0
        self.error: BaseException | None = None
        self._queue: queue.Queue[tuple[int, list[Mapping[str, Any]]] | None] = queue.Queue(
            maxsize=max(1, max_pending)
        )
        self._thread = threading.Thread(target=self._send_loop, daemon=True, name="mtaw-writer")
        self._thread.start()

    def _send_loop(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                seq, rows = item
                if self.error is None:
                    self.client.append(
                        self.stream, rows, producer_id=self.producer_id, sequence=seq
                    )
                    self.sent_rows += len(rows)
                    self.batches += 1
            except BaseException as ex:
                self.error = ex
            finally:
                self._queue.task_done()

    def _check(self) -> None:
        if self.error is not None:
            raise self.error

    def write(self, row: Mapping[str, Any]) -> None:
        self._check()
        self.rows.append(row)
        if len(self.rows) >= self.batch_rows:
            self._ship()

    def write_many(self, rows: Iterable[Mapping[str, Any]]) -> None:
        for r in rows:
            self.write(r)

    def _ship(self) -> None:
        rows, self.rows = self.rows, []
        self._queue.put((self.sequence, rows))  # blocks when max_pending wait: back-pressure
        self.sequence += 1

    def flush(self) -> None:
        """Send what is buffered and wait until every batch is acknowledged."""
        if self.rows:
            self._ship()
        self._queue.join()
        self._check()

    def close(self) -> None:
        """Send what is buffered, then stop the sender; raises a failed batch's error."""
        try:
            if self.rows:
                self._ship()
        finally:
            self._stop()
        self._check()

    def _stop(self) -> None:
        self._queue.put(None)
        self._thread.join()

    def __enter__(self) -> BatchWriter:
        return self

    def __exit__(self, et: object, ev: object, tb: object) -> None:
        if et is None:
            self.close()
        else:
            self._stop()


__all__ = ["BatchWriter"]
