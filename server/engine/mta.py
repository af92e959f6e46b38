"""Monoid Tree Aggregator windows, the public module of the two algorithms (paper sections 4.1
and 4.2): :class:`LogMTA` and :class:`AmortizedMTA`, and the :class:`WindowCorruptedError`
they raise.

Where each part lives (each module's docstring holds its part of the design):

* :mod:`.lmta`, :mod:`.amta`: one algorithm each, with its fact card and its own deviations
  from the paper;
* :mod:`.window`: :class:`~.window.MTAWindow`, what both share (the operations, the store,
  failures) and the deviations they share;
* :mod:`.forest`: the level machinery (absolute positions, the paper's invariants drawn);
* :mod:`.checkpoint`: the durability seam (snapshot, restore, replay);
* :mod:`.nonblocking`: calls that must not wait for the store; :mod:`.ledger`: idempotency.
"""

from __future__ import annotations

from .amta import AmortizedMTA
from .lmta import LogMTA
from .window import MTAWindow, WindowCorruptedError

__all__ = ["AmortizedMTA", "LogMTA", "WindowCorruptedError"]

_MTAWindow = MTAWindow  # the base class's name before the split
