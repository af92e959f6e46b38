"""The service's definitions and results as plain Python dataclasses.

The server and the SDK share these; :mod:`mtawindows.client.convert` maps them to and from the
protobuf messages. Timestamps are ``int`` nanoseconds since the Unix epoch (``datetime`` is
accepted on input); durations are :class:`datetime.timedelta`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field as dc_field
from datetime import timedelta
from enum import StrEnum
from typing import Any


class FieldType(StrEnum):
    DOUBLE = "DOUBLE"
    INT64 = "INT64"
    STRING = "STRING"
    BOOL = "BOOL"
    TIMESTAMP = "TIMESTAMP"


@dataclass(frozen=True)
class Field:
    name: str
    type: FieldType | str = FieldType.DOUBLE
    allow_nan: bool = False


@dataclass(frozen=True)
class StreamSpec:
    """A stream: a timestamp column plus typed value fields.

    ``late_policy``: ``"REJECT"`` (a batch with a row older than the newest fails, nothing
    applied) or ``"DROP"`` (late rows are skipped and counted); with ``DROP``,
    ``allowed_lateness`` reorders rows up to that much late instead of dropping them."""

    name: str
    fields: tuple[Field, ...] = ()
    timestamp_field: str = "ts"
    late_policy: str = "REJECT"
    allowed_lateness: timedelta = timedelta(0)


@dataclass(frozen=True)
class Aggregation:
    """A named output: ``monoid`` (catalog name or plugin) over ``field``, e.g.
    ``Aggregation("peak", "argmax", "cpu", {"key": "ts"})``."""

    name: str
    monoid: str
    field: str = ""
    params: Mapping[str, str] = dc_field(default_factory=dict)


@dataclass(frozen=True)
class Policy:
    """A window slide policy; build one with the class methods."""

    kind: str
    size: int = 0
    range: timedelta = timedelta(0)
    field: str = ""
    bound: float = 0.0
    max_size: int = 0
    cel: str = ""

    @classmethod
    def count(cls, size: int) -> Policy:
        """Keep the newest ``size`` rows."""
        return cls("count", size=size)

    @classmethod
    def time_range(cls, range: timedelta) -> Policy:
        """Keep rows newer than ``newest - range``."""
        return cls("time_range", range=range)

    @classmethod
    def bounded_sum(cls, field: str, bound: float) -> Policy:
        """Keep the rows whose suffix sum over ``field`` is at most ``bound``."""
        return cls("bounded_sum", field=field, bound=bound)

    @classmethod
    def max_sub_window(cls, field: str, max_size: int = 0) -> Policy:
        """Keep the window from its maximum of ``field`` on (at most ``max_size`` rows if > 0)."""
        return cls("max_sub_window", field=field, max_size=max_size)

    @classmethod
    def expression(cls, cel: str) -> Policy:
        """A CEL expression over ``total`` and ``old``: evict the longest prefix where true."""
        return cls("expression", cel=cel)


@dataclass(frozen=True)
class Storage:
    """``kind``: ``"redis"`` (default: middle levels in Redis, restored on restart) or
    ``"memory"``. ``durable``: journal every batch before acknowledging it."""

    kind: str = "redis"
    durable: bool = False
    block_size: int = 0
    cache_size: int = 0


@dataclass(frozen=True)
class WindowSpec:
    stream: str
    name: str
    aggregations: tuple[Aggregation, ...]
    policy: Policy
    algorithm: str = "AMTA"
    storage: Storage = Storage()


@dataclass(frozen=True)
class OutputSpec:
    name: str
    type: str  # a FieldType value, or "STRUCT" with parts
    parts: tuple[Field, ...] = ()


@dataclass
class StreamInfo:
    spec: StreamSpec
    windows: list[str] = dc_field(default_factory=list)
    rows_appended: int = 0
    rows_late: int = 0
    batches_appended: int = 0
    batches_duplicate: int = 0
    newest_timestamp: int = 0
    rows_buffered: int = 0


@dataclass
class WindowInfo:
    spec: WindowSpec
    stats: dict[str, int] = dc_field(default_factory=dict)
    outputs: list[OutputSpec] = dc_field(default_factory=list)


@dataclass
class WindowResult:
    """A window's result: ``values`` by output name (structs as dicts), its size in rows, the
    rows evicted by the batch that produced it, that batch's ``sequence`` (the stream's count of
    applied batches then: results of a window are ordered by it) and the stream's newest
    timestamp then (nanoseconds)."""

    window: str
    values: dict[str, Any]
    size: int = 0
    evicted: int = 0
    sequence: int = 0
    timestamp: int = 0

    def __getitem__(self, name: str) -> Any:
        return self.values[name]


@dataclass
class AppendResult:
    rows_applied: int = 0
    rows_late: int = 0
    rows_buffered: int = 0
    duplicate: bool = False
    results: dict[str, WindowResult] = dc_field(default_factory=dict)
    # per-row mode: window -> column name -> values (structs flattened as "peak.value")
    row_results: dict[str, dict[str, list[Any]]] = dc_field(default_factory=dict)
