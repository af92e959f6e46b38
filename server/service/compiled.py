"""What a window definition compiles to (:class:`Built`: one :class:`~mtawindows.server.engine.Record`,
its policy, the visible :class:`Output` columns and the hidden fields the policy reads), and the
error of a definition that cannot be built (:class:`DefinitionError`, naming the culprit)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from mtawindows.v1.reasons import Reason

from ..engine.monoids import Last, Max, Record

__all__ = ["NAME", "Built", "DefinitionError", "Output", "time_field"]

NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")  # a window's name, an output's name


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


@dataclass(frozen=True)
class Output:
    """One visible output: its name, type (a FieldType value or "STRUCT"), struct parts and
    how to turn the lowered value into plain parts."""

    name: str
    type: str
    parts: tuple[tuple[str, str], ...] = ()  # (part name, FieldType value)
    split: Callable[[Any], tuple[Any, ...]] | None = None  # lowered value -> parts
    nullable_when_empty: bool = True
    # a list output's element (quantiles: "DOUBLE"; top_k: parts item, count): its results
    # are lists (Value.list_value; Arrow: a list of that type); on the wire its type is ANY
    element: str | tuple[tuple[str, str], ...] | None = None
    # a plugin's (user code): its ``lower`` is tried on a batch's results before the batch
    # is applied (HostedWindow.check_results); the built-ins' never raise
    plugin: bool = False


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
    # a hopping window (WindowSpec.slide): its plan, and what its final aggregator runs over
    # (the record with a slice's rows and label; the policy that evicts slices before a cutoff)
    hop: Any = None
    slice_monoid: Record | None = None
    slice_policy: Any = None


def time_field(built: Built, ts_field: str) -> str | None:
    """The record field holding a window's newest timestamp: a time-range policy's hidden
    ``__ts``, else an output that is the max or last of the timestamp field; None if none."""
    fields = built.monoid.fields
    ts = fields.get("__ts")
    if isinstance(ts, Max | Last):
        return "__ts"
    for name, m in fields.items():
        if isinstance(m, Max | Last) and getattr(m, "field", None) == ts_field:
            return name
    return None
