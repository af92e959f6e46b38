"""Storage: the :class:`~.protocol.PairStore` protocol the engine writes level pairs through
and the :class:`~.protocol.CheckpointedWindow` protocol a store sees its window through; the
memory and Redis stores, their codecs, the embedded Redis (with its data-directory lock and its
child processes) and the service's stream journal.
Imports nothing above it (the engine reaches it, never the other way round).

:func:`reopen_store` finds a window's durable store again by its id: the engine reopens a
window through it without knowing which store that is. :func:`register_value_type` lets the
values of a type that serializes itself (the engine's sketches) through every codec.

    from mtawindows.server.storage import MemoryStore, RedisStore, PairStore, reopen_store

:class:`RedisStore` and :class:`~.embedded.EmbeddedRedis` load redis-py when first asked for
(PEP 562 ``__getattr__``): an in-memory user never imports it. The way to Redis is
:func:`mtawindows.server.storage.connect.connect` (not on the face: a name equal to its
module's would be shadowed by the module once that is imported).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .codecs import register_value_type
from .memory import MemoryStore
from .protocol import (
    CheckpointedWindow,
    CheckpointLevel,
    CorruptDataError,
    Pair,
    PairStore,
    SealedPair,
    StoreError,
    StoreStats,
    StoreUnavailableError,
    WindowStore,
    WouldBlock,
)

if TYPE_CHECKING:
    from .embedded import EmbeddedRedis, EmbeddedRedisError
    from .redis_store import RedisStore

__all__ = [
    "CheckpointLevel",
    "CheckpointedWindow",
    "CorruptDataError",
    "EmbeddedRedis",
    "EmbeddedRedisError",
    "MemoryStore",
    "Pair",
    "PairStore",
    "RedisStore",
    "SealedPair",
    "StoreError",
    "StoreStats",
    "StoreUnavailableError",
    "WindowStore",
    "WouldBlock",
    "register_value_type",
    "reopen_store",
]

# the names that need redis-py, and their modules: imported on first use
_LAZY = {
    "RedisStore": ".redis_store",
    "EmbeddedRedis": ".embedded",
    "EmbeddedRedisError": ".embedded",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        msg = f"module {__name__!r} has no attribute {name!r}"
        raise AttributeError(msg)
    return getattr(importlib.import_module(module, __name__), name)


def reopen_store(window_id: str, *, url: str | None = None, **options: Any) -> WindowStore:
    """The durable store of the existing window ``window_id`` (``LookupError`` when there is
    none). Windows are durable in Redis: ``url`` (default ``$MTAWINDOWS_REDIS_URL``, else the
    embedded server) and ``options`` go to
    :meth:`~mtawindows.server.storage.redis_store.RedisStore.reopen`."""
    from .redis_store import RedisStore  # imported on use: in-memory users never load redis

    return RedisStore.reopen(window_id, url=url, **options)
