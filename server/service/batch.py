"""A batch on its way into a stream: what the append asks (:class:`Append`, with the result
modes), the checked and lifted :class:`Batch`, and :class:`Deferred`, a batch that must finish
on a thread that may wait."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mtawindows.v1.types import AppendResult

# result modes: no results, each window's result after the batch, results after every row
FINAL, NONE, PER_ROW = "FINAL", "NONE", "PER_ROW"


@dataclass(frozen=True)
class Append:
    """What an append asks of a stream (a call's, or a journal entry's at recovery)."""

    columns: Mapping[str, tuple[str, list[Any]]]  # name -> (FieldType value, values)
    producer_id: str  # with ``sequence`` > 0: idempotent
    sequence: int
    mode: str  # FINAL, NONE or PER_ROW
    which: Sequence[str]  # the windows whose results to answer; empty: all
    max_rows: int


@dataclass
class Batch:
    """A validated, lifted batch on its way into a stream's windows."""

    request: Append
    result: AppendResult
    ts: Any  # the batch's timestamps: a list, or a numpy array (Stream.takes_arrays)
    lifted: dict[str, list[Any]]
    released_ts: Any  # the timestamps of the rows that pass the lateness rule, the same
    late: int
    applied: set[str] = field(default_factory=set)
    evicted: dict[str, int] = field(default_factory=dict)
    lsn: int = 0  # set when the batch is journaled (or applied, without a journal)
    noop: bool = False  # no rows: acknowledged, changes nothing (no batch, no sequence)
    replay: bool = False  # re-applied from the journal at recovery: no listeners
    per_row: dict[str, tuple[list[Any], list[int]]] = field(default_factory=dict)
    # the released rows by field (what the windows lifted), and as arrays for the columnar
    # shadows (made on first use); per-row results a shadow computed: (a pyarrow Table, sizes)
    columns: dict[str, Any] = field(default_factory=dict)
    arrays: dict[str, Any] = field(default_factory=dict)
    row_tables: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    # a hopping window's boundaries the batch closed (engine.hopping.Boundary), oldest first
    boundaries: dict[str, list[Any]] = field(default_factory=dict)
    # a columnar window's batch, checked and lifted as arrays (ColumnarEngine.prepare)
    prepared: dict[str, Any] = field(default_factory=dict)
    # the request's row of each released row, when late rows were dropped (None: one for one)
    origin: list[int] | None = None


class Deferred(Exception):
    """A non-blocking append met a window that would wait for Redis: finish ``batch`` with
    :meth:`Stream.resume` on a thread that may wait."""

    def __init__(self, batch: Batch) -> None:
        super().__init__("deferred to a worker thread")
        self.batch = batch
