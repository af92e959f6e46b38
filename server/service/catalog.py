"""From a window's definition to an engine: the monoid catalog, output types and policies.

A window's aggregations become one :class:`Record`; each built-in slide policy adds the hidden
fields it reads (``__n``, ``__ts``, ...), so users name only what they want to see. Monoid
plugins are entry points in the group ``mtawindows.monoids``: ``factory(field, params) ->
monoid``, where ``field`` is ``None`` when empty and ``params`` a ``dict[str, str]``; the monoid
may carry an ``output_type`` (a FieldType name) for typed result columns.
"""

from __future__ import annotations

import itertools
import operator
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

from mtawindows.v1.reasons import Reason
from mtawindows.v1.types import (
    Aggregation,
    FieldType,
    Policy,
    StreamSpec,
    WindowSpec,
    clip,
    show,
    show_names,
)

from ..engine.monoids import (
    ArgMax,
    ArgMin,
    Count,
    First,
    GeometricMean,
    Last,
    Max,
    MaxCount,
    Mean,
    Min,
    Monoid,
    Record,
    StdDev,
    Sum,
    Variance,
)
from ..engine.policies import (
    AnyOf,
    BoundedSumPolicy,
    CountPolicy,
    MaxSubWindowPolicy,
    TimeRangePolicy,
)
from ..storage.codecs import StructCodec
from .cel import CelError, CelField, CelPolicy

PLUGIN_GROUP = "mtawindows.monoids"
NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")
NUMERIC = (FieldType.DOUBLE, FieldType.INT64)
ORDERED = (FieldType.DOUBLE, FieldType.INT64, FieldType.TIMESTAMP)
_CEL_TYPES = {
    FieldType.DOUBLE: "double",
    FieldType.INT64: "int",
    FieldType.STRING: "string",
    FieldType.BOOL: "bool",
    FieldType.TIMESTAMP: "timestamp",
}


class DefinitionError(ValueError):
    """A stream or window definition that cannot be built; ``field`` names the culprit."""

    def __init__(
        self,
        field: str,
        message: str,
        *,
        reason: str = Reason.INVALID_DEFINITION,
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.description = message
        self.reason = reason
        self.metadata = dict(metadata or {})


def _pair(r: Any) -> tuple[Any, Any]:
    return (r[0], r[1])


@dataclass(frozen=True)
class Output:
    """One visible output: its name, type (a FieldType value or "STRUCT"), struct parts and
    how to turn the lowered value into plain parts."""

    name: str
    type: str
    parts: tuple[tuple[str, str], ...] = ()  # (part name, FieldType value)
    split: Callable[[Any], tuple[Any, ...]] | None = None  # lowered value -> parts
    nullable_when_empty: bool = True


@dataclass
class Built:
    """What a window definition compiles to."""

    monoid: Record
    policy: Any
    outputs: list[Output]
    hidden: tuple[str, ...]
    # insert-all-then-enforce-once equals row by row (count and time range over a stream whose
    # timestamps never go backwards); other policies are enforced after every row
    batch_safe: bool = False


def plugin_names() -> list[str]:
    return sorted(ep.name for ep in entry_points(group=PLUGIN_GROUP))


def _load_plugin(name: str) -> Callable[..., Monoid] | None:
    for ep in entry_points(group=PLUGIN_GROUP):
        if ep.name == name:
            return ep.load()  # type: ignore[no-any-return]
    return None


def field_types(stream: StreamSpec) -> dict[str, FieldType]:
    types = {f.name: FieldType(f.type) for f in stream.fields}
    types[stream.timestamp_field] = FieldType.TIMESTAMP
    return types


def _need_field(
    where: str, agg: Aggregation, types: Mapping[str, FieldType], allowed: tuple[FieldType, ...]
) -> FieldType:
    if not agg.field:
        raise DefinitionError(f"{where}.field", f"{show(agg.monoid)} needs a field, got none")
    t = types.get(agg.field)
    if t is None:
        raise DefinitionError(
            f"{where}.field",
            f"the stream has no field {show(agg.field)}; its fields are {show_names(sorted(types))}",
            reason=Reason.UNKNOWN_FIELD,
        )
    if t not in allowed:
        names = "/".join(a.value for a in allowed)
        raise DefinitionError(
            f"{where}.field",
            f"{show(agg.monoid)} needs a {names} field, {show(agg.field)} is {t.value}",
        )
    return t


def _params(where: str, agg: Aggregation, allowed: tuple[str, ...]) -> None:
    extra = sorted(set(agg.params) - set(allowed))
    if extra:
        expected = f"only {list(allowed)}" if allowed else "none"
        raise DefinitionError(
            f"{where}.params",
            f"{show(agg.monoid)} takes {expected} as params, got {show_names(extra)}",
        )


def build_aggregation(
    where: str, agg: Aggregation, types: Mapping[str, FieldType]
) -> tuple[Monoid, Output]:
    """One aggregation -> (monoid, output description): a built-in, else a plugin."""
    build = _BUILDERS.get(agg.monoid.lower())
    if build is None:
        return _plugin(where, agg, types)
    return build(where, agg, types)


# the built-in aggregations: each checks its params and field, then builds (monoid, output)
Builder = Callable[[str, Aggregation, Mapping[str, FieldType]], tuple[Monoid, Output]]


def _count(where: str, agg: Aggregation, types: Mapping[str, FieldType]) -> tuple[Monoid, Output]:
    _params(where, agg, ())
    if agg.field:
        raise DefinitionError(f"{where}.field", "count reads no field; leave it empty")
    return Count(), Output(agg.name, FieldType.INT64, nullable_when_empty=False)


def _sum(where: str, agg: Aggregation, types: Mapping[str, FieldType]) -> tuple[Monoid, Output]:
    _params(where, agg, ())
    t = _need_field(where, agg, types, NUMERIC)
    return Sum(agg.field), Output(agg.name, t, nullable_when_empty=False)


def _extreme(where: str, agg: Aggregation, types: Mapping[str, FieldType]) -> tuple[Monoid, Output]:
    """min, max, first, last: the field's own type."""
    kind = agg.monoid.lower()
    _params(where, agg, ())
    t = _need_field(where, agg, types, tuple(FieldType) if kind in ("first", "last") else ORDERED)
    cls = {"min": Min, "max": Max, "first": First, "last": Last}[kind]
    return cls(agg.field), Output(agg.name, t)


def _mean(where: str, agg: Aggregation, types: Mapping[str, FieldType]) -> tuple[Monoid, Output]:
    """mean, geomean: a DOUBLE."""
    _params(where, agg, ())
    _need_field(where, agg, types, NUMERIC)
    m = Mean(agg.field) if agg.monoid.lower() == "mean" else GeometricMean(agg.field)
    return m, Output(agg.name, FieldType.DOUBLE)


def _spread(where: str, agg: Aggregation, types: Mapping[str, FieldType]) -> tuple[Monoid, Output]:
    """variance, stddev: a DOUBLE; params ddof 0 (population, default) or 1 (sample)."""
    _params(where, agg, ("ddof",))
    _need_field(where, agg, types, NUMERIC)
    ddof_text = agg.params.get("ddof", "0")
    if ddof_text not in ("0", "1"):
        raise DefinitionError(f"{where}.params.ddof", f"expected 0 or 1, got {show(ddof_text)}")
    cls = Variance if agg.monoid.lower() == "variance" else StdDev
    return cls(agg.field, ddof=int(ddof_text)), Output(agg.name, FieldType.DOUBLE)


def _arg(where: str, agg: Aggregation, types: Mapping[str, FieldType]) -> tuple[Monoid, Output]:
    """argmax, argmin: a struct of the extreme value and the ``key`` field's value beside it."""
    kind = agg.monoid.lower()
    _params(where, agg, ("key",))
    t = _need_field(where, agg, types, ORDERED)
    key = agg.params.get("key", "")
    if key not in types:
        raise DefinitionError(
            f"{where}.params.key",
            f"{kind} needs params key = the field whose value to report, one of "
            f"{show_names(sorted(types))}; got {show(key)}",
        )
    arg: Monoid = (ArgMax if kind == "argmax" else ArgMin)(value=agg.field, key=key)
    parts = (("value", t.value), ("key", types[key].value))
    return arg, Output(agg.name, "STRUCT", parts, split=_pair)


def _maxcount(
    where: str, agg: Aggregation, types: Mapping[str, FieldType]
) -> tuple[Monoid, Output]:
    """maxcount: a struct of the maximum and how many rows hold it."""
    _params(where, agg, ())
    t = _need_field(where, agg, types, ORDERED)
    parts = (("max", t.value), ("count", FieldType.INT64.value))
    return MaxCount(agg.field), Output(agg.name, "STRUCT", parts, split=_pair)


def _plugin(where: str, agg: Aggregation, types: Mapping[str, FieldType]) -> tuple[Monoid, Output]:
    """A monoid of an entry point; its ``output_type`` (if a FieldType) types the column."""
    factory = _load_plugin(agg.monoid)
    if factory is None:
        raise DefinitionError(
            f"{where}.monoid",
            f"unknown monoid {show(agg.monoid)}; built-in: {list(BUILTINS)}, plugins: "
            f"{show_names(plugin_names())}",
            reason=Reason.UNKNOWN_MONOID,
        )
    if agg.field and agg.field not in types:
        raise DefinitionError(
            f"{where}.field",
            f"the stream has no field {show(agg.field)}",
            reason=Reason.UNKNOWN_FIELD,
        )
    try:
        plugin: Monoid = factory(agg.field or None, dict(agg.params))
    except (TypeError, ValueError) as ex:
        raise DefinitionError(
            f"{where}", f"plugin {show(agg.monoid)} refused: {clip(str(ex))}"
        ) from None
    # a declared FieldType (any case) types the result column; anything else stays untyped
    declared = str(getattr(plugin, "output_type", None) or "").upper()
    out_type = declared if declared in FieldType.__members__ else "ANY"
    return plugin, Output(agg.name, out_type)


_BUILDERS: dict[str, Builder] = {
    "count": _count,
    "sum": _sum,
    "min": _extreme,
    "max": _extreme,
    "mean": _mean,
    "variance": _spread,
    "stddev": _spread,
    "geomean": _mean,
    "first": _extreme,
    "last": _extreme,
    "argmax": _arg,
    "argmin": _arg,
    "maxcount": _maxcount,
}
BUILTINS = tuple(_BUILDERS)


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
    if shape == "moments":
        return zip(itertools.repeat(1), map(float, cols[f]), itertools.repeat(0.0))
    if shape == "value-one":
        return zip(cols[f], itertools.repeat(1))
    return zip(cols[f], cols[key], strict=False)


def _cel_field(out: Output, index: int, monoid: Monoid) -> CelField:
    lower = None if isinstance(monoid, Count | Sum | Max | Min) else monoid.lower
    if out.type == "STRUCT":
        names = [p for p, _ in out.parts]
        return CelField(
            {p: _CEL_TYPES[FieldType(t)] for p, t in out.parts},
            index,
            lower,
            {p: operator.itemgetter(j) for j, p in enumerate(names)},
        )
    known = out.type in FieldType.__members__.values()
    cel_type = _CEL_TYPES.get(FieldType(out.type), "dyn") if known else "dyn"
    return CelField(cel_type, index, lower)


def build_window(stream: StreamSpec, spec: WindowSpec) -> Built:
    """Check ``spec`` against ``stream`` and compile it; raises DefinitionError."""
    if not NAME.match(spec.name or ""):
        raise DefinitionError(
            "spec.name", f"expected a name matching {NAME.pattern}, got {show(spec.name)}"
        )
    if spec.algorithm not in ("AMTA", "LMTA"):
        raise DefinitionError(
            "spec.algorithm",
            f"expected AMTA or LMTA, got {show(spec.algorithm)}",
            reason=Reason.UNKNOWN_ENUM_VALUE,
        )
    if not spec.aggregations:
        raise DefinitionError("spec.aggregations", "expected at least one aggregation, got none")
    types = field_types(stream)
    fields: dict[str, Monoid] = {}
    outputs: list[Output] = []
    for i, agg in enumerate(spec.aggregations):
        where = f"spec.aggregations[{i}]"
        if not NAME.match(agg.name or ""):
            raise DefinitionError(
                f"{where}.name",
                f"expected an output name matching {NAME.pattern}, got {show(agg.name)}",
            )
        if agg.name in fields:
            raise DefinitionError(f"{where}.name", f"output {show(agg.name)} is defined twice")
        m, out = build_aggregation(where, agg, types)
        fields[agg.name] = m
        outputs.append(out)
    visible = dict(fields)
    policy = _build_policy(spec.policy, types, fields, stream.timestamp_field)
    hidden = tuple(n for n in fields if n not in visible)
    record = Record(fields)
    if isinstance(policy, _Cel):
        cel_fields = {
            out.name: _cel_field(out, record.index(out.name), fields[out.name]) for out in outputs
        }
        try:
            policy = CelPolicy(policy.text, cel_fields)
        except CelError as ex:
            at: dict[str, str] = {"line": str(ex.line), "column": str(ex.column)} if ex.line else {}
            raise DefinitionError(
                "spec.policy.expression.cel", str(ex), reason=ex.code, metadata=ex.metadata | at
            ) from None
    batch_safe = spec.policy.kind in ("count", "time_range")
    layout = struct_layout(record, types)
    if layout is not None:
        record.codec = StructCodec(layout)  # type: ignore[attr-defined]
    return Built(record, policy, outputs, hidden, batch_safe)


def struct_layout(record: Record, types: Mapping[str, FieldType]) -> tuple[str, ...] | None:
    """Fixed-size record layout of the Redis tier from the column types: a DOUBLE column's
    aggregates are always floats ("d"), INT64/TIMESTAMP ones ints ("q"), so no value needs the
    int-or-float tag of the generic "n". ``None`` when a field is not fixed-size (strings,
    plugins, arg-monoids keyed by a string)."""
    letters = {FieldType.DOUBLE: "d", FieldType.INT64: "q", FieldType.TIMESTAMP: "q"}
    out: list[str] = []
    for m in record.monoids:
        kind = type(m)
        f = getattr(m, "field", None)
        ftype = types.get(f) if isinstance(f, str) else None
        t = letters.get(ftype) if ftype is not None else None
        if kind is Count:
            out.append("q")
        elif kind in (Sum, Max, Min, First, Last) and t is not None:
            out.append(t)
        elif kind is Mean and t is not None:
            out.append("qd")
        elif kind in (Variance, StdDev) and t is not None:
            out.append("qdd")
        elif kind is MaxCount and t is not None:
            out.append(t + "q")
        elif kind in (ArgMax, ArgMin) and t is not None:
            key = getattr(m, "key_field", None)
            ktype = types.get(key) if isinstance(key, str) else None
            kt = letters.get(ktype) if ktype is not None else None
            if kt is None:
                return None
            out.append(t + kt)
        else:
            return None
    return tuple(out)


@dataclass(frozen=True)
class _Cel:
    text: str


def _build_policy(
    p: Policy, types: Mapping[str, FieldType], fields: dict[str, Monoid], ts_field: str
) -> Any:
    where = "spec.policy"
    if p.kind == "count":
        if p.size < 0:
            raise DefinitionError(f"{where}.count.size", f"expected >= 0, got {p.size}")
        fields["__n"] = Count()
        return CountPolicy(p.size, field="__n")
    if p.kind == "time_range":
        ns = _duration_ns(p)
        if ns <= 0:
            raise DefinitionError(f"{where}.time_range.range", f"expected > 0, got {p.range}")
        fields["__ts"] = Max(ts_field)
        return TimeRangePolicy(ns, field="__ts")
    if p.kind == "bounded_sum":
        agg = Aggregation("__sum", "sum", p.field)
        _need_field(f"{where}.bounded_sum", agg, types, NUMERIC)
        # NaN and negative bounds never built (+inf did: new windows are refused it by the
        # service's creation checks, a stored one keeps loading)
        if p.bound != p.bound or p.bound < 0:
            raise DefinitionError(
                f"{where}.bounded_sum.bound", f"expected a finite number >= 0, got {p.bound!r}"
            )
        fields["__sum"] = Sum(p.field)
        fields["__last"] = Last(p.field)
        return BoundedSumPolicy(p.bound, sum_field="__sum", last_field="__last")
    if p.kind == "max_sub_window":
        agg = Aggregation("__max", "max", p.field)
        _need_field(f"{where}.max_sub_window", agg, types, ORDERED)
        if p.max_size < 0:
            raise DefinitionError(
                f"{where}.max_sub_window.max_size", f"expected >= 0, got {p.max_size}"
            )
        fields["__max"] = Max(p.field)
        sub = MaxSubWindowPolicy(field="__max")
        if p.max_size > 0:
            fields["__n"] = Count()
            return AnyOf(sub, CountPolicy(p.max_size, field="__n"))
        return sub
    if p.kind == "expression":
        return _Cel(p.cel)
    raise DefinitionError(
        where,
        "expected one of count, time_range, bounded_sum, max_sub_window, expression; "
        f"got {p.kind or 'none'}",
    )


def _duration_ns(p: Policy) -> int:
    r = p.range
    return int((r.days * 86_400 + r.seconds) * 1_000_000_000 + r.microseconds * 1_000)
