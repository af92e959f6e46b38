"""Waiting for replicas: ``--redis-wait-replicas N`` makes every journal write and lease
acquisition wait (Redis ``WAIT`` on the same connection) until N replicas hold it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .protocol import StoreUnavailableError

__all__ = ["Waiter", "replicas_waiter"]


Waiter = Callable[[Any, str, Callable[[Any], Any]], Any]


def replicas_waiter(replicas: int, timeout_ms: int) -> Waiter | None:
    """``wait(client, key, write)``: run ``write(pipe)`` then Redis ``WAIT`` on one connection
    of the node holding ``key`` (so WAIT counts that write) and return the write's reply;
    :class:`StoreUnavailableError` when fewer than ``replicas`` replicas acknowledged it within
    ``timeout_ms`` (the write may be there: the caller treats it as unacknowledged). None for
    ``replicas`` 0: no waiting."""
    if replicas <= 0:
        return None

    def wait(client: Any, key: str, write: Callable[[Any], Any]) -> Any:
        from .connect import pipeline_on_key_node

        pipe = pipeline_on_key_node(client, key)
        write(pipe)
        pipe.execute_command("WAIT", replicas, timeout_ms)
        replies = pipe.execute()
        acked = int(replies[-1])
        if acked < replicas:
            msg = (
                f"a write of {key!r} reached {acked} of {replicas} replicas within "
                f"{timeout_ms} ms (Redis WAIT): not acknowledged"
            )
            raise StoreUnavailableError(msg)
        return replies[0]

    return wait
