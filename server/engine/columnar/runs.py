"""Per-row results of a window over rows of many keys given whole (:func:`run_results`):
each key's rows one run, in timestamp order; no state is kept.

This is the columnar path's segmented scan across keys. Every row's window is a range of its
own run: for a count window ``[max(run start, i - N + 1), i]``, for a time range the rows of
the run newer than ``ts[i] - range`` (one ``searchsorted`` over all runs at once: timestamps
are rebased per run and the runs laid end to end, so one sorted array holds every run). Laid
end to end, the ranges of all runs are one sliding window (starts that never decrease, each
range ending at its row): Two-Stacks answers them in one compiled pass (:func:`~.slide.slide`:
counts, max, min, max-count, sums, means), the other built-ins by the same block scans as a
single window's (:func:`~.ranges.range_aggregates`: van Herk / Gil-Werman, no inverses).
Lowered by the same kernels, so a key's results are a :class:`~.window.ColumnarWindow`'s fed
that key's rows (tests/engine/test_columnar_runs.py checks them against the per-row engine,
key by key).

The first ``skip`` rows are context: they are in the first run's windows but get no result (a
caller sending a long key in parts sends the rows its windows still reach again)."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from .kernels import Comps, Kernel, SumKernel, _ints
from .ranges import range_aggregates
from .slide import slide
from .window import _INT64_MAX, _INT64_MIN, BatchResult, ColumnarWindow, _Values

__all__ = ["check_order", "run_results"]

CHUNK = 1 << 16  # result rows whose block scans run together (see _blocks)
LONG_RUN = 64  # a run this long answers its filling windows by one prefix scan (_ranges)


def run_results(
    monoid: Any,
    policy: Any,
    columns: dict[str, Any],
    runs: np.ndarray,
    *,
    skip: int = 0,
) -> BatchResult:
    """The window's result after each row of ``columns`` (name -> array), a window per key:
    ``runs`` holds the first row of each key's run (ascending, from 0). Rows of one run must
    be in timestamp order. Returns the results of the rows from ``skip`` on (a ``rows`` table
    and ``sizes``); ``evicted`` is 0. Raises ``ValueError``/``TypeError`` naming the row for
    values the window refuses and timestamps that go back within a run."""
    w = ColumnarWindow(monoid, policy)
    cols, n = w._columns(columns)
    runs = np.asarray(runs, dtype=np.int64)
    if n and (len(runs) == 0 or runs[0] != 0 or (np.diff(runs) <= 0).any() or runs[-1] >= n):
        msg = f"run starts must rise from 0 below {n} rows, got {runs[:8].tolist()}..."
        raise ValueError(msg)
    if not 0 <= skip <= n:
        msg = f"skip: expected 0..{n} rows, got {skip}"
        raise ValueError(msg)
    if n == 0:
        return BatchResult(0, w._table(w.own, [], 0), np.empty(0, np.int64))
    first = np.zeros(n, dtype=np.int64)  # each row's run start
    first[runs] = runs
    np.maximum.accumulate(first, out=first)
    ts = None
    if w.ts_col is not None:
        ts = cols[w.ts_col] = _ints("timestamps", cols[w.ts_col])
        check_order(ts, runs)
    g = np.arange(n, dtype=np.int64)
    starts = _starts(w, ts, runs, first, g)
    empty = starts > g
    some = ~empty
    # every sum the scans take is of rows of one window (a run's prefix up to a filling
    # window's row, a block no wider than a window, the blocks within a window), or of two
    # rows: integer sums stay exact while the longest window's cannot overflow
    longest = max(2, int((g - starts).max()) + 1)
    for k in w.kernels:
        if isinstance(k, SumKernel):
            k.sum_rows = longest
    lifted = [k.lift(cols, n) for k in w.kernels]  # validates every value
    sizes = np.maximum(g - starts + 1, 0)
    split: tuple[list[tuple[int, np.ndarray]], np.ndarray] | None = None
    arrays = []
    values = _Values(cols)
    with np.errstate(all="ignore"):
        for i, k in enumerate(w.kernels):
            if i == w.own.ts_field:  # the newest timestamp after a row is the row's own
                assert ts is not None
                arrays.append(ts[skip:])
                continue
            # one Two-Stacks pass over every run (the ranges' starts never decrease across
            # the runs laid end to end, each range ending at its row), else the block scans
            res = slide(k, [lifted[i]], starts[skip:], sizes[skip:])
            if res is None:
                if split is None:
                    split = _prefix_runs(starts, first, runs, some, skip)
                res = _ranges(k, lifted[i], starts, g, some, skip, *split)
            arrays.append(k.lower(res, values))
    import pyarrow as pa

    table = w._table(
        w.own, [a if isinstance(a, pa.Array) else pa.array(a) for a in arrays], n - skip
    )
    if empty[skip:].any():
        table = w._patch_empty(w.own, table, empty[skip:])
    return BatchResult(0, table, sizes[skip:])


def check_order(ts: np.ndarray, runs: np.ndarray) -> None:
    """``ValueError`` naming the first row whose timestamp is older than the row before it
    in its run (``runs``: each run's first row)."""
    back = ts[1:] < ts[:-1]
    if len(runs) > 1:
        back[runs[1:] - 1] = False  # a run may start older than the one before it
    if back.any():
        i = int(np.argmax(back)) + 1
        msg = (
            f"timestamps go backwards within a key's rows at row {i}: "
            f"{ts[i].item()!r} after {ts[i - 1].item()!r}"
        )
        raise ValueError(msg)


def _prefix_runs(
    starts: np.ndarray, first: np.ndarray, runs: np.ndarray, some: np.ndarray, a0: int
) -> tuple[list[tuple[int, np.ndarray]], np.ndarray]:
    """Which windows of rows ``a0`` on are a run's prefix: those that start where their run
    does, in a run of :data:`LONG_RUN` rows or more (a key's windows while they fill, or every
    window of a key shorter than its range), one scan of the run answering all of them. As
    (run start, those rows within the run) per such run, and the mask of the other rows with a
    window, for the block scans. The same for every kernel of the call."""
    n = len(starts)
    lengths = np.diff(np.append(runs, n))
    grow = some & (starts == first) & (np.repeat(lengths, lengths) >= LONG_RUN)
    grow[:a0] = False
    prefixes: list[tuple[int, np.ndarray]] = []
    if grow.any():
        for r in np.flatnonzero(lengths >= LONG_RUN).tolist():
            lo = int(runs[r])
            rows = np.flatnonzero(grow[lo : lo + int(lengths[r])])
            if len(rows):
                prefixes.append((lo, rows))
    return prefixes, some & ~grow


def _ranges(
    k: Kernel,
    comps: Comps,
    starts: np.ndarray,
    g: np.ndarray,
    some: np.ndarray,
    a0: int,
    prefixes: list[tuple[int, np.ndarray]],
    rest: np.ndarray,
) -> Comps:
    """``k``'s aggregate of each window of rows ``a0`` on (empty ones: zeros, no position):
    the runs' prefixes (:func:`_prefix_runs`) by one scan each, the others by the block scans
    of :func:`_blocks`."""
    if not prefixes:
        return _blocks(k, comps, starts, g, some, a0)
    parts: list[tuple[np.ndarray, Comps]] = []  # (result rows from a0, their aggregates)
    for lo, rows in prefixes:
        top = int(rows[-1]) + 1  # the scan needs the run only up to its last such row
        scan = k.scan(tuple(c[lo : lo + top].reshape(1, -1) for c in comps), False)
        parts.append((rows + lo - a0, tuple(c[0, rows] for c in scan)))
    if rest[a0:].any():
        got = _blocks(k, comps, starts, g, rest, a0)
        parts.append((np.flatnonzero(rest[a0:]), tuple(c[rest[a0:]] for c in got)))
    out = []
    for j in range(len(comps)):
        dtype = np.result_type(*(p[1][j] for p in parts))
        col = np.full(len(g) - a0, -1, dtype) if k.pos_comp == j else np.zeros(len(g) - a0, dtype)
        for where, vals in parts:
            col[where] = vals[j]
        out.append(col)
    return tuple(out)


def _blocks(
    k: Kernel, comps: Comps, starts: np.ndarray, g: np.ndarray, some: np.ndarray, a0: int
) -> Comps:
    """``k``'s aggregate of each window of rows ``a0`` on (rows not ``some``: zeros, no
    position) by block scans (:func:`~.ranges.range_aggregates`). In chunks of
    :data:`CHUNK` rows when their windows reach back little (the temporaries of the block
    scans then grow with a chunk, not the call), else at once. Positions in the lifted
    components are the call's, so a chunk's results need no rebasing."""
    n = len(g)
    bounds = [*range(a0, n, CHUNK), n]
    # windows only start later down the rows (runs in order, each run's starts rising)
    reach = sum(b - min(int(starts[a]), a) for a, b in itertools.pairwise(bounds))
    if reach > 2 * (n - a0):
        bounds = [a0, n]
    parts: list[Comps] = []
    for a, b in itertools.pairwise(bounds):
        lo = min(int(starts[a]), a)
        sub = tuple(c[lo:b] for c in comps)
        sm = some[a:b]
        if sm.all():
            got = range_aggregates(k, sub, starts[a:b] - lo, g[a:b] - lo)
        else:
            got = range_aggregates(k, sub, starts[a:b][sm] - lo, g[a:b][sm] - lo)
            got = tuple(_spread(c, sm, k.pos_comp == j) for j, c in enumerate(got))
        parts.append(got)
    if len(parts) == 1:
        return parts[0]
    return tuple(
        np.concatenate(cs).astype(np.result_type(*cs), copy=False)
        for cs in zip(*parts, strict=True)
    )


def _spread(c: np.ndarray, some: np.ndarray, positions: bool) -> np.ndarray:
    out = np.full(len(some), -1, dtype=c.dtype) if positions else np.zeros(len(some), c.dtype)
    out[some] = c
    return out


def _starts(
    w: ColumnarWindow, ts: np.ndarray | None, runs: np.ndarray, first: np.ndarray, g: np.ndarray
) -> np.ndarray:
    """Each row's window start (a row index; above the row itself: an empty window)."""
    if w.own.count is not None:
        return np.asarray(np.maximum(g - w.own.count + 1, first), dtype=np.int64)
    assert ts is not None
    rng = w.own.range
    # rows at or before ``ts - range`` leave; where that is below every int64 none does
    if rng > _INT64_MAX:
        return first.copy()
    low = ts < _INT64_MIN + rng
    # per run, timestamps rebased to the run's oldest and runs laid end to end (a gap wider
    # than any run between them): one sorted array; a row's bound never reaches back past
    # its own run's start (``-1`` rebased)
    base = ts[first]
    # a run's own span may pass what int64 holds (timestamps from near -2^63 to near 2^63:
    # its difference wraps below 0)
    with np.errstate(over="ignore"):
        widths = ts[np.append(runs[1:], len(ts)) - 1] - ts[runs]
    span = _INT64_MAX if (widths < 0).any() else int(widths.max()) + 2
    if span * len(runs) >= _INT64_MAX // 2:  # too wide to lay end to end: a search per run
        out = np.empty(len(ts), dtype=np.int64)
        ends = [*runs[1:].tolist(), len(ts)]
        for lo, hi in zip(runs.tolist(), ends, strict=True):
            t = ts[lo:hi]
            with np.errstate(over="ignore"):
                bound = np.where(low[lo:hi], _INT64_MIN, t - rng)
            out[lo:hi] = lo + np.searchsorted(t, bound, side="right")
        return out
    flags = np.zeros(len(ts), dtype=np.int64)
    flags[runs] = 1
    offset = (np.cumsum(flags) - 1) * span
    laid = (ts - base) + offset
    with np.errstate(over="ignore"):
        rel = np.where(low, -1, np.maximum((ts - base) - rng, -1))
    out = np.searchsorted(laid, rel + offset, side="right")
    return np.asarray(out, dtype=np.int64)
