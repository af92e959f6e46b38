"""Protobuf <-> Python: specs, values, columns and results (shared by the server and the SDK)."""

from __future__ import annotations

import contextlib
import decimal
import math
import numbers
import re
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from google.protobuf.duration_pb2 import Duration

from . import windows_pb2 as pb
from .types import (
    ALGORITHMS,
    TS_UNITS,
    Aggregation,
    AppendResult,
    Field,
    FieldType,
    KeyInfo,
    OutputSpec,
    Policy,
    SpecError,
    Storage,
    StreamInfo,
    StreamSpec,
    WindowInfo,
    WindowResult,
    WindowSpec,
    show,
)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


# --------------------------------------------------------------------------- time


_ISO = re.compile(r"^(.*T\d\d:\d\d(?::\d\d)?)(?:[.,](\d{1,9}))?(Z|[+-]\d\d:?\d\d)?$", re.I)


def to_nanos(value: Any) -> int:
    """A timestamp as int nanoseconds since the epoch. Ints pass; ``datetime`` (naive = UTC;
    a pandas ``Timestamp`` to its nanosecond), ``numpy.datetime64`` and RFC 3339 / ISO 8601
    text (``"2026-01-01T12:00:00Z"``, up to nanoseconds; no offset = UTC) convert. A float is
    refused: its unit and precision are a guess (TypeError saying what to send)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, datetime):
        nanos = getattr(value, "nanosecond", 0)  # pandas.Timestamp: below the microsecond
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        d: timedelta = value - _EPOCH
        return (d.days * 86_400 + d.seconds) * 1_000_000_000 + d.microseconds * 1_000 + nanos
    if isinstance(value, str):
        return _iso_nanos(value)
    kind = type(value).__name__
    if kind == "datetime64":  # numpy's, of any unit (NaT refused)
        import numpy as np

        if np.isnat(value):
            msg = "expected a timestamp, got numpy.datetime64('NaT')"
            raise TypeError(msg)
        return int(value.astype("datetime64[ns]").astype("int64"))
    if hasattr(value, "__index__") and not isinstance(value, bool | float):  # numpy ints
        return int(value.__index__())
    hint = (
        ": a float's unit and precision are a guess; send int nanoseconds since the epoch, a "
        "datetime or RFC 3339 text"
        if isinstance(value, float)
        else ""
    )
    msg = (
        "expected a timestamp (int nanoseconds since the epoch, datetime, numpy.datetime64 or "
        f"RFC 3339 text), got {type(value).__name__} {value!r}{hint}"
    )
    raise TypeError(msg)


def rfc3339(ns: int) -> str:
    """``ns`` (nanoseconds since the epoch) as RFC 3339 text in UTC, to the nanosecond where
    it has one (``2026-01-01T12:00:00Z``, ``2026-01-01T12:00:00.000000001Z``); past
    ``datetime``'s years, the number."""
    seconds, frac = divmod(int(ns), 1_000_000_000)
    try:
        base = datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    except (OverflowError, OSError, ValueError):
        return str(ns)
    if frac:
        return f"{base}.{f'{frac:09d}'.rstrip('0')}Z"
    return f"{base}Z"


def timestamp_text(ns: int, spec: StreamSpec) -> str:
    """A row's timestamp in a message, as its stream's users wrote it: RFC 3339 text for a
    wall-clock stream (``2026-01-01T12:00:00Z``), else the plain number in the stream's
    ``ts_unit`` (sequence numbers read back as given)."""
    if spec.wall_clock:
        return rfc3339(ns)
    scale = TS_UNITS[spec.ts_unit]
    whole, part = divmod(int(ns), scale)
    return str(whole) if not part else repr(ns / scale)


def _iso_nanos(text: str) -> int:
    """RFC 3339 / ISO 8601 text as int nanoseconds (fractions to the nanosecond; no offset
    means UTC)."""
    m = _ISO.match(text.strip())
    if m is None:
        msg = f"expected RFC 3339 text such as '2026-01-01T12:00:00Z', got {text!r}"
        raise TypeError(msg)
    base, frac, zone = m.groups()
    try:
        when = datetime.fromisoformat(base + ("+00:00" if zone in (None, "Z", "z") else zone))
    except ValueError:
        msg = f"expected RFC 3339 text such as '2026-01-01T12:00:00Z', got {text!r}"
        raise TypeError(msg) from None
    return to_nanos(when) + int((frac or "0").ljust(9, "0"))


def duration_to_proto(td: timedelta) -> Duration:
    d = Duration()
    d.FromTimedelta(td)
    return d


# the longest Duration a timedelta holds (999,999,999 days); the server's creation checks
# bound new definitions far lower (MAX_DURATION), stored ones must keep loading
_DURATION_SECONDS = timedelta.max.days * 86_400


def duration_from_proto(d: Duration, field: str = "duration") -> timedelta:
    """A Duration as a timedelta; SpecError (naming ``field``) for one that is not a valid
    Duration (seconds and nanos of different signs, nanos out of range), one no timedelta
    holds (beyond 999,999,999 days), or one finer than a microsecond (a timedelta would
    silently drop the rest)."""
    s, n = d.seconds, d.nanos
    if abs(s) > _DURATION_SECONDS or abs(n) >= 1_000_000_000 or (s < 0 < n) or (n < 0 < s):
        msg = f"expected a valid Duration (seconds and nanos of one sign), got {s}s {n}ns"
        raise SpecError(field, msg)
    if n % 1000:
        msg = f"expected a whole number of microseconds, got {s}s {n}ns"
        raise SpecError(field, msg)
    return d.ToTimedelta()  # type: ignore[no-any-return]


@contextlib.contextmanager
def _at(prefix: str) -> Iterator[None]:
    """SpecErrors raised inside get ``prefix`` in front of their field path."""
    try:
        yield
    except SpecError as ex:
        raise ex.under(prefix) from None


def _enum_from_proto(field: str, value: int, names: Mapping[int, str], enum: str) -> str:
    """A wire enum number as its name in the SDK; an unknown number is a SpecError."""
    name = names.get(value)
    if name is None:
        allowed = [f"{k} ({v})" for k, v in names.items()]
        msg = f"expected one of {allowed} for {enum}, got {show(value)}"
        raise SpecError(field, msg, reason="UNKNOWN_ENUM_VALUE")
    return name


# --------------------------------------------------------------------------- specs

# Every enum both ways. UNSPECIFIED (0) reads as the default the proto documents where it has
# one (late policy REJECT, algorithm AMTA, storage REDIS); any other number is refused (proto3
# enums are open: an unknown number arrives as it was sent).
_FIELD_TYPES = {t.value: pb.FieldType.Value(t.value) for t in FieldType}
_FIELD_TYPE_NAMES: dict[int, str] = {v: k for k, v in _FIELD_TYPES.items()}
_LATE = {"REJECT": pb.REJECT, "DROP": pb.DROP}
_LATE_NAMES: dict[int, str] = {
    pb.LATE_POLICY_UNSPECIFIED: "REJECT",
    pb.REJECT: "REJECT",
    pb.DROP: "DROP",
}
_ALGORITHMS = {name: pb.Algorithm.Value(name) for name in ALGORITHMS}
_ALGORITHM_NAMES: dict[int, str] = {
    pb.ALGORITHM_UNSPECIFIED: "AMTA",
    **{number: name for name, number in _ALGORITHMS.items()},
}
_STORAGE = {"memory": pb.MEMORY, "redis": pb.REDIS}
_STORAGE_NAMES: dict[int, str] = {
    pb.STORAGE_KIND_UNSPECIFIED: "redis",
    pb.MEMORY: "memory",
    pb.REDIS: "redis",
}


def _to_wire(field: str, name: str, table: Mapping[str, Any]) -> Any:
    value = table.get(str(name))
    if value is None:  # the dataclasses refuse these first; never sent as UNSPECIFIED
        msg = f"expected one of {list(table)}, got {show(name)}"
        raise SpecError(field, msg, reason="UNKNOWN_ENUM_VALUE")
    return value


def stream_spec_to_proto(s: StreamSpec) -> pb.StreamSpec:
    return pb.StreamSpec(
        name=s.name,
        timestamp_field=s.timestamp_field,
        fields=[
            pb.FieldSpec(
                name=f.name,
                type=_to_wire(f"fields[{i}].type", str(f.type), _FIELD_TYPES),
                allow_nan=f.allow_nan,
            )
            for i, f in enumerate(s.fields)
        ],
        late_policy=_to_wire("late_policy", s.late_policy.upper(), _LATE),
        allowed_lateness=duration_to_proto(s.allowed_lateness),
        key=s.key,
        key_groups=s.key_groups,
        key_ttl=duration_to_proto(s.key_ttl),
        ts_unit="" if s.ts_unit == "ns" else s.ts_unit,
        not_wall_clock=not s.wall_clock,
    )


def field_type_name(value: int) -> str:
    """A FieldType number as its name (responses: ``str(value)`` for a number unknown here)."""
    return pb.FieldType.Name(value) if value in pb.FieldType.values() else str(value)


def stream_spec_from_proto(m: pb.StreamSpec) -> StreamSpec:
    """Raises SpecError (field path inside the spec) for an unknown enum number, an unset
    field type or an invalid duration, and for whatever the dataclasses refuse."""
    fields = []
    for i, f in enumerate(m.fields):
        type_name = _enum_from_proto(f"fields[{i}].type", f.type, _FIELD_TYPE_NAMES, "FieldType")
        with _at(f"fields[{i}]"):
            fields.append(Field(f.name, type_name, f.allow_nan))
    late = _enum_from_proto("late_policy", m.late_policy, _LATE_NAMES, "LatePolicy")
    lateness = duration_from_proto(m.allowed_lateness, "allowed_lateness")
    ttl = duration_from_proto(m.key_ttl, "key_ttl")
    return StreamSpec(
        name=m.name,
        fields=tuple(fields),
        timestamp_field=m.timestamp_field,
        late_policy=late,
        allowed_lateness=lateness,
        key=m.key,
        key_groups=m.key_groups,
        key_ttl=ttl,
        ts_unit=m.ts_unit or "ns",
        wall_clock=not m.not_wall_clock,
    )


def policy_to_proto(p: Policy) -> pb.SlidePolicy:
    if p.kind == "count":
        return pb.SlidePolicy(count=pb.CountPolicy(size=p.size))
    if p.kind == "time_range":
        return pb.SlidePolicy(time_range=pb.TimeRangePolicy(range=duration_to_proto(p.range)))
    if p.kind == "bounded_sum":
        return pb.SlidePolicy(bounded_sum=pb.BoundedSumPolicy(field=p.field, bound=p.bound))
    if p.kind == "max_sub_window":
        return pb.SlidePolicy(
            max_sub_window=pb.MaxSubWindowPolicy(field=p.field, max_size=p.max_size)
        )
    if p.kind == "expression":
        return pb.SlidePolicy(expression=pb.ExpressionPolicy(cel=p.cel))
    msg = f"unknown policy kind {p.kind!r}"
    raise ValueError(msg)


def policy_from_proto(m: pb.SlidePolicy) -> Policy:
    """The policy as the constructor takes it (not the class methods: a definition stored by
    an older server, such as a count of 0 rows, must keep loading; the server checks new
    definitions itself). SpecError with the path under ``policy``."""
    kind = m.WhichOneof("kind") or ""
    with _at(f"policy.{kind}" if kind else "policy"):
        if kind == "count":
            return Policy("count", size=m.count.size)
        if kind == "time_range":
            return Policy("time_range", range=duration_from_proto(m.time_range.range, "range"))
        if kind == "bounded_sum":
            return Policy("bounded_sum", field=m.bounded_sum.field, bound=m.bounded_sum.bound)
        if kind == "max_sub_window":
            p = m.max_sub_window
            return Policy("max_sub_window", field=p.field, max_size=p.max_size)
        if kind == "expression":
            return Policy("expression", cel=m.expression.cel)
    msg = "expected one of count, time_range, bounded_sum, max_sub_window, expression; got none"
    field = "policy"
    raise SpecError(field, msg)


def window_spec_to_proto(w: WindowSpec) -> pb.WindowSpec:
    return pb.WindowSpec(
        stream=w.stream,
        name=w.name,
        algorithm=_to_wire("algorithm", w.algorithm.upper(), _ALGORITHMS),
        aggregations=[
            pb.Aggregation(name=a.name, monoid=a.monoid, field=a.field, params=dict(a.params))
            for a in w.aggregations
        ],
        policy=policy_to_proto(w.policy),
        storage=pb.Storage(
            kind=_to_wire("storage.kind", w.storage.kind.lower(), _STORAGE),
            durable=w.storage.durable,
            block_size=w.storage.block_size,
            cache_size=w.storage.cache_size,
        ),
        slide=duration_to_proto(w.slide) if isinstance(w.slide, timedelta) else None,
        slide_rows=w.slide if isinstance(w.slide, int) else 0,
    )


def window_spec_from_proto(m: pb.WindowSpec) -> WindowSpec:
    """Raises SpecError (field path inside the spec) for an unknown algorithm or storage kind,
    a missing policy, an invalid duration, and whatever the dataclasses refuse."""
    algorithm = _enum_from_proto("algorithm", m.algorithm, _ALGORITHM_NAMES, "Algorithm")
    kind = _enum_from_proto("storage.kind", m.storage.kind, _STORAGE_NAMES, "StorageKind")
    aggregations = []
    for i, a in enumerate(m.aggregations):
        with _at(f"aggregations[{i}]"):
            aggregations.append(Aggregation(a.name, a.monoid, a.field, dict(a.params)))
    policy = policy_from_proto(m.policy)
    st = m.storage
    with _at("storage"):
        storage = Storage(kind, st.durable, st.block_size, st.cache_size)
    slide: timedelta | int | None = None
    if m.HasField("slide"):
        if m.slide_rows:
            field, msg = "slide", "expected slide or slide_rows, got both"
            raise SpecError(field, msg)
        slide = duration_from_proto(m.slide, "slide")
    elif m.slide_rows:
        slide = m.slide_rows
    return WindowSpec(
        stream=m.stream,
        name=m.name,
        aggregations=tuple(aggregations),
        policy=policy,
        algorithm=algorithm,
        storage=storage,
        slide=slide,
    )


_STREAM_COUNTERS = (
    "rows_appended",
    "rows_late",
    "batches_appended",
    "batches_duplicate",
    "newest_timestamp",
    "rows_buffered",
    "keys",
    "keys_expired",
)


def stream_info_from_proto(m: pb.StreamInfo) -> StreamInfo:
    counters = {k: getattr(m, k) for k in _STREAM_COUNTERS}
    return StreamInfo(spec=stream_spec_from_proto(m.spec), windows=list(m.windows), **counters)


def stream_info_to_proto(i: StreamInfo) -> pb.StreamInfo:
    counters = {k: getattr(i, k) for k in _STREAM_COUNTERS}
    return pb.StreamInfo(spec=stream_spec_to_proto(i.spec), windows=i.windows, **counters)


_STAT_FIELDS = tuple(f.name for f in pb.WindowStats.DESCRIPTOR.fields)


def window_info_to_proto(i: WindowInfo) -> pb.WindowInfo:
    return pb.WindowInfo(
        spec=window_spec_to_proto(i.spec),
        stats=pb.WindowStats(**{k: int(v) for k, v in i.stats.items() if k in _STAT_FIELDS}),
        outputs=[
            pb.OutputSpec(
                name=o.name,
                type=_FIELD_TYPES.get(o.type, 0),
                parts=[
                    pb.FieldSpec(name=p.name, type=_FIELD_TYPES.get(str(p.type), 0))
                    for p in o.parts
                ],
            )
            for o in i.outputs
        ],
        path=i.path,
        storage=i.storage,
        plan=i.plan,
    )


_OUTPUT_TYPE_NAMES: dict[int, str] = {pb.FIELD_TYPE_UNSPECIFIED: "ANY", **_FIELD_TYPE_NAMES}


def window_info_from_proto(m: pb.WindowInfo) -> WindowInfo:
    outputs = []
    for i, o in enumerate(m.outputs):
        parts = tuple(
            Field(p.name, _enum_from_proto(f"outputs[{i}].parts[{j}].type", p.type,
                                           _FIELD_TYPE_NAMES, "FieldType"))
            for j, p in enumerate(o.parts)
        )  # fmt: skip
        type_name = (
            "STRUCT"
            if parts
            else _enum_from_proto(f"outputs[{i}].type", o.type, _OUTPUT_TYPE_NAMES, "FieldType")
        )
        outputs.append(OutputSpec(o.name, type_name, parts))
    return WindowInfo(
        spec=window_spec_from_proto(m.spec),
        stats={k: getattr(m.stats, k) for k in _STAT_FIELDS},
        outputs=outputs,
        path=m.path,
        storage=m.storage,
        plan=m.plan,
    )


# --------------------------------------------------------------------------- values


def value_to_proto(v: Any, type_name: str = "") -> pb.Value:
    """A Python value as a Value; ``type_name`` TIMESTAMP marks ints as timestamps."""
    if v is None:
        return pb.Value(null=True)
    if isinstance(v, bool):
        return pb.Value(bool_value=v)
    if isinstance(v, int):
        if type_name == "TIMESTAMP":
            return pb.Value(timestamp_value=v)
        if -(2**63) <= v < 2**63:
            return pb.Value(int_value=v)
        return pb.Value(double_value=float(v))
    if isinstance(v, float):
        return pb.Value(double_value=v)
    if isinstance(v, str):
        return pb.Value(string_value=v)
    if isinstance(v, Mapping):
        return pb.Value(
            struct_value=pb.Struct(fields={str(k): value_to_proto(x) for k, x in v.items()})
        )
    if isinstance(v, Sequence | set | frozenset):
        return pb.Value(list_value=pb.ValueList(values=[value_to_proto(x) for x in v]))
    if isinstance(v, numbers.Integral):  # numpy's ints, ...
        return value_to_proto(int(v), type_name)
    if isinstance(v, numbers.Real):  # Decimal is no Real; Fraction, numpy's floats are
        return pb.Value(double_value=float(v))
    # never a repr: it may hold what is not the caller's to see (an address, a secret)
    msg = (
        f"a value of type {type(v).__name__} has no wire form: expected None, bool, int, "
        "float, str, a mapping or a sequence of those"
    )
    raise TypeError(msg)


def value_from_proto(m: pb.Value) -> Any:
    kind = m.WhichOneof("kind")
    if kind is None or kind == "null":
        return None
    if kind == "struct_value":
        return {k: value_from_proto(x) for k, x in m.struct_value.fields.items()}
    if kind == "list_value":
        return [value_from_proto(x) for x in m.list_value.values]
    return getattr(m, kind)


def result_to_proto(r: WindowResult, types: Mapping[str, str]) -> pb.WindowResult:
    values = {}
    for name, v in r.values.items():
        t = types.get(name, "")
        if isinstance(v, dict) and t.startswith("STRUCT"):
            parts = dict(
                (p.split("=")[0], p.split("=")[1]) for p in t[len("STRUCT:") :].split(",") if p
            )
            values[name] = pb.Value(
                struct_value=pb.Struct(
                    fields={k: value_to_proto(x, parts.get(k, "")) for k, x in v.items()}
                )
            )
        else:
            values[name] = value_to_proto(v, t)
    return pb.WindowResult(
        window=r.window,
        values=values,
        size=r.size,
        evicted=r.evicted,
        sequence=r.sequence,
        timestamp=r.timestamp,
        key=r.key,
        boundary=r.boundary,
    )


def result_from_proto(m: pb.WindowResult) -> WindowResult:
    return WindowResult(
        window=m.window,
        # a protobuf map has no order: by name, so that the same result prints the same
        values={k: value_from_proto(m.values[k]) for k in sorted(m.values)},
        size=m.size,
        evicted=m.evicted,
        sequence=m.sequence,
        timestamp=m.timestamp,
        key=m.key,
        boundary=m.boundary,
    )


def key_info_to_proto(k: KeyInfo, types: Mapping[str, Mapping[str, str]]) -> pb.KeyInfo:
    """``types``: each window's output types (for its result's values)."""
    return pb.KeyInfo(
        key=k.key,
        group=k.group,
        rows_appended=k.rows_appended,
        rows_late=k.rows_late,
        newest_timestamp=k.newest_timestamp,
        last_append_ms=k.last_append_ms,
        results=[result_to_proto(r, types.get(w, {})) for w, r in k.results.items()],
    )


def key_info_from_proto(m: pb.KeyInfo) -> KeyInfo:
    return KeyInfo(
        key=m.key,
        group=m.group,
        rows_appended=m.rows_appended,
        rows_late=m.rows_late,
        newest_timestamp=m.newest_timestamp,
        last_append_ms=m.last_append_ms,
        results={r.window: result_from_proto(r) for r in m.results},
    )


# --------------------------------------------------------------------------- ints as doubles

# A DOUBLE field takes ints only where a double holds them exactly (windows.proto, Column): an
# int it would round (2**53 + 1 becomes 2**53) is refused, never silently widened.
MAX_EXACT_INT = 2**53  # every int within +-2**53 is exactly a double; past it, only some are


def is_exact_double(v: int) -> bool:
    """Whether converting ``v`` to a double gives ``v`` itself (no rounding, no overflow)."""
    if -MAX_EXACT_INT <= v <= MAX_EXACT_INT:
        return True
    try:
        return float(v) == v  # an int and a float compare exactly in Python
    except OverflowError:
        return False


def first_inexact_int(values: Sequence[Any]) -> int | None:
    """Index of the first int (bools are no ints here) of ``values`` that no double holds
    exactly, or None: what a DOUBLE field refuses. One C loop each for ``min`` and ``max``
    proves the common case (every value within +-2**53)."""
    try:
        if min(values, default=0) >= -MAX_EXACT_INT and max(values, default=0) <= MAX_EXACT_INT:
            return None
    except (TypeError, ArithmeticError):  # not all plain numbers: each one is looked at
        pass
    for i, v in enumerate(values):
        if isinstance(v, bool | float):
            continue
        if isinstance(v, numbers.Integral) and not is_exact_double(int(v)):
            return i
        # a whole Decimal or Fraction is an int written another way: exact or refused (a
        # fractional one rounds to the nearest double, as any decimal text does)
        whole = isinstance(v, decimal.Decimal | numbers.Rational) and _whole(v)
        if whole and not is_exact_double(int(v)):
            return i
    return None


def _whole(v: Any) -> bool:
    try:
        return bool(v == int(v))
    except (ValueError, OverflowError, ArithmeticError):  # NaN, infinities
        return False


def inexact_int_text(v: int) -> str:
    """What refusing ``v`` from a DOUBLE field says of it: the int (a very long one by its
    size) and the double it would have become."""
    v = int(v)
    shown = str(v) if v.bit_length() <= 256 else f"an int of {v.bit_length()} bits"
    try:
        nearest = f"it would round to {float(v)!r}"
    except OverflowError:
        nearest = "it is past the double range"
    return f"{shown}, which no double holds exactly ({nearest})"


# --------------------------------------------------------------------------- columns

COLUMN_KINDS = {
    "doubles": FieldType.DOUBLE,
    "ints": FieldType.INT64,
    "strings": FieldType.STRING,
    "bools": FieldType.BOOL,
    "timestamps": FieldType.TIMESTAMP,
}
_KIND_OF_TYPE = {v.value: k for k, v in COLUMN_KINDS.items()}


def column_to_proto(name: str, type_name: str, values: Sequence[Any]) -> pb.Column:
    """A typed column; ``None`` entries (results only) are marked in ``nulls``."""
    kind = _KIND_OF_TYPE.get(type_name)
    nulls = [v is None for v in values]
    has_null = any(nulls)
    if kind is None:
        return pb.Column(name=name, values=pb.ValueList(values=[value_to_proto(v) for v in values]))
    if has_null:
        fill: Any = {"doubles": math.nan, "strings": "", "bools": False}.get(kind, 0)
        values = [fill if v is None else v for v in values]
    col = pb.Column(name=name, nulls=nulls if has_null else ())
    packed = getattr(col, kind).values
    try:
        packed.extend(values)
    except (TypeError, ValueError):
        raise _bad_value(name, type_name, values) from None
    return col


def _bad_value(name: str, type_name: str, values: Sequence[Any]) -> TypeError:
    """The error for a column whose values protobuf refused: the column, the type it expected
    and the first value that does not fit (shown short)."""
    probe = getattr(pb.Column(), _KIND_OF_TYPE[type_name]).values
    for i, v in enumerate(values):
        try:
            probe.append(v)
        except (TypeError, ValueError):
            return TypeError(
                f"column {show(name)}: expected {type_name} values, got {type(v).__name__} "
                f"{show(v)} at row {i}"
            )
    return TypeError(f"column {show(name)}: expected {type_name} values")  # pragma: no cover


def column_from_proto(col: pb.Column) -> tuple[str, list[Any]]:
    """(type name, values) of a column; nulls become ``None``."""
    kind = col.WhichOneof("data")
    if kind is None:
        return "EMPTY", []
    if kind == "values":
        values = [value_from_proto(v) for v in col.values.values]
        type_name = "ANY"
    else:
        values = list(getattr(col, kind).values)
        type_name = COLUMN_KINDS[kind].value
    if col.nulls:
        values = [None if n else v for v, n in zip(values, col.nulls, strict=False)]
    return type_name, values


def arrow_table(payload: bytes) -> Any:
    """A ``pyarrow.Table`` from one Arrow IPC stream (``WindowRowResults.arrow_ipc``)."""
    import pyarrow as pa

    return pa.ipc.open_stream(pa.py_buffer(payload)).read_all()


def append_result_from_proto(m: pb.AppendResponse) -> AppendResult:
    out = AppendResult(
        rows_applied=m.rows_applied,
        rows_late=m.rows_late,
        rows_buffered=m.rows_buffered,
        duplicate=m.duplicate,
        results={r.window: result_from_proto(r) for r in m.results if not r.key},
        # a keyed stream's FINAL results: one per (window, key) the batch changed
        key_results=[result_from_proto(r) for r in m.results if r.key],
    )
    rows: dict[str, Mapping[str, Any]] = {}
    out.row_results = rows
    for rr in m.row_results:
        if rr.HasField("rows"):  # not every row applied: the request's row of each entry
            out.row_positions = list(rr.rows.values)
        if rr.arrow_ipc:  # AppendRequest.arrow_results
            out.row_tables[rr.window] = arrow_table(rr.arrow_ipc)
            continue
        cols = {c.name: column_from_proto(c)[1] for c in rr.columns}
        cols["__size"] = list(rr.sizes.values)
        rows[rr.window] = cols
    return out


def output_types(outputs: Sequence[OutputSpec]) -> dict[str, str]:
    """Output name -> type tag used by :func:`result_to_proto` (structs carry their parts)."""
    tags = {}
    for o in outputs:
        if o.parts:
            tags[o.name] = "STRUCT:" + ",".join(f"{p.name}={p.type}" for p in o.parts)
        else:
            tags[o.name] = str(o.type)
    return tags
