"""The engine's markers for "no value": one object each, shared by the engine, its stores and
their codecs (identity checks with ``is``; they survive pickling and a round trip through the
store). The only "nothing" markers of the server: add a new one here, never an ``object()``.

* :data:`EMPTY`: an empty slot of a pair (the paper's ∅), never the monoid's identity: a
  lifted value may legitimately equal the identity (a sum of zeros), and it must still count
  as an item;
* :data:`NOTHING`: the aggregate of no item for monoids whose identity is "no value yet"
  (``First``, ``Last``; they lower it to ``None``);
* :data:`UNSET`: "not computed" inside an algorithm (a total to recompute, an optional
  argument not given); never stored.
"""

from __future__ import annotations

from typing import Any

__all__ = ["EMPTY", "NOTHING", "UNSET"]


class _Sentinel:
    """A named marker: prints as ``shown`` and pickles (or copies) as the module's global
    ``name``, so a round trip gives back the very object."""

    __slots__ = ("_name", "_shown")

    def __init__(self, name: str, shown: str) -> None:
        self._name = name
        self._shown = shown

    def __repr__(self) -> str:
        return self._shown

    def __reduce__(self) -> str:
        return self._name


EMPTY: Any = _Sentinel("EMPTY", "∅")
NOTHING: Any = _Sentinel("NOTHING", "NOTHING")
UNSET: Any = _Sentinel("UNSET", "UNSET")
