"""The service: streams, their windows and what users register on them.

Modules, by idea:

* the streams: ``registry`` (create/delete, adopt/release/drop), ``definitions`` (what users
  defined, persisted in Redis), ``durability`` (flush, journaling, recovery), ``ownership``
  (this server's streams in the cluster: leases, placement, hand-over);
* one stream: ``stream`` (its ingestion), ``batch`` (what an append asks, the batch on its way
  in), ``columns`` (a batch's columns against the schema), ``reorder`` (the lateness rule and
  reorder buffer), ``state`` (a stream's state and its JSON), ``hosted_window`` (one window of
  a stream: its engine, results and stats), ``fanout`` (results to subscribers), ``ranges``
  (query-time ranges: a suffix of a window, asked at query time);
* keyed streams: ``keyed`` (a window instance per key, keys by key group, the key cache);
* definitions into engines: ``window_builder`` (``build_window``), ``monoid_catalog``,
  ``plugins``, ``policy_catalog``, ``cel`` (expression policies), ``columnar_lift``,
  ``compiled`` (what a definition compiles to), ``specs`` (creation checks);
* refusals and bounds: ``refusals`` (``ServiceError`` and its builders), ``limits`` (the
  server's limits), ``inputs`` (the bounds of every request field).

    from mtawindows.server.service import Registry, Limits, ServiceError
"""

from .batch import FINAL, NONE, PER_ROW, Batch, Deferred
from .hosted_window import HostedWindow
from .keyed import KeyCache, KeyedStream
from .limits import Limits
from .refusals import (
    ServiceError,
    batch_too_large,
    invalid,
    new_error_id,
    store_failed,
    store_unavailable,
)
from .registry import Registry
from .specs import STREAM_NAME, check_policy_numbers, check_stream_spec
from .state import SEQUENCE_GAP_AFTER_CRASH, StreamState
from .stream import Stream

__all__ = [
    "FINAL",
    "NONE",
    "PER_ROW",
    "SEQUENCE_GAP_AFTER_CRASH",
    "STREAM_NAME",
    "Batch",
    "Deferred",
    "HostedWindow",
    "KeyCache",
    "KeyedStream",
    "Limits",
    "Registry",
    "ServiceError",
    "Stream",
    "StreamState",
    "batch_too_large",
    "check_policy_numbers",
    "check_stream_spec",
    "invalid",
    "new_error_id",
    "store_failed",
    "store_unavailable",
]
