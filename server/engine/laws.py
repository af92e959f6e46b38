"""Monoid laws as a library (after Algebird's algebird-test): run them on your own monoids.

>>> from mtawindows.server.engine import Sum
>>> check_laws(Sum(), [0, 1, 2.5, -3]).ok
True

Each violation is labelled with the law and the offending lifted values, so a failing custom
monoid says *what* is wrong::

    report = check_laws(MyMonoid(), samples)
    assert report.ok, report.explain()

Floating-point aggregates are compared with :func:`approx_equal` (relative tolerance 1e-9),
because a window combines in a different order than a left fold.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .monoids import Monoid

__all__ = ["LawReport", "LawViolation", "approx_equal", "assert_monoid_laws", "check_laws"]


def approx_equal(a: Any, b: Any, *, rel: float = 1e-9, abs_tol: float = 1e-9) -> bool:
    """Structural equality with a tolerance on floats (NaN equals NaN)."""
    if isinstance(a, float) or isinstance(b, float):
        if isinstance(a, int | float) and isinstance(b, int | float):
            if a != a and b != b:
                return True
            if math.isinf(a) or math.isinf(b):
                return a == b
            return math.isclose(a, b, rel_tol=rel, abs_tol=abs_tol)
        return bool(a == b)
    if isinstance(a, tuple | list) and isinstance(b, tuple | list):
        return len(a) == len(b) and all(
            approx_equal(x, y, rel=rel, abs_tol=abs_tol) for x, y in zip(a, b, strict=True)
        )
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(
            approx_equal(a[k], b[k], rel=rel, abs_tol=abs_tol) for k in a
        )
    return bool(a == b)


@dataclass(frozen=True)
class LawViolation:
    law: str  # "left identity", "right identity", "associativity", "commutativity"
    operands: tuple[Any, ...]
    left: Any
    right: Any

    def __str__(self) -> str:
        ops = ", ".join(repr(o) for o in self.operands)
        return f"{self.law} fails for ({ops}): {self.left!r} != {self.right!r}"


@dataclass
class LawReport:
    monoid: str
    checked: dict[str, int] = field(default_factory=dict)
    violations: list[LawViolation] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations

    def explain(self, limit: int = 10) -> str:
        if self.ok:
            return f"{self.monoid}: all laws hold ({self.checked})"
        lines = [f"{self.monoid}: {len(self.violations)} law violation(s)"]
        lines += [f"  - {v}" for v in self.violations[:limit]]
        return "\n".join(lines)


def check_laws(
    monoid: Monoid,
    items: Iterable[Any],
    *,
    eq: Callable[[Any, Any], bool] = approx_equal,
    max_triples: int = 2000,
) -> LawReport:
    """Check identity and associativity (and commutativity when the monoid declares it) on
    the lifted ``items`` and on aggregates built from them."""
    lifted = [monoid.lift(x) for x in items]
    # aggregates of runs, too: laws must hold for partial results, not only lifted items
    values = list(lifted)
    values.extend(monoid.combine(a, b) for a, b in itertools.pairwise(lifted))
    values.append(monoid.identity)
    report = LawReport(monoid=repr(monoid))
    combine = monoid.combine
    e = monoid.identity
    report.checked["identity"] = len(values)
    for a in values:
        left = combine(e, a)
        if not eq(left, a):
            report.violations.append(LawViolation("left identity", (e, a), left, a))
        right = combine(a, e)
        if not eq(right, a):
            report.violations.append(LawViolation("right identity", (a, e), right, a))
    n = 0
    for a, b, c in itertools.product(values, repeat=3):
        if n >= max_triples:
            break
        n += 1
        left = combine(combine(a, b), c)
        right = combine(a, combine(b, c))
        if not eq(left, right):
            report.violations.append(LawViolation("associativity", (a, b, c), left, right))
    report.checked["associativity"] = n
    if getattr(monoid, "commutative", False):
        m = 0
        for a, b in itertools.product(values, repeat=2):
            m += 1
            ab, ba = combine(a, b), combine(b, a)
            if not eq(ab, ba):
                report.violations.append(LawViolation("commutativity", (a, b), ab, ba))
        report.checked["commutativity"] = m
    return report


def assert_monoid_laws(monoid: Monoid, items: Iterable[Any], **kw: Any) -> None:
    """``check_laws`` that raises ``AssertionError`` with the labelled violations."""
    report = check_laws(monoid, items, **kw)
    if not report.ok:
        raise AssertionError(report.explain())
