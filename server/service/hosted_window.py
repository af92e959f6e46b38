"""One window of a stream (:class:`HostedWindow`): its definition, compiled record and engine, and
what it answers: its current result, the results kept for readers behind (``history``),
per-row results as typed columns, its stats and info; and the check that a plugin's ``lower``
takes the results a batch would give, before the batch is applied (:meth:`check_results`)."""

from __future__ import annotations

import collections
import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

from mtawindows.v1 import convert
from mtawindows.v1.types import (
    Field,
    FieldType,
    OutputSpec,
    StreamSpec,
    WindowInfo,
    WindowResult,
    WindowSpec,
    clip,
)

from ..engine.algorithms import card
from ..engine.hopping import Boundary, Hopper
from ..storage.codecs import codec_for
from .cel import CelPolicy
from .columnar_lift import columnar_lifter
from .compiled import Built, Output, time_field
from .refusals import int64_row_result, lower_failed
from .row_results import RowResults

log = logging.getLogger("mtawindows.service")


class HostedWindow:
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
        # the plugins' outputs that lower: (output name, index, lower, monoid name); their
        # lowers are user code, tried on a batch's results before it is applied
        monoids = {a.name: a.monoid for a in spec.aggregations}
        self._plugin_lowers = [
            (o.name, i, lower, monoids.get(o.name, "?"))
            for o in built.outputs
            if o.plugin
            for i, lower in (self._lowers[o.name],)
            if lower is not None
        ]
        # its INT64 sums (output name, index, lower): exact Python integers on the engine,
        # which may pass int64, the type per-row results carry them in (check_results)
        self._int64_sums = [
            (o.name, *self._lowers[o.name])
            for o in built.outputs
            if o.type == FieldType.INT64.value and monoids.get(o.name) == "sum"
        ]
        # the fields those sums read, and what is known of their values' magnitudes in the
        # window (note_ints): a bound that spares most per-row batches the engine's preview
        int64_outputs = {o for o, _, _ in self._int64_sums}
        self._int64_fields = sorted(
            {a.field for a in spec.aggregations if a.name in int64_outputs and a.field}
        )
        self._magnitude: _Magnitude | None = None
        nan_fields = {f.name for f in stream.fields if f.allow_nan}
        self.lift_columns = columnar_lifter(built.monoid, nan_fields)
        # the stream's batch count when the window last changed, and the newest timestamp then:
        # every result carries them, so readers can follow results by sequence
        self.sequence = sequence
        self.evicted = 0  # rows the last batch evicted (Query reports them; 0 after a restart)
        self.timestamp = 0
        self.history: collections.deque[WindowResult] = collections.deque(maxlen=max(1, history))
        # lsn of the last journal entry (append) this window holds; saved with its checkpoints
        self.lsn = 0
        # the columnar shadow (a window of built-ins over a count or a time range, served by an
        # engine), made when a batch first asks for per-row results (a window nobody asks
        # keeps only its engine's local parts in memory): see :meth:`feed_shadow`
        self.shadow: Any = None
        # why per-row results take the general path ("": the columnar path is possible; None:
        # not known yet, found on first ask: the columnar engine loads on first use)
        self._general: str | None = (
            _general_reason(built)
            if engine is not None
            else ("a keyed stream's windows (an instance per key) compute them row by row")
        )
        self.shadow_results = 0  # batches whose per-row results it gave
        # the window's state is columnar (a ColumnarEngine: it takes batches as arrays, and
        # gives per-row results itself; no shadow)
        self.columnar = bool(getattr(engine, "columnar", False))
        # the window whose rows it shares (a MemberEngine: its host takes every batch for it)
        self.host: str | None = None
        if self.columnar:
            self._general = ""
        # a hopping window (a slide): its slicer over the engine, the final aggregator
        self.hopper: Hopper | None = None
        self.sharing: tuple[str, ...] = ()  # the hopping windows sharing its slices
        if built.hop is not None and engine is not None:
            assert built.slice_monoid is not None
            self.hopper = Hopper(built.hop, built.monoid, engine, built.slice_policy)
            self.hopper.codec = codec_for(built.slice_monoid)
            self._general = "a hopping window reports its boundaries' results"
            self._lowers = built.slice_monoid.field_lowers()
            self.sequence = 0  # its results are numbered by the boundaries it closed
        # the engine's inserted count when the shadow last caught up with it: any other count
        # before a batch means the engine changed behind it (reloaded from a checkpoint after a
        # store failure, then the journal replayed): the shadow starts anew
        self.shadow_synced = 0

    @property
    def inline_ok(self) -> bool:
        """May a small batch be tried on the event loop (not reloading, no plugin results
        to check: that may read the store)? A stream with a journal never tries
        (:meth:`Stream.inline_ok`); a columnar window defers a batch that would read a
        slice from Redis (:meth:`Stream._apply_columnar`)."""
        return not self.engine.stale and not self._plugin_lowers and self.hopper is None

    @property
    def checks_results(self) -> bool:
        """Whether a batch's results are lowered before it is applied (a plugin's lower)."""
        return bool(self._plugin_lowers)

    @property
    def checks_row_ints(self) -> bool:
        """Whether a batch's per-row results are checked before it is applied: an INT64 sum
        on the engine may pass int64 (its integers are exact), and a per-row result carries
        it as INT64."""
        return (
            bool(self._int64_sums)
            and not self.columnar
            # (a hopping window's engine holds slices, and it answers boundaries; a keyed
            # stream's hopping window has no hopper here, its keys have one each)
            and self.built.hop is None
            and self.host is None
        )

    def note_ints(self, columns: Mapping[str, Any], rows: int) -> None:
        """Every batch of ``rows`` rows (``columns``: field -> its values, as the windows
        get them), before it is applied: the largest magnitude among the values of the fields
        this window's INT64 sums read, kept since the engine was last seen to change other
        than by the batches noted here (a reload, a refused batch): the rows it held then are
        of unknown magnitude until they have left (:meth:`row_ints_fit`)."""
        if not self.checks_row_ints:
            return
        engine = self.engine
        m = self._magnitude
        if m is None or m.expect != engine.inserted:
            m = self._magnitude = _Magnitude(unknown_until=engine.inserted)
        for f in self._int64_fields:
            values = columns.get(f)
            if values is not None and len(values):
                hi, lo = max(values), min(values)
                m.largest = max(m.largest, abs(int(hi)), abs(int(lo)))
        m.expect = engine.inserted + rows

    def row_ints_fit(self, rows: int) -> bool:
        """Whether every INT64 sum of this window surely fits int64 after every row of the
        batch of ``rows`` rows just noted (:meth:`note_ints`): the window then holds at most
        its rows and the batch's, each of a magnitude the bound knows (the rows of unknown
        magnitude have left). Exact, never a guess: False sends the batch to the engine's
        preview (:meth:`check_results`), which reads what it must."""
        m = self._magnitude
        engine = self.engine
        if m is None or m.expect != engine.inserted + rows or engine.evicted < m.unknown_until:
            return False
        held = engine.inserted - engine.evicted + rows
        policy = self.spec.policy
        if policy.kind == "count":  # after each row it holds at most its size
            held = min(held, policy.size)
        return bool(held * m.largest < 2**63)

    def check_results(
        self, lifted: list[Any], *, per_row: bool, origin: Sequence[int] | None = None
    ) -> None:
        """Refuse the batch ``lifted`` (FAILED_PRECONDITION, ``LOWER_FAILED``) when a plugin's
        ``lower`` raises on a result it would give this window: the result after the batch
        (every append lowers it), and with ``per_row`` the result after every row. Computed
        without applying the batch (``preview_lifted`` of the engine: the window unchanged,
        the same policy decisions), so a refused batch changes nothing and a retry gets the
        same refusal. A CEL policy runs here too; its error count is kept as it was (the
        apply counts them). ``origin``: the request's row of each lifted item (-1: a row a
        reorder buffer held from an earlier batch), when they are not the request's rows one
        for one; the refusal names that row."""
        policy = self.built.policy
        errors = policy.errors[0] if isinstance(policy, CelPolicy) else None
        totals: list[Any] | None = [] if per_row else None
        sizes: list[int] | None = [] if per_row else None
        try:
            total = self.engine.preview_lifted(
                lifted, per_item=not self.built.batch_safe, totals=totals, sizes=sizes
            )
        finally:
            if errors is not None:
                policy.errors[0] = errors
        for name, i, lower, monoid in self._plugin_lowers:
            for t in (total, *(totals or ())):
                try:
                    lower(t[i])
                except Exception as ex:
                    raise lower_failed(self.stream.name, self.spec.name, name, monoid, ex) from None
        past = self.int64_past(totals or ())
        if past is not None:
            out, row, v = past
            if origin is not None:
                row = origin[row]
            raise int64_row_result(self.stream.name, self.spec.name, out, row, v)

    def int64_past(self, totals: Sequence[Any]) -> tuple[str, int, int] | None:
        """The first of the per-row aggregates ``totals`` whose INT64 sum is past int64 (a
        per-row result carries it as INT64): (the sum's output name, its index in
        ``totals``, the sum); None when every one fits."""
        for row, t in enumerate(totals):
            for out, j, low in self._int64_sums:
                v = t[j] if low is None else low(t[j])
                if isinstance(v, int) and not -(2**63) <= v < 2**63:
                    return out, row, v
        return None

    @property
    def window_id(self) -> str | None:
        return None if self.engine is None else self.engine.window_id

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

    def boundary_result(
        self,
        b: Boundary | None,
        *,
        evicted: int,
        sequence: int,
        timestamp: int,
        key: str = "",
    ) -> WindowResult:
        """A hopping window's result at boundary ``b`` (None: none closed yet, empty), of the
        window or of a keyed stream's ``key``; ``sequence`` numbers the boundaries closed."""
        if b is None:
            lowered = self.built.monoid.lower(self.built.monoid.identity)
            return WindowResult(self.spec.name, self.values(lowered, 0), 0, 0, 0, 0, key)
        assert self.built.slice_monoid is not None
        lowered = self.built.slice_monoid.lower(b.aggregate)
        return WindowResult(
            self.spec.name,
            self.values(lowered, b.size),
            b.size,
            evicted,
            sequence,
            timestamp,
            key,
            boundary=b.at,
        )

    def result(self, evicted: int | None = None) -> WindowResult:
        """The current result; ``evicted``: the rows the batch that produced it evicted
        (default: the last batch's). A hopping window's: its last closed boundary's."""
        if self.hopper is not None:
            return self.boundary_result(
                self.hopper.last,
                evicted=self.evicted,
                sequence=self.sequence,
                timestamp=self.timestamp,
            )
        if evicted is None:
            evicted = self.evicted
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

    # -- the columnar shadow
    @property
    def shadow_possible(self) -> bool:
        return self._general is None or self._general == ""

    @property
    def path(self) -> str:
        """How per-row results are computed (``WindowInfo.path``): "columnar", or
        "general: " and why not."""
        if self._general is None:
            self._general = _columnar_refusal(self.built) or ""
        return "columnar" if not self._general else f"general: {self._general}"

    def _go_general(self, why: str) -> None:
        self.shadow = None
        self._general = why

    def want_shadow(self) -> None:
        """A batch asks for this window's per-row results: a shadow from now on, if the
        window can have one (empty: it gives results once it holds what the engine holds)."""
        if self.shadow is None and self.shadow_possible and not self.columnar:
            self.shadow = _new_shadow(self.built)
            self.shadow_synced = self.engine.inserted
            if self.shadow is None:
                self._go_general(_columnar_refusal(self.built) or "its columnar window failed")

    def feed_shadow(self, batch: Any, *, per_row: bool) -> tuple[Any, Any] | None:
        """Give the shadow the batch's rows (before the engine: all or nothing). With
        ``per_row``, and when the shadow holds the rows the engine holds (the same policy
        over the same rows since it was made: equal lengths mean equal contents, as both keep
        the newest rows), its per-row results: (a pyarrow Table, the sizes); else None and
        the engine gives them. A shadow that fails, or grows past
        :data:`SHADOW_MAX_ROWS`, is dropped: the window goes on without one, for good."""
        if self.shadow_synced != self.engine.inserted:  # the engine changed behind it
            self.restart_shadow()
        shadow = self.shadow
        if shadow is None:
            return None
        ready = per_row and len(shadow) == len(self.engine)
        try:
            got = shadow.apply(self.arrays(batch), per_row=ready)
        except Exception as ex:
            log.warning(
                "the columnar shadow of window %s failed (%s): the window goes on without it",
                self.spec.name,
                ex,
                extra={"stream": self.stream.name},
            )
            self._go_general(f"its columnar shadow failed ({clip(str(ex))})")
            return None
        if len(shadow) > SHADOW_MAX_ROWS:
            self._go_general(
                f"its columnar shadow was dropped past {SHADOW_MAX_ROWS:,} rows (memory)"
            )
        if not ready or not self._fits(got.rows):
            return None
        self.shadow_results += 1
        return got.rows, got.sizes

    def arrays(self, batch: Any) -> dict[str, Any]:
        """The batch's columns that this window's columnar form (its state, or its shadow)
        reads, and the timestamps (a window of counts reads no column, but counts the rows),
        as arrays made once per batch."""
        reads = self.engine.reads if self.columnar else self.shadow.reads
        return _arrays(batch, [*reads, self.stream.timestamp_field])

    def _fits(self, table: Any) -> bool:
        """Whether the shadow's results have the outputs' types: an INT64 sum it could only
        compute as doubles (past what int64 may hold along the way) is the engine's to give."""
        return all(
            _is_integer(table.column(o.name).type)
            for o in self.outputs
            if o.type == FieldType.INT64.value and o.split is None
        )

    def restart_shadow(self) -> None:
        """The shadow took rows the engine did not (it failed, or will take them later): a
        new, empty one (it gives results again once the engine's older rows have left)."""
        if self.shadow is not None:
            self.shadow = _new_shadow(self.built)
            self.shadow_synced = self.engine.inserted

    def row_results_from(self, table: Any, sizes: Any) -> RowResults:
        """:meth:`row_results` from a shadow's per-row results (a pyarrow Table, sizes)."""
        return RowResults(self.outputs, sizes, table=table)

    def row_results(self, totals: list[tuple[Any, ...]], sizes: list[int]) -> RowResults:
        """The per-row results of a batch from the window's lifted aggregate and size after
        each row (lowered by :meth:`columns` when asked as columns)."""
        return RowResults(self.outputs, sizes, totals=totals, lower=self.columns)

    def stats(self, late_rows: int) -> dict[str, int]:
        if self.engine is None:  # a keyed stream's: its instances are per key (GetKey)
            return {"late_rows": late_rows}
        s = self.engine.stats()
        store = s.get("store", {})
        policy = self.built.policy
        hop = self.hopper
        return {
            # a hopping window's engine holds slices: its size in rows is theirs and the
            # open slice's
            "size": s["size"] if hop is None else hop.held + hop.open_rows,
            "levels": s["levels"],
            # a hopping window's: rows (its engine counts slices)
            "inserted": s["inserted"] if hop is None else hop.rows,
            "evicted": s["evicted"] if hop is None else hop.rows - hop.held - hop.open_rows,
            "bulk_evictions": s["bulk_evictions"],
            "store_round_trips": store.get("round_trips", 0),
            "cache_misses": store.get("misses", 0),
            "store_bytes_read": store.get("bytes_read", 0),
            "store_bytes_written": store.get("bytes_written", 0),
            "late_rows": late_rows,
            "policy_errors": policy.error_count if isinstance(policy, CelPolicy) else 0,
            # the columnar shadow: -1 none (a user monoid, another policy, dropped), else the
            # rows it holds; and the batches whose per-row results it gave
            "columnar_rows": (
                s["size"] if self.columnar else -1 if self.shadow is None else len(self.shadow)
            ),
            "columnar_batches": self.shadow_results,
            "columnar_slices": s.get("slices", 0) if self.columnar else 0,
            "columnar_local_slices": s.get("local_slices", 0) if self.columnar else 0,
            "columnar_unwritten_slices": s.get("unwritten_slices", 0) if self.columnar else 0,
        }

    def info(self, late_rows: int) -> WindowInfo:
        return WindowInfo(
            self.spec,
            self.stats(late_rows),
            self.output_specs,
            self.path,
            self.storage,
            plan=self.plan,
        )

    @property
    def plan(self) -> str:
        """A hopping window's plan (GetWindow): its slices and final aggregator."""
        hop = self.built.hop
        if hop is None:
            return ""
        shared = (
            f"; slices shared with {', '.join(self.sharing)} (their edges too)"
            if self.sharing
            else ""
        )
        return f"{hop.describe()}{shared}; final aggregator {self.spec.algorithm} over the slices"

    @property
    def storage(self) -> str:
        """Where the window's state lives, by its algorithm's fact card (GetWindow)."""
        if self.spec.storage.kind == "memory":
            return "memory: the server's process only (lost on restart)"
        where = card(self.spec.algorithm).storage
        if self.host is not None:
            return (
                f"redis: columnar, the rows of window {self.host!r} of its stream (shared: "
                "lifted, sliced and stored once for both); its position in that window's "
                "checkpoint"
            )
        if self.columnar:
            return (
                "redis: columnar; each sealed slice of rows one Redis value, written once; "
                "the tree over the slices' aggregates, the unsealed tail and the oldest slices "
                "in the process"
            )
        if self.engine is None:  # a keyed stream's: an instance per key
            return (
                "redis: per key; a small key's instance in the key's one Redis value, a large "
                f"one as its algorithm in full ({where}); the key cache pages keys in and out"
            )
        return f"redis: {where}"


# the most rows a window's columnar shadow holds (in memory, beside the engine's Redis tier:
# about 8 bytes per row and column read, 24 MB for a window of max + sum at the limit); past it
# the shadow is dropped and the engine gives the per-row results
SHADOW_MAX_ROWS = 1_000_000


def _general_reason(built: Built) -> str | None:
    """Why a window of ``built`` may not have a columnar shadow, as far as known without
    loading the columnar engine ("" or None: it may; None: ask :func:`_columnar_refusal`)."""
    if os.environ.get("MTAWINDOWS_COLUMNAR", "1") == "0":
        return "the columnar path is turned off ($MTAWINDOWS_COLUMNAR=0)"
    plugins = [o.name for o in built.outputs if o.plugin]
    if plugins:
        return f"output {plugins[0]!r} is a plugin monoid's"
    if not built.batch_safe:
        return "its policy is not a count or a time range"
    return None


def columnar_state(spec: WindowSpec, built: Built, ts_field: str = "ts") -> bool:
    """Whether a new window of an unkeyed stream keeps its state as a columnar window (a
    :class:`~..engine.columnar.engine.ColumnarEngine`: its rows in slices, sealed ones in
    Redis; no Python object per row) instead of its algorithm's engine over lifted rows:
    built-in monoids over a count or a time range, the default algorithm, no slide, no
    INT64 sum (an engine of Python integers gives those exactly past int64 on the way), not
    a count window whose aggregations hold the newest timestamp (``ts_field``: the stream's
    timestamp field; its engine answers query-time ranges by time, a columnar count window
    by count only). The default; ``$MTAWINDOWS_COLUMNAR_STATE=0`` (``serve
    --no-columnar-state``) keeps every new window on its algorithm's engine."""
    if os.environ.get("MTAWINDOWS_COLUMNAR_STATE", "1") == "0":
        return False
    if spec.algorithm != "AMTA" or built.hop is not None or _general_reason(built) is not None:
        return False
    if _columnar_refusal(built) is not None:
        return False
    if spec.policy.kind == "count" and time_field(built, ts_field) is not None:
        return False
    from ..engine.monoids import Record, Sum

    monoid = built.monoid
    by_name = (
        dict(zip(monoid.names, monoid.monoids, strict=True)) if isinstance(monoid, Record) else {}
    )
    return not any(
        o.type == FieldType.INT64.value and isinstance(by_name.get(o.name), Sum)
        for o in built.outputs
    )


def _columnar_refusal(built: Built) -> str | None:
    from ..engine.columnar import columnar_refusal

    return columnar_refusal(built.monoid, built.policy)


def _new_shadow(built: Built) -> Any:
    """A columnar window of ``built``'s record and policy, or None when it cannot be one."""
    from ..engine.columnar import ColumnarWindow, columnar_refusal

    if columnar_refusal(built.monoid, built.policy) is not None:
        return None
    try:
        return ColumnarWindow(built.monoid, built.policy)
    except (TypeError, ValueError):
        return None


def _arrays(batch: Any, names: list[str]) -> dict[str, Any]:
    """The batch's released columns ``names`` as arrays (made once per batch)."""
    import numpy as np

    arrays: dict[str, Any] = batch.arrays
    for n in names:
        if n not in arrays:
            values = batch.columns[n]
            # text as Python strings (a fixed-width numpy string would drop trailing NULs)
            text = len(values) > 0 and isinstance(values[0], str)
            arrays[n] = np.array(values, dtype=object) if text else np.asarray(values)
    return {n: arrays[n] for n in dict.fromkeys(names)}


def _is_integer(t: Any) -> bool:
    import pyarrow as pa

    return bool(pa.types.is_integer(t))


class _Magnitude:
    """What :meth:`HostedWindow.note_ints` knows of the magnitudes of the values a window's
    INT64 sums read: the largest seen since the engine had inserted ``unknown_until`` items
    (those items' values are not known), and the engine's inserted count it expects next."""

    __slots__ = ("expect", "largest", "unknown_until")

    def __init__(self, unknown_until: int) -> None:
        self.unknown_until = unknown_until
        self.expect = unknown_until
        self.largest = 0
