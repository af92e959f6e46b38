"""Compute (:func:`compute`): a stream's windows' per-row results over rows sent whole, each
key's rows one window starting empty, computed by the columnar path and forgotten.

Nothing of the stream is read or changed but its window definitions: the answer is a pure
function of the rows and the definitions, the results a keyed stream's Append with PER_ROW
results would give for the same rows into a fresh stream (tests/transport/test_compute.py
checks exactly that). The Spark connector's batch ``sliding_aggregate`` calls it, so a
partition's rows of any number of keys take one call per chunk, with no Python object per
row on the server.

Refused before any work, naming what was wrong: a window the columnar path cannot compute
(NOT_COLUMNAR), a field missing or of another type than the stream declares
(SCHEMA_MISMATCH), a null, a NaN where the field allows none, a key's rows apart or going back
in time (BAD_VALUES), too many rows (BATCH_TOO_LARGE), a bad ``context_rows``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mtawindows.v1.keys import MAX_KEY_BYTES, key_refusal
from mtawindows.v1.reasons import Reason
from mtawindows.v1.types import FieldType, StreamSpec, clip, show

from .hosted_window import HostedWindow, _columnar_refusal, _general_reason
from .refusals import ServiceError, batch_too_large, invalid, not_found
from .row_results import RowResults

__all__ = ["compute", "compute_refusal"]


def compute_refusal(win: HostedWindow) -> str | None:
    """Why Compute cannot answer for ``win`` (None: it can)."""
    if win.built.hop is not None:
        return "it is a hopping window (its results are per boundary, not per row)"
    why = _general_reason(win.built) or _columnar_refusal(win.built)
    return why or None


def compute(
    spec: StreamSpec,
    windows: dict[str, HostedWindow],
    which: Sequence[str],
    table: Any,
    key_column: str,
    context_rows: int,
    max_rows: int,
) -> dict[str, RowResults]:
    """Each window's per-row results over ``table`` (a pyarrow Table), rows
    ``context_rows`` onward (see the module docstring)."""
    import numpy as np

    from ..engine.columnar.runs import check_order, run_results

    stream = spec.name
    names = list(which) or list(windows)
    wins = {}
    for name in names:
        w = windows.get(name)
        if w is None:
            msg = f"stream {stream!r} has no window {name!r}"
            raise not_found(Reason.WINDOW_NOT_FOUND, msg, stream=stream, window=name)
        why = compute_refusal(w)
        if why is not None:
            raise ServiceError(
                "FAILED_PRECONDITION",
                Reason.NOT_COLUMNAR,
                f"window {name!r} of stream {stream!r} cannot be computed by the columnar "
                f"path: {why}; append its rows to a stream with PER_ROW results instead",
                metadata={"stream": stream, "window": name},
            )
        wins[name] = w
    n = table.num_rows
    if n > max_rows:
        raise batch_too_large(n, max_rows)
    if not 0 <= context_rows <= n:
        raise invalid("context_rows", f"expected 0..{n} (the request's rows), got {context_rows}")
    key_column = key_column or spec.key or ""
    reads = {spec.timestamp_field}
    for w in wins.values():
        reads.update(_reads(w))
    types = {f.name: f.type for f in spec.fields}
    types[spec.timestamp_field] = FieldType.TIMESTAMP.value
    allow_nan = {f.name for f in spec.fields if f.allow_nan}
    arrays = {c: _column(table, c, types.get(c, ""), c in allow_nan) for c in sorted(reads)}
    runs = _runs(table, key_column) if key_column else np.zeros(1 if n else 0, dtype=np.int64)
    first_run = int(runs[1]) if len(runs) > 1 else n
    if context_rows > first_run:
        raise invalid(
            "context_rows",
            f"context rows must all be the first key's (its {first_run} rows), got {context_rows}",
        )
    try:
        check_order(arrays[spec.timestamp_field], runs)
    except ValueError as ex:
        raise invalid(f"arrow_ipc.{spec.timestamp_field}", str(ex), Reason.BAD_VALUES) from None
    out: dict[str, RowResults] = {}
    for name, w in wins.items():
        try:
            got = run_results(w.built.monoid, w.built.policy, dict(arrays), runs, skip=context_rows)
        except (TypeError, ValueError, KeyError) as ex:
            raise invalid(
                "arrow_ipc", f"window {name!r} refused the rows: {clip(str(ex))}", Reason.BAD_VALUES
            ) from None
        if got.rows is not None and got.rows.num_rows and not w._fits(got.rows):
            raise ServiceError(
                "FAILED_PRECONDITION",
                Reason.NOT_COLUMNAR,
                f"window {name!r}: an INT64 sum over these rows ({n} of them) may pass what "
                "int64 holds along the way, which only the row-by-row engine answers exactly; "
                "send fewer rows per call, or append them to a stream with PER_ROW results",
                metadata={"stream": stream, "window": name},
            )
        out[name] = w.row_results_from(got.rows, got.sizes)
    return out


def _reads(w: HostedWindow) -> set[str]:
    from ..engine.columnar.kernels import kernel_for
    from ..engine.monoids import Record

    m = w.built.monoid
    fields = m.monoids if isinstance(m, Record) else (m,)
    return {c for f in fields for c in kernel_for(f).reads}  # type: ignore[union-attr]


def _column(table: Any, name: str, kind: str, nan_ok: bool) -> Any:
    """Column ``name`` as a numpy array, checked against the stream's type ``kind``."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if name not in table.column_names:
        raise _mismatch(
            f"arrow_ipc.{name}",
            f"missing column {name!r} ({kind or 'read by a window'}); the rows have "
            f"{table.column_names[:20]}",
        )
    col = table.column(name)
    t = col.type
    if col.null_count:
        i = int(np.argmax(col.is_null().to_numpy(zero_copy_only=False)))
        raise invalid(
            f"arrow_ipc.{name}[{i}]",
            f"has {col.null_count} nulls (the first at row {i}); expected none",
            Reason.BAD_VALUES,
        )
    ok = {
        FieldType.DOUBLE.value: pa.types.is_floating(t) or pa.types.is_integer(t),
        FieldType.INT64.value: pa.types.is_integer(t),
        FieldType.TIMESTAMP.value: pa.types.is_timestamp(t) or pa.types.is_int64(t),
        FieldType.STRING.value: pa.types.is_string(t) or pa.types.is_large_string(t),
        FieldType.BOOL.value: pa.types.is_boolean(t),
    }.get(kind, False)
    if not ok:
        raise _mismatch(f"arrow_ipc.{name}", f"expected {kind}, got Arrow type {t}")
    if pa.types.is_timestamp(t):
        col = pc.cast(col, pa.timestamp("ns", tz=t.tz), safe=True).cast(pa.int64())
    if kind == FieldType.DOUBLE.value:
        col = col.cast(pa.float64())
    arr = col.to_numpy(zero_copy_only=False) if isinstance(col, pa.ChunkedArray) else col
    if kind == FieldType.DOUBLE.value and not nan_ok:
        bad = ~np.isfinite(arr)
        if bad.any():
            i = int(np.argmax(bad))
            raise invalid(
                f"arrow_ipc.{name}[{i}]",
                f"expected a finite number (the field does not allow NaN), got {arr[i]}",
                Reason.BAD_VALUES,
            )
    return arr


def _runs(table: Any, key_column: str) -> Any:
    """The first row of each key's run; refused when a key's rows are apart."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if key_column not in table.column_names:
        raise _mismatch(
            f"arrow_ipc.{key_column}",
            f"missing key column {key_column!r}; the rows have {table.column_names[:20]}",
        )
    col = table.column(key_column).combine_chunks()
    if pa.types.is_dictionary(col.type):  # a pandas category, an Arrow dictionary: the values
        col = col.dictionary_decode()
    n = len(col)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    if col.null_count:
        i = int(np.argmax(col.is_null().to_numpy(zero_copy_only=False)))
        raise invalid(
            f"arrow_ipc.{key_column}[{i}]", "a key is null; expected a value", Reason.BAD_VALUES
        )
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        # as a keyed stream's keys: at least one character, at most MAX_KEY_BYTES of UTF-8
        size = pc.binary_length(col).to_numpy(zero_copy_only=False)
        bad = (size == 0) | (size > MAX_KEY_BYTES)
        if bad.any():
            i = int(np.argmax(bad))
            what = key_refusal(col[i].as_py(), False)  # the keyed stream's words for it
            assert what is not None
            raise invalid(f"arrow_ipc.{key_column}[{i}]", what, Reason.BAD_VALUES)
    change = pc.not_equal(col[1:], col[:-1]).to_numpy(zero_copy_only=False)
    runs = np.concatenate([[0], np.flatnonzero(change) + 1]).astype(np.int64)
    distinct = pc.count_distinct(col).as_py()
    if distinct != len(runs):
        codes = pc.dictionary_encode(col).indices.to_numpy(zero_copy_only=False)[runs]
        seen: dict[int, int] = {}
        for r, c in zip(runs.tolist(), codes.tolist(), strict=True):
            if c in seen:
                key = col[r].as_py()
                raise invalid(
                    f"arrow_ipc.{key_column}[{r}]",
                    f"key {show(key)} has rows apart (rows {seen[c]} and {r}, others "
                    "between them); send each key's rows together, in timestamp order",
                    Reason.BAD_VALUES,
                )
            seen[c] = r
    return runs


def _mismatch(field: str, what: str) -> ServiceError:
    return invalid(field, what, Reason.SCHEMA_MISMATCH)
