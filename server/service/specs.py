"""The checks a stream or window definition passes when it is created (beyond those of
:func:`~.window_builder.build_window`): names, field types, lateness, storage and policy numbers."""

from __future__ import annotations

import math
import re
from datetime import timedelta

from mtawindows.v1.keys import DEFAULT_KEY_GROUPS, MAX_KEY_GROUPS
from mtawindows.v1.reasons import Reason
from mtawindows.v1.types import MAX_DURATION, Field, FieldType, StreamSpec, WindowSpec, show

from .compiled import NAME
from .refusals import invalid

# Stream names also hold a key (``telemetry:host-07``, the Spark connector's per-key streams).
STREAM_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.:~-]{0,254}$")


def check_stream_spec(spec: StreamSpec) -> None:
    """A new stream's definition: its name, its fields and its lateness rule."""
    if not STREAM_NAME.match(spec.name or ""):
        raise invalid(
            "spec.name",
            f"expected a stream name matching {STREAM_NAME.pattern}, got {show(spec.name)}",
        )
    if not NAME.match(spec.timestamp_field or ""):
        raise invalid(
            "spec.timestamp_field",
            f"expected a field name matching {NAME.pattern}, got {show(spec.timestamp_field)}",
        )
    seen = {spec.timestamp_field}
    for i, f in enumerate(spec.fields):
        _check_field(f"spec.fields[{i}]", f, seen)
        seen.add(f.name)
    if spec.late_policy not in ("REJECT", "DROP"):
        raise invalid(
            "spec.late_policy",
            f"expected REJECT or DROP, got {show(spec.late_policy)}",
            Reason.UNKNOWN_ENUM_VALUE,
        )
    lateness = spec.allowed_lateness.total_seconds()
    if lateness < 0 or spec.allowed_lateness > MAX_DURATION:
        raise invalid(
            "spec.allowed_lateness",
            f"expected a duration >= 0 and <= {MAX_DURATION.days} days, got "
            f"{spec.allowed_lateness}",
        )
    if lateness > 0 and spec.late_policy != "DROP":
        raise invalid("spec.allowed_lateness", "a reorder buffer needs late_policy DROP")
    _check_key(spec)


def _check_key(spec: StreamSpec) -> None:
    """A keyed stream's key field, key groups and key TTL (an unkeyed one sets none)."""
    if not spec.key:
        if spec.key_groups or spec.key_ttl:
            field = "spec.key_groups" if spec.key_groups else "spec.key_ttl"
            raise invalid(field, "key_groups and key_ttl need a key field (spec.key)")
        return
    types = {f.name: str(f.type) for f in spec.fields}
    kinds = (FieldType.STRING.value, FieldType.INT64.value)
    if spec.key == spec.timestamp_field and spec.key not in types:
        raise invalid(
            "spec.key",
            f"expected the name of a STRING or INT64 field of the stream, got {show(spec.key)}, "
            f"the timestamp field (a key groups rows by a field of their own; fields: "
            f"{sorted(types)})",
            Reason.INVALID_DEFINITION,
        )
    if types.get(spec.key) not in kinds:
        got = f"a {types[spec.key]} field" if spec.key in types else "no such field"
        raise invalid(
            "spec.key",
            f"expected the name of a STRING or INT64 field of the stream, got {show(spec.key)} "
            f"({got}; fields: {sorted(types)})",
            Reason.UNKNOWN_FIELD if spec.key not in types else Reason.INVALID_DEFINITION,
        )
    if not 0 <= spec.key_groups <= MAX_KEY_GROUPS:
        raise invalid(
            "spec.key_groups",
            f"expected 0 (the default, {DEFAULT_KEY_GROUPS}) to {MAX_KEY_GROUPS}, got "
            f"{spec.key_groups}",
        )
    if spec.allowed_lateness.total_seconds() > 0:
        raise invalid(
            "spec.allowed_lateness",
            "a keyed stream has no reorder buffer: ordering and the late policy apply per key; "
            "set allowed_lateness 0",
        )
    if spec.key_ttl > MAX_DURATION:
        raise invalid(
            "spec.key_ttl",
            f"expected a duration >= 0 and <= {MAX_DURATION.days} days, got {spec.key_ttl}",
        )


def _check_field(where: str, f: Field, seen: set[str]) -> None:
    """One field of a new stream (``seen``: the names before it)."""
    if not NAME.match(f.name or ""):
        raise invalid(
            f"{where}.name", f"expected a field name matching {NAME.pattern}, got {show(f.name)}"
        )
    if f.name in seen:
        raise invalid(
            f"{where}.name", f"field {f.name!r} is defined twice (or is the timestamp field)"
        )
    if str(f.type) not in {t.value for t in FieldType}:
        raise invalid(
            f"{where}.type", f"expected one of {[t.value for t in FieldType]}, got {f.type!r}"
        )
    if f.allow_nan and str(f.type) != FieldType.DOUBLE.value:
        raise invalid(
            f"{where}.allow_nan", "only DOUBLE fields can hold non-finite values (NaN, +inf, -inf)"
        )


def check_policy_numbers(spec: WindowSpec) -> None:
    """A new window's policy numbers: a count of at least one row, a time range in
    (0, MAX_DURATION], a finite bound >= 0. Checked when a window is created, not by
    ``build_window``, which also reopens stored windows and so keeps accepting what an earlier
    release stored. (The storage needs no check here: :class:`~mtawindows.v1.types.Storage`
    refuses a bad one when it is built.)"""
    p = spec.policy
    where = f"spec.policy.{p.kind}"
    if p.kind == "count" and p.size < 1:
        raise invalid(
            f"{where}.size", f"expected a row count >= 1, got {p.size}", Reason.INVALID_DEFINITION
        )
    if p.kind == "time_range" and not timedelta(0) < p.range <= MAX_DURATION:
        raise invalid(
            f"{where}.range",
            f"expected a duration > 0 and <= {MAX_DURATION.days} days, got {p.range}",
            Reason.INVALID_DEFINITION,
        )
    if p.kind == "bounded_sum" and not (math.isfinite(p.bound) and p.bound >= 0):
        raise invalid(
            f"{where}.bound",
            f"expected a finite number >= 0, got {p.bound!r}",
            Reason.INVALID_DEFINITION,
        )
