"""Lua scripts on Redis: each registered once per client (redis-py's ``Script`` loads it with
``EVALSHA`` and falls back to ``EVAL`` after a restart or a failover)."""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["registered", "text"]

_scripts: dict[tuple[int, str], Any] = {}
_scripts_lock = threading.Lock()


def registered(client: Any, source: str) -> Any:
    """``source`` registered with ``client`` (once per client)."""
    key = (id(client), source)
    s = _scripts.get(key)
    if s is None:
        with _scripts_lock:
            s = _scripts.get(key)
            if s is None:
                s = _scripts[key] = client.register_script(source)
    return s


def text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)
