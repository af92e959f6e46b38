"""From a window's definition to what the engine runs: :func:`build_window` checks a
``WindowSpec`` against its stream and compiles it (the aggregations through
:mod:`.monoid_catalog`, the policy through :mod:`.policy_catalog`, the Redis record layout)."""

from __future__ import annotations

from datetime import timedelta

from mtawindows.v1.reasons import Reason
from mtawindows.v1.types import ALGORITHMS, StreamSpec, WindowSpec, show

from ..engine.algorithms import EngineRefusal, check_algorithm
from ..engine.hopping import HopPlan, SliceCutoff, slice_record
from ..engine.monoids import Monoid, Record
from ..storage.codecs import StructCodec
from .compiled import NAME, Built, DefinitionError, Output
from .monoid_catalog import build_aggregation, field_types, legacy_layout, struct_layout
from .policy_catalog import build_policy, compile_expression_policy, timedelta_ns

__all__ = ["build_window"]


def build_window(stream: StreamSpec, spec: WindowSpec) -> Built:
    """Check ``spec`` against ``stream`` and compile it; raises DefinitionError."""
    if not NAME.match(spec.name or ""):
        raise DefinitionError(
            "spec.name", f"expected a name matching {NAME.pattern}, got {show(spec.name)}"
        )
    if spec.algorithm not in ALGORITHMS:
        raise DefinitionError(
            "spec.algorithm",
            f"expected one of {', '.join(ALGORITHMS)}, got {show(spec.algorithm)}",
            reason=Reason.UNKNOWN_ENUM_VALUE,
        )
    if spec.algorithm not in ("AMTA", "LMTA") and (
        spec.storage.block_size or spec.storage.cache_size
    ):
        which = "block_size" if spec.storage.block_size else "cache_size"
        raise DefinitionError(
            f"spec.storage.{which}",
            f"{spec.algorithm} keeps no levels in Redis (it checkpoints its items): "
            f"{which} sizes an MTA's Redis blocks and head cache; leave it 0 (got "
            f"{getattr(spec.storage, which)})",
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
    policy = build_policy(spec.policy, types, fields, stream.timestamp_field)
    hidden = tuple(n for n in fields if n not in visible)
    record = Record(fields)
    policy = compile_expression_policy(policy, record, fields, outputs)
    batch_safe = spec.policy.kind in ("count", "time_range")
    try:  # an algorithm that needs a monoid capability refuses a record without it
        check_algorithm(spec.algorithm, record, policy)
    except EngineRefusal as ex:
        raise DefinitionError(ex.field, str(ex)) from None
    layout = struct_layout(record, types)
    legacy = legacy_layout(record, layout) if layout is not None else None
    if layout is not None:
        record.codec = StructCodec(layout, legacy=legacy)  # type: ignore[attr-defined]
    built = Built(record, policy, outputs, hidden, batch_safe)
    if spec.slide is not None:
        _hopping(spec, built, layout, legacy)
    return built


# a time range over a time slide: a row after a pause closes up to range / slide boundaries
# (each a result, as Spark's window() emits each window holding a row): a day of 1 s slides
MAX_BOUNDARIES_PER_RANGE = 100_000


def _hopping(
    spec: WindowSpec,
    built: Built,
    layout: tuple[str, ...] | None,
    legacy: tuple[str, ...] | None = None,
) -> None:
    """A hopping window's plan and final aggregator (:mod:`..engine.hopping`)."""
    p = spec.policy
    if p.kind not in ("count", "time_range"):
        raise DefinitionError(
            "spec.slide",
            f"a hopping window needs a count or a time_range policy (its range), got {p.kind}",
        )
    if isinstance(spec.slide, timedelta):
        slide_kind, slide = "time", timedelta_ns(spec.slide)
    else:
        slide_kind, slide = "rows", int(spec.slide or 0)
    if p.kind == "count":
        range_kind, size = "rows", p.size
    else:
        range_kind, size = "time", timedelta_ns(p.range)
    if slide <= 0 or size <= 0:
        raise DefinitionError(
            "spec.slide", f"expected a slide and a range > 0, got {spec.slide} and {size}"
        )
    lowering = [
        o.name
        for o in built.outputs
        if o.plugin and built.monoid.field_lowers()[o.name][1] is not None
    ]
    if lowering:
        raise DefinitionError(
            "spec.slide",
            f"output {lowering[0]!r} is a plugin monoid with a lower of its own: a hopping "
            "window lowers its results at the boundaries, after their rows are applied, where "
            "a lower that raises could not refuse them; use it in a window without a slide",
        )
    if slide_kind == range_kind == "time" and size // slide > MAX_BOUNDARIES_PER_RANGE:
        raise DefinitionError(
            "spec.slide",
            f"a slide of {HopPlan.show('time', slide)} over a range of "
            f"{HopPlan.show('time', size)} gives {size // slide:,} boundaries per "
            f"range: at most {MAX_BOUNDARIES_PER_RANGE:,} (a row after a pause closes up to "
            "that many, each a result); use a longer slide",
        )
    built.hop = HopPlan(slide_kind, slide, range_kind, size)
    built.slice_monoid = slice_record(built.monoid)
    built.slice_policy = SliceCutoff()
    built.batch_safe = True  # the hopper takes rows one at a time itself
    try:
        check_algorithm(spec.algorithm, built.slice_monoid, built.slice_policy)
    except EngineRefusal as ex:
        raise DefinitionError(ex.field, str(ex)) from None
    if layout is not None:
        built.slice_monoid.codec = StructCodec(  # type: ignore[attr-defined]
            (*layout, "q", "q"), legacy=None if legacy is None else (*legacy, "q", "q")
        )
