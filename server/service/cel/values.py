"""The values a policy expression works with: the CEL types checked, the fields of the
``total``/``old`` records (:class:`CelField`), duration and timestamp literals in nanoseconds,
and the run-time helpers the generated code calls (CEL's division, modulo and ``int()``, the
int64 overflow check, and ``||``/``&&`` commutative over errors)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

# CEL types we check: scalar names, or a dict of part name -> type for structs.
CelType = Any
NUMERIC = ("int", "double")
_ORDERED = ("int", "double", "string", "timestamp", "duration", "bool")

INT64_MIN, INT64_MAX, UINT64_MAX = -(2**63), 2**63 - 1, 2**64 - 1


@dataclass(frozen=True)
class CelField:
    """One field of the ``total``/``old`` records: its CEL type and how to read it from a lifted
    aggregate tuple (``index``; ``lower`` when the stored form is not the value)."""

    type: CelType
    index: int
    lower: Callable[[Any], Any] | None = None
    parts: Mapping[str, Callable[[Any], Any]] = field(default_factory=dict)


_DURATION_UNITS = {
    "h": 3_600_000_000_000,
    "m": 60_000_000_000,
    "s": 1_000_000_000,
    "ms": 1_000_000,
    "us": 1_000,
    "µs": 1_000,
    "ns": 1,
}
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(h|ms|m|s|us|µs|ns)")


def parse_duration(text: str) -> int:
    """CEL/Go duration text (``"1h30m"``, ``"1.5s"``, ``"-90ms"``) in nanoseconds."""
    s = text.strip()
    sign = -1 if s.startswith("-") else 1
    s = s.lstrip("+-")
    if s == "0":
        return 0
    pos, total = 0, 0.0
    while pos < len(s):
        m = _DURATION_PART.match(s, pos)
        if m is None:
            msg = f'bad duration {text!r}: expected e.g. "1h", "90s", "1.5m", "250ms"'
            raise ValueError(msg)
        total += float(m.group(1)) * _DURATION_UNITS[m.group(2)]
        pos = m.end()
    if not s:
        msg = f"bad duration {text!r}: empty"
        raise ValueError(msg)
    return sign * round(total)


def parse_timestamp(text: str) -> int:
    """RFC 3339 text in nanoseconds since the epoch."""
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as ex:
        msg = f'bad timestamp {text!r}: expected RFC 3339, e.g. "2024-01-01T00:00:00Z"'
        raise ValueError(msg) from ex
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    delta = dt - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1_000


def _cel_div(a: Any, b: Any) -> Any:  # int: truncates toward zero; double: IEEE
    if isinstance(a, int) and isinstance(b, int):
        q = abs(a) // abs(b)  # ZeroDivisionError -> error -> false
        return q if (a >= 0) == (b >= 0) else -q
    if b == 0:
        return float("nan") if a == 0 or a != a else float("inf") if a > 0 else float("-inf")
    return a / b


def _cel_mod(a: int, b: int) -> int:  # sign of the dividend, as in CEL
    r = abs(a) % abs(b)
    return r if a >= 0 else -r


def _cel_i64(v: int) -> int:
    """``v`` when it fits in an int64, else an evaluation error: CEL's integers (and its
    durations and timestamps, nanoseconds here) are 64-bit, and an overflow is an error (the
    expression is false, counted in ``policy_errors``), never a wrapped or a wider value."""
    if INT64_MIN <= v <= INT64_MAX:
        return v
    msg = "int64 overflow"
    raise OverflowError(msg)


def _to_int(v: Any) -> int:
    if isinstance(v, float):
        if v != v or v in (float("inf"), float("-inf")):
            msg = f"int() of {v}"
            raise ValueError(msg)
        return _cel_i64(int(v))
    return int(v)


def _cel_or(a: Callable[[], bool], b: Callable[[], bool]) -> bool:
    try:
        if a():
            return True
    except Exception:
        if b() is True:  # the error is absorbed: the other side decides
            return True
        raise
    return b()


def _cel_and(a: Callable[[], bool], b: Callable[[], bool]) -> bool:
    try:
        if not a():
            return False
    except Exception:
        if b() is False:
            return False
        raise
    return b()
