"""A columnar window as a service window's engine (:class:`ColumnarEngine`): what the service
asks of an engine (its size, result, ranges, statistics; flush, reload and close through its
store; a store failure makes it reload its last checkpoint before its next call, as an MTA
window does), over a :class:`~.window.ColumnarWindow` whose sealed slices live in Redis
(:class:`~mtawindows.server.storage.slice_store.SliceStore`) or, without a store, in memory.
A batch goes in as columns (:meth:`prepare`, then :meth:`apply`): no Python object per row.

A window of the same stream whose aggregations are some of a columnar window's, under a count
or a time range over the same timestamps, shares its rows (:class:`MemberEngine`): a member
of the host's :class:`ColumnarWindow`; a batch is lifted, sliced and stored once for both."""

from __future__ import annotations

from typing import Any, ClassVar

from ...storage.protocol import StoreError
from .window import BatchResult, ColumnarWindow, Prepared

__all__ = ["ColumnarEngine", "MemberEngine"]


class ColumnarEngine:
    """One window of built-in monoids over a count or a time range, fed columns."""

    algorithm: ClassVar[str] = "AMTA"  # the slices' tree: an Amortized MTA over slices
    answers_ranges: ClassVar[bool] = True
    columnar: ClassVar[bool] = True

    def __init__(self, monoid: Any, policy: Any, *, store: Any = None, **options: Any) -> None:
        """``options`` go to the :class:`ColumnarWindow` (``slice_rows``, ``local_slices``)."""
        self.store = store
        self.monoid = monoid
        self.policy = policy
        self._stale = False
        try:
            self.window = ColumnarWindow(monoid, policy, store=store, **options)
        except StoreError:
            if store is not None:
                store.close(wait=False)
            raise
        self._meta()

    # -- the engine's face
    @property
    def window_id(self) -> str | None:
        return None if self.store is None else str(self.store.window_id)

    @property
    def reads(self) -> list[str]:
        """The columns a batch must carry."""
        return list(self.window.reads)

    @property
    def stale(self) -> bool:
        return self._stale or (self.store is not None and self.store.failed is not None)

    @property
    def inserted(self) -> int:
        return self.window.next

    def __len__(self) -> int:
        self._usable()
        return len(self.window)

    def query(self) -> Any:
        return self._guarded(self.window.query)

    def aggregate(self) -> Any:
        return self._guarded(self.window.aggregate)

    def aggregate_range(self, **ask: Any) -> tuple[Any, int]:
        return self._guarded(lambda: self.window.aggregate_range(**ask))  # type: ignore[no-any-return]

    def prepare(self, columns: dict[str, Any]) -> Prepared:
        """Check and lift a batch (nothing changes; a bad value raises here)."""
        self._usable()
        return self.window.prepare(columns)

    def would_block(self, batch: Prepared) -> bool:
        """Whether :meth:`apply` of ``batch`` would wait for Redis (see
        :meth:`ColumnarWindow.would_block`)."""
        self._usable()
        return self.window.would_block(batch)

    def apply(
        self,
        batch: Prepared,
        *,
        per_row: bool = False,
        nonblocking: bool = False,
        member_rows: frozenset[str] | set[str] = frozenset(),
    ) -> BatchResult:
        """Apply a prepared batch (``nonblocking``: :meth:`would_block` said it would not
        wait; ``member_rows``: the members whose per-row results are wanted). A store
        failure leaves the window to reload."""
        return self._guarded(  # type: ignore[no-any-return]
            lambda: self.window.apply(
                batch, per_row=per_row, nonblocking=nonblocking, member_rows=member_rows
            )
        )

    @property
    def members(self) -> list[str]:
        """The windows sharing its rows (:class:`MemberEngine`), by name."""
        return list(self.window.members)

    # -- the store
    def flush(self, *, wait: bool = True, meta: dict[str, Any] | None = None) -> Any:
        """Checkpoint (with ``meta``) behind the slices' writes; None in memory."""
        if self.store is None:
            return None
        return self._guarded(lambda: self.window.checkpoint(wait=wait, meta=meta))

    def wait_flushed(self, fut: Any) -> None:
        self._guarded(fut.result, usable=False)

    def reload(self) -> None:
        """The last checkpoint, after a store failure (or a restarted Redis). The window
        stays stale until a reload succeeds."""
        if self.store is None:
            msg = "ColumnarEngine: a window in memory has no durable state to reload"
            raise TypeError(msg)
        self._stale = True
        self.window.reload()  # raises (a StoreError) while Redis does not answer
        self._stale = False
        self._meta()

    def invalidate(self, ex: BaseException) -> None:
        if self.store is not None:
            self._stale = True

    def close(self) -> None:
        if self.store is None:
            return
        if not self.stale:
            self.flush()
        self.window.close()

    def stats(self) -> dict[str, Any]:
        """The window's (rows, slices, the store's counters) and its slices' tree's (levels,
        evictions) under an engine's names."""
        tree = self.window.tree.stats()
        return {
            **self.window.stats(),
            "algorithm": self.algorithm,
            "single_evictions": 0,
            **{k: tree[k] for k in ("levels", "bulk_evictions", "recomputes", "local_pairs")},
        }

    # -- failures
    def _meta(self) -> None:
        if self.store is not None:
            self.store.checkpoint_meta = self.window.checkpoint_meta

    def _usable(self) -> None:
        """Before a call. A window that failed in an earlier call reloads its last checkpoint
        first (its owner reloads it before that when it has a journal to replay after it:
        ``stale``). A write that failed in the background since is raised here, the window
        left as it is, as an MTA window raises its store's failure in the call that meets it:
        the owner learns of it (a journaled stream recovers, replaying its journal)."""
        if self._stale:
            self.reload()
            return
        failed = None if self.store is None else self.store.failed
        if failed is not None:
            self._stale = True
            raise failed

    def _guarded(self, fn: Any, *, usable: bool = True) -> Any:
        """``fn()``, after :meth:`_usable` (with ``usable``); a store failure in it leaves the
        window stale (reloaded before its next call, or by its owner)."""
        if usable:
            self._usable()
        try:
            return fn()
        except StoreError:
            self._stale = True
            raise


class MemberEngine:
    """A window sharing the rows of a columnar window of its stream (its ``host``: the
    :class:`ColumnarEngine` it is a member of, under the window's name). Its state is the
    host's (the rows, the slices in Redis, the checkpoint that holds its position): it has
    no store of its own (``store`` None), the host takes every batch for both (the stream
    applies the host, with the member's per-row results when asked) and reloads for both."""

    algorithm: ClassVar[str] = "AMTA"
    answers_ranges: ClassVar[bool] = True
    columnar: ClassVar[bool] = True
    store: ClassVar[Any] = None

    def __init__(self, host: ColumnarEngine, name: str, monoid: Any, policy: Any) -> None:
        self.host = host
        self.name = name
        self.monoid = monoid
        self.policy = policy
        host._usable()
        host.window.attach(name, monoid, policy)

    @property
    def window_id(self) -> str | None:
        return self.host.window_id

    @property
    def reads(self) -> list[str]:
        return self.host.reads

    @property
    def stale(self) -> bool:
        return self.host.stale

    @property
    def inserted(self) -> int:
        return self.host.inserted

    def __len__(self) -> int:
        self.host._usable()
        return self.host.window.member_size(self.name)

    def query(self) -> Any:
        return self.monoid.lower(self.aggregate())

    def aggregate(self) -> Any:
        return self.host._guarded(lambda: self.host.window.member_aggregate(self.name))

    def aggregate_range(self, **ask: Any) -> tuple[Any, int]:
        return self.host._guarded(  # type: ignore[no-any-return]
            lambda: self.host.window.aggregate_range(member=self.name, **ask)
        )

    def reload(self) -> None:
        self.host.reload()

    def invalidate(self, ex: BaseException) -> None:
        self.host.invalidate(ex)

    def detach(self) -> None:
        """The window is deleted: its rows are no longer held for it."""
        self.host.window.detach(self.name)

    def close(self) -> None:
        """Nothing of its own: the host closes the store."""

    def stats(self) -> dict[str, Any]:
        """The host's statistics, with the member's own rows (the store's counters are the
        host's alone: not counted twice)."""
        out = self.host.stats()
        out.pop("store", None)
        m = self.host.window.members[self.name]
        out["size"] = self.host.window.member_size(self.name)
        out["inserted"] = self.host.window.next - m.created
        out["evicted"] = m.evicted
        return out
