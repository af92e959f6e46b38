"""Storage: the :class:`~.protocol.PairStore` protocol the engine writes level pairs through
and the :class:`~.protocol.CheckpointedWindow` protocol a store sees its window through; the
memory and Redis stores, their codecs, the embedded Redis (with its data-directory lock and its
child processes) and the service's stream journal.
Imports nothing above it (the engine reaches it, never the other way round).

:func:`reopen_store` finds a window's durable store again by its id: the engine reopens a
window through it without knowing which store that is.
"""

from __future__ import annotations

from typing import Any

from .protocol import WindowStore

__all__ = ["reopen_store"]


def reopen_store(window_id: str, *, url: str | None = None, **options: Any) -> WindowStore:
    """The durable store of the existing window ``window_id`` (``LookupError`` when there is
    none). Windows are durable in Redis: ``url`` (default ``$MTAWINDOWS_REDIS_URL``, else the
    embedded server) and ``options`` go to
    :meth:`~mtawindows.server.storage.redis_store.RedisStore.reopen`."""
    from .redis_store import RedisStore  # imported on use: in-memory users never load redis

    return RedisStore.reopen(window_id, url=url, **options)
