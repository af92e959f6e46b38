"""The engine: monoids, window slide policies and the aggregation algorithms over them.

    from mtawindows.server.engine import AmortizedMTA, LogMTA, Max, TimeRangePolicy, check_laws

Where each part lives (each module's docstring holds its part of the design):

* :mod:`.monoids`: the aggregation algebra (identity, lift, combine, lower) and the built-ins;
  :mod:`.laws`: the monoid laws as a library users run on their own monoids;
* :mod:`.policies`: window slide policies (time range, count, bounded sum, ...);
* :mod:`.lmta`, :mod:`.amta`: Log MTA and Amortized MTA (paper sections 4.1 and 4.2), one
  algorithm each with its fact card; :mod:`.mta_window`: :class:`MTAWindow`, what both share;
* :mod:`.forest`: the level machinery (absolute positions, the paper's invariants drawn);
  :mod:`.levels`: the level queues (local, or tiered through a store);
* :mod:`.checkpoint`: the durability seam (snapshot, restore, replay);
  :mod:`.nonblocking`: calls that must not wait for the store; :mod:`.ledger`: idempotency;
* :mod:`.naive` (the oracle) and :mod:`.prefix` (what it shares);
* :mod:`.algorithms`: every algorithm a window can run, by name, with its fact card; the
  reference papers' FIFO engines behind one contract in :mod:`.fifo` (:mod:`.two_stacks`,
  :mod:`.two_stacks_lite`, :mod:`.daba`, :mod:`.daba_lite`, :mod:`.flatfat`, :mod:`.bint`,
  :mod:`.flatfit`, :mod:`.slickdeque`);
* :mod:`.suffix`: query-time ranges (a suffix of a window, asked at query time);
* :mod:`.columnar`: the columnar path (whole columns in, per-row results as Arrow), loaded on
  first use;
  :mod:`.validate`: checks of user-facing arguments.

Imports only :mod:`mtawindows.server.storage` (the store protocol) and the sentinels; knows
nothing of streams, Redis keys or gRPC.
"""

from typing import Any

from .algorithms import ALGORITHMS, EngineRefusal, FactCard, card, check_algorithm, engine_class
from .amta import AmortizedMTA
from .bint import BInt
from .daba import DABA
from .daba_lite import DABALite
from .fifo import Aggregator, AggregatorWindow
from .flatfat import FlatFAT
from .flatfit import FlatFIT
from .laws import LawReport, LawViolation, approx_equal, assert_monoid_laws, check_laws
from .lmta import LogMTA
from .monoids import (
    ArgMax,
    ArgMin,
    ArgResult,
    Concat,
    Count,
    First,
    GeometricMean,
    Last,
    Max,
    MaxCount,
    Mean,
    Min,
    Monoid,
    MonoidBase,
    Record,
    StdDev,
    Sum,
    Variance,
    capabilities,
)
from .mta_window import MTAWindow, WindowCorruptedError
from .naive import NaiveWindow
from .policies import (
    AllOf,
    AnyOf,
    BoundedSumPolicy,
    CountPolicy,
    MaxSubWindowPolicy,
    Policy,
    TimeRangePolicy,
    bind_policy,
)
from .slickdeque import SlickDeque
from .suffix import RangeNotSupportedError
from .two_stacks import TwoStacks
from .two_stacks_lite import TwoStacksLite

__all__ = [
    "ALGORITHMS",
    "DABA",
    "Aggregator",
    "AggregatorWindow",
    "AllOf",
    "AmortizedMTA",
    "AnyOf",
    "ArgMax",
    "ArgMin",
    "ArgResult",
    "BInt",
    "BatchResult",
    "BoundedSumPolicy",
    "ColumnarWindow",
    "Concat",
    "Count",
    "CountPolicy",
    "DABALite",
    "EngineRefusal",
    "FactCard",
    "First",
    "FlatFAT",
    "FlatFIT",
    "GeometricMean",
    "Last",
    "LawReport",
    "LawViolation",
    "LogMTA",
    "MTAWindow",
    "Max",
    "MaxCount",
    "MaxSubWindowPolicy",
    "Mean",
    "Min",
    "Monoid",
    "MonoidBase",
    "NaiveWindow",
    "Policy",
    "RangeNotSupportedError",
    "Record",
    "SlickDeque",
    "StdDev",
    "Sum",
    "TimeRangePolicy",
    "TwoStacks",
    "TwoStacksLite",
    "Variance",
    "WindowCorruptedError",
    "approx_equal",
    "assert_monoid_laws",
    "bind_policy",
    "capabilities",
    "card",
    "check_algorithm",
    "check_laws",
    "columnar_refusal",
    "engine_class",
]


_COLUMNAR = ("BatchResult", "ColumnarWindow", "columnar_refusal")


def __getattr__(name: str) -> Any:
    """The columnar path on first use: it imports numpy, pyarrow and numba, which the rest of
    the engine (and a server's start-up) does without."""
    if name in _COLUMNAR:
        from . import columnar

        return getattr(columnar, name)
    msg = f"module {__name__!r} has no attribute {name!r}"
    raise AttributeError(msg)
