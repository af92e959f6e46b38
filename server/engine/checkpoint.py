"""A window's durability seam: its local state as plain data for a checkpoint (``snapshot``),
the inverse over the store's levels (``restore``), and the replay of a logged operation.

The format is persisted (existing checkpoints in Redis must keep loading): a dict of plain
data (``algorithm``, the positions ``origin``/``first``/``next``, the counters, per level
``(index, start, end, head flags, tail flags)``, the idempotency ledger as ``producers``, and
what the algorithm adds, e.g. AMTA's ``stack`` length) and the list of lifted values it holds,
in order: the non-empty elements of each level's head then tail pair (bit 1 of the flags: the
left element is there, bit 2: the right one), then the algorithm's results
(``_snapshot_results``). The window exposes these as ``MTAWindow.snapshot``, ``restore`` and
``replay``; stores call only those
(:class:`~mtawindows.server.storage.protocol.CheckpointedWindow`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Protocol

from ..sentinels import EMPTY, UNSET
from ..storage.protocol import PairStore
from .ledger import Ledger
from .levels import TieredLevel

__all__ = ["WindowState", "replay", "restore", "snapshot"]


class WindowState(Protocol):
    """What a checkpoint reads and writes of a window (:class:`~.mta_window.MTAWindow`'s own
    state, private to the engine): positions, counters, level queues, the idempotency
    ledger, the algorithm's results, and the operations a logged entry replays."""

    store: PairStore | None
    _levels: list[Any]
    _origin: int
    _first: int
    _next: int
    _bulk_evicted: int
    bulk_evictions: int
    recomputes: int
    _ledger: Ledger

    @property
    def algorithm(self) -> str: ...

    def __len__(self) -> int: ...

    def _settle(self) -> None: ...

    def _reset_results(self) -> None: ...

    def _snapshot_results(self, state: dict[str, Any], values: list[Any]) -> None: ...

    def _restore_results(self, state: dict[str, Any], values: Iterator[Any]) -> None: ...

    def _extend_lifted(self, lifted: list[Any], nonblocking: bool = False) -> int: ...

    def _insert_or_undo(self, u: Any, r1: Any = UNSET) -> None: ...

    def _enforce(self) -> int: ...

    def _clear(self) -> None: ...


def snapshot(w: WindowState) -> tuple[dict[str, Any], list[Any]]:
    """The local state of ``w`` as plain data + the lifted values it holds."""
    w._settle()
    values: list[Any] = []

    def pair(p: Any) -> int:
        f = 0
        if p[0] is not EMPTY:
            f |= 1
            values.append(p[0])
        if p[1] is not EMPTY:
            f |= 2
            values.append(p[1])
        return f

    state: dict[str, Any] = {
        "algorithm": w.algorithm,
        "origin": w._origin,
        "first": w._first,
        "next": w._next,
        "bulk_evicted": w._bulk_evicted,
        "bulk_evictions": w.bulk_evictions,
        "recomputes": w.recomputes,
        "levels": [(lv.index, lv.start, lv.end, pair(lv.head), pair(lv.tail)) for lv in w._levels],
        "producers": w._ledger.snapshot(),
    }
    w._snapshot_results(state, values)
    return state, values


def restore(w: WindowState, state: dict[str, Any] | None, values: list[Any]) -> None:
    """Inverse of :func:`snapshot` over the store's levels (``None``: a new window)."""
    for lv in w._levels:
        lv.discard()
    w._levels = []
    w.recomputes = w.bulk_evictions = w._bulk_evicted = 0
    w._ledger = Ledger()
    if state is None:
        w._origin = w._first = w._next = 0
        w._reset_results()
        return
    if state["algorithm"] != w.algorithm:
        msg = f"checkpoint of a {state['algorithm']} window, opened as {w.algorithm}"
        raise ValueError(msg)
    it = iter(values)

    def pair(f: int) -> list[Any]:
        return [next(it) if f & 1 else EMPTY, next(it) if f & 2 else EMPTY]

    w._origin = int(state["origin"])
    w._first = int(state["first"])
    w._next = int(state["next"])
    w._bulk_evicted = int(state["bulk_evicted"])
    w.bulk_evictions = int(state["bulk_evictions"])
    w.recomputes = int(state["recomputes"])
    levels = []
    for index, start, end, hf, tf in state["levels"]:
        head = pair(hf)
        tail = pair(tf)
        levels.append(TieredLevel.restored(w.store, index, start, end, head, tail))  # type: ignore[arg-type]
    w._levels = levels
    w._ledger = Ledger(state["producers"])
    w._reset_results()
    if levels:
        w._restore_results(state, it)
    if next(it, UNSET) is not UNSET:
        msg = "checkpoint holds more values than its structure uses"
        raise ValueError(msg)


def replay(
    w: WindowState, op: str, items: Sequence[Any], producer_id: str | None, sequence: int | None
) -> None:
    """Apply one logged operation (lifted items) to ``w`` again."""
    if op == "x":
        w._extend_lifted(list(items))
    elif op == "p":
        for u in items:
            w._extend_lifted([u])
    elif op == "i":
        for u in items:
            w._insert_or_undo(u)
        w._settle()
    elif op == "e":
        w._enforce()
    elif op == "c":
        w._bulk_evicted += len(w)
        w._clear()
    else:
        msg = f"unknown logged operation {op!r}"
        raise ValueError(msg)
    if producer_id is not None and sequence is not None:
        w._ledger.record(producer_id, sequence)
