"""Query-time ranges: the aggregate of a suffix of a window, asked at query time (issue 25).

A window keeps the rows its slide policy lets stay; a query may ask for the newest part of
them only:

* ``count=N``: the newest ``N`` items (all of them when the window holds fewer);
* ``time_range=R`` (in the timestamps' unit) over the record field ``field`` holding the newest
  timestamp (a :class:`~.monoids.Max` or :class:`~.monoids.Last`): the items a
  :class:`~.policies.TimeRangePolicy` of range ``R`` would keep, by the same rule (a prefix P
  leaves while ``newest - ts(P's newest) >= R``, so an item stays when ``newest - ts < R``).
  The boundary is searched over the aggregates, as a bulk eviction searches it, and nothing
  leaves.

Every window type answers through one method, ``aggregate_range(count=..., time_range=...,
field=...) -> (lifted aggregate, items)`` (and ``query_range``, its lowered form):

==============  ===============================================================================
AMTA, LMTA      the levels' elements that lie inside the suffix (the fewest, each the highest
                aligned one), read through the same head cache and store paths as the engine:
                O(log n) combines and store reads; the time boundary by Algorithm 2's descent
FLATFAT, BINT   ``query_suffix(r)``: a range query over the tree, O(log n); the time boundary
                by their O(log n) search
FLATFIT         ``query_suffix(r)`` with its shared compressed pointers (amortized O(1) with
                every range asked each slide, O(r) worst case); the time boundary by a binary
                search over the items' timestamps
others          :class:`RangeNotSupportedError`: Two-Stacks (Lite) and DABA (Lite) keep no
                aggregate of a suffix they are not about to evict; SlickDeque answers only the
                ranges registered before the items came (``set_ranges``)
==============  ===============================================================================

A suffix query changes nothing a reader can see: the window's result, size, counters, local
state and Redis contents stay as they were (FlatFAT propagates its lazy changes and FlatFIT
compresses its pointers, as their own queries do).
"""

from __future__ import annotations

import datetime as _dt
import numbers
from typing import Any

from .monoids import Monoid
from .policies import BoundPolicy, TimeRangePolicy

__all__ = ["RangeNotSupportedError", "SuffixQuery", "check_suffix"]


class RangeNotSupportedError(Exception):
    """A window whose algorithm cannot answer a suffix of itself (``algorithm``) was asked for
    one; the service answers FAILED_PRECONDITION, ``RANGE_NOT_SUPPORTED``."""

    def __init__(self, algorithm: str, message: str) -> None:
        super().__init__(message)
        self.algorithm = algorithm


class SuffixQuery:
    """One validated query-time range: ``count`` items, or a ``time_range`` over ``field``."""

    __slots__ = ("count", "field", "time_range")

    def __init__(self, count: int | None, time_range: Any, field: str | None) -> None:
        self.count = count
        self.time_range = time_range
        self.field = field

    def keep(self, monoid: Monoid) -> BoundPolicy:
        """The time form's rule, bound to ``monoid``: ``keep(total, agg(P))`` is true while
        the prefix P leaves (the :class:`TimeRangePolicy` of the same range, bound the same
        way: a field that is no Max or Last of the timestamps is refused there)."""
        bound = TimeRangePolicy(self.time_range or 1, field=self.field).bind(monoid)
        if not self.time_range:  # a range of 0 keeps nothing: every prefix leaves
            return lambda total, old: True
        return bound


def check_suffix(owner: str, count: Any, time_range: Any, field: Any) -> SuffixQuery:
    """Validate the arguments of ``aggregate_range``: exactly one of ``count`` (an int >= 0) and
    ``time_range`` (a number >= 0 in the timestamps' unit, or a timedelta for datetime
    timestamps); ``field`` names the record field of the newest timestamp (None: the one Max or
    Last field, as the policies find it). TypeError or ValueError naming what came."""
    if (count is None) == (time_range is None):
        both = "both" if count is not None else "neither"
        msg = f"{owner}: expected exactly one of count and time_range, got {both}"
        raise ValueError(msg)
    if count is not None:
        if isinstance(count, bool) or not isinstance(count, int):
            msg = f"{owner}: count must be an int, got {type(count).__name__} {count!r}"
            raise TypeError(msg)
        if count < 0:
            msg = f"{owner}: count must be >= 0, got {count}"
            raise ValueError(msg)
        return SuffixQuery(count, None, None)
    if isinstance(time_range, bool) or not isinstance(time_range, numbers.Real | _dt.timedelta):
        msg = (
            f"{owner}: time_range must be a number or timedelta, got "
            f"{type(time_range).__name__} {time_range!r}"
        )
        raise TypeError(msg)
    zero: Any = _dt.timedelta(0) if isinstance(time_range, _dt.timedelta) else 0
    if time_range != time_range or time_range < zero:
        msg = f"{owner}: time_range must be >= 0, got {time_range!r}"
        raise ValueError(msg)
    if field is not None and not isinstance(field, str):
        msg = f"{owner}: field must be a record field's name, got {type(field).__name__}"
        raise TypeError(msg)
    return SuffixQuery(None, time_range, field)
