"""What every window with a store shares (:class:`StoreSeam`): failures and the reload after a
store failure, idempotency keys, the window id, waiting for a checkpoint, closing. The MTA
windows (:class:`~.mta_window.MTAWindow`) and the reference papers' engines
(:class:`~.fifo.AggregatorWindow`) both are one.

A store failure leaves the local state unsure: the window is marked stale and reloads its last
durable state before its next call (or refuses, when its owner reloads it: ``on_stale``). A
monoid failure half-way through a change makes the window unusable
(:class:`WindowCorruptedError`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..storage.protocol import StoreError, StoreUnavailableError, WindowStore
from .ledger import Ledger

__all__ = ["StoreSeam", "WindowCorruptedError", "require_monoid"]


class WindowCorruptedError(RuntimeError):
    """The window's structure could not be completed because the monoid broke its contract
    (``combine`` raised on aggregates it had produced itself). The window refuses further use."""


def require_monoid(owner: str, monoid: Any) -> None:
    """TypeError naming what ``monoid`` lacks of identity, lift, combine and lower (every
    window's check of its monoid)."""
    for attr in ("identity", "lift", "combine", "lower"):
        if not hasattr(monoid, attr):
            msg = (
                f"{owner}: monoid must have identity, lift, combine and lower; "
                f"{type(monoid).__name__} has no {attr!r}"
            )
            raise TypeError(msg)


class StoreSeam:
    """Mixed into a window class that sets ``_hook`` (its :class:`WindowStore` or None),
    ``_broken``, ``_stale``, ``_ledger``, ``on_stale`` and implements ``flush`` and
    ``_record(op, items, producer_id, sequence)``."""

    # no slots of its own: the window classes hold these attributes (MTAWindow in its
    # __slots__); mypy sees the assignments below as outside slots, hence its ignores
    __slots__ = ()

    _hook: WindowStore | None
    _broken: BaseException | None
    _stale: bool
    _ledger: Ledger
    on_stale: Callable[[], None] | None

    _lower: Callable[[Any], Any]

    def flush(self, *, wait: bool = True, meta: dict[str, Any] | None = None) -> Any:
        raise NotImplementedError  # pragma: no cover - each window's

    def aggregate_range(
        self, *, count: int | None = None, time_range: Any = None, field: str | None = None
    ) -> tuple[Any, int]:
        raise NotImplementedError  # pragma: no cover - each window's

    def query_range(
        self,
        *,
        count: int | None = None,
        time_range: Any = None,
        field: str | None = None,
    ) -> Any:
        """``lower`` of :meth:`aggregate_range`: the result over a suffix of the window."""
        agg, _ = self.aggregate_range(count=count, time_range=time_range, field=field)
        return self._lower(agg)

    def _record(
        self,
        op: str,
        items: Sequence[Any],
        producer_id: str | None = None,
        sequence: int | None = None,
    ) -> None:
        raise NotImplementedError  # pragma: no cover - each window's

    @property
    def window_id(self) -> str | None:
        """The id of a store-backed window (reopen it with ``open``); ``None`` in memory."""
        return None if self._hook is None else self._hook.window_id

    def wait_flushed(self, queued: Any) -> None:
        """Wait for a checkpoint :meth:`flush` queued (``wait=False``, its return value): a
        failure marks the window as a waiting flush does, and raises."""
        if queued is None:
            return
        try:
            queued.result()
        except StoreError as ex:
            self._store_failed(ex)
            raise

    def close(self) -> None:
        """Flush, then release the store's thread and connections."""
        if self._hook is not None:
            if self._broken is None:
                self.flush()
            self._hook.close()

    # ------------------------------------------------------------------ failures
    @property
    def stale(self) -> bool:
        """A store failure left the local state unsure: the next call reloads the window's
        last durable state (or the owner calls :meth:`reload` first)."""
        return self._stale

    def reload(self) -> None:
        """Rebuild the window from its store's durable state (its last checkpoint and log)."""
        if self._hook is None:
            msg = f"{type(self).__name__}: a window in memory has no durable state to reload"
            raise TypeError(msg)
        self._reload()

    def invalidate(self, ex: BaseException) -> None:
        """The store lost or may have lost state (a restarted Redis): reload the last durable
        state on the next call, as after a store failure. No-op without a store."""
        if self._hook is not None:
            self._store_failed(ex)

    def _check_usable(self) -> None:
        if self._broken is None:
            return
        if self._stale:
            if self.on_stale is not None:
                msg = (
                    f"{type(self).__name__}: its store failed ({self._broken}); its owner "
                    "reloads it"
                )
                raise StoreUnavailableError(msg) from self._broken
            self._reload()
            return
        msg = (
            f"{type(self).__name__} is unusable: its monoid raised while the window was being "
            f"restructured ({self._broken!r}); rebuild the window"
        )
        raise WindowCorruptedError(msg) from self._broken

    def _reload(self) -> None:
        """Rebuild the window from the store's durable state (after a store failure)."""
        try:
            self._hook.reload(self)  # type: ignore[union-attr,arg-type]
        except StoreError as ex:
            self._broken = ex  # type: ignore[misc]  # the window's slot (see the class)
            raise
        self._broken = None  # type: ignore[misc]
        self._stale = False  # type: ignore[misc]

    def _store_failed(self, ex: BaseException) -> None:
        """The store failed: the local state may be ahead of what Redis holds durably."""
        self._broken = ex  # type: ignore[misc]
        self._stale = True  # type: ignore[misc]
        if self.on_stale is not None:
            self.on_stale()

    # ------------------------------------------------------------------ idempotency
    def last_sequence(self, producer_id: str) -> int | None:
        """The last ``sequence`` applied for ``producer_id`` (idempotency), or ``None``."""
        return self._ledger.last(producer_id)

    def _duplicate(self, producer_id: Any, sequence: Any) -> bool:
        """Validate an idempotency key; whether it was applied already."""
        Ledger.check_key(type(self).__name__, producer_id, sequence)
        self._check_usable()
        return self._ledger.is_duplicate(producer_id, sequence)

    def _admit(self, producer_id: str | None, sequence: int | None) -> bool:
        """Before an operation: the window is usable; with an idempotency key, whether the
        operation is a duplicate (to be skipped)."""
        if producer_id is not None or sequence is not None:
            return self._duplicate(producer_id, sequence)
        self._check_usable()
        return False

    def _applied(
        self, op: str, items: Sequence[Any], producer_id: str | None, sequence: int | None
    ) -> None:
        """After an operation applied: remember its idempotency key, tell the store."""
        if producer_id is not None:
            self._ledger.record(producer_id, sequence)  # type: ignore[arg-type]
        if self._hook is not None:
            self._record(op, items, producer_id, sequence)
