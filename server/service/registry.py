"""The window service's core, independent of gRPC: streams, their windows, ingestion.

A :class:`Registry` holds the streams; each :class:`Stream` validates and decodes a batch once
(columns -> rows), lifts it for every window before changing any (so a refused row changes
nothing), then applies it to each window's engine (Amortized MTA or Log MTA, in memory or on
the Redis tier). Definitions live in Redis next to the windows' data, so a restarted registry
reopens every window where its last acknowledged batch left it.

Calls on one stream must be serialized by the caller (the gRPC layer holds a per-stream lock
and runs them on worker threads); different streams run in parallel.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import gc
import heapq
import itertools
import logging
import math
import operator
import re
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

from mtawindows.v1 import convert
from mtawindows.v1 import windows_pb2 as pb
from mtawindows.v1.types import (
    MAX_DURATION,
    AppendResult,
    Field,
    FieldType,
    OutputSpec,
    StreamInfo,
    StreamSpec,
    WindowInfo,
    WindowResult,
    WindowSpec,
    clip,
    show,
    show_names,
)

from ..engine.ledger import Ledger
from ..engine.mta import AmortizedMTA, LogMTA
from ..storage.journal import JournalEntry, StreamJournal
from ..storage.protocol import StoreError, WouldBlock
from .catalog import NAME, Built, DefinitionError, Output, build_window, columnar_lifter
from .cel import CelPolicy

log = logging.getLogger("mtawindows.service")

FINAL, NONE, PER_ROW = "FINAL", "NONE", "PER_ROW"


class ServiceError(Exception):
    """A refused request: a gRPC status code name, an UPPER_SNAKE reason, a message naming what
    was wrong, expected and given, and field violations for bad requests."""

    def __init__(
        self,
        code: str,
        reason: str,
        message: str,
        violations: Sequence[tuple[str, str]] = (),
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.violations = list(violations)
        self.metadata = dict(metadata or {})


def batch_too_large(rows: int, limit: int) -> ServiceError:
    return ServiceError(
        "RESOURCE_EXHAUSTED",
        "BATCH_TOO_LARGE",
        f"batch of {rows} rows exceeds the server's limit of {limit} rows per Append; split it",
        metadata={"limit": str(limit), "rows": str(rows)},
    )


def new_error_id() -> str:
    """A fresh id for an error the log explains and the caller only names."""
    return uuid.uuid4().hex[:16]


def store_failed(
    where: str, ex: BaseException, metadata: Mapping[str, str] | None = None
) -> ServiceError:
    """UNAVAILABLE, ``STORE_UNAVAILABLE``: the store's error text (hosts, ports, paths) stays
    in the log under an id, which is all the caller gets of it."""
    error_id = new_error_id()
    log.warning(
        "store failed, error id %s: %s: %s",
        error_id,
        where,
        clip(f"{type(ex).__name__}: {ex}", 1000),
        extra={"error_id": error_id, **(metadata or {})},
    )
    return ServiceError(
        "UNAVAILABLE",
        "STORE_UNAVAILABLE",
        f"{where}: the store failed ({type(ex).__name__}, error id {error_id}); retry the "
        "call (an append with the same producer_id and sequence: one that was applied is "
        "then a duplicate)",
        metadata={**(metadata or {}), "error_id": error_id},
    )


def store_unavailable(stream: str, ex: BaseException, window: str | None = None) -> ServiceError:
    where = f"stream {stream!r}" + (f", window {window!r}" if window else "")
    return store_failed(where, ex, {"stream": stream})


def invalid(field_path: str, message: str, reason: str = "INVALID_ARGUMENT") -> ServiceError:
    return ServiceError(
        "INVALID_ARGUMENT", reason, f"{field_path}: {message}", [(field_path, message)]
    )


@dataclass(frozen=True)
class Limits:
    max_streams: int = 1000
    max_windows_per_stream: int = 64
    max_batch_rows: int = 500_000
    max_message_bytes: int = 64 * 1024 * 1024
    max_subscribers: int = 1000
    result_history: int = 1000  # results kept per window for ReadResults
    # serialized results queued for one subscriber that does not keep up, and held for all
    # of them (each result once); past either the furthest behind is cut
    # (RESOURCE_EXHAUSTED, SUBSCRIBER_TOO_SLOW)
    subscriber_queue_bytes: int = 8 * 1024 * 1024
    subscribers_total_bytes: int = 256 * 1024 * 1024
    # a new CEL policy: its UTF-8 size and how deep it may nest (brackets plus operators),
    # checked before it is parsed (INVALID_ARGUMENT, CEL_TOO_LARGE / CEL_TOO_DEEP)
    max_cel_bytes: int = 4096
    max_cel_depth: int = 64


# --------------------------------------------------------------------------- windows


class Window:
    """One window of a stream: its definition, compiled record and policy, and engine."""

    def __init__(
        self,
        stream: StreamSpec,
        spec: WindowSpec,
        built: Built,
        engine: Any,
        *,
        history: int = 1000,
        sequence: int = 0,
    ) -> None:
        self.stream = stream
        self.spec = spec
        self.built = built
        self.engine = engine
        self.outputs: list[Output] = built.outputs
        self.output_specs = [
            OutputSpec(o.name, o.type, tuple(Field(p, t) for p, t in o.parts))
            for o in built.outputs
        ]
        self.type_tags = convert.output_types(self.output_specs)
        self.lift = built.monoid.lift
        # output name -> (its index in the record's aggregate, its field monoid's lower or
        # None when that is the identity function)
        self._lowers = built.monoid.field_lowers()
        nan_fields = {f.name for f in stream.fields if f.allow_nan}
        self.lift_columns = columnar_lifter(built.monoid, nan_fields)
        # the stream's batch count when the window last changed, and the newest timestamp then:
        # every result carries them, so readers can follow results by sequence
        self.sequence = sequence
        self.timestamp = 0
        self.history: collections.deque[WindowResult] = collections.deque(maxlen=max(1, history))
        # lsn of the last journal entry (append) this window holds; saved with its checkpoints
        self.lsn = 0

    @property
    def inline_ok(self) -> bool:
        """May a small batch be tried on the event loop (not reloading)? A stream with a
        journal never tries (:meth:`Stream.inline_ok`)."""
        return not self.engine.stale

    @property
    def window_id(self) -> str | None:
        return self.engine.window_id  # type: ignore[no-any-return]

    def values(self, lowered: Mapping[str, Any], size: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for o in self.outputs:
            v = lowered[o.name]
            if size == 0 and o.nullable_when_empty:
                v = None
            elif o.split is not None and v is not None:
                v = dict(zip((p for p, _ in o.parts), o.split(v), strict=True))
            out[o.name] = v
        return out

    def result(self, evicted: int = 0) -> WindowResult:
        # first: a window reloading after a store failure does it here, before its size
        lowered = self.engine.query()
        size = len(self.engine)
        return WindowResult(
            self.spec.name,
            self.values(lowered, size),
            size,
            evicted,
            self.sequence,
            self.timestamp,
        )

    def results_after(self, after: int, limit: int) -> list[WindowResult]:
        """Results with a sequence above ``after``, oldest first, at most ``limit``. Only the
        last ``history`` results are kept: a reader further behind gets the oldest kept (the
        gap shows in their sequences); with none kept (after a restart), the current one."""
        if after >= self.sequence:
            return []
        kept = [r for r in self.history if r.sequence > after]
        if not kept or kept[-1].sequence != self.sequence:
            kept = [self.result()]
        return kept[:limit]

    def columns(self, totals: list[tuple[Any, ...]], sizes: list[int]) -> dict[str, Any]:
        """Per-row results as typed columns (struct outputs split into ``name.part``), from
        the window's lifted aggregate after each row, lowered one output at a time."""
        cols: dict[str, tuple[str, list[Any]]] = {}
        empty = 0 in sizes
        for o in self.outputs:
            i, lower = self._lowers[o.name]
            vs = [t[i] for t in totals] if lower is None else [lower(t[i]) for t in totals]
            if empty and o.nullable_when_empty:
                vs = [None if s == 0 else v for v, s in zip(vs, sizes, strict=True)]
            if o.split is None:
                cols[o.name] = (o.type, vs)
                continue
            split = o.split
            parts = [split(v) if v is not None else None for v in vs]
            for j, (p, t) in enumerate(o.parts):
                cols[f"{o.name}.{p}"] = (t, [None if x is None else x[j] for x in parts])
        return cols

    def stats(self, late_rows: int) -> dict[str, int]:
        s = self.engine.stats()
        store = s.get("store", {})
        policy = self.built.policy
        return {
            "size": s["size"],
            "levels": s["levels"],
            "inserted": s["inserted"],
            "evicted": s["evicted"],
            "bulk_evictions": s["bulk_evictions"],
            "store_round_trips": store.get("round_trips", 0),
            "cache_misses": store.get("misses", 0),
            "store_bytes_read": store.get("bytes_read", 0),
            "store_bytes_written": store.get("bytes_written", 0),
            "late_rows": late_rows,
            "policy_errors": policy.error_count if isinstance(policy, CelPolicy) else 0,
        }

    def info(self, late_rows: int) -> WindowInfo:
        return WindowInfo(self.spec, self.stats(late_rows), self.output_specs)


# --------------------------------------------------------------------------- streams

_NUMERIC_WIDEN = {
    (FieldType.INT64.value, FieldType.DOUBLE.value),
    (FieldType.INT64.value, FieldType.TIMESTAMP.value),
    (FieldType.TIMESTAMP.value, FieldType.INT64.value),
}


@dataclass
class StreamState:
    newest: int | None = None  # newest timestamp released to the windows
    seen: int | None = None  # newest timestamp received (reorder buffer)
    rows_appended: int = 0
    rows_late: int = 0
    batches_appended: int = 0
    sequence: int = 0  # orders results; jumps ahead after an unclean stop
    batches_duplicate: int = 0
    producers: Ledger = field(default_factory=Ledger)  # idempotency: last sequence per producer
    buffer: list[tuple[int, int, dict[str, Any]]] = field(default_factory=list)  # heap
    arrivals: int = 0  # tie-breaker of the heap: arrival order
    lsn: int = 0  # appends applied: the journal's sequence number of the last one


T = TypeVar("T")


def _locked(method: Callable[..., T]) -> Callable[..., T]:
    """Run a Stream method under the stream's lock."""

    @functools.wraps(method)
    def run(self: Stream, *args: Any, **kwargs: Any) -> T:
        with self.lock:
            return method(self, *args, **kwargs)

    return run


def _stream_locked(method: Callable[..., T]) -> Callable[..., T]:
    """Run a Registry method whose first argument is a Stream under that stream's lock."""

    @functools.wraps(method)
    def run(self: Registry, stream: Stream, *args: Any, **kwargs: Any) -> T:
        with stream.lock:
            return method(self, stream, *args, **kwargs)

    return run


@contextlib.contextmanager
def _gc_paused(rows: int) -> Iterator[None]:
    """No cyclic garbage collection while a large batch goes into the windows: it allocates
    short-lived tuples by the million (freed by reference counting), and the collector's
    passes over them cost up to a third of the ingest time. Collection resumes after."""
    if rows < 1000 or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _first_nonfinite(values: list[Any]) -> int | None:
    """Index of the first NaN, +inf or -inf; a finite sum proves there is none (one C loop:
    any non-finite value makes ``fsum`` non-finite or raise)."""
    try:
        if math.isfinite(math.fsum(values)):
            return None
    except (TypeError, ValueError, OverflowError):  # inf - inf, an overflow, not numbers
        pass
    return next((i for i, v in enumerate(values) if not math.isfinite(v)), None)


def _first_negative(values: list[Any]) -> int | None:
    """Index of the first value that is not a finite number >= 0 (the values of a bounded-sum
    window's field); ``min`` and ``fsum`` prove there is none in two C loops."""
    try:
        if min(values, default=0) >= 0 and math.isfinite(math.fsum(values)):
            return None
    except (TypeError, ValueError, OverflowError):
        pass
    return next((i for i, v in enumerate(values) if not (v >= 0 and math.isfinite(v))), None)


@dataclass
class Batch:
    """A validated, lifted batch on its way into a stream's windows."""

    result: AppendResult
    mode: str
    which: Sequence[str]
    producer_id: str
    sequence: int
    ts: list[int]
    lifted: dict[str, list[Any]]
    released_ts: list[int]
    late: int
    applied: set[str] = field(default_factory=set)
    evicted: dict[str, int] = field(default_factory=dict)
    lsn: int = 0  # set when the batch is journaled (or applied, without a journal)
    noop: bool = False  # no rows: acknowledged, changes nothing (no batch, no sequence)
    replay: bool = False  # re-applied from the journal at recovery: no listeners
    per_row: dict[str, tuple[list[Any], list[int]]] = field(default_factory=dict)


class Deferred(Exception):
    """A non-blocking append met a window that would wait for Redis: finish ``batch`` with
    :meth:`Stream.resume` on a thread that may wait."""

    def __init__(self, batch: Batch) -> None:
        super().__init__("deferred to a worker thread")
        self.batch = batch


class Stream:
    def __init__(self, spec: StreamSpec) -> None:
        self.spec = spec
        self.types: dict[str, str] = {f.name: str(f.type) for f in spec.fields}
        self.types[spec.timestamp_field] = FieldType.TIMESTAMP.value
        self.nan_ok = {f.name for f in spec.fields if f.allow_nan}
        self.order = [spec.timestamp_field, *(f.name for f in spec.fields)]
        self.windows: dict[str, Window] = {}
        self.state = StreamState()
        self.lateness = int(spec.allowed_lateness.total_seconds() * 1e9)
        self.batches = 0
        self.listeners: list[Callable[[int, Mapping[str, WindowResult]], None]] = []
        # Held by every operation on the stream's windows and state, on whatever thread runs
        # it (the gRPC layer's asyncio lock orders the calls; this one makes sure that no two
        # ever overlap, whatever the callers do). Re-entrant: an append may recover first.
        self.lock = threading.RLock()
        # Durability (see journal.py): the journal when a window is durable; ``stale`` after a
        # store failure left the windows or the journal unsure: ``recover`` (set by the
        # registry) rebuilds the stream from Redis before its next call.
        self.journal: StreamJournal | None = None
        self.state_store: StreamJournal  # the stream's keys in Redis (set by the registry)
        self.stale = False
        self.recover: Callable[[], None] = lambda: None
        # the checkpoints queued by the last flush: (lsn, state JSON, futures)
        self.pending_state: tuple[int, str, list[Any]] | None = None

    def info(self) -> StreamInfo:
        st = self.state
        return StreamInfo(
            self.spec,
            list(self.windows),
            st.rows_appended,
            st.rows_late,
            st.batches_appended,
            st.batches_duplicate,
            st.newest or 0,
            len(st.buffer),
        )

    # -- decoding
    def decode(self, columns: Mapping[str, tuple[str, list[Any]]]) -> tuple[int, list[list[Any]]]:
        """Check a batch's columns against the schema; the columns in schema order."""
        violations: list[tuple[str, str]] = []  # schema first, then values
        missing = [n for n in self.order if n not in columns]
        unknown = sorted(set(columns) - set(self.types))
        violations += [
            (
                f"columns[{n}]",
                f"missing column {n!r} ({self.types[n]}) of stream {show(self.spec.name)}",
            )
            for n in missing
        ]
        violations += [
            (
                f"columns[{n}]",
                f"unknown column {show(n)}; the stream's columns are {show_names(self.order)}",
            )
            for n in unknown
        ]
        lengths = {n: len(columns[n][1]) for n in self.order if n in columns}
        n_rows = max(lengths.values(), default=0)
        for name, length in lengths.items():
            if length != n_rows:
                violations.append(
                    (
                        f"columns[{name}]",
                        f"has {length} values, expected {n_rows} like the longest column",
                    )
                )
        out: list[list[Any]] = []
        values_bad: list[tuple[str, str]] = []
        for name in self.order:
            if name not in columns:
                continue
            given, values = columns[name]
            expected = self.types[name]
            if given != expected:
                if (given, expected) not in _NUMERIC_WIDEN:
                    violations.append(
                        (f"columns[{name}]", f"expected {expected} values, got {given}")
                    )
                    continue
                if expected == FieldType.DOUBLE.value:
                    values = [float(v) for v in values]
            if expected == FieldType.DOUBLE.value and name not in self.nan_ok:
                bad = _first_nonfinite(values)
                if bad is not None:
                    values_bad.append(
                        (
                            f"columns[{name}][{bad}]",
                            f"expected a finite number, got {values[bad]!r} (the field does "
                            "not allow non-finite values: allow_nan is off)",
                        )
                    )
            out.append(values)
        if violations or values_bad:
            schema = bool(violations)
            violations += values_bad
            first = violations[0]
            extra = f" (and {len(violations) - 1} more)" if len(violations) > 1 else ""
            raise ServiceError(
                "INVALID_ARGUMENT",
                "SCHEMA_MISMATCH" if schema else "BAD_VALUES",
                f"{first[0]}: {first[1]}{extra}",
                violations,
            )
        return n_rows, out

    def _check_bounded_sums(self, cols: list[list[Any]]) -> None:
        """A bounded-sum window is prefix-monotone only over values >= 0 (a negative value
        would let an evicted prefix's rows belong in the window again), and a non-finite one
        poisons its sum: refuse the batch, naming the first such row, before anything."""
        for wname, w in self.windows.items():
            p = w.spec.policy
            if p.kind != "bounded_sum" or p.field not in self.order:
                continue
            values = cols[self.order.index(p.field)]
            bad = _first_negative(values)
            if bad is not None:
                path = f"columns[{p.field}][{bad}]"
                what = (
                    f"expected a finite number >= 0 (window {wname!r} sums {p.field!r} up to a "
                    f"bound), got {values[bad]!r}"
                )
                raise ServiceError(
                    "INVALID_ARGUMENT",
                    "BAD_VALUES",
                    f"{path}: {what}",
                    [(path, what)],
                    {"row": str(bad), "window": wname},
                )

    # -- ingestion
    @_locked
    def append(
        self,
        columns: Mapping[str, tuple[str, list[Any]]],
        *,
        producer_id: str = "",
        sequence: int = 0,
        mode: str = NONE,
        which: Sequence[str] = (),
        max_rows: int = 500_000,
        nonblocking: bool = False,
    ) -> AppendResult:
        """Validate, decode once, lift for every window, apply to each, commit the stream.

        With ``nonblocking`` (the event loop calling), a window that would wait for Redis
        raises :class:`Deferred` instead, carrying the batch: :meth:`resume` finishes it where
        waiting is fine. Windows before that one are applied, it and the rest are not."""
        self.ensure_current()
        rows = max((len(v) for _, v in columns.values()), default=0)
        with _gc_paused(rows):
            saved = self._save_buffer()
            try:
                batch = self.prepare(
                    columns,
                    producer_id=producer_id,
                    sequence=sequence,
                    mode=mode,
                    which=which,
                    max_rows=max_rows,
                )
            except BaseException:
                self._restore_buffer(saved)  # a refused batch changes nothing
                raise
            if batch.result.duplicate or batch.noop:
                return batch.result
            batch.lsn = self.state.lsn + 1
            if self.journal is not None:
                try:
                    self.journal.append(batch.lsn, producer_id, sequence, mode, which, columns)
                except StoreError as ex:
                    self._restore_buffer(saved)
                    self.stale = True  # the entry may have landed: reload before the next append
                    raise store_unavailable(self.spec.name, ex) from None
            self._apply(batch, nonblocking=nonblocking)
            return self._finish(batch)

    def ensure_current(self) -> None:
        """Before a call that reads or changes the windows: a journaled stream whose journal or
        windows failed is rebuilt from Redis first (a window must not reload its checkpoint
        alone: it would lose the journal's entries after it)."""
        if self.journal is None:
            return
        if self.stale or any(w.engine.stale for w in self.windows.values()):
            self.stale = True
            self.recover()

    def _save_buffer(self) -> tuple[list[Any], int, int | None] | None:
        """What ``prepare`` may change before it can still refuse the batch (the reorder
        buffer), to put back if it does."""
        if not self.lateness:
            return None
        st = self.state
        return list(st.buffer), st.arrivals, st.seen

    def _restore_buffer(self, saved: tuple[list[Any], int, int | None] | None) -> None:
        if saved is not None:
            st = self.state
            st.buffer, st.arrivals, st.seen = saved

    def replay(self, entry: JournalEntry) -> None:
        """Apply a journaled append again (recovery): the same checks against the same state
        give the same batch; windows that hold the entry already are skipped."""
        batch = self.prepare(
            entry.columns,
            producer_id=entry.producer_id,
            sequence=entry.sequence,
            mode=entry.mode,
            which=[w for w in entry.which if w in self.windows],
            max_rows=1 << 62,
        )
        if batch.result.duplicate:  # pragma: no cover - a journal written by another state
            msg = f"stream {self.spec.name!r}: journal entry {entry.lsn} replays as a duplicate"
            raise StoreError(msg)
        batch.lsn = entry.lsn
        batch.replay = True
        batch.applied = {n for n, w in self.windows.items() if w.lsn >= entry.lsn}
        self._apply(batch, nonblocking=False)
        self._finish(batch)

    @_locked
    def resume(self, batch: Batch) -> AppendResult:
        """Finish a :class:`Deferred` batch (may wait for Redis)."""
        with _gc_paused(batch.result.rows_applied):
            self._apply(batch, nonblocking=False)
            return self._finish(batch)

    def inline_ok(self, n_rows: int, mode: str) -> bool:
        """Whether a batch may be tried on the event loop: small, no reorder buffer, no window
        that journals (a Redis round trip per batch) or is reloading, and either one row or
        only windows that take a batch in one step (a window cannot stop halfway)."""
        if n_rows > 256 or self.lateness:
            return False
        if self.journal is not None or self.stale:
            return False
        one_step = n_rows == 1 or (
            mode != PER_ROW and all(w.built.batch_safe for w in self.windows.values())
        )
        return one_step and all(w.inline_ok for w in self.windows.values())

    def prepare(
        self,
        columns: Mapping[str, tuple[str, list[Any]]],
        *,
        producer_id: str = "",
        sequence: int = 0,
        mode: str = NONE,
        which: Sequence[str] = (),
        max_rows: int = 500_000,
    ) -> Batch:
        """Everything that can refuse the batch, before any window changes."""
        for w in which:
            if w not in self.windows:
                raise ServiceError(
                    "NOT_FOUND",
                    "WINDOW_NOT_FOUND",
                    f"stream {self.spec.name!r} has no window {w!r}",
                )
        n_rows, cols = self.decode(columns)
        if n_rows > max_rows:
            raise batch_too_large(n_rows, max_rows)
        self._check_bounded_sums(cols)
        st = self.state
        if (producer_id or sequence) and (not producer_id or sequence <= 0):
            raise invalid(
                "producer_id" if not producer_id else "sequence",
                "idempotency needs both a producer_id and a sequence > 0, got "
                f"producer_id={show(producer_id)}, sequence={sequence}",
            )
        if n_rows == 0:
            # nothing to apply: acknowledged without a trace (no batch counted, no sequence,
            # the producer's sequence not taken, no result); FINAL answers the current results
            res = AppendResult()
            if mode == FINAL:
                res.results = self._results(which, {})
            elif mode == PER_ROW:
                res.row_results = {
                    n: self.windows[n].columns([], []) | {"__size": (FieldType.INT64.value, [])}
                    for n in (which or list(self.windows))
                }
            return Batch(res, mode, which, producer_id, sequence, [], {}, [], 0, noop=True)
        if producer_id and st.producers.is_duplicate(producer_id, sequence):
            st.batches_duplicate += 1
            res = AppendResult(duplicate=True)
            if mode == FINAL:
                res.results = self._results(which, {})
            return Batch(res, mode, which, producer_id, sequence, [], {}, [], 0)
        ts = cols[0]
        rows_idx, late = self._admit(ts)
        names = self.order
        if rows_idx is not None:
            cols = [[c[i] for i in rows_idx] for c in cols]
        rows: list[dict[str, Any]] | None = None
        buffered = 0
        if self.lateness:  # the reorder buffer holds rows
            rows = [dict(zip(names, r, strict=True)) for r in zip(*cols, strict=True)]
            rows, buffered = self._release(rows)
            columns_of = {n: [r[n] for r in rows] for n in names}
        else:
            columns_of = dict(zip(names, cols, strict=True))
        n_released = len(columns_of[names[0]])
        # lift for every window before changing any: a refused row changes nothing
        lifted: dict[str, list[Any]] = {}
        for name, win in self.windows.items():
            if win.lift_columns is not None:
                lifted[name] = win.lift_columns(columns_of)
                continue
            if rows is None:
                rows = [dict(zip(names, r, strict=True)) for r in zip(*cols, strict=True)]
            lift = win.lift
            try:
                lifted[name] = [lift(r) for r in rows]
            except (TypeError, ValueError) as ex:
                raise invalid(
                    "columns", f"window {name!r} refused a row: {clip(str(ex))}", "BAD_VALUES"
                ) from None
        result = AppendResult(rows_applied=n_released, rows_late=late, rows_buffered=buffered)
        released_ts = columns_of[self.spec.timestamp_field]
        return Batch(result, mode, which, producer_id, sequence, ts, lifted, released_ts, late)

    def _apply(self, batch: Batch, *, nonblocking: bool) -> None:
        pid = batch.producer_id or None
        seq = batch.sequence if batch.producer_id else None
        for name, win in self.windows.items():
            if name in batch.applied:
                continue
            engine = win.engine
            try:
                if batch.mode == PER_ROW and (not batch.which or name in batch.which):
                    totals: list[Any] = []
                    sizes: list[int] = []
                    batch.evicted[name] = engine.apply_lifted(
                        batch.lifted[name],
                        pid,
                        seq,
                        totals=totals,
                        sizes=sizes,
                        nonblocking=nonblocking,
                    )
                    batch.per_row[name] = (totals, sizes)
                else:
                    batch.evicted[name] = engine.apply_lifted(
                        batch.lifted[name],
                        pid,
                        seq,
                        per_item=not win.built.batch_safe,
                        nonblocking=nonblocking,
                    )
            except WouldBlock:
                raise Deferred(batch) from None
            except StoreError as ex:
                if self.journal is not None:
                    # journaled: recovery replays the batch into every window that lacks it
                    self.stale = True
                if batch.replay:
                    raise
                raise store_unavailable(self.spec.name, ex, window=name) from None
            batch.applied.add(name)
            win.lsn = batch.lsn

    def _finish(self, batch: Batch) -> AppendResult:
        """Commit the stream's state and build the answer."""
        st = self.state
        ts = batch.ts
        result = batch.result
        if ts:
            high = max(ts)
            st.seen = high if st.seen is None else max(st.seen, high)
        if batch.released_ts:
            last = batch.released_ts[-1]
            st.newest = last if st.newest is None else max(st.newest, last)
        st.rows_appended += result.rows_applied
        st.rows_late += batch.late
        st.batches_appended += 1
        st.sequence += 1
        st.lsn = batch.lsn
        if batch.producer_id:
            st.producers.record(batch.producer_id, batch.sequence)
        self.batches += 1
        finals: dict[str, WindowResult] = {}
        for n, w in self.windows.items():
            w.sequence = st.sequence
            w.timestamp = st.newest or 0
            finals[n] = r = w.result(batch.evicted.get(n, 0))
            w.history.append(r)
        if batch.mode == FINAL:
            result.results = {n: finals[n] for n in batch.which or finals}
        for name, (totals, sizes) in batch.per_row.items():
            result.row_results[name] = self.windows[name].columns(totals, sizes) | {
                "__size": (FieldType.INT64.value, sizes)
            }
        # the batch's temporaries go before the collector resumes (it would walk them all)
        batch.per_row.clear()
        batch.lifted.clear()
        if self.listeners and not batch.replay:
            for listener in list(self.listeners):
                listener(self.batches, finals)
        return result

    def _results(self, which: Sequence[str], evicted: Mapping[str, int]) -> dict[str, WindowResult]:
        names = which or list(self.windows)
        return {n: self.windows[n].result(evicted.get(n, 0)) for n in names}

    def _admit(self, ts: list[int]) -> tuple[list[int] | None, int]:
        """Which rows pass the lateness rule: (row indexes, None = all; rows dropped)."""
        st = self.state
        if self.spec.late_policy != "DROP":
            prev = st.newest
            if (prev is None or not ts or ts[0] >= prev) and all(
                map(operator.le, ts, itertools.islice(ts, 1, None))
            ):
                return None, 0  # in order (checked in C); else find the first late row
            for i, t in enumerate(ts):
                if prev is not None and t < prev:
                    whose = "the previous row's" if i else "the stream's newest"
                    raise ServiceError(
                        "FAILED_PRECONDITION",
                        "OUT_OF_ORDER",
                        f"row {i} has timestamp {t}, older than {whose} ({prev}); the stream "
                        "rejects late rows (late_policy REJECT), so nothing was applied",
                        [(f"columns[{self.spec.timestamp_field}][{i}]", f"timestamp {t} < {prev}")],
                        {"row": str(i), "timestamp": str(t), "newest": str(prev)},
                    )
                prev = t
            return None, 0
        high = st.newest
        keep: list[int] = []
        for i, t in enumerate(ts):
            if high is None or t >= high:
                keep.append(i)
                if not self.lateness:  # in order unless a reorder buffer sorts them
                    high = t
        late = len(ts) - len(keep)
        return (None if late == 0 else keep), late

    def _release(self, rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
        """The reorder buffer (DROP with allowed lateness): rows come out in timestamp order once
        the newest timestamp is ``allowed_lateness`` past them."""
        if not self.lateness:
            return rows, 0
        st = self.state
        tsf = self.spec.timestamp_field
        for r in rows:
            st.arrivals += 1
            heapq.heappush(st.buffer, (r[tsf], st.arrivals, r))
            st.seen = r[tsf] if st.seen is None else max(st.seen, r[tsf])
        out = []
        if st.seen is not None:
            limit = st.seen - self.lateness
            while st.buffer and st.buffer[0][0] <= limit:
                out.append(heapq.heappop(st.buffer)[2])
        return out, len(st.buffer)


# --------------------------------------------------------------------------- registry


class Registry:
    """All streams of a server, their definitions persisted under ``{prefix}:svc:*`` in Redis."""

    def __init__(
        self, redis_url: str | None, *, limits: Limits | None = None, prefix: str = "mtaw"
    ) -> None:
        import redis

        from ..storage.embedded import default_url

        self.url = redis_url or default_url()
        self.limits = limits or Limits()
        self.prefix = prefix
        self.redis: Any = redis.Redis.from_url(self.url, socket_timeout=10)
        self.streams: dict[str, Stream] = {}
        self.guard = threading.Lock()  # create/delete of streams and windows

    # -- keys
    @property
    def _streams_key(self) -> str:
        return f"{self.prefix}:svc:streams"

    @property
    def _windows_key(self) -> str:
        return f"{self.prefix}:svc:windows"

    @property
    def _state_key(self) -> str:
        return f"{self.prefix}:svc:state"

    # -- lookup
    def stream(self, name: str) -> Stream:
        s = self.streams.get(name)
        if s is None:
            raise ServiceError(
                "NOT_FOUND",
                "STREAM_NOT_FOUND",
                f"no stream named {name!r}",
                metadata={"stream": name},
            )
        return s

    def window(self, stream: str, name: str) -> Window:
        s = self.stream(stream)
        w = s.windows.get(name)
        if w is None:
            raise ServiceError(
                "NOT_FOUND",
                "WINDOW_NOT_FOUND",
                f"stream {stream!r} has no window {name!r}; its windows are {sorted(s.windows)}",
                metadata={"stream": stream, "window": name},
            )
        return w

    def result(self, stream: str, name: str) -> WindowResult:
        """A window's current result (under the stream's lock)."""
        w = self.window(stream, name)
        s = self.stream(stream)
        with s.lock:
            s.ensure_current()
            try:
                return w.result()
            except StoreError as ex:
                if s.journal is not None:
                    s.stale = True
                raise store_unavailable(stream, ex, window=name) from None

    # -- streams
    def create_stream(self, spec: StreamSpec) -> StreamInfo:
        check_stream_spec(spec)
        with self.guard:
            if spec.name in self.streams:
                raise ServiceError(
                    "ALREADY_EXISTS",
                    "STREAM_EXISTS",
                    f"stream {spec.name!r} already exists",
                    metadata={"stream": spec.name},
                )
            if len(self.streams) >= self.limits.max_streams:
                raise ServiceError(
                    "RESOURCE_EXHAUSTED",
                    "TOO_MANY_STREAMS",
                    f"the server holds its limit of {self.limits.max_streams} streams; delete one first",
                )
            blob = convert.stream_spec_to_proto(spec).SerializeToString()
            s = self._new_stream(spec)
            s.state_store.delete()  # leftovers of an earlier stream of that name
            self.redis.hset(self._streams_key, spec.name, blob)
            self.streams[spec.name] = s
            return s.info()

    def _new_stream(self, spec: StreamSpec) -> Stream:
        s = Stream(spec)
        s.state_store = StreamJournal(self.redis, self.prefix, spec.name)
        s.recover = functools.partial(self._recover_stream, s)
        return s

    def delete_stream(self, name: str) -> None:
        with self.guard:
            s = self.stream(name)
            for wname in list(s.windows):
                self._drop_window(s, wname)
            self.redis.hdel(self._streams_key, name)
            self.redis.hdel(self._state_key, name)
            s.state_store.delete()
            del self.streams[name]

    # -- windows
    def create_window(self, spec: WindowSpec) -> WindowInfo:
        with self.guard:
            s = self.stream(spec.stream)
            if spec.name in s.windows:
                raise ServiceError(
                    "ALREADY_EXISTS",
                    "WINDOW_EXISTS",
                    f"stream {spec.stream!r} already has a window {spec.name!r}",
                    metadata={"stream": spec.stream, "window": spec.name},
                )
            if len(s.windows) >= self.limits.max_windows_per_stream:
                raise ServiceError(
                    "RESOURCE_EXHAUSTED",
                    "TOO_MANY_WINDOWS",
                    f"stream {spec.stream!r} holds its limit of {self.limits.max_windows_per_stream} windows",
                )
            check_storage(spec)
            try:
                built = build_window(s.spec, spec)
            except DefinitionError as ex:
                raise ServiceError(
                    "INVALID_ARGUMENT",
                    ex.reason,
                    str(ex),
                    [(ex.field, ex.description)],
                    ex.metadata,
                ) from None
            s.ensure_current()  # the new window joins at the stream's state: the current one
            window_id = uuid.uuid4().hex if spec.storage.kind == "redis" else ""
            engine = self._engine(spec, built, window_id, new=True)
            w = Window(
                s.spec,
                spec,
                built,
                engine,
                history=self.limits.result_history,
                sequence=s.state.sequence,
            )
            w.timestamp = s.state.newest or 0
            # a window created on a stream with rows joins from now on (at the stream's lsn)
            w.lsn = s.state.lsn
            if engine.store is not None:  # its first checkpoint says where it joined
                engine.flush(meta=self._window_meta(s, w, _state_json(s.state)))
            record = pb.WindowInfo(spec=convert.window_spec_to_proto(spec))
            self.redis.hset(
                self._windows_key, f"{spec.stream}/{spec.name}", _window_blob(record, window_id)
            )
            s.windows[spec.name] = w
            self._journal_if_durable(s)
            return w.info(s.state.rows_late)

    def delete_window(self, stream: str, name: str) -> None:
        with self.guard:
            s = self.stream(stream)
            self.window(stream, name)
            self._drop_window(s, name)
            self._journal_if_durable(s)

    def _drop_window(self, s: Stream, name: str) -> None:
        w = s.windows.pop(name)
        self.redis.hdel(self._windows_key, f"{s.spec.name}/{name}")
        store = w.engine.store
        if store is not None and hasattr(store, "delete_window"):
            try:
                store.delete_window()
                store.close()
            except StoreError:  # pragma: no cover - logged, keys expire with the data
                log.warning("could not delete the data of window %s/%s", s.spec.name, name)

    def _engine(self, spec: WindowSpec, built: Built, window_id: str, *, new: bool) -> Any:
        cls = AmortizedMTA if spec.algorithm == "AMTA" else LogMTA
        if spec.storage.kind == "memory":
            return cls(built.monoid, built.policy)
        from ..storage.redis_store import RedisStore

        # No log per window and no checkpoint of its own: the stream's journal makes durable
        # windows durable, and the stream's flush checkpoints every window with its lsn.
        opts: dict[str, Any] = {
            "durable": False,
            "checkpoint_every": 1 << 62,
            "prefix": self.prefix,
        }
        if spec.storage.block_size:
            opts["block_size"] = spec.storage.block_size
        if spec.storage.cache_size:
            opts["cache_size"] = spec.storage.cache_size
            opts["refill_at"] = max(1, spec.storage.cache_size // 2)
        store = RedisStore(self.url, window_id=window_id, **opts)
        return cls(built.monoid, built.policy, store=store)

    # -- durability (the order of writes is in journal.py)
    def _journal_if_durable(self, s: Stream) -> None:
        """Start or stop journaling when the stream gains its first durable window or loses
        its last. Either way every window is checkpointed with its lsn and the state saved at
        the same lsn first, so the journal starts (or ends) exactly there."""
        durable = any(w.spec.storage.durable for w in s.windows.values())
        if durable == (s.journal is not None):
            return
        self.flush(s, wait=True)
        if durable:
            s.journal = s.state_store
            s.journal.first = s.state.lsn + 1
        else:
            s.journal = None
            s.state_store.drop_journal()

    def _window_meta(self, s: Stream, w: Window, state: str) -> dict[str, Any]:
        """What a window's checkpoint carries: its lsn, and without a journal to replay the
        stream's state (``state``, its JSON), since recovery then takes the newest saved."""
        meta: dict[str, Any] = {"lsn": w.lsn}
        if s.journal is None:
            meta["state"] = state
        return meta

    @_stream_locked
    def flush(self, stream: Stream, *, wait: bool = True, final: bool = False) -> None:
        """Checkpoint every Redis window of ``stream`` and save the stream's state.
        ``wait=False`` (the periodic flush) only queues the windows' checkpoints behind their
        pending writes, so appends to the stream are not held up by the round trips; with a
        journal, the state they reach is saved (and the journal trimmed) by the next flush,
        once they committed."""
        s = stream
        s.ensure_current()
        pending = s.pending_state
        if pending is not None and s.journal is not None:
            lsn, blob, futures = pending
            if all(f.done() for f in futures):
                s.pending_state = None
                if not any(f.cancelled() or f.exception() is not None for f in futures):
                    try:
                        s.journal.commit_state(blob, lsn)
                    except StoreError:
                        s.stale = True
                        raise
        futures = []
        blob = _state_json(s.state, clean=final)
        try:
            for w in s.windows.values():
                if w.engine.store is not None:
                    futures.append(w.engine.flush(wait=wait, meta=self._window_meta(s, w, blob)))
            if s.journal is None:
                s.state_store.save_state(blob)
            elif wait:
                s.pending_state = None
                s.journal.commit_state(blob, s.state.lsn)
            else:
                s.pending_state = (s.state.lsn, blob, futures)
        except StoreError:
            if s.journal is not None:
                s.stale = True
            raise

    @_stream_locked
    def _recover_stream(self, s: Stream, *, reload: bool = True) -> None:
        """Rebuild ``s`` from Redis: each Redis window from its checkpoint, the stream's state,
        then the journal's entries after that state (see journal.py). ``reload=False``: the
        windows were just opened (start-up)."""
        try:
            if reload:
                for w in s.windows.values():
                    if w.engine.store is not None:
                        w.engine.reload()
            blob = s.state_store.load_state()
            if blob is None:  # saved by an earlier release
                blob = self.redis.hget(self._state_key, s.spec.name)
            journaled = s.journal is not None
            state = _state_from_json(blob, journaled=journaled) if blob else StreamState()
            metas = {
                n: (w.engine.store.checkpoint_meta or {})
                for n, w in s.windows.items()
                if w.engine.store is not None
            }
            if not journaled:  # the newest state that reached Redis (never go back)
                for meta in metas.values():
                    if "state" in meta:
                        other = _state_from_json(meta["state"])
                        if other.lsn > state.lsn:
                            state = other
            live = s.state.lsn
            s.state = state
            s.pending_state = None
            entries = s.journal.entries() if s.journal is not None else []
            if s.journal is not None:
                s.journal.first = entries[0].lsn if entries else state.lsn + 1
            end = max(state.lsn, entries[-1].lsn) if entries else state.lsn
            for n, w in s.windows.items():
                if n in metas:
                    w.lsn = int(metas[n].get("lsn", state.lsn))
                elif not reload:
                    w.lsn = end  # in memory: empty after a restart, joins after the journal
            for e in entries:
                if e.lsn > state.lsn:
                    s.replay(e)
            for w in s.windows.values():
                w.sequence = s.state.sequence
                w.timestamp = s.state.newest or 0
            if reload and s.state.lsn < live:  # pragma: no cover - a journal shorter than acked
                log.error("stream %s recovered at lsn %d < %d", s.spec.name, s.state.lsn, live)
        except StoreError as ex:
            s.stale = True
            raise store_unavailable(s.spec.name, ex) from None
        s.stale = False

    def restore(self) -> int:
        """Load every stream and window definition, reopen the windows and recover each
        stream's state (replaying its journal); returns windows."""
        count = 0
        for name, blob in self.redis.hgetall(self._streams_key).items():
            spec = convert.stream_spec_from_proto(pb.StreamSpec.FromString(blob))
            self.streams[name.decode()] = self._new_stream(spec)
        for key, blob in self.redis.hgetall(self._windows_key).items():
            sname, _, wname = key.decode().partition("/")
            s = self.streams.get(sname)
            if s is None:
                continue
            info, window_id = _window_from_blob(blob)
            wspec = convert.window_spec_from_proto(info.spec)
            built = build_window(s.spec, wspec)
            engine = self._engine(wspec, built, window_id, new=False)
            s.windows[wname] = Window(
                s.spec, wspec, built, engine, history=self.limits.result_history
            )
            count += 1
        for s in self.streams.values():
            if any(w.spec.storage.durable for w in s.windows.values()):
                s.journal = s.state_store
            self._recover_stream(s, reload=False)
            if s.journal is None:
                # from now on a stop without a final flush is unclean
                s.state_store.save_state(_state_json(s.state))
        return count

    def close(self) -> None:
        for s in self.streams.values():
            with s.lock:
                try:
                    self.flush(s, final=True)
                except Exception:  # pragma: no cover - logged at shutdown
                    log.exception("flush of stream %s failed at shutdown", s.spec.name)
                for w in s.windows.values():
                    if w.engine.store is not None:
                        try:
                            w.engine.close()
                        except Exception:  # pragma: no cover
                            log.exception("close of window %s failed", w.spec.name)
        self.redis.close()


# Stream names also hold a key (``telemetry:host-07``, the Spark connector's per-key streams).
STREAM_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.:~-]{0,254}$")


def check_stream_spec(spec: StreamSpec) -> None:
    if not STREAM_NAME.match(spec.name or ""):
        raise invalid(
            "spec.name",
            f"expected a stream name matching {STREAM_NAME.pattern}, got {show(spec.name)}",
        )
    if not NAME.match(spec.timestamp_field or ""):
        raise invalid(
            "spec.timestamp_field",
            f"expected a field name matching {NAME.pattern}, got {show(spec.timestamp_field)}",
        )
    seen = {spec.timestamp_field}
    for i, f in enumerate(spec.fields):
        if not NAME.match(f.name or ""):
            raise invalid(
                f"spec.fields[{i}].name",
                f"expected a field name matching {NAME.pattern}, got {show(f.name)}",
            )
        if f.name in seen:
            raise invalid(
                f"spec.fields[{i}].name",
                f"field {f.name!r} is defined twice (or is the timestamp field)",
            )
        seen.add(f.name)
        if str(f.type) not in {t.value for t in FieldType}:
            raise invalid(
                f"spec.fields[{i}].type",
                f"expected one of {[t.value for t in FieldType]}, got {f.type!r}",
            )
        if f.allow_nan and str(f.type) != FieldType.DOUBLE.value:
            raise invalid(
                f"spec.fields[{i}].allow_nan",
                "only DOUBLE fields can hold non-finite values (NaN, +inf, -inf)",
            )
    if spec.late_policy not in ("REJECT", "DROP"):
        raise invalid(
            "spec.late_policy",
            f"expected REJECT or DROP, got {show(spec.late_policy)}",
            "UNKNOWN_ENUM_VALUE",
        )
    lateness = spec.allowed_lateness.total_seconds()
    if lateness < 0 or spec.allowed_lateness > MAX_DURATION:
        raise invalid(
            "spec.allowed_lateness",
            f"expected a duration >= 0 and <= {MAX_DURATION.days} days, got "
            f"{spec.allowed_lateness}",
        )
    if lateness > 0 and spec.late_policy != "DROP":
        raise invalid("spec.allowed_lateness", "a reorder buffer needs late_policy DROP")


def check_storage(spec: WindowSpec) -> None:
    """The checks a window definition passes when it is created, beyond those of
    ``build_window`` (which also reopens stored windows, so it keeps accepting what an
    earlier release stored): the storage, and the policy's numbers (a count of at least one
    row, a time range in (0, MAX_DURATION], a finite bound >= 0)."""
    check_policy_numbers(spec)
    st = spec.storage
    if st.kind not in ("memory", "redis"):
        raise invalid(
            "spec.storage.kind",
            f"expected MEMORY or REDIS, got {show(st.kind)}",
            "UNKNOWN_ENUM_VALUE",
        )
    for name in ("block_size", "cache_size"):
        v = getattr(st, name)
        if v < 0 or v > 1 << 20:
            raise invalid(f"spec.storage.{name}", f"expected 0 (default) to {1 << 20}, got {v}")
    if st.kind == "memory" and st.durable:
        raise invalid("spec.storage.durable", "a MEMORY window cannot be durable; use REDIS")


def check_policy_numbers(spec: WindowSpec) -> None:
    p = spec.policy
    where = f"spec.policy.{p.kind}"
    if p.kind == "count" and p.size < 1:
        raise invalid(
            f"{where}.size", f"expected a row count >= 1, got {p.size}", "INVALID_DEFINITION"
        )
    if p.kind == "time_range" and not timedelta(0) < p.range <= MAX_DURATION:
        raise invalid(
            f"{where}.range",
            f"expected a duration > 0 and <= {MAX_DURATION.days} days, got {p.range}",
            "INVALID_DEFINITION",
        )
    if p.kind == "bounded_sum" and not (math.isfinite(p.bound) and p.bound >= 0):
        raise invalid(
            f"{where}.bound",
            f"expected a finite number >= 0, got {p.bound!r}",
            "INVALID_DEFINITION",
        )


def _window_blob(info: pb.WindowInfo, window_id: str) -> bytes:
    # "<window id>\n<WindowInfo protobuf>": the id is hex, never holds a newline
    return window_id.encode() + b"\n" + bytes(info.SerializeToString())


def _window_from_blob(blob: bytes) -> tuple[pb.WindowInfo, str]:
    window_id, _, rest = blob.partition(b"\n")
    return pb.WindowInfo.FromString(rest), window_id.decode()


# After an unclean stop the last saved state may be behind by the batches of one flush
# interval; result sequences then jump ahead by this much so they never repeat.
SEQUENCE_GAP_AFTER_CRASH = 1 << 32


def _state_json(st: StreamState, *, clean: bool = False) -> str:
    import json

    return json.dumps(
        {
            "newest": st.newest,
            "seen": st.seen,
            "rows_appended": st.rows_appended,
            "rows_late": st.rows_late,
            "batches_appended": st.batches_appended,
            "sequence": st.sequence,
            "batches_duplicate": st.batches_duplicate,
            "producers": st.producers.snapshot(),
            "buffer": [[t, a, r] for t, a, r in st.buffer],
            "arrivals": st.arrivals,
            "lsn": st.lsn,
            "clean": clean,
        }
    )


def _state_from_json(blob: bytes | str, *, journaled: bool = False) -> StreamState:
    """A saved state. After an unclean stop of a stream without a journal, result sequences
    jump ahead (the state may be behind what readers saw); a journal replays it exactly."""
    import json

    d = json.loads(blob)
    clean = d.pop("clean", True)
    st = StreamState(**{k: v for k, v in d.items() if k not in ("buffer", "producers")})
    st.producers = Ledger(d.get("producers"))
    if "sequence" not in d:
        st.sequence = st.batches_appended
    if not clean and not journaled:
        st.sequence += SEQUENCE_GAP_AFTER_CRASH
    st.buffer = [(t, a, r) for t, a, r in d.get("buffer", [])]
    heapq.heapify(st.buffer)
    return st


__all__ = ["FINAL", "NONE", "PER_ROW", "Limits", "Registry", "ServiceError", "Stream", "Window"]
