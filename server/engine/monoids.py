"""Monoids: the aggregation algebra of every window (the paper's map -> reduce -> map).

A monoid is any object with:

* ``identity``: the neutral aggregate (``combine(identity, a) == combine(a, identity) == a``),
* ``lift(x)``: turn one input item into an aggregate (the first *map*),
* ``combine(older, newer)``: associative merge of two aggregates; ``older`` always covers
  items that arrived before ``newer``'s, so non-commutative monoids are safe,
* ``lower(agg)``: turn an aggregate into the user-facing result (the last *map*).

Optional capabilities are explicit, never assumed: ``commutative`` (a declaration checked by
:mod:`mtawindows.server.engine.laws`), ``combine_all`` (a batch fold, default a left fold),
``invertible`` with ``inverse(a)`` (a group whose inverse is *exact*:
``combine(inverse(a), combine(a, b)) == b`` to the bit, which SlickDeque's invertible form
subtracts with: a count, a sum of integers; a float sum, mean or variance is not, since a
large value leaving takes the small ones' digits with it) and ``selection`` (``combine(a, b)`` is always
``a`` or ``b`` itself, as max: what SlickDeque's non-invertible form needs). No monoid needs
an inverse: the MTA engines never subtract; an engine that needs a capability refuses a monoid
without it (:func:`capabilities`).

Glossary for Beam and Spark users: ``lift ~ prepare ~ add_input(identity, x)``,
``combine ~ plus ~ merge_accumulators``, ``lower ~ present ~ extract_output``.

Aggregates are immutable values (numbers or tuples): tree nodes share them and, with the
Redis tier, they are stored remotely. Built-in monoids validate their input in ``lift`` and
raise ``TypeError``/``ValueError`` naming the monoid, what was expected and what came, so a
bad item is rejected before it touches a window.

Every built-in monoid takes an optional ``field``: when set, ``lift`` reads ``x[field]`` from a
mapping item (a row), so several monoids can aggregate different columns of one stream inside a
:class:`Record`.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol, runtime_checkable

from ..sentinels import NOTHING

__all__ = [
    "ArgMax",
    "ArgMin",
    "ArgResult",
    "Concat",
    "Count",
    "First",
    "GeometricMean",
    "Last",
    "Max",
    "MaxCount",
    "Mean",
    "Min",
    "Monoid",
    "MonoidBase",
    "Record",
    "StdDev",
    "Sum",
    "Variance",
    "capabilities",
    "catalog",
]

NEG_INF = -math.inf
POS_INF = math.inf


@runtime_checkable
class Monoid(Protocol):
    """The protocol every window aggregation follows (see the module docstring)."""

    identity: Any

    def lift(self, x: Any) -> Any: ...

    def combine(self, older: Any, newer: Any) -> Any: ...

    def lower(self, agg: Any) -> Any: ...


def _read_field(owner: str, field: str | None) -> Callable[[Any], Any] | None:
    """Return a getter for ``x[field]`` with a clear error, or ``None`` for whole items."""
    if field is None:
        return None
    if not isinstance(field, str) or not field:
        msg = f"{owner}: field must be a non-empty string or None, got {field!r}"
        raise ValueError(msg)

    def get(x: Any) -> Any:
        try:
            return x[field]
        except (KeyError, IndexError, TypeError) as ex:
            msg = f"{owner}: expected a row with field {field!r}, got {x!r}"
            raise TypeError(msg) from ex

    return get


def _real(owner: str, v: Any) -> float | int:
    """Validate a real number (bool and NaN-free checks are left to the caller)."""
    if v.__class__ is float or v.__class__ is int:
        return v
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        msg = f"{owner}: expected a real number (int or float), got {type(v).__name__} {v!r}"
        raise TypeError(msg)
    return float(v)


def _ordered(owner: str, v: Any) -> float | int:
    """A real number that can be ordered: NaN breaks max/min associativity, so it is refused."""
    r = _real(owner, v)
    if r != r:
        msg = f"{owner}: NaN cannot be ordered; expected a real number, got nan"
        raise ValueError(msg)
    return r


class MonoidBase:
    """Shared behaviour of the built-in monoids.

    Subclasses set ``identity``, ``commutative`` and implement ``_lift_value``, ``combine`` and
    (optionally) ``lower``. ``inline_combine`` is an optional expression template over ``{o}``
    (older) and ``{n}`` (newer) that :class:`Record` inlines into its generated combine; it is
    our own code, never user input.
    """

    identity: Any = None
    commutative: bool = False
    #: a group: ``inverse(a)`` undoes ``a`` from the front (see the module docstring)
    invertible: bool = False
    #: ``combine(a, b)`` is always ``a`` or ``b`` itself (max, min, first, ...)
    selection: bool = False
    inline_combine: str | None = None
    #: Optional expression template over ``{v}`` (the item's value) and ``{L}`` (this monoid's
    #: ``_lift_value``, the validating slow path) that :class:`Record` inlines into its lift.
    inline_lift: str | None = None
    #: When set, ``lift`` returns this constant (Count): Record inlines it.
    constant_lift: Any = None
    #: Fixed numeric shape of the lifted value for the Redis tier's struct codec
    #: (see :mod:`mtawindows.server.storage.codecs`); ``None``: the generic msgpack codec.
    codec_layout: str | None = None

    def __init__(self, field: str | None = None) -> None:
        self.field = field
        name = type(self).__name__
        self._get = _read_field(name, field)
        if self._get is None:
            self.lift = self._lift_value  # type: ignore[method-assign,assignment]

    def lift(self, x: Any) -> Any:
        assert self._get is not None
        return self._lift_value(self._get(x))

    def _lift_value(self, v: Any) -> Any:
        return v

    def combine(self, older: Any, newer: Any) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def lower(self, agg: Any) -> Any:
        return agg

    def inverse(self, agg: Any) -> Any:
        """The group inverse of ``agg`` (``invertible`` monoids only)."""
        msg = f"{type(self).__name__} has no inverse (it is not a group)"
        raise TypeError(msg)

    def combine_all(self, aggs: Iterable[Any]) -> Any:
        """Left fold of ``aggs`` (oldest first) starting at the identity."""
        acc = self.identity
        combine = self.combine
        for a in aggs:
            acc = combine(acc, a)
        return acc

    def describe(self) -> dict[str, Any]:
        """A JSON-friendly description (kind + parameters), used in stats and errors."""
        d: dict[str, Any] = {"kind": type(self).__name__}
        if self.field is not None:
            d["field"] = self.field
        return d

    def __repr__(self) -> str:
        args = "" if self.field is None else f"field={self.field!r}"
        return f"{type(self).__name__}({args})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, MonoidBase)
            and type(other) is type(self)
            and other.describe() == self.describe()
        )

    def __hash__(self) -> int:
        return hash(repr(self))


class Count(MonoidBase):
    """Number of items. ``lift(x) = 1`` whatever ``x`` is."""

    codec_layout = "q"

    identity = 0
    commutative = True
    invertible = True
    inline_combine = "{o} + {n}"
    constant_lift = 1

    def inverse(self, agg: int) -> int:
        return -agg

    def _lift_value(self, v: Any) -> int:
        return 1

    def lift(self, x: Any) -> int:  # a Count never reads its field
        return 1

    def combine(self, older: int, newer: int) -> int:
        return older + newer


class Sum(MonoidBase):
    """Sum of real numbers (ints stay exact). ``integers=True``: a sum of integers only
    (a float is refused), whose inverse is exact: ``invertible``, as SlickDeque needs."""

    codec_layout = "n"

    identity = 0
    commutative = True
    inline_combine = "{o} + {n}"
    inline_lift = "({v} if {v}.__class__ is float or {v}.__class__ is int else {L}({v}))"

    def __init__(self, field: str | None = None, *, integers: bool = False) -> None:
        self.integers = integers
        if integers:
            self.invertible = True
            self.inline_lift = "({v} if {v}.__class__ is int else {L}({v}))"
        super().__init__(field)

    def _lift_value(self, v: Any) -> float | int:
        if self.integers:
            if isinstance(v, bool) or not isinstance(v, numbers.Integral):
                msg = f"Sum(integers=True): expected an int, got {type(v).__name__} {v!r}"
                raise TypeError(msg)
            return int(v)  # numpy's ints too
        if v.__class__ is float or v.__class__ is int:
            return v
        return _real("Sum", v)

    def inverse(self, agg: float) -> float:
        if not self.integers:
            return super().inverse(agg)  # type: ignore[no-any-return]
        return -agg

    # describe() leaves ``integers`` out: it changes no stored value (a window saved before
    # it existed reopens), only what lift accepts

    def __repr__(self) -> str:
        if not self.integers:
            return super().__repr__()
        f = "" if self.field is None else f"{self.field!r}, "
        return f"Sum({f}integers=True)"

    def combine(self, older: float, newer: float) -> float:
        return older + newer


class _Extreme(MonoidBase):
    """What :class:`Max` and :class:`Min` share: an ordered number (NaN refused), one slot."""

    codec_layout = "n"

    commutative = True
    selection = True
    inline_lift = (
        "({v} if {v}.__class__ is int or ({v}.__class__ is float and {v} == {v}) else {L}({v}))"
    )

    def _lift_value(self, v: Any) -> float | int:
        if (v.__class__ is float and v == v) or v.__class__ is int:
            return v
        return _ordered(type(self).__name__, v)


class Max(_Extreme):
    """Largest value. The identity is ``-inf``: the max of an empty window reads as ``-inf``."""

    identity = NEG_INF
    inline_combine = "({n} if {n} > {o} else {o})"

    def combine(self, older: float, newer: float) -> float:
        return newer if newer > older else older


class Min(_Extreme):
    """Smallest value. The identity is ``+inf``: the min of an empty window reads as ``+inf``."""

    identity = POS_INF
    inline_combine = "({n} if {n} < {o} else {o})"

    def combine(self, older: float, newer: float) -> float:
        return newer if newer < older else older


class Mean(MonoidBase):
    """Arithmetic mean as mergeable ``(count, mean)``: stable for large counts and magnitudes.

    ``integers=True`` (a mean of an INT64 column): ``(count, sum)`` with the sum an exact
    Python integer (past int64 too), lowered as ``sum / count``, the exact mean rounded once
    (Python's int true division). The float form would round each integer above 2^53 (an
    epoch in nanoseconds) before adding it: hundreds off. It also takes the float form,
    which is what releases before it saved (checkpoints, keyed states, old-layout blocks):
    combined with one, an exact aggregate becomes the float form (as exact as before), until
    those items leave the window. ``lower`` gives ``None`` for an empty window.
    """

    codec_layout = "qd"

    identity: tuple[int, Any] = (0, 0.0)
    commutative = True

    def __init__(self, field: str | None = None, *, integers: bool = False) -> None:
        self.integers = integers
        if integers:
            self.identity = (0, 0)
            self.codec_layout = "qw"  # the sum may pass int64: the codecs' wide integers
            self.combine = self._combine_exact  # type: ignore[method-assign]
            self.lower = self._lower_exact  # type: ignore[method-assign]
        super().__init__(field)

    def _lift_value(self, v: Any) -> tuple[int, Any]:
        if not self.integers:
            return (1, float(_real("Mean", v)))
        if v.__class__ is int:
            return (1, v)
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            msg = f"Mean(integers=True): expected an int, got {type(v).__name__} {v!r}"
            raise TypeError(msg)
        return (1, int(v))  # numpy's ints too

    def combine(self, older: tuple[int, float], newer: tuple[int, float]) -> tuple[int, float]:
        na, ma = older
        nb, mb = newer
        if nb == 0:
            return older
        if na == 0:
            return newer
        n = na + nb
        return (n, ma + (mb - ma) * nb / n)

    def _combine_exact(self, older: tuple[int, Any], newer: tuple[int, Any]) -> tuple[int, Any]:
        """``integers=True``: sums of two ``(count, sum)`` added; beside a float form, the
        sum as its mean and the float combine."""
        na, sa = older
        nb, sb = newer
        if nb == 0:
            return older
        if na == 0:
            return newer
        if sa.__class__ is int and sb.__class__ is int:
            return (na + nb, sa + sb)
        return Mean.combine(self, _as_mean(older), _as_mean(newer))

    def lower(self, agg: tuple[int, float]) -> float | None:
        return agg[1] if agg[0] else None

    def _lower_exact(self, agg: tuple[int, Any]) -> float | None:
        n, s = agg
        if not n:
            return None
        return s / n if s.__class__ is int else s  # (int / int: rounded once)

    # describe() and repr() leave ``integers`` out: both name stored definitions (a Redis
    # window's meta, a columnar checkpoint's members), and a window saved before it existed
    # holds float forms it reads, so it reopens as it was (only its codec layout changes: a
    # StructCodec's ``legacy`` form reads the old one)


def _as_mean(agg: tuple[int, Any]) -> tuple[int, float]:
    """An exact mean's ``(count, sum)`` as the float form ``(count, mean)``; a float form as
    it is."""
    n, s = agg
    return (n, s / n) if s.__class__ is int and n else agg


class Variance(MonoidBase):
    """Variance from mergeable moments ``(count, mean, M2)`` (Chan, Golub and LeVeque).

    ``ddof=0`` is the population variance, ``ddof=1`` the sample variance. ``lower`` gives
    ``None`` when the window holds ``ddof`` items or fewer.
    """

    codec_layout = "qdd"

    identity = (0, 0.0, 0.0)
    commutative = True

    def __init__(self, field: str | None = None, *, ddof: int = 0) -> None:
        if ddof not in (0, 1):
            msg = f"{type(self).__name__}: ddof must be 0 or 1, got {ddof!r}"
            raise ValueError(msg)
        self.ddof = ddof
        super().__init__(field)

    def _lift_value(self, v: Any) -> tuple[int, float, float]:
        return (1, float(_real(type(self).__name__, v)), 0.0)

    def combine(
        self, older: tuple[int, float, float], newer: tuple[int, float, float]
    ) -> tuple[int, float, float]:
        na, ma, qa = older
        nb, mb, qb = newer
        if nb == 0:
            return older
        if na == 0:
            return newer
        n = na + nb
        delta = mb - ma
        return (n, ma + delta * nb / n, qa + qb + delta * delta * na * nb / n)

    def lower(self, agg: tuple[int, float, float]) -> float | None:
        n = agg[0] - self.ddof
        return agg[2] / n if n > 0 else None

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "ddof": self.ddof}

    def __repr__(self) -> str:
        f = "" if self.field is None else f"field={self.field!r}, "
        return f"{type(self).__name__}({f}ddof={self.ddof})"


class StdDev(Variance):
    """Standard deviation: the square root of :class:`Variance` (same moments, same ``ddof``)."""

    def lower(self, agg: tuple[int, float, float]) -> float | None:
        var = super().lower(agg)
        return None if var is None else math.sqrt(max(var, 0.0))


class GeometricMean(MonoidBase):
    """Geometric mean of positive numbers, as mergeable ``(count, mean of logs)``."""

    codec_layout = "qd"

    identity = (0, 0.0)
    commutative = True

    def _lift_value(self, v: Any) -> tuple[int, float]:
        v = _real("GeometricMean", v)
        if not v > 0:
            msg = f"GeometricMean: expected a number > 0, got {v!r}"
            raise ValueError(msg)
        return (1, math.log(v))

    combine = Mean.combine

    def lower(self, agg: tuple[int, float]) -> float | None:
        return math.exp(agg[1]) if agg[0] else None


class ArgResult(NamedTuple):
    """Result of :class:`ArgMax`/:class:`ArgMin`: the extreme value and the key it came with."""

    value: Any
    key: Any


class _ArgExtreme(MonoidBase):
    """Shared code of ArgMax/ArgMin: aggregates are ``(value, key)``; ties go to the newest."""

    _sign = 1
    selection = True

    def __init__(self, value: str | None = None, key: str | None = None) -> None:
        name = type(self).__name__
        if (value is None) != (key is None):
            msg = f"{name}: give both value= and key= field names, or neither; got value={value!r}, key={key!r}"
            raise ValueError(msg)
        self.value_field = value
        self.key_field = key
        self.field = value
        self._get = None
        self._get_value = _read_field(name, value)
        self._get_key = _read_field(name, key)
        self.identity = (NEG_INF * self._sign, None)

    def lift(self, x: Any) -> tuple[Any, Any]:
        name = type(self).__name__
        if self._get_value is not None:
            assert self._get_key is not None
            return (_ordered(name, self._get_value(x)), self._get_key(x))
        try:
            v, k = x
        except (TypeError, ValueError) as ex:
            msg = f"{name}: expected a (value, key) pair, got {x!r}"
            raise TypeError(msg) from ex
        return (_ordered(name, v), k)

    def lower(self, agg: tuple[Any, Any]) -> ArgResult | None:
        return None if agg[1] is None and agg[0] == self.identity[0] else ArgResult(*agg)

    def describe(self) -> dict[str, Any]:
        d: dict[str, Any] = {"kind": type(self).__name__}
        if self.value_field is not None:
            d["value"] = self.value_field
            d["key"] = self.key_field
        return d

    def __repr__(self) -> str:
        if self.value_field is None:
            return f"{type(self).__name__}()"
        return f"{type(self).__name__}(value={self.value_field!r}, key={self.key_field!r})"


class ArgMax(_ArgExtreme):
    """Largest value with its key (e.g. its timestamp). Ties go to the newest item, so the
    result says *when the current maximum was last seen*; hence not commutative."""

    _sign = 1

    def combine(self, older: tuple[Any, Any], newer: tuple[Any, Any]) -> tuple[Any, Any]:
        return newer if newer[0] >= older[0] else older


class ArgMin(_ArgExtreme):
    """Smallest value with its key. Ties go to the newest item; not commutative."""

    _sign = -1

    def combine(self, older: tuple[Any, Any], newer: tuple[Any, Any]) -> tuple[Any, Any]:
        return newer if newer[0] <= older[0] else older


class First(MonoidBase):
    """The oldest item of the window (``None`` when empty). Not commutative."""

    identity = NOTHING
    selection = True

    def combine(self, older: Any, newer: Any) -> Any:
        return newer if older is NOTHING else older

    def lower(self, agg: Any) -> Any:
        return None if agg is NOTHING else agg


class Last(MonoidBase):
    """The newest item of the window (``None`` when empty). Not commutative."""

    identity = NOTHING
    selection = True
    inline_combine = "({o} if {n} is NOTHING else {n})"
    inline_lift = "{v}"

    def combine(self, older: Any, newer: Any) -> Any:
        return older if newer is NOTHING else newer

    def lower(self, agg: Any) -> Any:
        return None if agg is NOTHING else agg


class MaxCount(MonoidBase):
    """The maximum value and how many items hold it, as ``(max, count)``."""

    codec_layout = "nq"

    identity = (NEG_INF, 0)
    commutative = True

    def _lift_value(self, v: Any) -> tuple[float, int]:
        return (_ordered("MaxCount", v), 1)

    def combine(self, older: tuple[float, int], newer: tuple[float, int]) -> tuple[float, int]:
        if newer[0] > older[0]:
            return newer
        if older[0] > newer[0]:
            return older
        return (older[0], older[1] + newer[1])

    def lower(self, agg: tuple[float, int]) -> tuple[float, int] | None:
        return None if agg[1] == 0 else agg


class Concat(MonoidBase):
    """Concatenation of items into a tuple: the textbook non-commutative monoid.

    O(window) per combine: meant for tests and small windows, not production streams.
    """

    identity: tuple[Any, ...] = ()

    def _lift_value(self, v: Any) -> tuple[Any, ...]:
        return (v,)

    def combine(self, older: tuple[Any, ...], newer: tuple[Any, ...]) -> tuple[Any, ...]:
        return older + newer

    def lower(self, agg: tuple[Any, ...]) -> list[Any]:
        return list(agg)


class Record(MonoidBase):
    """Several named monoids over the same items: the paper's multi-dimensional windows.

    ``Record(count=Count(), total=Sum("value"), last_ts=Max("ts"))`` lifts a row into a tuple of
    field aggregates, combines field by field and lowers to a ``dict`` keyed by field name. All
    fields share one window structure and one slide policy (paper section 5.8), so adding a
    field costs one more field combine, not one more window.

    The combine, lift and lower functions are generated once per record from each field's
    ``inline_combine`` template (our own code, indexed by position; field names never reach
    the generated source).
    """

    def __init__(self, fields: Mapping[str, Monoid] | None = None, /, **kw: Monoid) -> None:
        merged: dict[Any, Any] = dict(fields or {})  # validated below: user input
        for k, v in kw.items():
            if k in merged:
                msg = f"Record: field {k!r} given twice"
                raise ValueError(msg)
            merged[k] = v
        if not merged:
            msg = "Record: expected at least one field, got none"
            raise ValueError(msg)
        for name, m in merged.items():
            if not isinstance(name, str) or not name:
                msg = f"Record: field names must be non-empty strings, got {name!r}"
                raise ValueError(msg)
            if not isinstance(m, Monoid):
                msg = (
                    f"Record: field {name!r} must be a monoid (identity, lift, combine, lower), "
                    f"got {type(m).__name__}"
                )
                raise TypeError(msg)
        self.fields: dict[str, Monoid] = merged
        self.names: tuple[str, ...] = tuple(merged)
        self.monoids: tuple[Monoid, ...] = tuple(merged.values())
        self.field = None
        self._get = None
        self.identity = tuple(m.identity for m in self.monoids)
        self.commutative = all(getattr(m, "commutative", False) for m in self.monoids)
        # a record is a group when every field is; a selection only when every field is
        # and there is one (two selections picked field by field pick from both inputs)
        self.invertible = all(getattr(m, "invertible", False) for m in self.monoids)
        self.selection = len(self.monoids) == 1 and bool(
            getattr(self.monoids[0], "selection", False)
        )
        self.combine = self._build_combine()  # type: ignore[method-assign,assignment]
        self.lift = self._build_lift()  # type: ignore[method-assign,assignment]
        self.lower = self._build_lower()  # type: ignore[method-assign,assignment]

    def inverse(self, agg: tuple[Any, ...]) -> tuple[Any, ...]:
        if not self.invertible:
            return super().inverse(agg)  # type: ignore[no-any-return]
        return tuple(m.inverse(a) for m, a in zip(self.monoids, agg, strict=True))  # type: ignore[attr-defined]

    def index(self, name: str) -> int:
        """Position of field ``name`` in the record's aggregate tuple."""
        try:
            return self.names.index(name)
        except ValueError:
            msg = f"Record has no field {name!r}; its fields are {list(self.names)}"
            raise KeyError(msg) from None

    def _build_combine(self) -> Callable[[tuple[Any, ...], tuple[Any, ...]], tuple[Any, ...]]:
        env: dict[str, Any] = {"NOTHING": NOTHING}
        parts = []
        for i, m in enumerate(self.monoids):
            tpl = getattr(m, "inline_combine", None)
            o, n = f"o[{i}]", f"n[{i}]"
            if tpl:
                parts.append("(" + tpl.format(o=o, n=n) + ")")
            else:
                env[f"c{i}"] = m.combine
                parts.append(f"c{i}({o}, {n})")
        src = f"lambda o, n: ({', '.join(parts)},)"
        return eval(src, env)  # type: ignore[no-any-return]

    def _build_lift(self) -> Callable[[Any], tuple[Any, ...]]:
        """One generated function: read every field once, validate on the fast path, and fall
        back to the field monoids' own lifts (which raise the precise error) on any failure."""
        env: dict[str, Any] = {"NOTHING": NOTHING}
        reads: list[str] = []
        parts: list[str] = []
        for i, m in enumerate(self.monoids):
            const = getattr(m, "constant_lift", None)
            tpl = getattr(m, "inline_lift", None)
            fld = getattr(m, "field", None)
            if const is not None and isinstance(const, int):
                parts.append(repr(const))
            elif (
                tpl is not None
                and isinstance(m, MonoidBase)
                and (fld is None or isinstance(fld, str))
            ):
                env[f"F{i}"] = fld
                env[f"L{i}"] = m._lift_value
                reads.append(f"v{i} = x[F{i}]" if fld is not None else f"v{i} = x")
                parts.append("(" + tpl.format(v=f"v{i}", L=f"L{i}") + ")")
            else:
                env[f"l{i}"] = m.lift
                parts.append(f"l{i}(x)")
        env["slow"] = self._slow_lift
        body = "\n".join(f"        {r}" for r in reads) or "        pass"
        src = (
            "def lift(x):\n"
            "    try:\n"
            f"{body}\n"
            "    except Exception:\n"
            "        return slow(x)\n"
            f"    return ({', '.join(parts)},)\n"
        )
        exec(src, env)
        return env["lift"]  # type: ignore[no-any-return]

    def _slow_lift(self, x: Any) -> tuple[Any, ...]:
        return tuple(m.lift(x) for m in self.monoids)

    def field_lowers(self) -> dict[str, tuple[int, Callable[[Any], Any] | None]]:
        """Per field: (its index in an aggregate, its monoid's ``lower``, or None when that
        is the identity): to lower a column of aggregates one field at a time."""
        return {
            name: (i, None if type(m).lower is MonoidBase.lower else m.lower)
            for i, (name, m) in enumerate(zip(self.names, self.monoids, strict=True))
        }

    def _build_lower(self) -> Callable[[tuple[Any, ...]], dict[str, Any]]:
        env: dict[str, Any] = {f"w{i}": m.lower for i, m in enumerate(self.monoids)}
        env["names"] = self.names
        parts = []
        for i, m in enumerate(self.monoids):
            plain = type(m).lower is MonoidBase.lower
            parts.append(f"names[{i}]: a[{i}]" if plain else f"names[{i}]: w{i}(a[{i}])")
        src = f"lambda a: {{{', '.join(parts)}}}"
        return eval(src, env)  # type: ignore[no-any-return]

    def describe(self) -> dict[str, Any]:
        return {
            "kind": "Record",
            "fields": {
                k: (m.describe() if hasattr(m, "describe") else {"kind": type(m).__name__})
                for k, m in self.fields.items()
            },
        }

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={m!r}" for k, m in self.fields.items())
        return f"Record({inner})"


def catalog() -> dict[str, type[MonoidBase]]:
    """The built-in monoids by name (the service's catalog builds on this)."""
    kinds: Sequence[type[MonoidBase]] = (
        Count,
        Sum,
        Min,
        Max,
        Mean,
        Variance,
        StdDev,
        GeometricMean,
        ArgMax,
        ArgMin,
        First,
        Last,
        MaxCount,
        Concat,
    )
    return {k.__name__: k for k in kinds}


def capabilities(monoid: Any) -> frozenset[str]:
    """What ``monoid`` declares it can do, of ``"commutative"``, ``"inverse"`` and
    ``"selection"``; a :class:`Record` also ``"inverse-or-selection"`` when each field is one
    or the other (SlickDeque runs such a record field by field)."""
    out = set()
    if getattr(monoid, "commutative", False):
        out.add("commutative")
    if getattr(monoid, "invertible", False) and callable(getattr(monoid, "inverse", None)):
        out.add("inverse")
    if getattr(monoid, "selection", False):
        out.add("selection")
    parts = getattr(monoid, "monoids", None) if isinstance(monoid, Record) else (monoid,)
    if parts and all(
        getattr(m, "selection", False) or getattr(m, "invertible", False) for m in parts
    ):
        out.add("inverse-or-selection")
    return frozenset(out)
