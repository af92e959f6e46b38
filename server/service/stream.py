"""One stream (:class:`Stream`): its windows and state, and ingestion.

A batch is validated and decoded once (columns -> schema order), passes the lateness rule,
and is lifted for every window before any changes (so a refused row changes nothing), the
results a plugin's ``lower`` would get tried too (so a refused result changes nothing); then
it is journaled (when a window is durable), applied to each window's engine and committed to
the stream's state, and the stream's listeners (subscribers) get the results.

Every operation on a stream's windows and state runs under the stream's lock (``_locked``).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import re
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NoReturn, TypeVar

import numpy as np

from mtawindows.v1.reasons import Reason
from mtawindows.v1.types import AppendResult, StreamInfo, StreamSpec, WindowResult, clip, show

from ..engine.hopping import HopGroup
from ..storage.fencing import Fence, FencedError
from ..storage.journal import JournalEntry, StreamJournal
from ..storage.protocol import StoreError, WouldBlock
from .batch import FINAL, NONE, PER_ROW, Append, Batch, Deferred
from .columns import Columns, Schema
from .hosted_window import HostedWindow
from .refusals import (
    ServiceError,
    batch_too_large,
    fenced_out,
    invalid,
    moved_after_journal,
    not_found,
    store_unavailable,
)
from .reorder import Reorder
from .state import StreamState

T = TypeVar("T")


def _locked(method: Callable[..., T]) -> Callable[..., T]:
    """Run a Stream method under the stream's lock."""

    @functools.wraps(method)
    def run(self: Stream, *args: Any, **kwargs: Any) -> T:
        with self.lock:
            return method(self, *args, **kwargs)

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


def _lift_key(win: HostedWindow) -> Any:
    """What a window's lift depends on (its aggregations and the hidden fields its policy
    kind adds): windows with equal keys lift a row alike. None: not shared (an expression
    policy's record holds what its CEL reads)."""
    spec = win.spec
    if spec.policy.kind == "expression":
        return None
    aggs = tuple(
        (a.name, a.monoid, a.field, tuple(sorted(a.params.items()))) for a in spec.aggregations
    )
    return (aggs, spec.policy.kind, spec.policy.field)


def _check_idempotency(producer_id: str, sequence: int) -> None:
    if (producer_id or sequence) and (not producer_id or sequence <= 0):
        raise invalid(
            "producer_id" if not producer_id else "sequence",
            "idempotency needs both a producer_id and a sequence > 0, got "
            f"producer_id={show(producer_id)}, sequence={sequence}",
        )


class Stream:
    """A stream: its definition and schema, its windows, its state and lateness rule, its
    journal when a window is durable, and the listeners told of each applied batch."""

    def __init__(self, spec: StreamSpec) -> None:
        self.spec = spec
        self.schema = Schema(spec)
        self.windows: dict[str, HostedWindow] = {}
        # deleted windows whose rows other windows still share (their hosts, hidden: they
        # take every batch, answer no one), by a name no window can have ("~<id>")
        self.retired: dict[str, HostedWindow] = {}
        self.state = StreamState()
        self.reorder = Reorder(spec)
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
        # the owner's fencing token (a cluster member's streams; None: unfenced), and whether
        # the stream left this server (released or fenced out): every call then refuses
        self.fence: Fence | None = None
        self.gone = False
        # the checkpoints queued by the last flush: (lsn, state JSON, futures)
        self.pending_state: tuple[int, str, list[Any]] | None = None
        # the state blob the last flush saved (None: not known to be in Redis): an idle
        # stream's flush does not save the same state again
        self.saved_state: str | None = None

    keyed = False
    key_bytes: str | None = None  # (a keyed stream's: KeyedStream.key_bytes)

    @property
    def takes_arrays(self) -> bool:
        """Whether a batch's numbers may come as numpy arrays (an Arrow request's, decoded
        without a Python object per value): every window keeps its state as columns and
        lifts nothing row by row, and no reorder buffer holds rows (it keeps them as rows).
        Any other stream takes lists (:meth:`append` makes them from arrays it is given);
        a stream without windows reads nothing of its rows: arrays."""
        return not self.reorder.lateness and all(
            w.columnar and w.hopper is None for w in self.windows.values()
        )

    def hosted(self) -> dict[str, HostedWindow]:
        """Every window that takes batches: the retired hosts (first: their members' rows are
        theirs), then the windows."""
        return {**self.retired, **self.windows} if self.retired else self.windows

    def members_of(self, w: HostedWindow) -> list[str]:
        """The windows sharing ``w``'s rows (its columnar window's members), by name."""
        return [m for m in getattr(w.engine, "members", ()) if m in self.windows]

    @property
    def rows_late(self) -> int:
        return self.state.rows_late

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

    def decode(self, columns: Columns) -> tuple[int, list[list[Any]]]:
        """Check a batch's columns against the schema; the columns in schema order."""
        return self.schema.decode(columns)

    # -- ingestion
    @_locked
    def append(
        self,
        columns: Columns,
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
        if not self.takes_arrays:
            columns = _as_lists(columns)
        request = Append(columns, producer_id, sequence, mode, which, max_rows)
        rows = max((len(v) for _, v in columns.values()), default=0)
        with _gc_paused(rows):
            saved = self.reorder.save(self.state)
            try:
                batch = self.prepare(request)
            except BaseException:
                self.reorder.restore(self.state, saved)  # a refused batch changes nothing
                raise
            if batch.result.duplicate or batch.noop:
                return batch.result
            batch.lsn = self.state.lsn + 1
            if self.journal is not None:
                try:
                    self.journal.append(batch.lsn, producer_id, sequence, mode, which, columns)
                except StoreError as ex:
                    self.reorder.restore(self.state, saved)
                    self.stale = True  # the entry may have landed: reload before the next append
                    raise store_unavailable(self.spec.name, ex) from None
            self._apply(batch, nonblocking=nonblocking)
            return self._finish(batch)

    def ensure_current(self) -> None:
        """Before a call that reads or changes the windows: a journaled stream whose journal or
        windows failed is rebuilt from Redis first (a window must not reload its checkpoint
        alone: it would lose the journal's entries after it). A stream that left this server
        refuses (FENCED): the caller is sent to its owner."""
        if self.gone or (self.fence is not None and self.fence.lost):
            raise fenced_out(self.spec.name)
        if self.journal is None:
            return
        if self.stale or any(w.engine.stale for w in self.hosted().values()):
            self.stale = True
            self.recover()

    def replay(self, entry: JournalEntry) -> None:
        """Apply a journaled append again (recovery): the same checks against the same state
        give the same batch; windows that hold the entry already are skipped. Its results
        are not tried again (they were before it was journaled, and a window that holds the
        entry would try them on top of it)."""
        which = [w for w in entry.which if w in self.windows]
        request = Append(
            entry.columns, entry.producer_id, entry.sequence, entry.mode, which, 1 << 62
        )
        batch = self.prepare(request, replay=True)
        if batch.result.duplicate:  # pragma: no cover - a journal written by another state
            msg = f"stream {self.spec.name!r}: journal entry {entry.lsn} replays as a duplicate"
            raise StoreError(msg)
        batch.lsn = entry.lsn
        batch.replay = True
        batch.applied = {n for n, w in self.hosted().items() if w.lsn >= entry.lsn}
        self._prepare_columnar(batch)
        self._apply(batch, nonblocking=False)
        self._finish(batch)

    @_locked
    def resume(self, batch: Batch) -> AppendResult:
        """Finish a :class:`Deferred` batch (may wait for Redis)."""
        with _gc_paused(batch.result.rows_applied):
            self._apply(batch, nonblocking=False)
            return self._finish(batch)

    def inline_arrays_ok(self) -> bool:
        """Whether a small Arrow batch may be tried on the event loop: the stream takes it as
        arrays (every window columnar: each applies the batch in one vectorized step, and
        defers it when it would read a slice from Redis), no journal, nothing reloading."""
        if self.journal is not None or self.stale or not self.takes_arrays:
            return False
        return all(w.inline_ok for w in self.hosted().values())

    def inline_ok(self, n_rows: int, mode: str) -> bool:
        """Whether a batch may be tried on the event loop: small, no reorder buffer, no window
        that journals (a Redis round trip per batch) or is reloading, and either one row or
        only windows that take a batch in one step (a window cannot stop halfway)."""
        if n_rows > 256 or self.reorder.lateness:
            return False
        if self.journal is not None or self.stale:
            return False
        one_step = n_rows == 1 or (
            mode != PER_ROW and all(w.built.batch_safe for w in self.windows.values())
        )
        return one_step and all(w.inline_ok for w in self.hosted().values())

    # -- the steps of an append
    def prepare(self, request: Append, *, replay: bool = False) -> Batch:
        """Everything that can refuse the batch, before any window changes (a journaled one
        being replayed: ``replay``)."""
        self._check_windows(request.which)
        n_rows, cols = self.decode(request.columns)
        if n_rows > request.max_rows:
            raise batch_too_large(n_rows, request.max_rows)
        self.schema.check_bounded_sums(self.windows, cols)
        _check_idempotency(request.producer_id, request.sequence)
        if n_rows == 0:
            return self._noop(request)
        if request.producer_id and self.state.producers.is_duplicate(
            request.producer_id, request.sequence
        ):
            return self._duplicate(request)
        ts = cols[0]
        columns_of, rows, late, buffered, kept = self._admit(cols)
        lifted = self._lift(columns_of, rows, kept)
        released_ts = columns_of[self.spec.timestamp_field]
        for win in self.windows.values():
            win.note_ints(columns_of, len(released_ts))
        if not replay:
            self._check_results(request, lifted, kept)
        result = AppendResult(rows_applied=len(released_ts), rows_late=late, rows_buffered=buffered)
        if request.mode == PER_ROW and kept is not None:
            result.row_positions = kept  # the request's row of each result (late rows left)
        batch = Batch(request, result, ts, lifted, released_ts, late, columns=columns_of)
        batch.origin = kept
        if not replay:  # a replayed entry's: once the windows that hold it are known
            self._prepare_columnar(batch)
        return batch

    def _prepare_columnar(self, batch: Batch) -> None:
        """Each columnar window checks and lifts the batch's arrays before anything changes:
        a value it refuses refuses the batch here (BAD_VALUES), as a lift does (a window
        sharing another's rows: that one's)."""
        for name, win in self.hosted().items():
            if not win.columnar or not len(batch.released_ts) or name in batch.applied:
                continue
            if win.host is not None:
                continue
            try:
                batch.prepared[name] = win.engine.prepare(win.arrays(batch))
            except StoreError as ex:  # nothing changed yet; a journaled stream recovers next
                if self.journal is not None:
                    self.stale = True
                raise store_unavailable(self.spec.name, ex, window=self._shown(name)) from None
            except (TypeError, ValueError, KeyError) as ex:
                name = self._shown(name)
                why = str(ex).strip("'")  # a KeyError's text comes quoted
                # "(row i)" of the rows it was given: the request's row, when rows were
                # dropped; none when a reorder buffer released them (they may be older)
                why = _ROW_TEXT.sub(
                    lambda m: _row_text(self._request_row(int(m[1]), batch.origin)), why
                )
                raise invalid(
                    "columns",
                    f"window {name!r} refused a row: {clip(why)}",
                    Reason.BAD_VALUES,
                ) from None

    def _shown(self, name: str) -> str:
        """The window a caller is told of for window ``name``: a retired host's first
        member (the window whose rows it holds; it has no name of its own)."""
        if name in self.windows:
            return name
        return next(iter(self.members_of(self.hosted()[name])), name)

    def _request_row(self, i: int, origin: list[int] | None) -> int | None:
        """The request's row of row ``i`` of the rows a window was given: through
        ``origin`` (the request's row of each, when late rows were dropped); None when a
        reorder buffer released them (they need not be this request's)."""
        if self.reorder.lateness:
            return None
        return origin[i] if origin is not None else i

    def _refused_row(
        self,
        name: str,
        win: HostedWindow,
        rows: list[dict[str, Any]],
        ex: Exception,
        origin: list[int] | None,
    ) -> ServiceError:
        """BAD_VALUES for a row window ``name``'s lift refused (``ex``): the first such row as
        the request's row (:meth:`_request_row`) and, when one field's lift refuses it, that
        column, in the violation and the metadata."""
        found = _first_refused(win.lift, rows)
        if found is None:  # pragma: no cover - the batch's lift raised, so one row does
            why = f"window {name!r} refused a row: {clip(str(ex))}"
            return invalid("columns", why, Reason.BAD_VALUES)
        i, row, ex = found
        monoid = win.built.monoid
        column = None
        for m in getattr(monoid, "monoids", (monoid,)):
            f = getattr(m, "field", None)
            if isinstance(f, str) and f in row:
                try:
                    m.lift(row)
                except (TypeError, ValueError):
                    column = f
                    break
        row_no = self._request_row(i, origin)
        meta = {"window": name} | ({"column": column} if column else {})
        where = "columns"
        if row_no is not None:
            meta["row"] = str(row_no)
            where = f"columns[{column}][{row_no}]" if column else "columns"
        elif column:
            where = f"columns[{column}]"
        said = _row_text(row_no)
        text = f"window {name!r} refused a row: {clip(str(ex))}" + (f" {said}" if said else "")
        return invalid(where, text, Reason.BAD_VALUES, meta)

    def _check_results(
        self, request: Append, lifted: dict[str, list[Any]], origin: list[int] | None = None
    ) -> None:
        """A window with a plugin's ``lower`` lowers the results the batch would give it
        before anything changes (journal, windows, ledger): one that raises refuses the
        batch here (``LOWER_FAILED``), as a ``lift`` that raises does. With per-row results,
        a window's INT64 sums on the engine are checked the same way: one past int64 (which
        a per-row result carries them in) refuses the batch (``BAD_VALUES``)."""
        for name, win in self.windows.items():
            per_row = request.mode == PER_ROW and (not request.which or name in request.which)
            # (INT64 sums that surely fit need no preview: most batches, see row_ints_fit)
            ints = (
                per_row
                and win.checks_row_ints
                and name in lifted
                and not win.row_ints_fit(len(lifted[name]))
            )
            if win.checks_results or ints:
                win.check_results(lifted[name], per_row=per_row, origin=origin)

    def _check_windows(self, which: Sequence[str]) -> None:
        for w in which:
            if w not in self.windows:
                msg = f"stream {self.spec.name!r} has no window {w!r}"
                raise not_found(Reason.WINDOW_NOT_FOUND, msg, stream=self.spec.name, window=w)

    def _noop(self, request: Append) -> Batch:
        """No rows: acknowledged without a trace (no batch counted, no sequence, the
        producer's sequence not taken, no result); FINAL answers the current results."""
        res = AppendResult()
        if request.mode == FINAL:
            res.results = self._results(request.which)
        elif request.mode == PER_ROW:
            res.row_results = {
                n: self.windows[n].row_results([], []) for n in (request.which or self.windows)
            }
        return Batch(request, res, [], {}, [], 0, noop=True)

    def _duplicate(self, request: Append) -> Batch:
        """A producer's sequence already applied: counted, nothing applied."""
        self.state.batches_duplicate += 1
        res = AppendResult(duplicate=True)
        if request.mode == FINAL:
            res.results = self._results(request.which)
        return Batch(request, res, [], {}, [], 0)

    def _admit(
        self, cols: list[Any]
    ) -> tuple[dict[str, Any], list[dict[str, Any]] | None, int, int, list[int] | None]:
        """The rows that pass the lateness rule and leave the reorder buffer: (their columns
        by name, the same as rows when the buffer made them, rows late, rows buffered, and
        the request's row each is when some were dropped or a buffer reorders them: -1 for
        a row the buffer held from an earlier batch)."""
        rows_idx, late = self.reorder.admit(self.state, cols[0])
        if rows_idx is not None:
            cols = [_take(c, rows_idx) for c in cols]
        names = self.schema.order
        if not self.reorder.lateness:
            return dict(zip(names, cols, strict=True)), None, late, 0, rows_idx
        rows = [dict(zip(names, r, strict=True)) for r in zip(*cols, strict=True)]
        rows, buffered, which = self.reorder.release(self.state, rows)
        origin = list(range(len(cols[0]))) if rows_idx is None else rows_idx
        positions = [origin[i] if i >= 0 else -1 for i in which]
        return {n: [r[n] for r in rows] for n in names}, rows, late, buffered, positions

    def _lift(
        self,
        columns_of: dict[str, list[Any]],
        rows: list[dict[str, Any]] | None,
        origin: list[int] | None = None,
    ) -> dict[str, list[Any]]:
        """The batch lifted for every window before any changes: a refused row changes
        nothing (named as the request's row: ``origin`` when late rows were dropped). A
        window lifts whole columns, or else the rows one by one."""
        lifted: dict[str, list[Any]] = {}
        same: dict[Any, list[Any]] = {}  # windows of one record lift the batch once
        for name, win in self.windows.items():
            if win.columnar:  # it takes the batch as arrays (_prepare_columnar)
                continue
            key = _lift_key(win)
            if key is not None and key in same:
                lifted[name] = same[key]
                continue
            if win.lift_columns is not None:
                lifted[name] = win.lift_columns(columns_of)
                if key is not None:
                    same[key] = lifted[name]
                continue
            if rows is None:
                names = self.schema.order
                cols = [columns_of[n] for n in names]
                rows = [dict(zip(names, r, strict=True)) for r in zip(*cols, strict=True)]
            lift = win.lift
            try:
                lifted[name] = [lift(r) for r in rows]
            except (TypeError, ValueError) as ex:
                raise self._refused_row(name, win, rows, ex, origin) from None
            if key is not None:
                same[key] = lifted[name]
        return lifted

    def _apply(self, batch: Batch, *, nonblocking: bool) -> None:
        request = batch.request
        pid = request.producer_id or None
        seq = request.sequence if request.producer_id else None
        for name, win in self.hosted().items():
            if name in batch.applied:
                continue
            per_row: tuple[list[Any], list[int]] | None = None
            if self._wants_rows(request, name):
                per_row = ([], [])
            if win.hopper is not None:
                self._apply_hopping(batch, name, request)
                continue
            if win.host is not None:  # its host took the batch for it (it comes first)
                if per_row is not None:  # pragma: no cover - hosts are applied first
                    batch.per_row[name] = per_row
                batch.applied.add(name)
                win.lsn = batch.lsn
                continue
            if win.columnar:
                self._apply_columnar(batch, name, per_row is not None, nonblocking)
                continue
            # a window's columnar shadow takes every row its engine takes, first (all or
            # nothing); when it holds what the engine holds, it gives the per-row results
            # and the engine takes the batch in one step
            shadowed = None
            if per_row is not None:
                win.want_shadow()
            # a call that must not wait (the event loop) feeds it after the engine, without
            # its results: a deferred batch would otherwise start it anew each time
            if win.shadow is not None and not nonblocking:
                shadowed = win.feed_shadow(batch, per_row=per_row is not None)
            if shadowed is not None:
                per_row = None
            totals, sizes = per_row or (None, None)
            inserted = win.engine.inserted
            try:
                batch.evicted[name] = win.engine.apply_lifted(
                    batch.lifted[name],
                    pid,
                    seq,
                    per_item=not win.built.batch_safe,
                    totals=totals,
                    sizes=sizes,
                    nonblocking=nonblocking,
                )
            except WouldBlock:
                win.restart_shadow()  # it took the batch, the engine will later: anew
                raise Deferred(batch) from None
            except StoreError as ex:
                win.restart_shadow()
                self._store_failed(batch, name, ex)
            if win.engine.inserted == inserted and len(batch.released_ts):  # it took none
                win.restart_shadow()
            elif nonblocking and win.shadow is not None:
                win.feed_shadow(batch, per_row=False)
            win.shadow_synced = win.engine.inserted
            if shadowed is not None:
                batch.row_tables[name] = shadowed
            elif per_row is not None:
                batch.per_row[name] = per_row
            batch.applied.add(name)
            win.lsn = batch.lsn

    def _wants_rows(self, request: Append, name: str) -> bool:
        """Whether window ``name`` answers ``request`` with per-row results (a retired host
        answers no one)."""
        return (
            request.mode == PER_ROW
            and (not request.which or name in request.which)
            and name in self.windows
        )

    def _apply_columnar(
        self, batch: Batch, name: str, per_row: bool, nonblocking: bool = False
    ) -> None:
        """A columnar window takes the batch as it prepared it, for itself and the windows
        sharing its rows (its members: their results come with its own). It waits for Redis
        only to read the few slices where a start moves (or when its slice writes back up):
        a call that must not wait (the event loop) defers the batch then, before this
        window changes (``Deferred``)."""
        win = self.hosted()[name]
        prepared = batch.prepared.get(name)
        members = self.members_of(win)
        replay = batch.replay  # a replayed entry answers no one
        rows = {m for m in members if not replay and self._wants_rows(batch.request, m)}
        if prepared is not None:
            per_row = per_row and not replay
            try:
                if prepared.at != win.engine.inserted:  # the window changed since (a reload)
                    prepared = win.engine.prepare(win.arrays(batch))
                if nonblocking and win.engine.would_block(prepared):
                    raise Deferred(batch)
                got = win.engine.apply(
                    prepared, per_row=per_row, nonblocking=nonblocking, member_rows=rows
                )
            except StoreError as ex:
                self._store_failed(batch, name, ex)
            batch.evicted[name] = got.evicted
            if per_row:
                batch.row_tables[name] = (got.rows, got.sizes)
                win.shadow_results += 1
            for m in members:
                r = got.members[m]
                batch.evicted[m] = r.evicted
                if m in rows:
                    batch.row_tables[m] = (r.rows, r.sizes)
                    self.windows[m].shadow_results += 1
        else:
            for n in (name, *members):
                if (n == name and per_row) or n in rows:
                    batch.per_row[n] = ([], [])
                else:
                    batch.evicted[n] = 0
        for n in (name, *members):
            batch.applied.add(n)
            self.hosted()[n].lsn = batch.lsn

    def _store_failed(self, batch: Batch, name: str, ex: StoreError) -> NoReturn:
        """A window failed on the store while taking ``batch``: what the caller is told."""
        if self.journal is not None:
            # journaled: recovery replays the batch into every window that lacks it
            self.stale = True
        if batch.replay:
            raise ex
        if self.journal is not None and isinstance(ex, FencedError):
            # the batch is in the journal: the new owner applies it; not "nothing done"
            raise moved_after_journal(self.spec.name) from None
        raise store_unavailable(self.spec.name, ex, window=self._shown(name)) from None

    def hop_groups(self) -> dict[str, list[str]]:
        """The hopping windows sharing slices (HopGroup): each window's group, by name (the
        windows in definition order; a window alone is a group of one). Windows share when
        their plans slice (slide and range count the same thing) and their records are one:
        the same aggregations under the same kind of policy."""
        groups: dict[Any, list[str]] = {}
        out: dict[str, list[str]] = {}
        for name, w in self.windows.items():
            if w.hopper is None:
                continue
            key = _lift_key(w) if w.built.hop.sliced else None
            members = groups.setdefault(key, []) if key is not None else [name]
            if key is not None:
                members.append(name)
            out[name] = members
        for name, members in out.items():
            self.windows[name].sharing = tuple(m for m in members if m != name)
        return out

    def _apply_hopping(self, batch: Batch, name: str, request: Append) -> None:
        """A hopping window takes the batch through its slicer, with the windows sharing its
        slices (one combine per row for all; never deferred: a final aggregator gets a slice
        at a time). A store failure leaves a window to reload its checkpoint, the hopper's
        state with it."""
        members = [m for m in self.hop_groups()[name] if m not in batch.applied]
        wins = [self.windows[m] for m in members]
        for win in wins:
            hop = win.hopper
            assert hop is not None
            if win.engine.stale and self.journal is None:
                win.engine.reload()
                meta = win.engine.store.checkpoint_meta or {}
                hop.restore(meta.get("hop"))
        per_row: list[tuple[list[Any], list[int]] | None] = [
            ([], [])
            if request.mode == PER_ROW and (not request.which or m in request.which)
            else None
            for m in members
        ]
        group = HopGroup([w.hopper for w in wins if w.hopper is not None])
        try:
            got = group.apply(batch.lifted[name], batch.released_ts, per_row)
        except StoreError as ex:
            self._store_failed(batch, name, ex)
        for m, win, (closed, evicted), lists in zip(members, wins, got, per_row, strict=True):
            batch.evicted[m] = evicted
            batch.boundaries[m] = closed
            if lists is not None:
                batch.per_row[m] = lists
            batch.applied.add(m)
            win.lsn = batch.lsn

    def _finish(self, batch: Batch) -> AppendResult:
        """Commit the stream's state and build the answer."""
        st = self.state
        ts = batch.ts
        result = batch.result
        if len(ts):
            high = int(ts.max()) if isinstance(ts, np.ndarray) else max(ts)
            st.seen = high if st.seen is None else max(st.seen, high)
        if len(batch.released_ts):
            last = int(batch.released_ts[-1])
            st.newest = last if st.newest is None else max(st.newest, last)
        st.rows_appended += result.rows_applied
        st.rows_late += batch.late
        st.batches_appended += 1
        st.sequence += 1
        st.lsn = batch.lsn
        if batch.request.producer_id:
            st.producers.record(batch.request.producer_id, batch.request.sequence)
        self.batches += 1
        finals: dict[str, Any] = {}
        for n, w in self.windows.items():
            w.timestamp = st.newest or 0
            w.evicted = batch.evicted.get(n, 0)
            if w.hopper is not None:
                # results numbered by boundary: one per boundary the batch closed (a
                # subscriber gets each, a reader pages through them by sequence)
                closed = batch.boundaries.get(n, ())
                first = w.hopper.closed - len(closed)
                out = []
                for i, b in enumerate(closed):
                    w.sequence = first + i + 1
                    out.append(
                        w.boundary_result(
                            b, evicted=w.evicted, sequence=w.sequence, timestamp=w.timestamp
                        )
                    )
                w.history.extend(out)
                finals[n] = out
                continue
            w.sequence = st.sequence
            try:
                finals[n] = r = w.result()
            except StoreError as ex:  # a write that failed in the background since the apply
                self._store_failed(batch, n, ex)
            w.history.append(r)
        if batch.request.mode == FINAL:
            which = batch.request.which or finals
            result.results = {
                n: self.windows[n].result() if isinstance(finals[n], list) else finals[n]
                for n in which
            }
        for name, (totals, sizes) in batch.per_row.items():
            result.row_results[name] = self.windows[name].row_results(totals, sizes)
        for name, (table, sizes) in batch.row_tables.items():
            result.row_results[name] = self.windows[name].row_results_from(table, sizes)
        # the batch's temporaries go before the collector resumes (it would walk them all)
        batch.per_row.clear()
        batch.row_tables.clear()
        batch.lifted.clear()
        batch.arrays.clear()
        if self.listeners and not batch.replay:
            for listener in list(self.listeners):
                listener(self.batches, finals)
        return result

    def _results(self, which: Sequence[str]) -> dict[str, WindowResult]:
        return {n: self.windows[n].result() for n in which or self.windows}


def _as_lists(columns: Columns) -> Columns:
    """``columns`` with every numpy array as a list (a stream that lifts rows takes lists)."""
    if not any(isinstance(v, np.ndarray) for _, v in columns.values()):
        return columns
    return {
        n: (kind, v.tolist() if isinstance(v, np.ndarray) else v)
        for n, (kind, v) in columns.items()
    }


def _take(values: Any, rows: list[int]) -> Any:
    """The values at ``rows`` of a column (a list or an array)."""
    if isinstance(values, np.ndarray):
        return values[rows]
    return [values[i] for i in rows]


def _first_refused(
    lift: Callable[[Any], Any], rows: list[dict[str, Any]]
) -> tuple[int, dict[str, Any], Exception] | None:
    """The first row ``lift`` refuses: (its index, the row, the error); None when none."""
    for i, row in enumerate(rows):
        try:
            lift(row)
        except (TypeError, ValueError) as ex:
            return i, row, ex
    return None


_ROW_TEXT = re.compile(r"\(row (\d+)\)")  # how a columnar window's refusal names its row


def _row_text(row: int | None) -> str:
    """``(row N)`` as refusals name a row; nothing for no row."""
    return "" if row is None else f"(row {row})"
