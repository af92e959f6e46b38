"""Slide policies written in CEL, compiled to Python closures.

A policy expression reads two records, ``total`` (the window before enforcement) and ``old``
(a candidate prefix), whose fields are the window's named aggregations, and says whether the
prefix may leave::

    total.ts_max - old.ts_max >= duration("1h")
    total.n - old.n > 1000 || total.peak.value > 2.0 * old.mean

The expression is parsed by cel-python (the CEL grammar, with positions), type-checked here
against the window's outputs, and translated into one generated Python function: nothing
from the expression text reaches the generated source (identifiers become tuple indices,
literals become named constants), so the only reachable names are ``total`` and ``old``.
Parse, type and name errors raise :class:`CelError` with the line and column.

Supported: literals (int, uint, double, string, bool, null), ``total.f`` / ``old.f`` and
struct parts (``total.peak.key``), ``! - * / % + -``, comparisons (numbers compare across
int/double as in CEL; arithmetic does not mix them: use ``double(x)``), ``&& || ?:``, ``in``
over a list literal, and the functions ``duration("1h30m")``, ``timestamp("2024-01-01T00:00:00Z")``,
``int()``, ``double()``. Timestamps are nanoseconds since the epoch, durations nanoseconds.
Integer literals must fit in 64 bits (int64, or uint64 with the ``u`` suffix).

At run time an evaluation error (division by zero, a null operand) makes the expression
false: that prefix stays. Such errors are counted (:attr:`CelPolicy.errors`).

A new expression's UTF-8 size and nesting are limited (:class:`CelLimits`, checked by
:func:`check_limits` before anything is parsed; see :mod:`.limits`).

Modules, each importing only those before it: ``errors`` (:class:`CelError`), ``limits`` (size
and nesting), ``values`` (types, record fields, duration and timestamp literals, the run-time
helpers of the generated code) and ``compiler`` (:class:`CelPolicy`,
:func:`compile_expression`). ``mtawindows.server.service.cel`` was one module; its names stay
here.
"""

from .compiler import _HELPERS as _HELPERS
from .compiler import _PASS_THROUGH as _PASS_THROUGH
from .compiler import _SAFE as _SAFE
from .compiler import CelPolicy, compile_expression
from .compiler import _compile as _compile
from .compiler import _Compiler as _Compiler
from .errors import _LONG_TOKEN as _LONG_TOKEN
from .errors import CelError
from .limits import _BINARY as _BINARY
from .limits import _CLOSE as _CLOSE
from .limits import _OPEN as _OPEN
from .limits import _TIER_MEMBER as _TIER_MEMBER
from .limits import _TIER_TERNARY as _TIER_TERNARY
from .limits import _TIER_UNARY as _TIER_UNARY
from .limits import _TIERS as _TIERS
from .limits import _WORD as _WORD
from .limits import CelLimits, check_limits, measure
from .limits import _close as _close
from .limits import _Level as _Level
from .limits import _Scan as _Scan
from .values import _DURATION_PART as _DURATION_PART
from .values import _DURATION_UNITS as _DURATION_UNITS
from .values import _ORDERED as _ORDERED
from .values import (
    INT64_MAX,
    INT64_MIN,
    NUMERIC,
    UINT64_MAX,
    CelField,
    CelType,
    parse_duration,
    parse_timestamp,
)
from .values import _cel_and as _cel_and
from .values import _cel_div as _cel_div
from .values import _cel_mod as _cel_mod
from .values import _cel_or as _cel_or
from .values import _to_int as _to_int

__all__ = [
    "INT64_MAX",
    "INT64_MIN",
    "NUMERIC",
    "UINT64_MAX",
    "CelError",
    "CelField",
    "CelLimits",
    "CelPolicy",
    "CelType",
    "check_limits",
    "compile_expression",
    "measure",
    "parse_duration",
    "parse_timestamp",
]
