"""One key's instance of one window (:class:`KeyWindow`), in the form its size calls for.

**Compact** (a key's window of at most ``threshold`` items): the lifted items, oldest first,
and their aggregate, in the key's one Redis value (table.py) written as a unit. Enforcement
follows the MTA engines' semantics exactly (the paper's Algorithm 2, as
:meth:`~mtawindows.server.engine.mta_window.MTAWindow._leaving` tests it): after the items
go in, the longest prefix P, oldest first, with ``policy(total, agg(P))`` leaves, ``total``
being the aggregate before the enforcement. A batch goes in whole and is enforced once, or
item by item when the window's policy is not batch-safe or per-row results are asked for: as
``apply_lifted`` does for a tree.

**Full** (it grew past ``threshold``): an Amortized or Log MTA with its tails, stack and
head cache local and middle levels in Redis, as an unkeyed window's (its Redis keys under a
name of its own, recorded in the key's value). It never goes back to compact.

The answer never depends on the form: both apply the same policy to the same items in the
same order (tests/service/test_keyed_forms.py drives keys across the threshold against an
oracle).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...engine.suffix import check_suffix
from ...sentinels import UNSET

__all__ = ["KeyWindow", "WindowOps"]


class WindowOps:
    """What a window's instances share: its monoid's combine and identity, its bound policy,
    whether a batch is enforced once (``batch_safe``), the compact form's size limit, and
    how a new full-form engine is made (``make_engine() -> (engine, its Redis id)``)."""

    __slots__ = (
        "batch_safe",
        "codec",
        "combine",
        "cutoff",
        "hop",
        "identity",
        "make_engine",
        "name",
        "policy",
        "record",
        "threshold",
    )

    def __init__(
        self,
        name: str,
        combine: Callable[[Any, Any], Any],
        identity: Any,
        policy: Callable[[Any, Any], bool],
        *,
        batch_safe: bool,
        threshold: int,
        make_engine: Callable[[], tuple[Any, str]],
    ) -> None:
        self.name = name
        self.combine = combine
        self.identity = identity
        self.policy = policy
        self.batch_safe = batch_safe
        self.threshold = threshold
        self.make_engine = make_engine
        # a hopping window's: its plan, the record its rows combine in, the slice policy's
        # cell and the slice record's codec (for the hopper's state)
        self.hop: Any = None
        self.record: Any = None
        self.cutoff: Any = None
        self.codec: Any = None


class KeyWindow:
    """One key's window: ``items`` and ``total`` (compact), or ``engine`` (full, its Redis
    id ``wid``); ``lsn``: the journal entry of its group a full one last took (its
    checkpoint says so too); ``evicted``: the items the key's last batch evicted (what its
    results report; not stored: 0 after a reload)."""

    __slots__ = ("closed", "engine", "evicted", "hop", "hop_state", "items", "lsn", "total", "wid")

    def __init__(self, items: list[Any] | None = None) -> None:
        self.items: list[Any] = items if items is not None else []
        self.total: Any = UNSET
        self.engine: Any = None
        self.wid = ""
        self.lsn = 0
        self.evicted = 0
        # a hopping window's: the key's hopper (made on first use, from ``hop_state`` as
        # stored), and the boundaries the key's last batch closed
        self.hop: Any = None
        self.hop_state: Any = None
        self.closed: list[Any] = []

    def hopper(self, ops: WindowOps) -> Any:
        """The key's hopper over this window's slices (compact or full, as any key's)."""
        if self.hop is None:
            from ...engine.hopping import Hopper

            self.hop = Hopper(ops.hop, ops.record, _Slices(self, ops), ops.cutoff)
            self.hop.codec = ops.codec
            self.hop.restore(self.hop_state)
        return self.hop

    def __len__(self) -> int:
        return len(self.items) if self.engine is None else len(self.engine)

    @property
    def full(self) -> bool:
        return self.engine is not None

    def aggregate(self, ops: WindowOps) -> Any:
        """The lifted aggregate of the window."""
        if self.engine is not None:
            return self.engine.aggregate()
        total = self.total
        if total is UNSET:
            total = ops.identity
            combine = ops.combine
            for u in self.items:
                total = combine(total, u)
            self.total = total
        return total

    def aggregate_range(
        self,
        ops: WindowOps,
        monoid: Any,
        *,
        count: int | None = None,
        time_range: Any = None,
        field: str | None = None,
    ) -> tuple[Any, int]:
        """A query-time range (:mod:`mtawindows.server.engine.suffix`): the lifted aggregate
        of the window's newest ``count`` items, or of those a time range over ``field`` keeps,
        and how many. A full window asks its engine; a compact one folds its few items (the
        boundary by the time-range policy's rule, tested from the oldest as enforcement
        does). Read-only."""
        if self.engine is not None:
            return self.engine.aggregate_range(  # type: ignore[no-any-return]
                count=count, time_range=time_range, field=field
            )
        q = check_suffix("KeyWindow.aggregate_range", count, time_range, field)
        items = self.items
        n = len(items)
        combine = ops.combine
        if q.count is not None:
            k = n - min(n, q.count)
        else:
            keep = q.keep(monoid)
            total = self.aggregate(ops)
            k = 0
            sub: Any = UNSET
            while k < n:
                cand = items[k] if sub is UNSET else combine(sub, items[k])
                if not keep(total, cand):
                    break
                sub = cand
                k += 1
        if not k:
            return self.aggregate(ops), n
        acc = ops.identity
        for u in items[k:]:
            acc = combine(acc, u)
        return acc, n - k

    def apply(
        self,
        ops: WindowOps,
        us: list[Any],
        totals: list[Any] | None = None,
        sizes: list[int] | None = None,
    ) -> int:
        """Take the lifted items ``us``; with ``totals`` and ``sizes``, append the aggregate
        and size after each. Returns how many items left. All or nothing: a monoid or policy
        that raises leaves the window as it was."""
        engine = self.engine
        if engine is not None:
            self.evicted = int(
                engine.apply_lifted(us, per_item=not ops.batch_safe, totals=totals, sizes=sizes)
            )
            return self.evicted
        items = self.items
        saved = items[:], self.total
        try:
            if totals is None and ops.batch_safe:
                evicted = self._extend(ops, us)
            else:
                evicted = 0
                for u in us:
                    evicted += self._extend(ops, (u,))
                    if totals is not None:
                        totals.append(self.total)
                        sizes.append(len(items))  # type: ignore[union-attr]
        except BaseException:
            self.items, self.total = saved
            raise
        if len(self.items) > ops.threshold:
            self._promote(ops)
        self.evicted = evicted
        return evicted

    def preview(self, ops: WindowOps, us: list[Any], totals: list[Any], sizes: list[int]) -> None:
        """What :meth:`apply` with ``totals`` and ``sizes`` would append to them, without
        taking ``us``: the window stays as it was (a compact one previews on a copy of its
        items, a full one asks its engine's ``preview_lifted``). The stream checks a batch's
        per-row results this way before anything changes."""
        if self.engine is not None:
            self.engine.preview_lifted(us, per_item=not ops.batch_safe, totals=totals, sizes=sizes)
            return
        copy = KeyWindow(self.items[:])
        copy.total = self.total
        for u in us:
            copy._extend(ops, (u,))
            totals.append(copy.total)
            sizes.append(len(copy.items))

    def _extend(self, ops: WindowOps, us: Any) -> int:
        """Insert ``us`` and enforce once: the longest prefix the policy lets go leaves."""
        combine = ops.combine
        total = self.aggregate(ops)
        items = self.items
        for u in us:
            total = combine(total, u)
            items.append(u)
        policy = ops.policy
        k = 0
        n = len(items)
        sub: Any = UNSET
        while k < n:
            cand = items[k] if sub is UNSET else combine(sub, items[k])
            if not policy(total, cand):
                break
            sub = cand
            k += 1
        if k:
            del items[:k]
            self.total = UNSET
            self.aggregate(ops)
        else:
            self.total = total
        return k

    def _promote(self, ops: WindowOps) -> None:
        """Grow into the full MTA: a new tree takes the items as they are, without
        enforcing again."""
        engine, wid = ops.make_engine()
        engine.load_lifted(self.items)
        self.engine = engine
        self.wid = wid
        self.items = []
        self.total = UNSET


class _Slices:
    """A key's window as a hopper's final aggregator: its items are slices."""

    __slots__ = ("kw", "ops")

    def __init__(self, kw: KeyWindow, ops: WindowOps) -> None:
        self.kw = kw
        self.ops = ops

    def apply_lifted(self, us: list[Any]) -> int:
        return self.kw.apply(self.ops, us)

    def enforce(self) -> int:
        kw = self.kw
        if kw.engine is not None:
            return int(kw.engine.enforce())
        return kw._extend(self.ops, ())

    def aggregate(self) -> Any:
        return self.kw.aggregate(self.ops)

    def __len__(self) -> int:
        return len(self.kw)
