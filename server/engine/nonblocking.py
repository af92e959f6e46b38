"""The non-blocking path: a window operation called with ``nonblocking=True`` (the service's
event loop) must not wait for the window's store. The window holds its store in non-blocking
mode for that one call; anything that would wait (a journal append, a reload, a miss, a
refill in flight, a large eviction) raises
:class:`~mtawindows.server.storage.protocol.WouldBlock` before the window changed, and the
caller retries where it may wait.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..storage.protocol import PairStore, WindowStore, WouldBlock

__all__ = ["MAX_EVICT", "NonBlockingCall", "WaitingAllowed", "ensure_local"]

MAX_EVICT = 64  # larger evictions are left to a caller that may wait


class NonBlockingCall:
    """``with NonBlockingCall(store, hook, stale, flush_full_blocks):`` a window's ``store``
    is non-blocking for the duration.

    Refuses at once when the call would wait anyway: the window's durable store (``hook``,
    or ``None``) logs every operation, or the window is ``stale`` (it must reload after a
    store failure). On the way out it calls ``flush_full_blocks``: the level buffers that
    filled up meanwhile are queued for writing."""

    __slots__ = ("_flush", "_hook", "_stale", "_store")

    def __init__(
        self,
        store: PairStore,
        hook: WindowStore | None,
        stale: bool,
        flush_full_blocks: Callable[[], None],
    ) -> None:
        self._store = store
        self._hook = hook
        self._stale = stale
        self._flush = flush_full_blocks

    def __enter__(self) -> None:
        hook = self._hook
        if (hook is not None and hook.durable) or self._stale:
            raise WouldBlock
        self._store.nonblocking = True

    def __exit__(self, *exc: object) -> None:
        self._store.nonblocking = False
        self._flush()


class WaitingAllowed:
    """``with WaitingAllowed(store):`` a non-blocking store may wait for the duration (the
    debug checker reads everything). No-op for a blocking store or none."""

    __slots__ = ("_held", "_store")

    def __init__(self, store: Any) -> None:
        self._store = store
        self._held = store is not None and store.nonblocking

    def __enter__(self) -> None:
        if self._held:
            self._store.nonblocking = False

    def __exit__(self, *exc: object) -> None:
        if self._held:
            self._store.nonblocking = True


def ensure_local(levels: list[Any], first: int, k: int, max_evict: int = MAX_EVICT) -> None:
    """With a non-blocking store, before committing an eviction of ``k`` leaves from the
    window whose oldest leaf is ``first``: at most ``max_evict`` leaves, and every pair the
    commit may read (each level from its head to its new head) local and ready, else
    :class:`WouldBlock` (nothing has changed yet; the caller undoes the inserts and retries
    where it may wait)."""
    if k > max_evict:
        raise WouldBlock
    g = first + k
    for lvl, lv in enumerate(levels):
        new_head = (g >> lvl) >> 1
        for pos in range(lv.start, min(new_head, lv.end - 1) + 1):
            if not lv.has_local(pos, ready=True):
                raise WouldBlock
