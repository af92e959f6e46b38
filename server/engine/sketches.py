"""Sliding sketches: distinct counts, quantiles and heavy hitters as monoids, on the Apache
DataSketches library (``datasketches``).

A sketch is a mergeable summary: ``combine`` is the library's union / merge, so a sketch fits
the window engines like any monoid, and a row that leaves a window really leaves it (the tree
combines only the sketches of the rows still inside; nothing is ever subtracted).

=============  ==========================  ====================================================
monoid         sketch                      lowered to
=============  ==========================  ====================================================
``Distinct``   HLL (``hll_sketch``, HLL_8)  the estimated number of distinct values (a float)
``Quantiles``  KLL (``kll_doubles_sketch``) the values at the given fractions (floats), in their
                                           order; ``None`` when empty
``TopK``       frequent items               the ``k`` most frequent values with their estimated
               (``frequent_strings_sketch``) counts, most frequent first; ``None`` when empty
=============  ==========================  ====================================================

HLL rather than CPC: at the same ``lg_k`` CPC is about 40% smaller, but its union is as slow as
HLL's and its per-item sketch is not faster; HLL's list and set modes keep the sketches of few
values (every lifted row, the tree's lower levels) a few bytes long.

Aggregates are immutable values: a tuple of at most ``buffer`` (32) raw values, exact and a
few bytes (a lift is a 1-tuple, the identity ``()``), or one of the library's sketch objects,
never updated once made. ``combine(older, newer)`` concatenates two short tuples, feeds a
tuple's values into a copy of a sketch (an HLL copy goes through its bytes: 0.5 us where a
union's result takes 25), or merges two sketches into a new one; tree nodes share aggregates,
so no input is ever changed. Each sketch type is registered with the storage codecs
(:func:`~mtawindows.server.storage.codecs.register_value_type`): blocks, checkpoints, the
insert log and keyed tables hold the sketch's own serialization, never pickle.

The monoid laws hold exactly on the serialized state while it is exact (the identity always
gives the other operand itself; short tuples concatenate), and past that for what the sketches
answer, not their bytes: an HLL union is a register-wise max (the same registers in any
grouping, but a copy fed values keeps its HIP estimator where a union switches to the
composite one), KLL's compaction is randomized and frequent items' purge depends on the
order, so two groupings give two answers, each within the sketch's error bound
(:func:`error_bounds` gives those bounds for a window's answer).

Capabilities: commutative, neither invertible nor a selection (SlickDeque refuses them), no
columnar kernel (per-row results come from the engine).

Glossary for Beam and Spark users: ``lift ~ prepare``, ``combine ~ merge_accumulators``,
``lower ~ extract_output``; Spark's ``approx_count_distinct`` / ``percentile_approx`` over a
tumbling window are the non-sliding relatives.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import Any

from datasketches import (  # type: ignore[import-untyped]
    HLL_8,
    frequent_items_error_type,
    frequent_strings_sketch,
    hll_sketch,
    hll_union,
    kll_doubles_sketch,
)

from ..storage import register_value_type
from .monoids import MonoidBase, _ordered

__all__ = [
    "DEFAULT_FRACTIONS",
    "Distinct",
    "Quantiles",
    "TopK",
    "error_bounds",
]

DEFAULT_FRACTIONS = (0.5, 0.9, 0.99)

# The sketches' own bytes in every codec (the tags name the formats in stored bytes: keep them)
register_value_type(
    hll_sketch, "hll", lambda s: s.serialize_compact(), hll_sketch.deserialize
)  # fmt: skip
register_value_type(
    kll_doubles_sketch, "kll_doubles", lambda s: s.serialize(), kll_doubles_sketch.deserialize
)
register_value_type(
    frequent_strings_sketch,
    "frequent_strings",
    lambda s: s.serialize(),
    frequent_strings_sketch.deserialize,
)


def _int_param(owner: str, name: str, v: Any, lo: int, hi: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        msg = f"{owner}: {name} must be an int in [{lo}, {hi}], got {v!r}"
        raise ValueError(msg)
    return v


class _Sketch(MonoidBase):
    """What the three share: an aggregate is a tuple of at most :attr:`buffer` raw values
    (exact, a few bytes; the identity is ``()``) or a sketch. ``combine`` concatenates two
    short tuples, feeds a tuple's values into a *copy* of a sketch, and merges two sketches
    into a new one; it never updates an input."""

    commutative = True
    identity: Any = ()
    #: raw values an aggregate keeps before it becomes a sketch (a lift is a 1-tuple)
    buffer = 32

    # -- what each sketch gives
    def _key(self, v: Any) -> Any:  # pragma: no cover - abstract
        """``v`` checked, as the sketch's ``update`` takes it."""
        raise NotImplementedError

    def _new(self) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def _copy(self, sketch: Any) -> Any:
        """An updatable copy of ``sketch`` (a merge into a new one)."""
        s = self._new()
        s.merge(sketch)
        return s

    def _merge(self, older: Any, newer: Any) -> Any:
        s = self._new()
        s.merge(older)
        s.merge(newer)
        return s

    def _params(self) -> dict[str, Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    # -- the monoid
    def _lift_value(self, v: Any) -> tuple[Any]:
        return (self._key(v),)

    def sketch_of(self, agg: Any) -> Any:
        """The sketch ``agg`` stands for (a new one of a tuple's values; never update it)."""
        if agg.__class__ is not tuple:
            return agg
        s = self._new()
        update = s.update
        for v in agg:
            update(v)
        return s

    def _fed(self, sketch: Any, values: tuple[Any, ...]) -> Any:
        s = self._copy(sketch)
        update = s.update
        for v in values:
            update(v)
        return s

    def combine(self, older: Any, newer: Any) -> Any:
        if older.__class__ is tuple:
            if newer.__class__ is tuple:
                if len(older) + len(newer) <= self.buffer:
                    return older + newer
                return self.sketch_of(older + newer)
            return self._fed(newer, older) if older else newer
        if newer.__class__ is tuple:
            return self._fed(older, newer) if newer else older
        return self._merge(older, newer)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), **self._params()}

    def __repr__(self) -> str:
        args = [] if self.field is None else [repr(self.field)]
        args += [f"{k}={v!r}" for k, v in self._params().items()]
        return f"{type(self).__name__}({', '.join(args)})"


def _number_key(v: Any) -> int | float | str:
    """A number as HLL hashes it: an integral float as its int (3.0 is 3), an integer past
    int64 as its text; NaN and infinities as floats."""
    if v.__class__ is float:
        if not v.is_integer():
            return v
        return int(v) if -(2**63) <= v < 2**63 else str(int(v))
    if isinstance(v, numbers.Integral):
        i = int(v)
        return i if -(2**63) <= i < 2**63 else str(i)
    return _number_key(float(v))


class Distinct(_Sketch):
    """Estimated number of distinct values: an HLL sketch (``lg_k`` 4 to 21, default 12: a
    relative standard error of about ``1.04 / sqrt(2**lg_k)``, 1.6% at 12).

    Values are ints, floats, strings or bools; numbers equal in Python count as one value
    (``3`` and ``3.0``; a bool as its int). Exact up to :attr:`buffer` rows (the count of the
    distinct values kept); the empty window's count is ``0.0``.
    """

    def __init__(self, field: str | None = None, *, lg_k: int = 12) -> None:
        self.lg_k = _int_param("Distinct", "lg_k", lg_k, 4, 21)
        super().__init__(field)

    def _params(self) -> dict[str, Any]:
        return {"lg_k": self.lg_k}

    def _key(self, v: Any) -> Any:
        c = v.__class__
        if c is str or (c is int and -(2**63) <= v < 2**63):
            return v
        if c is not bool and isinstance(v, numbers.Real):
            return _number_key(v)
        if c is bool:
            return int(v)
        msg = f"Distinct: expected an int, float, string or bool, got {type(v).__name__} {v!r}"
        raise TypeError(msg)

    def _new(self) -> Any:
        return hll_sketch(self.lg_k, HLL_8)

    def _copy(self, sketch: Any) -> Any:
        # through its bytes: 0.5 us where a union's result takes 25 (lg_k 12)
        return hll_sketch.deserialize(sketch.serialize_updatable())

    def _merge(self, older: Any, newer: Any) -> Any:
        u = hll_union(self.lg_k)
        u.update(older)
        u.update(newer)
        return u.get_result(HLL_8)

    def lower(self, agg: Any) -> float:
        if agg.__class__ is tuple:
            return float(len(set(agg)))
        return float(agg.get_estimate())


def _fractions(owner: str, fractions: Any) -> tuple[float, ...]:
    if isinstance(fractions, str) or not isinstance(fractions, Sequence) or not fractions:
        msg = f"{owner}: fractions must be a non-empty sequence of numbers in [0, 1], got {fractions!r}"
        raise ValueError(msg)
    out = []
    for f in fractions:
        if isinstance(f, bool) or not isinstance(f, int | float) or not 0.0 <= f <= 1.0:
            msg = f"{owner}: each fraction must be a number in [0, 1], got {f!r}"
            raise ValueError(msg)
        out.append(float(f))
    return tuple(out)


class Quantiles(_Sketch):
    """The values at ``fractions`` of the window's values (a KLL sketch of accuracy ``k``, 8
    to 65535, default 200: a normalized rank error of about 1.33% at 200, 99% confidence).

    ``lower`` gives one float per fraction, in their order: the smallest value whose rank (the
    share of values at or below it) is at least the fraction, so exact up to ``k`` values (it
    is numpy's ``quantile(..., method="inverted_cdf")``), and past them within the rank error.
    ``None`` when the window is empty. NaN is refused (it has no rank).
    """

    def __init__(
        self,
        field: str | None = None,
        *,
        fractions: Sequence[float] = DEFAULT_FRACTIONS,
        k: int = 200,
    ) -> None:
        self.fractions = _fractions("Quantiles", fractions)
        self.k = _int_param("Quantiles", "k", k, 8, 65535)
        super().__init__(field)

    def _params(self) -> dict[str, Any]:
        return {"fractions": list(self.fractions), "k": self.k}

    def _key(self, v: Any) -> float:
        if v.__class__ is float and v == v:
            return v
        return float(_ordered("Quantiles", v))

    def _new(self) -> Any:
        return kll_doubles_sketch(self.k)

    def lower(self, agg: Any) -> list[float] | None:
        if not agg or (agg.__class__ is not tuple and agg.is_empty()):
            return None
        sketch = self.sketch_of(agg)
        return [float(q) for q in sketch.get_quantiles(self.fractions, inclusive=True)]


# how a field's values are keys of a frequent_strings sketch, and back
_TO_KEY: dict[str, Callable[[Any], str]] = {
    "STRING": str,
    "INT64": lambda v: str(int(v)),
    "BOOL": lambda v: "1" if v else "0",
}
_FROM_KEY: dict[str, Callable[[str], Any]] = {
    "STRING": str,
    "INT64": int,
    "BOOL": lambda t: t == "1",
}
_NO_FALSE_NEGATIVES = frequent_items_error_type.NO_FALSE_NEGATIVES
_ESTIMATE = itemgetter(1)  # of a row (item, estimate, lower bound, upper bound)


class TopK(_Sketch):
    """The ``k`` most frequent values with their estimated counts, most frequent first (ties
    by value): a frequent items sketch (Misra-Gries) whose map holds ``2**lg_map_size`` entries
    (default: the least power of two >= 1024 and >= 4k; 3/4 of them can be tracked).

    ``item_type`` is the values' type: ``"STRING"`` (default), ``"INT64"`` or ``"BOOL"``;
    ``lower`` gives ``[{"item": value, "count": estimate}, ...]`` with values of that type,
    ``None`` when the window is empty. Exact while the window holds fewer distinct values than
    the map tracks; past that a count is off by at most ``epsilon * n`` (``n`` rows, epsilon
    = 3.5 / 2**lg_map_size), and never below the true count.
    """

    def __init__(
        self,
        field: str | None = None,
        *,
        k: int = 10,
        lg_map_size: int | None = None,
        item_type: str = "STRING",
    ) -> None:
        self.k = _int_param("TopK", "k", k, 1, 10_000)
        least = max(10, (4 * self.k - 1).bit_length())
        self.lg_map_size = (
            least if lg_map_size is None else _int_param("TopK", "lg_map_size", lg_map_size, 3, 26)
        )
        if 3 * 2**self.lg_map_size // 4 < self.k:
            msg = (
                f"TopK: lg_map_size {self.lg_map_size} tracks {3 * 2**self.lg_map_size // 4} "
                f"values, fewer than k = {self.k}; expected lg_map_size >= {least}"
            )
            raise ValueError(msg)
        if item_type not in _TO_KEY:
            msg = f"TopK: item_type must be one of {sorted(_TO_KEY)}, got {item_type!r}"
            raise ValueError(msg)
        self.item_type = item_type
        self._item = _FROM_KEY[item_type]
        super().__init__(field)

    def _params(self) -> dict[str, Any]:
        return {"k": self.k, "lg_map_size": self.lg_map_size, "item_type": self.item_type}

    def _key(self, v: Any) -> str:
        kind = self.item_type
        if kind == "STRING":
            ok = v.__class__ is str or isinstance(v, str)
        elif kind == "BOOL":
            ok = isinstance(v, bool)
        else:
            ok = isinstance(v, numbers.Integral) and not isinstance(v, bool)
        if not ok:
            want = {"STRING": "a string", "INT64": "an int", "BOOL": "a bool"}[kind]
            msg = f"TopK: expected {want} (item_type {kind}), got {type(v).__name__} {v!r}"
            raise TypeError(msg)
        return _TO_KEY[kind](v)

    def _new(self) -> Any:
        return frequent_strings_sketch(self.lg_map_size)

    def lower(self, agg: Any) -> list[dict[str, Any]] | None:
        if not agg or (agg.__class__ is not tuple and agg.is_empty()):
            return None
        rows = self.sketch_of(agg).get_frequent_items(_NO_FALSE_NEGATIVES, 0)
        k = self.k
        if len(rows) > k:  # the k largest estimates and their ties, by a sort in C
            rows.sort(key=_ESTIMATE, reverse=True)
            kth = rows[k - 1][1]
            end = k
            while end < len(rows) and rows[end][1] == kth:
                end += 1
            rows = rows[:end]
        item = self._item
        # most frequent first, ties by value (as the field's type orders them)
        best = sorted((-r[1], item(r[0])) for r in rows)[:k]
        return [{"item": v, "count": -c} for c, v in best]


def error_bounds(monoid: Any, agg: Any, *, num_std_devs: int = 3) -> dict[str, Any]:
    """What the sketch ``agg`` of ``monoid`` promises, from the library's own bound functions:

    * Distinct: ``{"lower": ..., "upper": ...}``, the estimate's bounds at ``num_std_devs``
      (1 to 3) standard deviations;
    * Quantiles: ``{"rank_error": ...}``, the normalized rank error (99% confidence) of any
      answered fraction: the true rank of the value given lies within it of the fraction;
    * TopK: ``{"max_error": ..., "epsilon": ..., "items": {value: (lower, upper)}}``: every
      count is within ``max_error`` (``epsilon`` times the rows) of the true one, and each
      tracked value's true count is within its (lower, upper).
    """
    if isinstance(monoid, Distinct) and agg.__class__ is tuple:  # exact
        return {"lower": monoid.lower(agg), "upper": monoid.lower(agg)}
    agg = monoid.sketch_of(agg) if isinstance(monoid, _Sketch) else agg
    if isinstance(monoid, Distinct):
        return {
            "lower": float(agg.get_lower_bound(num_std_devs)),
            "upper": float(agg.get_upper_bound(num_std_devs)),
        }
    if isinstance(monoid, Quantiles):
        return {"rank_error": float(kll_doubles_sketch.get_normalized_rank_error(monoid.k, False))}
    if isinstance(monoid, TopK):
        lg = monoid.lg_map_size
        rows = agg.get_frequent_items(_NO_FALSE_NEGATIVES, 0)
        return {
            "max_error": float(frequent_strings_sketch.get_apriori_error(lg, agg.total_weight)),
            "epsilon": float(frequent_strings_sketch.get_epsilon_for_lg_size(lg)),
            "items": {monoid._item(r[0]): (int(r[2]), int(r[3])) for r in rows},
        }
    msg = f"error_bounds: expected a Distinct, Quantiles or TopK monoid, got {monoid!r}"
    raise TypeError(msg)
