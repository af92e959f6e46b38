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
the slide and never fewer (benchmarks/bench_queries.py measures both on the same rows: 1,000
slices against Pairs' 286 for a 600 s range and a 7 s slide, the same rows/s, the same
results); Cutty's punctuation-driven slices pay off for windows whose edges depend on the
data, which aligned hopping windows do not have. Pairs it is.

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

__all__ = ["Boundary", "HopGroup", "HopPlan", "Hopper", "SliceCutoff", "slice_record"]

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

    def describe(self) -> str:
        what = f"slide {self.show(self.slide_kind, self.slide)}, range {self.show(self.range_kind, self.range)}"
        if not self.sliced:
            return f"{what}; a slice per row (the slide and the range count different things)"
        shift = (-self.range) % self.slide
        s = self.show(self.slide_kind, self.slide)
        edges = (
            f"slice edges every {s}"
            if not shift
            else f"slice edges every {s} and {self.show(self.slide_kind, self.range)} before each"
        )
        return f"{what}; Pairs slices, {edges}"

    @staticmethod
    def show(kind: str, n: int) -> str:
        """``n`` positions of ``kind`` as text: 10s, 1m, 500ms; 1,000 rows."""
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
    (any engine, built over :func:`slice_record` with a :class:`SliceCutoff` policy). Its
    rows come through a :class:`HopGroup` (of one, or of the windows sharing its slices)."""

    def __init__(self, plan: HopPlan, record: Record, engine: Any, cutoff: SliceCutoff) -> None:
        self.plan = plan
        self.combine = record.combine
        self.identity = record.identity
        self.engine = engine
        self.cutoff = cutoff
        self.codec: Any = None  # set by the owner (the record codec) for state()
        self.group: HopGroup | None = None  # the group sealing the slices it shares
        self.reset()

    def reset(self) -> None:
        self.open: Any = None  # the open slice's aggregate (None: no open slice)
        self.open_label = 0  # the position of its first row
        self.open_rows = 0
        self.open_end = 0  # where it must end: the first edge after its first row
        self.rows = 0  # rows seen (the row index of the next)
        self.newest: int | None = None  # the newest row's timestamp
        self.next_boundary: int | None = None  # the first boundary not yet closed
        self.closed = 0  # boundaries closed so far
        self.last: Boundary | None = None
        self.held = 0  # rows in the final aggregator's slices
        # its own cutoff: the policy's cell may serve several hoppers (a keyed stream's keys
        # share one window definition), so it is set from here before every engine call
        self.limit = _FAR

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
        per_row = None if totals is None or sizes is None else [(totals, sizes)]
        return HopGroup([self]).apply(lifted, ts, per_row)[0]

    def pos(self, t: int) -> int:
        """The position of a row at ``t`` arriving now: its time, or its row index."""
        return t if self.plan.range_kind == "time" else self.rows

    def start_slice(self, x: Any, t: int) -> None:
        pos = self.pos(t)
        self.open, self.open_rows, self.open_label = x, 1, pos
        self.open_end = self.plan.next_edge(pos) if self.plan.sliced else pos + 1

    def _agg(self, last: Boundary | None) -> Any:
        return (*self.identity, 0, _FAR) if last is None else last.aggregate

    def _seal(self) -> None:
        if self.group is not None:
            self.group.seal()
        else:
            self.seal_own()

    def seal_own(self) -> None:
        """The open slice into the final aggregator."""
        if self.open is None:
            return
        self.cutoff.cutoff = self.limit
        self.engine.apply_lifted([(*self.open, self.open_rows, self.open_label)])
        self.held += self.open_rows
        self.open = None
        self.open_rows = 0

    def _evict_before(self, cutoff: int) -> int:
        """The slices labelled before ``cutoff`` leave; the rows they held."""
        self.limit = self.cutoff.cutoff = cutoff
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

    def close_time(self, t: int, out: list[Boundary]) -> int:
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

    def close_rows(self, out: list[Boundary]) -> int:
        plan = self.plan
        self._seal()
        if plan.range_kind == "rows":
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
            "cutoff": self.limit,
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
        self.limit = int(st.get("cutoff", _FAR))


class HopGroup:
    """Hopping windows of one stream that share their slices (the multi-query plan of the
    papers' ACQs, over the union of their edges): the same record, each cutting where any of
    them needs an edge, so a row is combined once for all of them and each final aggregator
    gets the same slices, labelled in its own positions. A finer slice is never wrong (no
    slice straddles any member's edge), so a member joining, or members whose open slices
    differ (after a restart mid-slice), just seal first. A group of one is a window alone."""

    def __init__(self, members: Sequence[Hopper]) -> None:
        self.members = list(members)

    def seal(self) -> None:
        for m in self.members:
            m.seal_own()

    def _align(self) -> None:
        """The members' open slices one and the same, or none open."""
        lead = self.members[0]
        for m in self.members[1:]:
            same = m.open is lead.open or (m.open == lead.open and m.open_rows == lead.open_rows)
            if not same:
                self.seal()
                return
        for m in self.members[1:]:
            m.open = lead.open

    def apply(
        self,
        lifted: Sequence[Any],
        ts: Sequence[int],
        per_row: Sequence[tuple[list[Any], list[int]] | None] | None = None,
    ) -> list[tuple[list[Boundary], int]]:
        """Rows (lifted once, with their timestamps) into every member: per member, the
        boundaries closed and the rows evicted; ``per_row``: per member, lists for its last
        closed boundary's aggregate and size after each row (or None)."""
        ms = self.members
        for m in ms:
            m.group = self
        try:
            return self._apply(lifted, ts, per_row)
        finally:
            for m in ms:
                m.group = None

    def _apply(
        self,
        lifted: Sequence[Any],
        ts: Sequence[int],
        per_row: Sequence[tuple[list[Any], list[int]] | None] | None,
    ) -> list[tuple[list[Boundary], int]]:
        ms = self.members
        self._align()
        lead = ms[0]
        combine = lead.combine
        outs: list[list[Boundary]] = [[] for _ in ms]
        evicted = [0] * len(ms)
        by_time = [i for i, m in enumerate(ms) if m.plan.slide_kind == "time"]
        by_rows = [i for i, m in enumerate(ms) if m.plan.slide_kind == "rows"]
        at_time = [m for m in ms if m.plan.range_kind == "time"]
        at_rows = [m for m in ms if m.plan.range_kind == "rows"]
        inf = 1 << 126

        def first_boundary() -> int:
            nb = [ms[i].next_boundary for i in by_time]
            return min((b for b in nb if b is not None), default=inf) if by_time else inf

        def slice_ends() -> tuple[int, int]:
            """(the time at which, the rows after which) the open slice must be sealed."""
            end_t = min((m.open_end for m in at_time), default=inf)
            left = min((m.open_end - m.rows for m in at_rows), default=inf)
            return end_t, left

        nb = first_boundary()
        end_t, left = slice_ends() if lead.open is not None else (inf, inf)
        fresh = any(ms[i].newest is None for i in by_time)
        count_down = [ms[i].plan.slide - ms[i].rows % ms[i].plan.slide for i in by_rows]
        for x, t in zip(lifted, ts, strict=True):
            if t >= nb or fresh:
                for i in by_time:
                    evicted[i] += ms[i].close_time(t, outs[i])
                nb = first_boundary()
                fresh = False
            if lead.open is not None and (t >= end_t or left <= 0):
                self.seal()
            if lead.open is None:
                for m in ms:
                    m.start_slice(x, t)
                end_t, left = slice_ends()
            else:
                agg = combine(lead.open, x)
                for m in ms:
                    m.open = agg
                    m.open_rows += 1
            for m in ms:
                m.rows += 1
                m.newest = t
            left -= 1
            for j, i in enumerate(by_rows):
                count_down[j] -= 1
                if not count_down[j]:
                    count_down[j] = ms[i].plan.slide
                    evicted[i] += ms[i].close_rows(outs[i])
            if per_row is not None:
                for m, lists in zip(ms, per_row, strict=True):
                    if lists is not None:
                        last = m.last
                        lists[0].append(m._agg(last))
                        lists[1].append(0 if last is None else last.size)
        return list(zip(outs, evicted, strict=True))
