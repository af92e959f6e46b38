"""A stream's columns (:class:`Schema`): a batch's typed columns checked against them and put
in schema order, with the value checks a batch passes before any window sees it (no
non-finite number where the field allows none, no int a DOUBLE field would round, no negative
value a bounded sum reads)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from mtawindows.v1.convert import MAX_EXACT_INT, first_inexact_int, inexact_int_text
from mtawindows.v1.reasons import Reason
from mtawindows.v1.types import FieldType, StreamSpec, show, show_names

from .hosted_window import HostedWindow
from .refusals import ServiceError, invalid

# name -> (FieldType value, values: a list, or a numpy array of numbers from Arrow)
Columns = Mapping[str, tuple[str, Any]]
Violation = tuple[str, str]  # (field path, what is wrong)

_NUMERIC_WIDEN = {
    (FieldType.INT64.value, FieldType.DOUBLE.value),
    (FieldType.INT64.value, FieldType.TIMESTAMP.value),
    (FieldType.TIMESTAMP.value, FieldType.INT64.value),
}


class KeyBytes:
    """A keyed stream's STRING key column as Arrow gave it (``--wire arrow``): its UTF-8
    bytes (key ``i``: ``data[offsets[i]:offsets[i+1]]``) for the key slab to find its keys
    in one compiled pass (``KeySlab.find``), no Python string a row; :meth:`tolist` makes
    the texts for every other use (once, when a batch needs them)."""

    __slots__ = ("_array", "data", "offsets")

    def __init__(self, array: Any) -> None:
        import pyarrow as pa

        if isinstance(array, pa.ChunkedArray):
            array = array.combine_chunks()
        self._array = array
        _, offsets, data = array.buffers()
        wide = pa.types.is_large_string(array.type)
        self.offsets = np.frombuffer(offsets, dtype=np.int64 if wide else np.int32)[
            array.offset : array.offset + len(array) + 1
        ]
        self.data = (
            np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, np.uint8)
        )

    def __len__(self) -> int:
        return len(self._array)

    def tolist(self) -> list[str]:
        return self._array.to_pylist()  # type: ignore[no-any-return]

    def take(self, rows: np.ndarray) -> list[str]:
        """The texts of rows ``rows``."""
        return self._array.take(rows).to_pylist()  # type: ignore[no-any-return]


def plain_lists(columns: Columns) -> Columns:
    """``columns`` with any :class:`KeyBytes` column as its list of texts, any numpy array
    as its list of values."""
    if not any(isinstance(v, KeyBytes | np.ndarray) for _, v in columns.values()):
        return columns
    return {
        n: (t, v.tolist() if isinstance(v, KeyBytes | np.ndarray) else v)
        for n, (t, v) in columns.items()
    }


class Schema:
    """The columns of a stream's batches: their names in order (the timestamp first), their
    types, and the DOUBLE fields that may hold non-finite values."""

    def __init__(self, spec: StreamSpec) -> None:
        self.stream = spec.name
        self.types: dict[str, str] = {f.name: str(f.type) for f in spec.fields}
        self.types[spec.timestamp_field] = FieldType.TIMESTAMP.value
        self.nan_ok = {f.name for f in spec.fields if f.allow_nan}
        self.order = [spec.timestamp_field, *(f.name for f in spec.fields)]

    def decode(self, columns: Columns) -> tuple[int, list[Any]]:
        """Check a batch's columns against the schema; the columns in schema order (each a
        list, or a numpy array where the batch gave one)."""
        violations, n_rows = self._shape(columns)  # schema first, then values
        out: list[list[Any]] = []
        values_bad: list[Violation] = []
        for name in self.order:
            if name not in columns:
                continue
            given, values = columns[name]
            expected = self.types[name]
            if given != expected:
                if (given, expected) not in _NUMERIC_WIDEN:
                    violations.append(
                        (f"columns[{name}]", f"expected {expected} values, got {given}")
                    )
                    continue
                if expected == FieldType.DOUBLE.value:  # ints only where a double is exact
                    inexact = first_inexact_int(_plain(values, MAX_EXACT_INT))
                    if inexact is not None:
                        values_bad.append(_inexact(name, inexact, _at(values, inexact)))
                        continue
                    if isinstance(values, np.ndarray):
                        values = values.astype(np.float64)
                    else:
                        values = [float(v) for v in values]
            if expected == FieldType.DOUBLE.value and name not in self.nan_ok:
                bad = first_nonfinite(values)
                if bad is not None:
                    values_bad.append(_nonfinite(name, bad, _at(values, bad)))
            out.append(values)
        if violations or values_bad:
            raise _refused(violations, values_bad)
        return n_rows, out

    def _shape(self, columns: Columns) -> tuple[list[Violation], int]:
        """The columns missing, unknown or of another length than the longest; its length."""
        violations = [
            (
                f"columns[{n}]",
                f"missing column {n!r} ({self.types[n]}) of stream {show(self.stream)}",
            )
            for n in self.order
            if n not in columns
        ]
        violations += [
            (
                f"columns[{n}]",
                f"unknown column {show(n)}; the stream's columns are {show_names(self.order)}",
            )
            for n in sorted(set(columns) - set(self.types))
        ]
        lengths = {n: len(columns[n][1]) for n in self.order if n in columns}
        n_rows = max(lengths.values(), default=0)
        violations += [
            (f"columns[{n}]", f"has {length} values, expected {n_rows} like the longest column")
            for n, length in lengths.items()
            if length != n_rows
        ]
        return violations, n_rows

    def check_bounded_sums(
        self, windows: Mapping[str, HostedWindow], cols: list[list[Any]]
    ) -> None:
        """A bounded-sum window is prefix-monotone only over values >= 0 (a negative value
        would let an evicted prefix's rows belong in the window again), and a non-finite one
        poisons its sum: refuse the batch, naming the first such row, before anything."""
        for wname, w in windows.items():
            p = w.spec.policy
            if p.kind != "bounded_sum" or p.field not in self.order:
                continue
            values = cols[self.order.index(p.field)]
            bad = first_negative(values)
            if bad is not None:
                what = (
                    f"expected a finite number >= 0 (window {wname!r} sums {p.field!r} up to a "
                    f"bound), got {values[bad]!r}"
                )
                meta = {"row": str(bad), "window": wname}
                raise invalid(f"columns[{p.field}][{bad}]", what, Reason.BAD_VALUES, meta)


def _nonfinite(name: str, row: int, value: Any) -> Violation:
    return (
        f"columns[{name}][{row}]",
        f"expected a finite number, got {value!r} (the field does not allow non-finite "
        "values: allow_nan is off)",
    )


def _inexact(name: str, row: int, value: int) -> Violation:
    """An int a DOUBLE field refuses: converting it would round it (past 2**53)."""
    return (
        f"columns[{name}][{row}]",
        f"expected DOUBLE values, got the INT64 value {inexact_int_text(value)}; send it as "
        "a double, or make the field INT64",
    )


def _refused(schema: list[Violation], values: list[Violation]) -> ServiceError:
    """INVALID_ARGUMENT naming the first violation: ``SCHEMA_MISMATCH`` when the columns do
    not match the schema, else ``BAD_VALUES``; all of them as field violations."""
    violations = schema + values
    first = violations[0]
    extra = f" (and {len(violations) - 1} more)" if len(violations) > 1 else ""
    return ServiceError(
        "INVALID_ARGUMENT",
        Reason.SCHEMA_MISMATCH if schema else Reason.BAD_VALUES,
        f"{first[0]}: {first[1]}{extra}",
        violations,
    )


def _at(values: Any, i: int) -> Any:
    """Value ``i`` of a column as a Python value (a numpy scalar would show as such)."""
    v = values[i]
    return v.item() if isinstance(v, np.generic) else v


def _plain(values: Any, bound: int) -> Any:
    """An array of ints as itself when every value lies within ``+-bound`` (nothing to
    look at one by one), else as a list (the list checks name the value)."""
    if not isinstance(values, np.ndarray):
        return values
    if not len(values) or (values.min() >= -bound and values.max() <= bound):
        return []
    return values.tolist()


def first_nonfinite(values: Any) -> int | None:
    """Index of the first NaN, +inf or -inf; a finite sum proves there is none (one C loop:
    any non-finite value makes ``fsum`` non-finite or raise). An array: one vectorized test."""
    if isinstance(values, np.ndarray):
        bad = np.flatnonzero(~np.isfinite(values))
        return int(bad[0]) if len(bad) else None
    try:
        if math.isfinite(math.fsum(values)):
            return None
    except (TypeError, ValueError, OverflowError):  # inf - inf, an overflow, not numbers
        pass
    return next((i for i, v in enumerate(values) if not math.isfinite(v)), None)


def first_negative(values: list[Any]) -> int | None:
    """Index of the first value that is not a finite number >= 0 (the values of a bounded-sum
    window's field); ``min`` and ``fsum`` prove there is none in two C loops."""
    try:
        if min(values, default=0) >= 0 and math.isfinite(math.fsum(values)):
            return None
    except (TypeError, ValueError, OverflowError):
        pass
    return next((i for i, v in enumerate(values) if not (v >= 0 and math.isfinite(v))), None)
