"""A window's slide policy (``Policy``) into the engine's: each built-in adds the hidden fields
it reads (``__n``, ``__ts``, ``__sum``, ...) to the record, so users name only what they want
to see; an expression policy compiles to a :class:`~.cel.CelPolicy` over the outputs."""

from __future__ import annotations

import operator
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from mtawindows.v1.types import Aggregation, FieldType, Policy

from ..engine.monoids import Count, Last, Max, Min, Monoid, Record, Sum
from ..engine.policies import (
    AnyOf,
    BoundedSumPolicy,
    CountPolicy,
    MaxSubWindowPolicy,
    TimeRangePolicy,
)
from .cel import CelError, CelField, CelPolicy
from .compiled import DefinitionError, Output
from .monoid_catalog import NUMERIC, ORDERED, need_field

__all__ = ["build_policy", "compile_expression_policy", "timedelta_ns"]

_CEL_TYPES = {
    FieldType.DOUBLE: "double",
    FieldType.INT64: "int",
    FieldType.STRING: "string",
    FieldType.BOOL: "bool",
    FieldType.TIMESTAMP: "timestamp",
}


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


@dataclass(frozen=True)
class _Cel:
    text: str


def build_policy(
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
        need_field(f"{where}.bounded_sum", agg, types, NUMERIC)
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
        need_field(f"{where}.max_sub_window", agg, types, ORDERED)
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
    return timedelta_ns(p.range)


def timedelta_ns(r: timedelta) -> int:
    """A duration in nanoseconds (the unit of the service's timestamps)."""
    return int((r.days * 86_400 + r.seconds) * 1_000_000_000 + r.microseconds * 1_000)


def compile_expression_policy(
    policy: Any, record: Record, fields: Mapping[str, Monoid], outputs: list[Output]
) -> Any:
    """An expression policy (what :func:`build_policy` returned for one) compiled to a
    :class:`CelPolicy` over the window's outputs; any other policy as it is."""
    if not isinstance(policy, _Cel):
        return policy
    cel_fields = {
        out.name: _cel_field(out, record.index(out.name), fields[out.name]) for out in outputs
    }
    try:
        return CelPolicy(policy.text, cel_fields)
    except CelError as ex:
        at: dict[str, str] = {"line": str(ex.line), "column": str(ex.column)} if ex.line else {}
        raise DefinitionError(
            "spec.policy.expression.cel", str(ex), reason=ex.code, metadata=ex.metadata | at
        ) from None
