"""Aggregates over many ranges of one array of lifted rows at once, for any monoid kernel
(kernels.py), without inverses: the block decomposition of van Herk and Gil-Werman.

The rows are cut into blocks of ``L`` (the shorter ranges' length); within
every block a forward scan (prefix aggregates) and a backward scan (suffix aggregates) are taken
in two array passes. A range ``[s, e]``:

* across two adjacent blocks is ``suffix[s] + prefix[e]``;
* across more is ``suffix[s] + (the blocks between) + prefix[e]``, the blocks between being a
  range over the blocks' aggregates: the same problem ``L`` times smaller (recursion);
* inside one block is ``prefix[e]`` when it starts the block, ``suffix[s]`` when it ends it,
  else (shorter than ``L``) the same problem with blocks half as long, over just those rows.

Every range costs O(1) combines; the scans cost O(n) per level, and levels shrink by ``L``.
Order is kept (older part first), so non-commutative kernels (First, Last, arg-max ties)
answer as the per-row engine does.
"""

from __future__ import annotations

import numpy as np

from .kernels import Comps, Kernel

__all__ = ["range_aggregates", "scan_all", "segment_scan"]


def segment_scan(k: Kernel, comps: Comps, width: int, reverse: bool) -> Comps:
    """``k``'s scan within consecutive segments of ``width`` rows (the last may be shorter)."""
    n = len(comps[0])
    full = n // width * width
    parts: list[Comps] = []
    if full:
        parts.append(
            tuple(
                c.reshape(-1)
                for c in k.scan(tuple(c[:full].reshape(-1, width) for c in comps), reverse)
            )
        )
    if full < n:
        parts.append(
            tuple(
                c.reshape(-1)
                for c in k.scan(tuple(c[full:].reshape(1, -1) for c in comps), reverse)
            )
        )
    if len(parts) == 1:
        return parts[0]
    return tuple(np.concatenate(cs) for cs in zip(*parts, strict=True))


def scan_all(k: Kernel, comps: Comps, reverse: bool = False) -> Comps:
    """Prefix (or suffix) aggregates of the whole array."""
    n = len(comps[0])
    if n == 0:
        return comps
    return segment_scan(k, comps, n, reverse)


def _take(comps: Comps, idx: np.ndarray) -> Comps:
    return tuple(c[idx] for c in comps)


def _put(out: Comps, where: np.ndarray, vals: Comps) -> None:
    for o, v in zip(out, vals, strict=True):
        o[where] = v


def _block(lengths: np.ndarray, n: int) -> int:
    """A block length: the shorter ranges' length (the tenth percentile, >= 2), so that most
    ranges span two blocks (a count window's, all of one length, every one) and few fall
    inside one."""
    sample = lengths[:: max(1, len(lengths) // 64)]
    short = int(np.partition(sample, len(sample) // 10)[len(sample) // 10])
    return max(2, min(short, n))


def range_aggregates(
    k: Kernel, comps: Comps, s: np.ndarray, e: np.ndarray, width: int | None = None
) -> Comps:
    """``k``'s aggregate of ``comps[s[i] .. e[i]]`` (inclusive, ``s <= e``) for every ``i``."""
    q = len(s)
    out = tuple(np.empty(q, dtype=c.dtype) for c in comps)
    if q == 0:
        return out
    n = len(comps[0])
    if width is None:
        width = _block(e - s + 1, n)
    bs = s // width
    be = e // width
    prefix = segment_scan(k, comps, width, False)
    suffix = segment_scan(k, comps, width, True)
    same = bs == be
    if same.any():
        starts = same & (s % width == 0)
        ends = same & ~starts & ((e % width == width - 1) | (e == n - 1))
        inner = same & ~starts & ~ends
        if starts.any():
            _put(out, starts, _take(prefix, e[starts]))
        if ends.any():
            _put(out, ends, _take(suffix, s[ends]))
        if inner.any():  # shorter than a block, strictly inside one: halve the blocks
            si, ei = s[inner], e[inner]
            lo, hi = int(si.min()), int(ei.max()) + 1
            sub = tuple(c[lo:hi] for c in comps)
            _put(out, inner, range_aggregates(k, sub, si - lo, ei - lo, max(2, width // 2)))
    two = be == bs + 1
    if two.any():
        _put(out, two, k.combine(_take(suffix, s[two]), _take(prefix, e[two])))
    more = be > bs + 1
    if more.any():
        ends_of_blocks = np.minimum(np.arange(width - 1, n + width - 1, width), n - 1)
        blocks = _take(prefix, ends_of_blocks)
        middle = range_aggregates(k, blocks, bs[more] + 1, be[more] - 1)
        left = k.combine(_take(suffix, s[more]), middle)
        _put(out, more, k.combine(left, _take(prefix, e[more])))
    return out
