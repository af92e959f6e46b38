"""The calls a server is answering (:class:`InFlight`), so that a graceful stop waits for them
and for nothing else.

gRPC's own graceful stop (``server.stop(grace)``) waits until every call the core accepted has
ended, or the grace is over. A call that reached the core as the stop began but never reached
a handler (the serving loop had already stopped taking calls) is among those: it holds the stop
for the whole grace, and with it the stream's lease, so the call's client (and every other
caller of the stream) waits the grace before the stream moves. The server counts the calls its
handlers took instead, from the handler's start to the RPC's end (its status sent), and once
none is left it ends the stop (the calls that reached no handler are cancelled: UNAVAILABLE,
and a client resends an idempotent one elsewhere).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

__all__ = ["InFlight"]


class InFlight:
    """The calls whose handler started and whose RPC has not ended, by method."""

    def __init__(self) -> None:
        self.by_method: Counter[str] = Counter()
        self._idle = asyncio.Event()
        self._idle.set()

    def __len__(self) -> int:
        return self.by_method.total()

    def enter(self, method: str, context: Any) -> None:
        """A handler of ``method`` started: counted until its RPC ends (``context``'s done
        callback, on the event loop, once the status went out or the call was cancelled)."""
        self.by_method[method] += 1
        self._idle.clear()
        context.add_done_callback(lambda _: self._leave(method))

    def _leave(self, method: str) -> None:
        self.by_method[method] -= 1
        if self.by_method[method] <= 0:
            del self.by_method[method]
        if not self.by_method:
            self._idle.set()

    async def drained(self, timeout: float | None) -> bool:
        """Wait until no call is in flight (True), or ``timeout`` seconds (False)."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            return False
        return True

    def describe(self) -> str:
        """The calls in flight, by method (for the log of a stop that waits for them)."""
        return ", ".join(f"{m} x{n}" for m, n in sorted(self.by_method.items())) or "none"
