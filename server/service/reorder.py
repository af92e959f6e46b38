"""A stream's lateness rule (:class:`Reorder`): which rows of a batch are late (refused with
late_policy REJECT, dropped with DROP), and the reorder buffer that holds rows back until the
newest timestamp is ``allowed_lateness`` past them (DROP with allowed lateness). With a
buffer a row is late when it is more than ``allowed_lateness`` older than the newest row
received before it (a watermark): however the rows are split into batches, the same rows are
late. What it
holds lives in the stream's state (:class:`~.state.StreamState`), saved with it."""

from __future__ import annotations

import heapq
import itertools
import operator
from typing import Any

import numpy as np

from mtawindows.v1.convert import timestamp_text
from mtawindows.v1.reasons import Reason
from mtawindows.v1.types import StreamSpec

from .refusals import ServiceError
from .state import StreamState

Saved = tuple[list[Any], int, int | None] | None  # what admitting a batch may change


class Reorder:
    """The lateness rule of one stream."""

    def __init__(self, spec: StreamSpec) -> None:
        self.spec = spec
        self.lateness = int(spec.allowed_lateness.total_seconds() * 1e9)  # ns; 0: no buffer

    def save(self, st: StreamState) -> Saved:
        """What :meth:`release` may change before the batch can still be refused (the reorder
        buffer), to put back with :meth:`restore` if it is."""
        if not self.lateness:
            return None
        return list(st.buffer), st.arrivals, st.seen

    def restore(self, st: StreamState, saved: Saved) -> None:
        if saved is not None:
            st.buffer, st.arrivals, st.seen = saved

    def admit(self, st: StreamState, ts: Any) -> tuple[list[int] | None, int]:
        """Which rows pass the lateness rule: (row indexes, None = all; rows dropped).
        ``ts``: a list, or a numpy array (then without a reorder buffer)."""
        if self.spec.late_policy != "DROP":
            self._check_in_order(st.newest, ts)
            return None, 0
        high = st.newest
        if isinstance(ts, np.ndarray) and not self.lateness:
            # a row passes when it is not older than the newest before it (the stream's, or
            # an earlier row's: a dropped row is older than that, so it never raises it)
            if not len(ts):
                return None, 0
            if (high is None or ts[0] >= high) and not (ts[1:] < ts[:-1]).any():
                return None, 0  # in order, the common case: no batch-long temporaries
            before = np.empty_like(ts)
            before[1:] = np.maximum.accumulate(ts)[:-1]
            before[0] = ts[0] if high is None else high
            if high is not None:
                np.maximum(before, high, out=before)
            passing = np.flatnonzero(ts >= before)
            dropped = len(ts) - len(passing)
            return (None if dropped == 0 else passing.tolist()), dropped
        keep: list[int] = []
        if not self.lateness:
            for i, t in enumerate(ts):
                if high is None or t >= high:
                    keep.append(i)
                    high = t
        else:
            # the watermark, row by row in the order the rows came: the newest timestamp
            # received so far (the stream's, then this batch's rows before) less the allowed
            # lateness; a row older than it is late. The same rows split into other batches
            # meet the same watermark (it followed the newest row the windows had when the
            # batch began: [8, 10, 12] then [20, 11] kept 11, [20] then [11] dropped it).
            lateness = self.lateness
            released = st.newest
            seen = st.seen
            for i, t in enumerate(ts):
                if (seen is None or t >= seen - lateness) and (released is None or t >= released):
                    keep.append(i)
                    seen = t if seen is None else max(seen, t)
        late = len(ts) - len(keep)
        return (None if late == 0 else keep), late

    def _check_in_order(self, prev: int | None, ts: Any) -> None:
        """late_policy REJECT: FAILED_PRECONDITION, ``OUT_OF_ORDER`` at the first row older
        than the one before it (or than the stream's newest)."""
        if isinstance(ts, np.ndarray):  # in order: two vectorized comparisons
            if not len(ts) or ((prev is None or ts[0] >= prev) and not (ts[1:] < ts[:-1]).any()):
                return
            ts = ts.tolist()  # else find the first late row, as below
        if (prev is None or not ts or ts[0] >= prev) and all(
            map(operator.le, ts, itertools.islice(ts, 1, None))
        ):
            return  # in order (checked in C); else find the first late row

        def when(ns: int) -> str:
            return timestamp_text(ns, self.spec)

        for i, t in enumerate(ts):
            if prev is not None and t < prev:
                whose = "the previous row's" if i else "the stream's newest"
                raise ServiceError(
                    "FAILED_PRECONDITION",
                    Reason.OUT_OF_ORDER,
                    f"row {i} has timestamp {when(t)}, older than {whose} ({when(prev)}); the "
                    "stream rejects late rows (late_policy REJECT), so nothing was applied",
                    [
                        (
                            f"columns[{self.spec.timestamp_field}][{i}]",
                            f"timestamp {when(t)} < {when(prev)}",
                        )
                    ],
                    {"row": str(i), "timestamp": str(t), "newest": str(prev)},
                )
            prev = t

    def release(
        self, st: StreamState, rows: list[dict[str, Any]]
    ) -> tuple[list[dict[str, Any]], int, list[int]]:
        """The reorder buffer: ``rows`` go in, the rows it releases come out in timestamp order
        (with the rows it still holds, and which of ``rows`` each released row is: its index,
        or -1 for a row an earlier batch brought)."""
        if not self.lateness:
            return rows, 0, list(range(len(rows)))
        tsf = self.spec.timestamp_field
        first = st.arrivals + 1  # this batch's rows arrive as first, first + 1, ...
        for r in rows:
            st.arrivals += 1
            heapq.heappush(st.buffer, (r[tsf], st.arrivals, r))
            st.seen = r[tsf] if st.seen is None else max(st.seen, r[tsf])
        out = []
        which = []
        if st.seen is not None:
            limit = st.seen - self.lateness
            while st.buffer and st.buffer[0][0] <= limit:
                _, arrival, row = heapq.heappop(st.buffer)
                out.append(row)
                which.append(arrival - first if arrival >= first else -1)
        return out, len(st.buffer), which
