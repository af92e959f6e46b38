"""The engine's markers for "no value": one object each, shared by the engine, its stores and
their codecs (identity checks with ``is``; they survive a round trip through the store).

* :data:`EMPTY`: an empty slot of a pair (the paper's ∅), never the monoid's identity;
* :data:`NOTHING`: the aggregate of no item for monoids whose identity is "no value yet"
  (``First``, ``Last``);
* :data:`UNSET`: "not computed" inside an algorithm (a total to recompute, an optional
  argument not given); never stored.
"""

from __future__ import annotations

from typing import Any

__all__ = ["EMPTY", "NOTHING", "UNSET"]


class _Empty:
    """The engine's own marker for an empty slot of a pair (the paper's ∅).

    Never the monoid's identity: a lifted value may legitimately equal the identity (a sum of
    zeros), and it must still count as an item.
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return "∅"

    def __reduce__(self) -> str:
        return "EMPTY"


EMPTY: Any = _Empty()


class _Nothing:
    """The value of no item (``First``/``Last`` of an empty window lower it to ``None``)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NOTHING"

    def __reduce__(self) -> str:
        return "NOTHING"


NOTHING: Any = _Nothing()

UNSET: Any = object()
