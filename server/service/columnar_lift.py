"""A record's ``lift`` over a whole batch of validated columns in C loops (``zip``, ``repeat``)
instead of one call per row, for the built-ins whose lift only copies or pairs values."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..engine.monoids import (
    ArgMax,
    ArgMin,
    Count,
    First,
    Last,
    Max,
    MaxCount,
    Mean,
    Min,
    Record,
    StdDev,
    Sum,
    Variance,
)

__all__ = ["columnar_lifter"]


def columnar_lifter(
    record: Record, nan_fields: set[str]
) -> Callable[[Mapping[str, list[Any]]], list[Any]] | None:
    """``record.lift`` over a whole batch given as validated columns, in C loops (``zip``,
    ``repeat``) instead of one call per row: the same tuples for the built-ins whose lift only
    copies or pairs values once the stream checked the column types and NaN. ``None`` when a
    field needs its own lift (geometric mean, plugins, NaN-carrying fields)."""
    specs: list[tuple[str, str, str]] = []  # (shape, field, key field)
    for m in record.monoids:
        f = getattr(m, "field", None)
        key = getattr(m, "key_field", None) or ""
        if not isinstance(f, str) and type(m) is not Count:
            return None
        if f in nan_fields or key in nan_fields:
            return None
        shape = _SHAPES.get(type(m))
        if shape is None:
            return None
        if shape == "count-float" and getattr(m, "integers", False):
            shape = "count-value"  # an INT64 mean's exact (count, sum)
        specs.append((shape, f or "", key))

    def lift(cols: Mapping[str, list[Any]]) -> list[Any]:
        n = len(next(iter(cols.values())))
        return list(zip(*(_column(spec, cols, n) for spec in specs), strict=False))

    return lift


_SHAPES: dict[type, str] = {
    Count: "one",
    Sum: "value",
    Max: "value",
    Min: "value",
    First: "value",
    Last: "value",
    Mean: "count-float",
    Variance: "moments",
    StdDev: "moments",
    MaxCount: "value-one",
    ArgMax: "value-key",
    ArgMin: "value-key",
}


def _column(spec: tuple[str, str, str], cols: Mapping[str, list[Any]], n: int) -> Iterable[Any]:
    shape, f, key = spec
    if shape == "one":
        return itertools.repeat(1, n)
    if shape == "value":
        return cols[f]
    if shape == "count-float":
        return zip(itertools.repeat(1), map(float, cols[f]))
    if shape == "count-value":
        return zip(itertools.repeat(1), cols[f])
    if shape == "moments":
        return zip(itertools.repeat(1), map(float, cols[f]), itertools.repeat(0.0))
    if shape == "value-one":
        return zip(cols[f], itertools.repeat(1))
    return zip(cols[f], cols[key], strict=False)
