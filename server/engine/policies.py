"""Window slide policies (WSP): which old items leave the window.

A policy is any callable ``policy(total, old) -> bool`` over *lifted* aggregates, with the
semantics of the paper's Algorithm 2: on enforcement the window evicts the **longest prefix** P
(oldest items first) such that ``policy(total, agg(P))`` is true, where ``total`` is the
aggregate of the whole window *before* enforcement.

Contract (checked by the engines' tests, not at run time):

* **prefix-monotone**: if ``policy(total, agg(P))`` holds for a prefix P, it holds for every
  shorter prefix. This is what lets the engines find P by a root-to-leaf search in O(log n)
  instead of testing items one by one.
* **time-monotone** and **idempotent** (for ``extend`` to equal pushing items one at a time):
  an item that may leave the window may still leave after newer items arrive, and enforcing
  twice evicts nothing more the second time. Every single built-in policy is both. Unions can
  lose idempotence: with ``AnyOf(MaxSubWindowPolicy(), CountPolicy(n))`` the count bound may
  evict the maximum, after which the *next* enforcement evicts the items older than the new
  maximum; a batch then ends one enforcement behind a run of single pushes.
* pure: no side effects; it may be called any number of times per enforcement.

One enforcement is one pass (the paper's Algorithm 2): ``total`` is fixed before it starts.

Built-in policies are frozen dataclasses that validate their parameters on creation and
``bind(monoid)`` to a fast closure that reads the right field of a :class:`Record` aggregate.
When ``field`` is ``None`` and the monoid is a Record, the policy looks for the one field whose
monoid kind it needs (a single ``Count`` for :class:`CountPolicy`, ...) and says so clearly if
there is none or more than one. ``requirements()`` names the fields a policy needs, so a service
can add them to a user's record.
"""

from __future__ import annotations

import datetime as _dt
import numbers
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from .monoids import ArgMax, Count, Last, Max, MaxCount, Monoid, Record, Sum

__all__ = [
    "AllOf",
    "AnyOf",
    "BoundPolicy",
    "BoundedSumPolicy",
    "CountPolicy",
    "MaxSubWindowPolicy",
    "Policy",
    "TimeRangePolicy",
    "bind_policy",
]

BoundPolicy = Callable[[Any, Any], bool]


@runtime_checkable
class Policy(Protocol):
    def __call__(self, total: Any, old: Any) -> bool: ...


def bind_policy(policy: Any, monoid: Monoid) -> BoundPolicy:
    """Resolve ``policy`` against ``monoid``: built-ins bind to a closure, callables pass as is."""
    bind = getattr(policy, "bind", None)
    if bind is not None:
        return bind(monoid)  # type: ignore[no-any-return]
    if not callable(policy):
        msg = f"policy must be callable as policy(total, old) -> bool, got {type(policy).__name__}"
        raise TypeError(msg)
    return policy  # type: ignore[no-any-return]


def _getter(
    owner: str,
    monoid: Monoid,
    field_name: str | None,
    kinds: tuple[type, ...],
    role: str,
) -> int | None:
    """Index of the field to read in a Record aggregate, or None when the monoid itself is used."""
    kind_names = "/".join(k.__name__ for k in kinds)
    if isinstance(monoid, Record):
        if field_name is None:
            matches = [n for n, m in monoid.fields.items() if isinstance(m, kinds)]
            if len(matches) != 1:
                found = "none" if not matches else f"several: {matches}"
                msg = (
                    f"{owner}: cannot tell which record field holds the {role}; expected exactly "
                    f"one {kind_names} field, found {found}; pass field=... explicitly"
                )
                raise ValueError(msg)
            field_name = matches[0]
        idx = monoid.index(field_name)
        m = monoid.fields[field_name]
        if not isinstance(m, kinds):
            msg = (
                f"{owner}: field {field_name!r} must be a {kind_names} monoid holding the {role}, "
                f"got {type(m).__name__}"
            )
            raise TypeError(msg)
        return idx
    if field_name is not None:
        msg = f"{owner}: field={field_name!r} needs a Record monoid, got {type(monoid).__name__}"
        raise ValueError(msg)
    if not isinstance(monoid, kinds):
        msg = f"{owner}: needs a {kind_names} monoid (or a Record with one), got {type(monoid).__name__}"
        raise TypeError(msg)
    return None


def _difference_at_least(i: int | None, bound: Any) -> BoundPolicy:
    """The bound policy ``total - old >= bound`` over field ``i`` of a record's aggregates
    (``None``: over the aggregates themselves)."""
    if i is None:
        return lambda total, old: total - old >= bound
    return lambda total, old: total[i] - old[i] >= bound


def _check_number(owner: str, name: str, value: Any, *, strict: bool) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real | _dt.timedelta):
        msg = f"{owner}: {name} must be a number or timedelta, got {type(value).__name__} {value!r}"
        raise TypeError(msg)
    zero: Any = _dt.timedelta(0) if isinstance(value, _dt.timedelta) else 0
    if value != value or (value <= zero if strict else value < zero):
        cmp = "> 0" if strict else ">= 0"
        msg = f"{owner}: {name} must be {cmp}, got {value!r}"
        raise ValueError(msg)


@dataclass(frozen=True)
class CountPolicy:
    """Keep the newest ``size`` items (the paper's Listing 3: ``total.count - old.count >= size``).

    Needs a :class:`Count` aggregate (the monoid itself, or one Record field). ``size=0`` evicts
    everything.
    """

    size: int
    field: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.size, bool) or not isinstance(self.size, int):
            msg = f"CountPolicy: size must be an int, got {type(self.size).__name__} {self.size!r}"
            raise TypeError(msg)
        if self.size < 0:
            msg = f"CountPolicy: size must be >= 0, got {self.size!r}"
            raise ValueError(msg)

    def requirements(self) -> dict[str, Monoid]:
        return {self.field or "count": Count()}

    def bind(self, monoid: Monoid) -> BoundPolicy:
        i = _getter("CountPolicy", monoid, self.field, (Count,), "item count")
        return _difference_at_least(i, self.size)

    def __call__(self, total: Any, old: Any) -> bool:
        return bool(total - old >= self.size)


@dataclass(frozen=True)
class TimeRangePolicy:
    """Keep items newer than ``newest - range``: evict P while ``newest - ts(P's newest) >= range``.

    Needs the window's newest timestamp: a :class:`Max` or :class:`Last` over the timestamp
    field (timestamps of a stream never go backwards, so both hold the newest). ``range`` is a
    number in the timestamps' unit, or a ``timedelta`` for ``datetime`` timestamps.
    """

    range: Any
    field: str | None = None

    def __post_init__(self) -> None:
        _check_number("TimeRangePolicy", "range", self.range, strict=True)

    def requirements(self) -> dict[str, Monoid]:
        return {self.field or "ts": Max()}

    def bind(self, monoid: Monoid) -> BoundPolicy:
        i = _getter("TimeRangePolicy", monoid, self.field, (Max, Last), "newest timestamp")
        return _difference_at_least(i, self.range)

    def __call__(self, total: Any, old: Any) -> bool:
        return bool(total - old >= self.range)


@dataclass(frozen=True)
class BoundedSumPolicy:
    """The paper's running example (section 3.2): item ``d_i`` stays while the sum of it and all
    newer items is ``<= bound``. For non-negative values this keeps the longest suffix whose sum
    is at most ``bound``.

    A prefix P may leave when the suffix that starts at P's newest item sums above the bound:
    ``total.sum - old.sum + old.last > bound``. Needs a Record with a :class:`Sum` field and a
    :class:`Last` field over the same values (``requirements()`` names them).
    """

    bound: Any
    sum_field: str | None = None
    last_field: str | None = None

    def __post_init__(self) -> None:
        _check_number("BoundedSumPolicy", "bound", self.bound, strict=False)

    def requirements(self) -> dict[str, Monoid]:
        return {self.sum_field or "sum": Sum(), self.last_field or "last": Last()}

    def bind(self, monoid: Monoid) -> BoundPolicy:
        if not isinstance(monoid, Record):
            msg = (
                "BoundedSumPolicy: needs a Record with a Sum field and a Last field over the "
                f"values, got {type(monoid).__name__}"
            )
            raise TypeError(msg)
        s = _getter("BoundedSumPolicy", monoid, self.sum_field, (Sum,), "sum of values")
        last = _getter("BoundedSumPolicy", monoid, self.last_field, (Last,), "newest value")
        bound = self.bound
        return lambda total, old: total[s] - old[s] + old[last] > bound

    def __call__(self, total: Any, old: Any) -> bool:
        msg = "BoundedSumPolicy must be bound to a Record monoid; windows do this themselves"
        raise TypeError(msg)


@dataclass(frozen=True)
class MaxSubWindowPolicy:
    """Evict the older sub-window that does not hold the current maximum (paper section 5.6):
    items older than the window's maximum can never be the maximum again.

    ``old`` may leave while ``max(old) < max(total)``; the window then starts at the first
    occurrence of its maximum. Reads a :class:`Max`, :class:`ArgMax` or :class:`MaxCount`
    aggregate. Combine it with a size bound with :class:`AnyOf`, as the paper does.
    """

    field: str | None = None

    def requirements(self) -> dict[str, Monoid]:
        return {self.field or "max": Max()}

    def bind(self, monoid: Monoid) -> BoundPolicy:
        kinds = (Max, ArgMax, MaxCount)
        i = _getter("MaxSubWindowPolicy", monoid, self.field, kinds, "maximum")
        m = (
            monoid.fields[monoid.names[i]]
            if (i is not None and isinstance(monoid, Record))
            else monoid
        )
        pair = isinstance(m, ArgMax | MaxCount)
        if i is None:
            if pair:
                return lambda total, old: old[0] < total[0]
            return lambda total, old: old < total
        if pair:
            return lambda total, old: old[i][0] < total[i][0]
        return lambda total, old: old[i] < total[i]

    def __call__(self, total: Any, old: Any) -> bool:
        return bool(old < total)


def _some_policies(owner: str, policies: tuple[Any, ...]) -> tuple[Any, ...]:
    if not policies:
        msg = f"{owner}: expected at least one policy, got none"
        raise ValueError(msg)
    return policies


@dataclass(frozen=True)
class AnyOf:
    """Evict P if any of the policies would: the union of prefix-monotone policies is one."""

    policies: tuple[Any, ...] = field(default=())

    def __init__(self, *policies: Any) -> None:
        object.__setattr__(self, "policies", _some_policies("AnyOf", policies))

    def requirements(self) -> dict[str, Monoid]:
        out: dict[str, Monoid] = {}
        for p in self.policies:
            out.update(getattr(p, "requirements", dict)())
        return out

    def bind(self, monoid: Monoid) -> BoundPolicy:
        bound = tuple(bind_policy(p, monoid) for p in self.policies)
        if len(bound) == 2:
            a, b = bound
            return lambda total, old: a(total, old) or b(total, old)
        return lambda total, old: any(p(total, old) for p in bound)

    def __call__(self, total: Any, old: Any) -> bool:
        return any(p(total, old) for p in self.policies)


@dataclass(frozen=True)
class AllOf:
    """Evict P only if every policy would: the intersection of prefix-monotone policies is one."""

    policies: tuple[Any, ...] = field(default=())

    def __init__(self, *policies: Any) -> None:
        object.__setattr__(self, "policies", _some_policies("AllOf", policies))

    def requirements(self) -> dict[str, Monoid]:
        return AnyOf(*self.policies).requirements()

    def bind(self, monoid: Monoid) -> BoundPolicy:
        bound = tuple(bind_policy(p, monoid) for p in self.policies)
        return lambda total, old: all(p(total, old) for p in bound)

    def __call__(self, total: Any, old: Any) -> bool:
        return all(p(total, old) for p in self.policies)
