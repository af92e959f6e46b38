"""Hopping windows (a range and a slide): results at each slide boundary, computed from slices.

"Every 10 seconds, the max over the last minute": boundaries at multiples of the slide since
the epoch (event time, as Flink and Spark align them), or after every ``slide`` rows; a time
boundary ``b`` closes when a row at or after ``b`` arrives, and its result covers the rows in
``[b - range, b)`` (a count range: the newest ``size`` rows before ``b``).

How (the Pairs technique of Krishnamurthy et al., which the papers' ACQ plans build on):

    rows ──combine──> open slice ──seal at an edge──> final aggregator (any engine) ──> result
                                                       one item per slice; at a boundary b
                                                       the slices before b - range leave

Edges fall where some boundary's range starts or ends: at ``k * slide`` and at
``k * slide - range``, so every slice lies wholly inside or wholly outside each boundary's
range and no row is aggregated twice. A row costs one combine into its slice; a slice one push
into the final aggregator; a boundary one bulk eviction (O(log n) for the MTAs) and one query.
Panes (slices of ``gcd(range, slide)``) cut more slices when the range is not a multiple of
the slide and never fewer; Cutty's punctuation-driven slices pay off for windows whose edges
depend on the data, which aligned hopping windows do not have. Pairs it is.

Where the slide and the range count different things (a time slide over a count range, a
slide in rows over a time range), a boundary's first row depends on the data: each row is its
own slice, and the boundary evicts up to it.

The slice's label (its first position: a timestamp or a row index) rides in the item as one
more record field (a ``Max``), so the final aggregator's policy (:class:`SliceCutoff`) evicts
the prefix of slices labelled before the boundary's start by the same O(log n) search as any
policy, and the labels live where the items live (Redis for the MTAs' middle levels).
:class:`Hopper` keeps the open slice, the last closed boundary and its result; its
:meth:`~Hopper.state` rides in the window's checkpoint so a restart resumes exactly.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .monoids import Count, Max, Record

__all__ = ["Boundary", "HopPlan", "Hopper", "SliceCutoff", "slice_record"]

_FAR = -(1 << 63)  # a cutoff before every position: evict nothing
SLICE_FIELD = "__slice"
ROWS_FIELD = "__rows"


@dataclass(frozen=True)
class HopPlan:
    """What a hopping window cuts and when it reports.

    ``slide_kind`` / ``range_kind``: ``"time"`` (nanoseconds) or ``"rows"``. ``sliced``: the
    slide and the range count the same thing (Pairs slices); otherwise a slice per row."""

    slide_kind: str
    slide: int
    range_kind: str
    range: int

    def __post_init__(self) -> None:
        if self.slide <= 0 or self.range <= 0:  # pragma: no cover - the builder checks
            msg = f"HopPlan: slide and range must be > 0, got {self.slide}, {self.range}"
            raise ValueError(msg)

    @property
    def sliced(self) -> bool:
        return self.slide_kind == self.range_kind

    def next_edge(self, pos: int) -> int:
        """The first slice edge after position ``pos`` (sliced plans): the next multiple of
        the slide, or of the slide shifted back by the range, whichever comes first."""
        s = self.slide
        a = (pos // s + 1) * s
        shift = (-self.range) % s
        if not shift:
            return a
        b = ((pos - shift) // s + 1) * s + shift
        return min(a, b)

    def edge_at_or_before(self, pos: int) -> int:
        """The last slice edge at or before ``pos``: the label of the slice holding it."""
        s = self.slide
        a = (pos // s) * s
        shift = (-self.range) % s
        if not shift:
            return a
        b = ((pos - shift) // s) * s + shift
        return max(a, b)

    def describe(self) -> str:
        what = f"slide {self._show(self.slide_kind, self.slide)}, range {self._show(self.range_kind, self.range)}"
        if not self.sliced:
            return f"{what}; a slice per row (the slide and the range count different things)"
        shift = (-self.range) % self.slide
        s = self._show(self.slide_kind, self.slide)
        edges = (
            f"slice edges every {s}"
            if not shift
            else f"slice edges every {s} and {self._show(self.slide_kind, self.range)} before each"
        )
        return f"{what}; Pairs slices, {edges}"

    @staticmethod
    def _show(kind: str, n: int) -> str:
        if kind == "rows":
            return f"{n:,} rows"
        for unit, per in (
            ("d", 86_400 * 10**9),
            ("h", 3_600 * 10**9),
            ("m", 60 * 10**9),
            ("s", 10**9),
            ("ms", 10**6),
            ("us", 10**3),
        ):
            if n % per == 0:
                return f"{n // per}{unit}"
        return f"{n}ns"


class SliceCutoff:
    """The final aggregator's policy: the prefix of slices labelled before ``cutoff`` leaves
    (prefix-monotone: labels grow with age). The hopper moves the cutoff at each boundary."""

    def __init__(self) -> None:
        self.cutoff = _FAR

    def requirements(self) -> dict[str, Any]:
        return {SLICE_FIELD: Max()}

    def bind(self, monoid: Any) -> Callable[[Any, Any], bool]:
        i = monoid.index(SLICE_FIELD)
        cell = self

        def policy(total: Any, old: Any) -> bool:
            return bool(old[i] < cell.cutoff)

        return policy

    def __call__(self, total: Any, old: Any) -> bool:  # pragma: no cover - bound above
        msg = "SliceCutoff must be bound to its slice record"
        raise TypeError(msg)


def slice_record(record: Record) -> Record:
    """The final aggregator's items: the window's record, the slice's rows and its label."""
    return Record({**record.fields, ROWS_FIELD: Count(), SLICE_FIELD: Max()})


@dataclass(frozen=True)
class Boundary:
    """One closed boundary: where (ns, or a row count), its lifted aggregate (slice record
    form), its size in rows, and the rows evicted when it closed."""

    at: int
    aggregate: Any
    size: int


class Hopper:
    """The slicing and reporting of one hopping window over its final aggregator ``engine``
    (any engine, built over :func:`slice_record` with a :class:`SliceCutoff` policy)."""

    def __init__(self, plan: HopPlan, record: Record, engine: Any, cutoff: SliceCutoff) -> None:
        self.plan = plan
        self.combine = record.combine
        self.identity = record.identity
        self.engine = engine
        self.cutoff = cutoff
        self.codec: Any = None  # set by the owner (the record codec) for state()
        self.reset()

    def reset(self) -> None:
        self.open: Any = None  # the open slice's aggregate (None: no open slice)
        self.open_label = 0
        self.open_rows = 0
        self.open_end = 0  # its end edge (sliced plans)
        self.rows = 0  # rows seen (the row index of the next)
        self.newest: int | None = None  # the newest row's timestamp
        self.next_boundary: int | None = None  # the first boundary not yet closed
        self.closed = 0  # boundaries closed so far
        self.last: Boundary | None = None
        self.held = 0  # rows in the final aggregator's slices
        self.cutoff.cutoff = _FAR

    # -- applying rows
    def apply(
        self,
        lifted: Sequence[Any],
        ts: Sequence[int],
        totals: list[Any] | None = None,
        sizes: list[int] | None = None,
    ) -> tuple[list[Boundary], int]:
        """Rows (lifted, with their timestamps) in order: the boundaries they close, and the
        slices' rows evicted. ``totals``/``sizes`` get, after each row, the last closed
        boundary's aggregate and size (its result as of that row)."""
        plan = self.plan
        out: list[Boundary] = []
        evicted = 0
        time_slide = plan.slide_kind == "time"
        for x, t in zip(lifted, ts, strict=True):
            if time_slide:
                evicted += self._close_time(t, out)
            pos = t if plan.range_kind == "time" else self.rows
            if plan.sliced:
                if self.open is not None and pos >= self.open_end:
                    self._seal()
                if self.open is None:
                    self.open = x
                    self.open_label = plan.edge_at_or_before(pos)
                    self.open_end = plan.next_edge(pos)
                    self.open_rows = 1
                else:
                    self.open = self.combine(self.open, x)
                    self.open_rows += 1
            else:
                self.open, self.open_label, self.open_rows = x, pos, 1
                self._seal()
            self.rows += 1
            self.newest = t
            if not time_slide and self.rows % plan.slide == 0:
                evicted += self._close_rows(out)
            if totals is not None and sizes is not None:
                last = self.last
                totals.append(self._agg(last))
                sizes.append(0 if last is None else last.size)
        return out, evicted

    def _agg(self, last: Boundary | None) -> Any:
        return (*self.identity, 0, _FAR) if last is None else last.aggregate

    def _seal(self) -> None:
        if self.open is None:
            return
        self.engine.apply_lifted([(*self.open, self.open_rows, self.open_label)])
        self.held += self.open_rows
        self.open = None
        self.open_rows = 0

    def _evict_before(self, cutoff: int) -> int:
        """The slices labelled before ``cutoff`` leave; the rows they held."""
        self.cutoff.cutoff = cutoff
        if not self.engine.enforce():
            return 0
        held = self.engine.aggregate()[-2] if len(self.engine) else 0
        gone, self.held = self.held - held, held
        return gone

    def _report(self, at: int, out: list[Boundary]) -> None:
        b = Boundary(at, self.engine.aggregate(), self.held)
        self.closed += 1
        self.last = b
        out.append(b)

    def _close_time(self, t: int, out: list[Boundary]) -> int:
        """Close the time boundaries at or before ``t`` (a row at ``t`` arrives) whose range
        holds a row (Spark and Flink emit no empty window); the rows evicted."""
        plan = self.plan
        s = plan.slide
        if self.newest is None:
            self.next_boundary = (t // s + 1) * s
            return 0
        b = self.next_boundary
        assert b is not None
        if t < b:
            return 0
        self._seal()  # every row before b is in the final aggregator now
        evicted = 0
        if plan.range_kind == "time":
            last_useful = self.newest + plan.range  # b - range <= newest: the range holds it
            stop = min(t, last_useful)
            while b <= stop:
                evicted += self._evict_before(b - plan.range)
                self._report(b, out)
                b += s
        else:
            # a count range: the newest `range` rows before b. Boundaries after the first
            # one past the newest row would repeat its result (no row in their slide): one.
            evicted += self._evict_before(self.rows - plan.range)
            self._report(b, out)
        self.next_boundary = (t // s + 1) * s
        return evicted

    def _close_rows(self, out: list[Boundary]) -> int:
        plan = self.plan
        if plan.range_kind == "rows":
            self._seal()
            evicted = self._evict_before(self.rows - plan.range)
        else:  # a time range as the time-range policy keeps it: newer than newest - range
            assert self.newest is not None
            evicted = self._evict_before(self.newest - plan.range + 1)
        self._report(self.rows, out)
        return evicted

    # -- what a checkpoint carries
    def state(self) -> dict[str, Any]:
        """The hopper's own state (plain data): with the final aggregator's checkpoint it is
        the whole window."""

        def pack(agg: Any) -> str:
            return base64.b64encode(self.codec.pack_values([agg])).decode("ascii")

        last = self.last
        return {
            "open": None if self.open is None else pack((*self.open, 0, self.open_label)),
            "open_rows": self.open_rows,
            "open_end": self.open_end,
            "rows": self.rows,
            "newest": self.newest,
            "next": self.next_boundary,
            "closed": self.closed,
            "last": None if last is None else [last.at, pack(last.aggregate), last.size],
            "held": self.held,
            "cutoff": self.cutoff.cutoff,
        }

    def restore(self, st: dict[str, Any] | None) -> None:
        """Back to :meth:`state` (None: empty, as a new window)."""
        self.reset()
        if not st:
            return

        def unpack(s: str) -> Any:
            return self.codec.unpack_values(base64.b64decode(s))[0]

        if st.get("open") is not None:
            agg = unpack(st["open"])
            self.open, self.open_label = tuple(agg[:-2]), agg[-1]
        self.open_rows = int(st.get("open_rows", 0))
        self.open_end = int(st.get("open_end", 0))
        self.rows = int(st.get("rows", 0))
        self.newest = st.get("newest")
        self.next_boundary = st.get("next")
        self.closed = int(st.get("closed", 0))
        last = st.get("last")
        if last is not None:
            self.last = Boundary(int(last[0]), unpack(last[1]), int(last[2]))
        self.held = int(st.get("held", 0))
        self.cutoff.cutoff = int(st.get("cutoff", _FAR))
