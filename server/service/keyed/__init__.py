"""Keyed streams: one instance of every window per key, keys by key group (stream.py), a key's
window compact or a full MTA by its size (window.py), the groups' tables in Redis (table.py)."""

from .stream import KeyCache, KeyedStream, key_not_found, not_keyed

__all__ = ["KeyCache", "KeyedStream", "key_not_found", "not_keyed"]
