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

At run time an evaluation error (division by zero, a null operand, an int64 overflow: integer,
duration and timestamp arithmetic is 64-bit, as in CEL) makes the expression false: that
prefix stays. Such errors are counted (:attr:`CelPolicy.errors`; a window's
``policy_errors``).

A new expression's UTF-8 size and nesting are limited (:class:`CelLimits`, checked by
:func:`check_limits` before anything is parsed; see :mod:`.expression_limits`).

Modules, each importing only those before it: ``expression_errors`` (:class:`CelError`),
``expression_limits`` (size and nesting), ``values`` (types, record fields, duration and
timestamp literals, the run-time helpers of the generated code) and ``compiler``
(:class:`CelPolicy`, :func:`compile_expression`).
"""

from .compiler import CelPolicy, compile_expression
from .expression_errors import CelError
from .expression_limits import CelLimits, check_limits, measure
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
