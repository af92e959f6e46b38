"""The service: streams, their windows and what users register on them (catalog of monoids
and policies, CEL expressions, input limits, the result fan-out).

Modules: ``registry`` (the streams, create/delete, flush, recovery, restore), ``stream`` (one
stream's ingestion), ``batch`` (what an append asks, the batch on its way in), ``columns`` (a
batch's columns against the schema), ``reorder`` (the lateness rule and reorder buffer),
``state`` (a stream's state and its JSON), ``window`` (one window's results and stats),
``specs`` (creation checks of definitions), ``errors`` (ServiceError and its builders),
``limits``, ``catalog``, ``cel``, ``inputs`` and ``fanout``.

``mtawindows.server.service`` was one module in the flat layout; its public names stay here.
"""

from .batch import FINAL, NONE, PER_ROW, Batch, Deferred
from .errors import (
    ServiceError,
    batch_too_large,
    invalid,
    new_error_id,
    store_failed,
    store_unavailable,
)
from .limits import Limits
from .registry import Registry
from .specs import STREAM_NAME, check_policy_numbers, check_stream_spec
from .state import SEQUENCE_GAP_AFTER_CRASH, StreamState
from .stream import Stream
from .window import Window

__all__ = [
    "FINAL",
    "NONE",
    "PER_ROW",
    "SEQUENCE_GAP_AFTER_CRASH",
    "STREAM_NAME",
    "Batch",
    "Deferred",
    "Limits",
    "Registry",
    "ServiceError",
    "Stream",
    "StreamState",
    "Window",
    "batch_too_large",
    "check_policy_numbers",
    "check_stream_spec",
    "invalid",
    "new_error_id",
    "store_failed",
    "store_unavailable",
]
