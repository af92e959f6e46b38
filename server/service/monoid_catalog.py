"""The monoid catalog: a window's aggregations (``Aggregation(name, monoid, field, params)``)
into monoids of the engine and their output columns, each built-in checking its field's type
and its params; a name that is no built-in is a plugin (:mod:`.plugins`). Also the fixed-size
record layout of the Redis tier that the column types allow (:func:`struct_layout`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from mtawindows.v1.reasons import Reason
from mtawindows.v1.types import Aggregation, FieldType, StreamSpec, clip, show, show_names

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
from ..engine.sketches import Distinct, Quantiles, TopK
from .compiled import DefinitionError, Output
from .plugins import load_plugin, plugin_names

__all__ = [
    "BUILTINS",
    "NUMERIC",
    "ORDERED",
    "build_aggregation",
    "field_types",
    "legacy_layout",
    "need_field",
    "struct_layout",
]

NUMERIC = (FieldType.DOUBLE, FieldType.INT64)
ORDERED = (FieldType.DOUBLE, FieldType.INT64, FieldType.TIMESTAMP)


def _pair(r: Any) -> tuple[Any, Any]:
    return (r[0], r[1])


def field_types(stream: StreamSpec) -> dict[str, FieldType]:
    types = {f.name: FieldType(f.type) for f in stream.fields}
    types[stream.timestamp_field] = FieldType.TIMESTAMP
    return types


def need_field(
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
    t = need_field(where, agg, types, NUMERIC)
    # a sum of an INT64 field is exact, and so is taking a value back out (SlickDeque)
    return Sum(agg.field, integers=t == FieldType.INT64), Output(
        agg.name, t, nullable_when_empty=False
    )


def _extreme(where: str, agg: Aggregation, types: Mapping[str, FieldType]) -> tuple[Monoid, Output]:
    """min, max, first, last: the field's own type."""
    kind = agg.monoid.lower()
    _params(where, agg, ())
    t = need_field(where, agg, types, tuple(FieldType) if kind in ("first", "last") else ORDERED)
    cls = {"min": Min, "max": Max, "first": First, "last": Last}[kind]
    return cls(agg.field), Output(agg.name, t)


def _mean(where: str, agg: Aggregation, types: Mapping[str, FieldType]) -> tuple[Monoid, Output]:
    """mean, geomean: a DOUBLE; a mean of an INT64 field is exact (an integer sum) and
    rounded once."""
    _params(where, agg, ())
    t = need_field(where, agg, types, NUMERIC)
    if agg.monoid.lower() == "mean":
        return Mean(agg.field, integers=t == FieldType.INT64), Output(agg.name, FieldType.DOUBLE)
    return GeometricMean(agg.field), Output(agg.name, FieldType.DOUBLE)


def _spread(where: str, agg: Aggregation, types: Mapping[str, FieldType]) -> tuple[Monoid, Output]:
    """variance, stddev: a DOUBLE; params ddof 0 (population, default) or 1 (sample)."""
    _params(where, agg, ("ddof",))
    need_field(where, agg, types, NUMERIC)
    ddof_text = agg.params.get("ddof", "0")
    if ddof_text not in ("0", "1"):
        raise DefinitionError(f"{where}.params.ddof", f"expected 0 or 1, got {show(ddof_text)}")
    cls = Variance if agg.monoid.lower() == "variance" else StdDev
    return cls(agg.field, ddof=int(ddof_text)), Output(agg.name, FieldType.DOUBLE)


def _arg(where: str, agg: Aggregation, types: Mapping[str, FieldType]) -> tuple[Monoid, Output]:
    """argmax, argmin: a struct of the extreme value and the ``key`` field's value beside it."""
    kind = agg.monoid.lower()
    _params(where, agg, ("key",))
    t = need_field(where, agg, types, ORDERED)
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
    t = need_field(where, agg, types, ORDERED)
    parts = (("max", t.value), ("count", FieldType.INT64.value))
    return MaxCount(agg.field), Output(agg.name, "STRUCT", parts, split=_pair)


def _int_param(where: str, agg: Aggregation, name: str, default: int, lo: int, hi: int) -> int:
    text = agg.params.get(name)
    if text is None:
        return default
    try:
        v = int(text.strip())
    except ValueError:
        v = lo - 1
    if not lo <= v <= hi:
        raise DefinitionError(
            f"{where}.params.{name}", f"expected an integer from {lo} to {hi}, got {show(text)}"
        )
    return v


def _distinct(
    where: str, agg: Aggregation, types: Mapping[str, FieldType]
) -> tuple[Monoid, Output]:
    """distinct: an HLL sketch of any field (params lg_k, 4 to 21, default 12), lowered to the
    estimated number of distinct values, a DOUBLE (0.0 when empty)."""
    _params(where, agg, ("lg_k",))
    need_field(where, agg, types, tuple(FieldType))
    lg_k = _int_param(where, agg, "lg_k", 12, 4, 21)
    return Distinct(agg.field, lg_k=lg_k), Output(
        agg.name, FieldType.DOUBLE, nullable_when_empty=False
    )


def _quantiles(
    where: str, agg: Aggregation, types: Mapping[str, FieldType]
) -> tuple[Monoid, Output]:
    """quantiles: a KLL sketch of a numeric field (params fractions, default "0.5,0.9,0.99";
    k, 8 to 65535, default 200), lowered to a list of DOUBLEs, one per fraction in order."""
    _params(where, agg, ("fractions", "k"))
    need_field(where, agg, types, NUMERIC)
    text = agg.params.get("fractions", "0.5,0.9,0.99")
    fractions = []
    for part in text.split(","):
        try:
            f = float(part)
        except ValueError:
            f = math.nan
        if not 0.0 <= f <= 1.0:
            raise DefinitionError(
                f"{where}.params.fractions",
                'expected numbers from 0 to 1 separated by commas (e.g. "0.5,0.9,0.99"), got '
                f"{show(text)} ({show(part.strip())} is not one)",
            )
        fractions.append(f)
    k = _int_param(where, agg, "k", 200, 8, 65535)
    out = Output(agg.name, "ANY", element=FieldType.DOUBLE.value)
    return Quantiles(agg.field, fractions=fractions, k=k), out


def _top_k(where: str, agg: Aggregation, types: Mapping[str, FieldType]) -> tuple[Monoid, Output]:
    """top_k: a frequent items sketch of a STRING, INT64 or BOOL field (params k, the items
    given, 1 to 10000, default 10; lg_map_size, 3 to 26, default the least >= 10 tracking 4k),
    lowered to a list of {item, count}, most frequent first."""
    _params(where, agg, ("k", "lg_map_size"))
    t = need_field(where, agg, types, (FieldType.STRING, FieldType.INT64, FieldType.BOOL))
    k = _int_param(where, agg, "k", 10, 1, 10_000)
    least = max(10, (4 * k - 1).bit_length())
    lg = _int_param(where, agg, "lg_map_size", least, 3, 26)
    if 3 * 2**lg // 4 < k:
        raise DefinitionError(
            f"{where}.params.lg_map_size",
            f"a map of 2**{lg} entries tracks {3 * 2**lg // 4} items, fewer than k = {k}; "
            f"expected {least} or more, got {show(agg.params['lg_map_size'])}",
        )
    parts = (("item", t.value), ("count", FieldType.INT64.value))
    top = TopK(agg.field, k=k, lg_map_size=lg, item_type=t.value)
    return top, Output(agg.name, "ANY", element=parts)


def _plugin(where: str, agg: Aggregation, types: Mapping[str, FieldType]) -> tuple[Monoid, Output]:
    """A monoid of an entry point; its ``output_type`` (if a FieldType) types the column."""
    factory = load_plugin(agg.monoid)
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
    return plugin, Output(agg.name, out_type, plugin=True)


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
    "distinct": _distinct,
    "quantiles": _quantiles,
    "top_k": _top_k,
}
BUILTINS = tuple(_BUILDERS)


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
        elif kind is Sum and getattr(m, "integers", False) and t == "q":
            out.append("w")  # exact: a level pair of 8 epoch-ns values passes int64
        elif kind in (Sum, Max, Min, First, Last) and t is not None:
            out.append(t)
        elif kind is Mean and t is not None:
            out.append("qw" if getattr(m, "integers", False) else "qd")
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


def legacy_layout(record: Record, layout: tuple[str, ...]) -> tuple[str, ...] | None:
    """The layout :func:`struct_layout` gave ``record`` before INT64 means and sums were
    stored exactly (a mean's ``(count, mean)`` as "m": see
    :class:`~..storage.codecs.StructCodec`; a sum as an int64, "q", which a level pair past
    int64 could not be written in), or None when it gave this one: a window saved then
    reopens in that form."""

    def before(m: Any, part: str) -> str:
        if isinstance(m, Mean) and m.integers:
            return "m"
        if type(m) is Sum and part == "w":
            return "q"
        return part

    old = tuple(before(m, part) for m, part in zip(record.monoids, layout, strict=True))
    return old if old != layout else None
