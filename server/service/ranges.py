"""Query-time ranges (issue 25): ``Query(range=...)`` or ``Query(count=...)`` answers a suffix of
a window, by its engine's ``aggregate_range`` (:mod:`mtawindows.server.engine.suffix`).

* :func:`range_query` validates what the request asks (INVALID_ARGUMENT naming ``range`` or
  ``count``), before anything is read;
* :func:`check_range` refuses a window that cannot answer (FAILED_PRECONDITION,
  ``RANGE_NOT_SUPPORTED``, metadata stream, window, algorithm): its algorithm answers no
  suffix, it is a hopping window, or (a time range) its record holds no newest timestamp;
* :func:`suffix_result` (an unkeyed stream's window) and :func:`suffix_of` (any instance: a
  window's engine, a key's compact or full window) give the answer, a
  :class:`~mtawindows.v1.types.WindowResult` of the same shape as the whole window's, its
  ``size`` the rows in the suffix.

A range is in nanoseconds, the unit every timestamp has in the server (a stream's ``ts_unit``
only says how clients read plain numbers), as a time-range policy's range is converted
(:func:`~.policy_catalog.build_policy`); the suffix is the rows a time-range policy of that
range would keep: ``newest - ts < range``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mtawindows.v1.reasons import Reason
from mtawindows.v1.types import StreamSpec, WindowResult

from ..engine.algorithms import answers_ranges
from ..engine.suffix import RangeNotSupportedError
from .compiled import time_field
from .hosted_window import HostedWindow
from .refusals import ServiceError, invalid

__all__ = ["RangeQuery", "check_range", "range_query", "suffix_of", "suffix_result"]

_INT64_MAX = (1 << 63) - 1
_NANOS = 1_000_000_000


@dataclass(frozen=True)
class RangeQuery:
    """A validated query-time range: the newest ``count`` rows, or the rows of the last
    ``range_ns`` nanoseconds (exactly one is set)."""

    count: int | None = None
    range_ns: int | None = None

    def describe(self) -> str:
        if self.count is not None:
            return f"count={self.count}"
        return f"range={self.range_ns}ns"


def range_query(count: int, duration: tuple[int, int] | None) -> RangeQuery | None:
    """The range a Query asks: ``count`` (0: none), ``duration`` (the Duration's seconds and
    nanos; None: not set). None for the whole window; INVALID_ARGUMENT naming the field for
    both, a negative one, a malformed Duration or one past int64 nanoseconds (about 292
    years, the timestamps' unit)."""
    if duration is None:
        if count < 0:
            raise invalid("count", f"expected a row count >= 1, got {count}")
        return RangeQuery(count=count) if count else None
    seconds, nanos = duration
    if count:
        raise invalid(
            "range",
            f"expected a range or a count, not both; got range={_show(seconds, nanos)} and "
            f"count={count}",
        )
    if abs(nanos) >= _NANOS or (seconds < 0 < nanos) or (nanos < 0 < seconds):
        raise invalid(
            "range",
            f"expected a valid Duration (seconds and nanos of one sign, |nanos| < 10^9), got "
            f"{seconds}s {nanos}ns",
        )
    ns = seconds * _NANOS + nanos
    if ns < 0:
        raise invalid("range", f"expected a duration >= 0, got {_show(seconds, nanos)}")
    if ns > _INT64_MAX:
        raise invalid(
            "range",
            f"expected a duration of at most {_INT64_MAX // _NANOS} s (int64 nanoseconds, the "
            f"timestamps' unit), got {_show(seconds, nanos)}",
        )
    return RangeQuery(range_ns=ns)


def _show(seconds: int, nanos: int) -> str:
    if not nanos:
        return f"{seconds}s"
    return f"{seconds + nanos / _NANOS:.9f}".rstrip("0") + "s"


def not_supported(stream: str, w: HostedWindow, why: str) -> ServiceError:
    """FAILED_PRECONDITION, ``RANGE_NOT_SUPPORTED`` for window ``w`` of ``stream``."""
    return ServiceError(
        "FAILED_PRECONDITION",
        Reason.RANGE_NOT_SUPPORTED,
        f"window {w.spec.name!r} of stream {stream!r} answers no query-time range: {why}",
        metadata={"stream": stream, "window": w.spec.name, "algorithm": w.spec.algorithm},
    )


def check_range(stream: StreamSpec, w: HostedWindow, q: RangeQuery) -> str | None:
    """Refuse (``RANGE_NOT_SUPPORTED``) a window that cannot answer ``q``; returns the record
    field of the newest timestamp for a time range (None for a count)."""
    if getattr(w.spec, "slide", None) is not None:  # the hook for hopping windows
        raise not_supported(
            stream.name,
            w,
            "it is a hopping window, whose Query answers its last closed boundary; query a "
            "window without a slide",
        )
    algorithm = w.spec.algorithm
    if not answers_ranges(algorithm):
        raise not_supported(
            stream.name,
            w,
            f"its algorithm {algorithm} keeps no aggregate of a suffix of the window; AMTA, "
            "LMTA, FLATFAT, BINT and FLATFIT answer one in O(log n)",
        )
    if q.count is not None:
        return None
    field = time_field(w.built, stream.timestamp_field)
    if field is None:
        raise not_supported(
            stream.name,
            w,
            "a time range needs the newest timestamp in the window's aggregates (a time-range "
            f"policy, or a max or last of {stream.timestamp_field!r}); ask a count instead",
        )
    return field


def suffix_of(
    stream: StreamSpec,
    w: HostedWindow,
    q: RangeQuery,
    field: str | None,
    aggregate_range: Callable[..., tuple[Any, int]],
) -> tuple[Any, int]:
    """``(lowered result, rows)`` of the suffix ``q`` of a window of ``w`` checked by
    :func:`check_range`: ``aggregate_range`` is its instance's (an engine's, a key's
    window's)."""
    try:
        agg, size = aggregate_range(count=q.count, time_range=q.range_ns, field=field)
    except RangeNotSupportedError as ex:
        raise not_supported(stream.name, w, str(ex)) from None
    return w.built.monoid.lower(agg), size


def suffix_result(stream: StreamSpec, w: HostedWindow, q: RangeQuery) -> WindowResult:
    """An unkeyed stream's window's result over the suffix ``q`` (checked first): the shape of
    :meth:`HostedWindow.result`, ``size`` the rows in the suffix, ``evicted`` the last
    batch's, as the whole window's."""
    field = check_range(stream, w, q)
    lowered, size = suffix_of(stream, w, q, field, w.engine.aggregate_range)
    return WindowResult(
        w.spec.name, w.values(lowered, size), size, w.evicted, w.sequence, w.timestamp
    )
