"""The service's definitions and results as plain Python dataclasses.

The server and the SDK share these; :mod:`mtawindows.v1.convert` maps them to and from the
protobuf messages. Timestamps are ``int`` nanoseconds since the Unix epoch (``datetime`` is
accepted on input); durations are :class:`datetime.timedelta`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field as dc_field
from datetime import timedelta
from enum import StrEnum
from typing import Any, NoReturn

# The longest duration a definition may hold (a time range, a stream's allowed lateness):
# 36,500 days (about 100 years), well inside int64 nanoseconds.
MAX_DURATION = timedelta(days=36_500)
ECHO_CHARS = 64


def show(value: Any, limit: int = ECHO_CHARS) -> str:
    """``value`` as errors and logs echo it: ASCII-only ``repr`` of at most ``limit`` characters
    of it; a longer text is cut with ``...`` and its length given, so no error or log line
    ever carries unbounded input."""
    if isinstance(value, str | bytes) and len(value) > limit:
        return f"{value[:limit]!a}... ({len(value)} chars)"
    text = ascii(value)
    if len(text) > limit + 2:
        return f"{text[:limit]}... ({len(text)} chars)"
    return text


def show_names(names: Any, limit: int = 8) -> str:
    """A list of names for a message: at most ``limit`` of them, each echoed by :func:`show`."""
    names = list(names)
    shown = ", ".join(show(n) for n in names[:limit])
    more = f", ... ({len(names)} in all)" if len(names) > limit else ""
    return f"[{shown}{more}]"


def clip(text: str, limit: int = 200) -> str:
    """Free text (an exception's message) cut to ``limit`` characters, its length given."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} chars)"


class SpecError(ValueError):
    """A definition refused at construction: ``field`` is the path of the culprit inside the
    definition (``late_policy``, ``fields[2].type``), ``reason`` an UPPER_SNAKE reason when the
    refusal has its own (``UNKNOWN_ENUM_VALUE``), else empty."""

    def __init__(self, field: str, message: str, *, reason: str = "", owner: str = "") -> None:
        super().__init__(f"{owner}.{field}: {message}" if owner else f"{field}: {message}")
        self.field = field
        self.description = message
        self.reason = reason
        self.owner = owner

    def under(self, prefix: str) -> SpecError:
        """The same error with ``prefix`` in front of its field path."""
        return SpecError(f"{prefix}.{self.field}", self.description, reason=self.reason)


def _refuse(owner: str, field: str, message: str, reason: str = "") -> NoReturn:
    raise SpecError(field, message, reason=reason, owner=owner)


def _enum(owner: str, name: str, value: Any, allowed: tuple[str, ...], *, upper: bool) -> str:
    """``value`` (a case-insensitive name) as its canonical spelling; else SpecError."""
    if isinstance(value, str):
        canon = value.upper() if upper else value.lower()
        if canon in allowed:
            return canon
    msg = f"expected one of {list(allowed)}, got {show(value)}"
    raise SpecError(name, msg, reason="UNKNOWN_ENUM_VALUE", owner=owner)


def _check_type(owner: str, name: str, value: Any, kind: type | tuple[type, ...]) -> None:
    ok = False if isinstance(value, bool) and kind is not bool else isinstance(value, kind)
    if not ok:
        want = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        msg = f"expected {want}, got {type(value).__name__} {show(value)}"
        raise SpecError(name, msg, owner=owner)


def _check_items(obj: Any, name: str, kind: type) -> None:
    """``obj.<name>``: a tuple or list of ``kind`` items, kept as a tuple."""
    owner = type(obj).__name__
    value = getattr(obj, name)
    _check_type(owner, name, value, (tuple, list))
    object.__setattr__(obj, name, tuple(value))
    for i, item in enumerate(value):
        _check_type(owner, f"{name}[{i}]", item, kind)


def _check_duration(
    owner: str, name: str, value: Any, *, positive: bool = False, upper: bool = True
) -> None:
    """A timedelta >= 0 (> 0 with ``positive``) and, with ``upper``, <= MAX_DURATION."""
    _check_type(owner, name, value, timedelta)
    low_ok = value > timedelta(0) if positive else value >= timedelta(0)
    if not low_ok or (upper and value > MAX_DURATION):
        low = "> 0" if positive else ">= 0"
        high = f" and <= {MAX_DURATION.days} days" if upper else ""
        msg = f"expected a duration {low}{high}, got {value.total_seconds():g} s"
        raise SpecError(name, msg, owner=owner)


class FieldType(StrEnum):
    DOUBLE = "DOUBLE"
    INT64 = "INT64"
    STRING = "STRING"
    BOOL = "BOOL"
    TIMESTAMP = "TIMESTAMP"


FIELD_TYPES = tuple(t.value for t in FieldType)
LATE_POLICIES = ("REJECT", "DROP")
# units a stream may read plain-number timestamps in, with nanoseconds per unit
TS_UNITS = {"s": 1_000_000_000, "ms": 1_000_000, "us": 1_000, "ns": 1}
# the aggregation algorithms a window may run (the proto's enum Algorithm; fact cards in the
# server's mtawindows.server.engine.algorithms and the docs' algorithms page)
ALGORITHMS = (
    "AMTA",
    "LMTA",
    "TWO_STACKS",
    "TWO_STACKS_LITE",
    "DABA",
    "DABA_LITE",
    "FLATFAT",
    "BINT",
    "FLATFIT",
    "SLICKDEQUE",
)
STORAGE_KINDS = ("redis", "memory")
POLICY_KINDS = ("count", "time_range", "bounded_sum", "max_sub_window", "expression")


@dataclass(frozen=True)
class Field:
    """A value field of a stream. ``type``: a :class:`FieldType` (or its name, any case).
    ``allow_nan`` (DOUBLE only): the field may hold non-finite values (NaN, +inf, -inf);
    without it the server refuses them."""

    name: str
    type: FieldType | str = FieldType.DOUBLE
    allow_nan: bool = False

    def __post_init__(self) -> None:
        _check_type("Field", "name", self.name, str)
        t = _enum("Field", "type", self.type, FIELD_TYPES, upper=True)
        object.__setattr__(self, "type", FieldType(t))
        _check_type("Field", "allow_nan", self.allow_nan, bool)
        if self.allow_nan and t != FieldType.DOUBLE:
            msg = f"only DOUBLE fields can hold non-finite values, {show(self.name)} is {t}"
            _refuse("Field", "allow_nan", msg)


@dataclass(frozen=True)
class StreamSpec:
    """A stream: a timestamp column plus typed value fields.

    ``key``: the field (STRING or INT64) that makes it a keyed stream: every window then holds
    one instance per key; ``key_groups`` (fixed at creation; 0 means 256) is how many groups
    the keys hash into, the unit of ownership and journaling; ``key_ttl`` drops a key that took
    no row for that long.

    ``ts_unit``: how the SDK, the CLI and the connector read a timestamp given as a plain number
    (``"s"``, ``"ms"``, ``"us"`` or ``"ns"``, the default); ``datetime``, numpy/pandas/Arrow
    timestamps and RFC 3339 text carry their own. On the wire a timestamp is always int
    nanoseconds. With ``wall_clock`` (the default) they refuse a plain number that would put a
    row before 1990 in that unit (seconds read as nanoseconds fall in 1970); a stream whose
    timestamps are not dates (sequence numbers) says ``wall_clock=False``.

    ``late_policy``: ``"REJECT"`` (a batch with a row older than the newest fails, nothing
    applied) or ``"DROP"`` (late rows are skipped and counted); with ``DROP``,
    ``allowed_lateness`` reorders rows up to that much late instead of dropping them."""

    name: str
    fields: tuple[Field, ...] = ()
    timestamp_field: str = "ts"
    late_policy: str = "REJECT"
    allowed_lateness: timedelta = timedelta(0)
    # keyed streams (see windows.proto): the key field, its key groups (0: DEFAULT_KEY_GROUPS
    # with a key) and how long a key without rows is kept (0: forever)
    key: str = ""
    key_groups: int = 0
    key_ttl: timedelta = timedelta(0)
    # how the SDK, the CLI and the connector read plain numbers as timestamps (the wire is
    # always nanoseconds); ``wall_clock=False``: the timestamps are not dates (sequence
    # numbers), so no number is refused as "before 1990"
    ts_unit: str = "ns"
    wall_clock: bool = True

    def __post_init__(self) -> None:
        _check_type("StreamSpec", "name", self.name, str)
        object.__setattr__(
            self,
            "ts_unit",
            _enum("StreamSpec", "ts_unit", self.ts_unit, tuple(TS_UNITS), upper=False),
        )
        _check_type("StreamSpec", "wall_clock", self.wall_clock, bool)
        _check_type("StreamSpec", "key", self.key, str)
        _check_type("StreamSpec", "key_groups", self.key_groups, int)
        _check_duration("StreamSpec", "key_ttl", self.key_ttl, upper=False)
        _check_items(self, "fields", Field)
        _check_type("StreamSpec", "timestamp_field", self.timestamp_field, str)
        late = _enum("StreamSpec", "late_policy", self.late_policy, LATE_POLICIES, upper=True)
        object.__setattr__(self, "late_policy", late)
        _check_duration("StreamSpec", "allowed_lateness", self.allowed_lateness, upper=False)


@dataclass(frozen=True)
class Aggregation:
    """A named output: ``monoid`` (catalog name or plugin) over ``field``, e.g.
    ``Aggregation("peak", "argmax", "cpu", {"key": "ts"})``."""

    name: str
    monoid: str
    field: str = ""
    params: Mapping[str, str] = dc_field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("name", "monoid", "field"):
            _check_type("Aggregation", name, getattr(self, name), str)
        _check_type("Aggregation", "params", self.params, Mapping)
        for k, v in self.params.items():
            _check_type("Aggregation", "params", k, str)
            _check_type("Aggregation", f"params.{k}", v, str)


@dataclass(frozen=True)
class Policy:
    """A window slide policy; build one with the class methods.

    The class methods refuse what the server refuses when a window is created (a count of 0
    rows, a time range outside (0, 100 years], a bound that is negative or not finite); the
    constructor itself checks only the shape (a known ``kind``, types, no NaN, nothing
    negative), so every definition a server ever stored still loads."""

    kind: str
    size: int = 0
    range: timedelta = timedelta(0)
    field: str = ""
    bound: float = 0.0
    max_size: int = 0
    cel: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.kind, str) or self.kind not in POLICY_KINDS:
            msg = f"expected one of {list(POLICY_KINDS)}, got {show(self.kind)}"
            _refuse("Policy", "kind", msg, "UNKNOWN_ENUM_VALUE")
        for name in ("size", "max_size"):
            v = getattr(self, name)
            _check_type("Policy", name, v, int)
            if v < 0:
                _refuse("Policy", name, f"expected >= 0, got {v}")
        _check_duration("Policy", "range", self.range, upper=False)
        _check_type("Policy", "field", self.field, str)
        _check_type("Policy", "bound", self.bound, (int, float))
        if math.isnan(self.bound) or self.bound < 0:
            _refuse("Policy", "bound", f"expected a number >= 0, got {self.bound!r}")
        _check_type("Policy", "cel", self.cel, str)

    @classmethod
    def count(cls, size: int) -> Policy:
        """Keep the newest ``size`` rows (``size`` >= 1)."""
        p = cls("count", size=size)
        if size < 1:
            msg = f"expected a row count >= 1, got {size}"
            _refuse("Policy.count", "size", msg)
        return p

    @classmethod
    def time_range(cls, range: timedelta) -> Policy:
        """Keep rows newer than ``newest - range`` (0 < ``range`` <= 36,500 days)."""
        _check_duration("Policy.time_range", "range", range, positive=True)
        return cls("time_range", range=range)

    @classmethod
    def bounded_sum(cls, field: str, bound: float) -> Policy:
        """Keep the rows whose suffix sum over ``field`` is at most ``bound`` (finite, >= 0).
        The field's values must be finite and >= 0 (the server refuses other rows)."""
        p = cls("bounded_sum", field=field, bound=bound)
        if not math.isfinite(bound) or bound < 0:
            msg = f"expected a finite bound >= 0, got {bound!r}"
            _refuse("Policy.bounded_sum", "bound", msg)
        return p

    @classmethod
    def max_sub_window(cls, field: str, max_size: int = 0) -> Policy:
        """Keep the window from its maximum of ``field`` on (at most ``max_size`` rows if > 0)."""
        return cls("max_sub_window", field=field, max_size=max_size)

    @classmethod
    def expression(cls, cel: str) -> Policy:
        """A CEL expression over ``total`` and ``old``: evict the longest prefix where true."""
        return cls("expression", cel=cel)


MAX_BLOCK = 1 << 20  # Storage.block_size and cache_size


@dataclass(frozen=True)
class Storage:
    """``kind``: ``"redis"`` (default: middle levels in Redis, restored on restart) or
    ``"memory"``. ``durable``: journal every batch before acknowledging it."""

    kind: str = "redis"
    durable: bool = False
    block_size: int = 0
    cache_size: int = 0

    def __post_init__(self) -> None:
        kind = _enum("Storage", "kind", self.kind, STORAGE_KINDS, upper=False)
        object.__setattr__(self, "kind", kind)
        _check_type("Storage", "durable", self.durable, bool)
        for name in ("block_size", "cache_size"):
            v = getattr(self, name)
            _check_type("Storage", name, v, int)
            if v < 0 or v > MAX_BLOCK:
                _refuse("Storage", name, f"expected 0 (default) to {MAX_BLOCK}, got {v}")
        if kind == "memory" and self.durable:
            msg = "a memory window cannot be durable; use redis"
            _refuse("Storage", "durable", msg)


@dataclass(frozen=True)
class WindowSpec:
    stream: str
    name: str
    aggregations: tuple[Aggregation, ...]
    policy: Policy
    algorithm: str = "AMTA"
    storage: Storage = Storage()
    # a hopping window: results at each slide boundary (a timedelta: boundaries at its
    # multiples since the epoch, in event time; an int: after every that many rows); None:
    # a result after every batch or row
    slide: timedelta | int | None = None

    def __post_init__(self) -> None:
        _check_type("WindowSpec", "stream", self.stream, str)
        _check_type("WindowSpec", "name", self.name, str)
        _check_items(self, "aggregations", Aggregation)
        _check_type("WindowSpec", "policy", self.policy, Policy)
        algorithm = _enum("WindowSpec", "algorithm", self.algorithm, ALGORITHMS, upper=True)
        object.__setattr__(self, "algorithm", algorithm)
        _check_type("WindowSpec", "storage", self.storage, Storage)
        slide = self.slide
        if isinstance(slide, timedelta):
            _check_duration("WindowSpec", "slide", slide, positive=True)
        elif slide is not None:
            if isinstance(slide, bool) or not isinstance(slide, int):
                msg = f"expected a timedelta, an int (rows) or None, got {type(slide).__name__}"
                _refuse("WindowSpec", "slide", msg)
            if slide < 1:
                msg = f"expected a row count >= 1, got {slide}"
                _refuse("WindowSpec", "slide", msg)


OUTPUT_TYPES = (*FIELD_TYPES, "STRUCT", "ANY")


@dataclass(frozen=True)
class OutputSpec:
    """A window's output: ``type`` a FieldType value, ``"STRUCT"`` (with ``parts``) or
    ``"ANY"`` (a plugin's output without a declared type)."""

    name: str
    type: str
    parts: tuple[Field, ...] = ()

    def __post_init__(self) -> None:
        _check_type("OutputSpec", "name", self.name, str)
        t = _enum("OutputSpec", "type", str(self.type), OUTPUT_TYPES, upper=True)
        object.__setattr__(self, "type", t)


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
    keys: int = 0
    keys_expired: int = 0


@dataclass
class KeyInfo:
    """One key of a keyed stream: its text, group, counters and (GetKey) each window's result."""

    key: str
    group: int = 0
    rows_appended: int = 0
    rows_late: int = 0
    newest_timestamp: int = 0
    last_append_ms: int = 0
    results: dict[str, WindowResult] = dc_field(default_factory=dict)


@dataclass
class WindowInfo:
    spec: WindowSpec
    stats: dict[str, int] = dc_field(default_factory=dict)
    outputs: list[OutputSpec] = dc_field(default_factory=list)
    # how per-row results are computed: "columnar", or "general: <why not columnar>"
    path: str = ""
    # where its state lives, by its algorithm (Redis-backed middle levels, or all in the
    # server with every item checkpointed)
    storage: str = ""
    # a hopping window's plan: its slices' edges, the windows sharing them, its final
    # aggregator ("" without a slide)
    plan: str = ""


@dataclass
class WindowResult:
    """A window's result: ``values`` by output name (structs as dicts), its size in rows,
    ``evicted``: the rows the batch that produced it evicted (not the window's running total,
    which :class:`WindowStats` ``evicted`` counts; a keyed stream's: the key's last batch,
    0 after its key is reloaded), that batch's ``sequence`` (the stream's count of
    applied batches then: results of a window are ordered by it) and the stream's newest
    timestamp then (nanoseconds)."""

    window: str
    values: dict[str, Any]
    size: int = 0
    evicted: int = 0
    sequence: int = 0
    timestamp: int = 0
    key: str = ""  # a keyed stream's: the key whose window this is
    # a hopping window's result: the boundary it closed (ns since the epoch for a time slide,
    # a row count for a slide in rows); 0 for other windows
    boundary: int = 0

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    @property
    def batch(self) -> int:
        """The stream's count of applied batches when this result was computed (the field
        ``sequence``; the CLI and ``subscribe`` call it ``batch``: not a producer's sequence)."""
        return self.sequence


@dataclass
class AppendResult:
    rows_applied: int = 0
    rows_late: int = 0
    rows_buffered: int = 0
    duplicate: bool = False
    results: dict[str, WindowResult] = dc_field(default_factory=dict)
    # per-row mode: window -> column name -> values (structs flattened as "peak.value";
    # "__size": the window's size after each row)
    row_results: dict[str, Mapping[str, Any]] = dc_field(default_factory=dict)
    # a keyed stream's FINAL results: one per (window, key) the batch changed
    key_results: list[WindowResult] = dc_field(default_factory=list)
    # per-row mode, when not every row was applied or a reorder buffer released them: the
    # request's row of each entry (-1: a row the buffer held from an earlier batch)
    row_positions: list[int] | None = None
    # per-row mode asked as Arrow: window -> a pyarrow.Table, one row per applied row (output
    # columns, structs as struct columns, then "_size" and "_row": the request's row)
    row_tables: dict[str, Any] = dc_field(default_factory=dict)
