"""Every aggregation algorithm a window can run, by the name ``CreateWindow`` takes
(``WindowSpec.algorithm``), with its fact card and what it refuses.

* ``AMTA``, ``LMTA``: the Monoid Tree Aggregators (paper ``002_*``), middle levels in Redis;
* ``TWO_STACKS``, ``TWO_STACKS_LITE``, ``DABA``, ``DABA_LITE`` (``004_*``);
* ``FLATFAT``, ``BINT`` (``001_*``), ``FLATFIT`` (``000_*``), ``SLICKDEQUE`` (``003_*``).

The last eight are :class:`~.fifo.AggregatorWindow` engines: all in the process, durable
through checkpoints of their items (:mod:`.fifo`). Modules load on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from .fifo import EngineRefusal, FactCard, check_engine

__all__ = [
    "ALGORITHMS",
    "EngineRefusal",
    "FactCard",
    "answers_ranges",
    "card",
    "check_algorithm",
    "engine_class",
]

# name -> (module, class) of its window
_WHERE: dict[str, tuple[str, str]] = {
    "AMTA": ("amta", "AmortizedMTA"),
    "LMTA": ("lmta", "LogMTA"),
    "TWO_STACKS": ("two_stacks", "TwoStacks"),
    "TWO_STACKS_LITE": ("two_stacks_lite", "TwoStacksLite"),
    "DABA": ("daba", "DABA"),
    "DABA_LITE": ("daba_lite", "DABALite"),
    "FLATFAT": ("flatfat", "FlatFAT"),
    "BINT": ("bint", "BInt"),
    "FLATFIT": ("flatfit", "FlatFIT"),
    "SLICKDEQUE": ("slickdeque", "SlickDeque"),
}
ALGORITHMS: tuple[str, ...] = tuple(_WHERE)

_MTA_CARDS = {
    "AMTA": FactCard(
        name="AMTA",
        full_name="Amortized Monoid Tree Aggregator",
        paper="002: the MTA paper, section 4.2 (Algorithms 1-6)",
        ordering="FIFO (in order)",
        requires="a monoid: associative with an identity; no inverse, need not commute",
        time="insert O(1) amortized, O(log n) worst case; query O(1)",
        space="O(n) pairs, of which O(log n) in the process (tails, stack, head cache)",
        bulk="evicting any k items at once: O(log n)",
        storage="middle levels in Redis; tails, stack, result pair and head cache local",
        deviations="search, then commit; whole-window eviction (see mta_window.py)",
    ),
    "LMTA": FactCard(
        name="LMTA",
        full_name="Log Monoid Tree Aggregator",
        paper="002: the MTA paper, section 4.1",
        ordering="FIFO (in order)",
        requires="a monoid: associative with an identity; no inverse, need not commute",
        time="insert and query O(log n) worst case",
        space="O(n) pairs, of which O(log n) in the process",
        bulk="evicting any k items at once: O(log n)",
        storage="middle levels in Redis; tails and head cache local",
        deviations="search, then commit; whole-window eviction (see mta_window.py)",
    ),
}


def engine_class(name: str) -> Any:
    """The window class of algorithm ``name`` (KeyError for an unknown name)."""
    module, cls = _WHERE[name]
    return getattr(importlib.import_module(f"{__package__}.{module}"), cls)


def card(name: str) -> FactCard:
    """The fact card of algorithm ``name``."""
    if name in _MTA_CARDS:
        return _MTA_CARDS[name]
    return engine_class(name).aggregator.card  # type: ignore[no-any-return]


def answers_ranges(name: str) -> bool:
    """Whether algorithm ``name`` answers query-time ranges (a suffix of the window in
    O(log n): :mod:`.suffix`): the MTAs, FlatFAT, B-Int and FlatFIT."""
    if name in _MTA_CARDS:
        return True
    return bool(engine_class(name).aggregator.answers_ranges)


def check_algorithm(name: str, monoid: Any, policy: Any = None) -> None:
    """Refuse (:class:`~.fifo.EngineRefusal`) a monoid or policy algorithm ``name`` cannot
    run, naming what is missing; the MTAs run any monoid and policy."""
    if name in _MTA_CARDS:
        return
    check_engine(engine_class(name).aggregator, monoid, policy)
