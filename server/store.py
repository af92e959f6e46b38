"""``mtawindows.server.store``, the flat layout's path of the stores and level queues (kept
working): :mod:`~mtawindows.server.storage.protocol`, :mod:`~mtawindows.server.storage.memory`,
:mod:`~mtawindows.server.engine.levels`, :mod:`~mtawindows.server.storage.redis_store`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .engine.levels import Level, MemoryLevel, TieredLevel
from .sentinels import EMPTY
from .storage.memory import MemoryStore
from .storage.protocol import (
    CorruptDataError,
    Pair,
    PairStore,
    SealedPair,
    StoreError,
    StoreStats,
    StoreUnavailableError,
    WouldBlock,
    check_sizes,
)

if TYPE_CHECKING:
    from .storage.redis_store import RedisStore

__all__ = [
    "EMPTY",
    "CorruptDataError",
    "Level",
    "MemoryLevel",
    "MemoryStore",
    "Pair",
    "PairStore",
    "RedisStore",
    "SealedPair",
    "StoreError",
    "StoreStats",
    "StoreUnavailableError",
    "TieredLevel",
    "WouldBlock",
    "check_sizes",
]


def __getattr__(name: str) -> Any:
    if name == "RedisStore":  # imported lazily: in-memory users never load redis
        from .storage.redis_store import RedisStore

        return RedisStore
    msg = f"module {__name__!r} has no attribute {name!r}"
    raise AttributeError(msg)
