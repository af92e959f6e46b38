"""The server's limits on what clients may hold and send (:class:`Limits`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    max_streams: int = 1000
    max_windows_per_stream: int = 64
    max_batch_rows: int = 500_000
    max_message_bytes: int = 64 * 1024 * 1024
    max_subscribers: int = 1000
    result_history: int = 1000  # results kept per window for ReadResults
    # serialized results queued for one subscriber that does not keep up, and held for all
    # of them (each result once); past either the furthest behind is cut
    # (RESOURCE_EXHAUSTED, SUBSCRIBER_TOO_SLOW)
    subscriber_queue_bytes: int = 8 * 1024 * 1024
    subscribers_total_bytes: int = 256 * 1024 * 1024
    # a new CEL policy: its UTF-8 size and how deep it may nest (brackets plus operators),
    # checked before it is parsed (INVALID_ARGUMENT, CEL_TOO_LARGE / CEL_TOO_DEEP)
    max_cel_bytes: int = 4096
    max_cel_depth: int = 64
    # keyed streams: keys held by the server (every keyed stream together), the memory the
    # key cache may hold (key states in memory; the others wait in Redis), and the items a
    # key's window holds in its compact form before it becomes a full MTA
    max_keys: int = 10_000_000
    key_cache_bytes: int = 512 * 1024 * 1024
    key_compact_items: int = 64
