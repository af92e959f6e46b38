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


class _Marker:
    """A named singleton: prints as ``shown``, pickles as this module's attribute ``name`` (so
    it comes back as the very same object)."""

    __slots__ = ("_name", "_shown")

    def __init__(self, name: str, shown: str) -> None:
        self._name = name
        self._shown = shown

    def __repr__(self) -> str:
        return self._shown

    def __reduce__(self) -> str:
        return self._name


EMPTY: Any = _Marker("EMPTY", "∅")
NOTHING: Any = _Marker("NOTHING", "NOTHING")
UNSET: Any = _Marker("UNSET", "UNSET")
