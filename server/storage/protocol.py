"""The seams between the engine and its stores (paper section 4.1.5), both ways:

* :class:`PairStore`: where the middle of every level queue lives (what the level queues call);
* :class:`WindowStore`: a pair store that also keeps its one window durable (checkpoints, an
  operation log, reloads; what the window calls on its store);
* :class:`CheckpointedWindow`: what such a store may call on the window it holds (and
  :class:`CheckpointLevel`, what it may touch of a level queue). A store sees the window only
  through it: it never imports the engine nor reaches into its private state;

plus their counters, their errors and the size checks every store shares.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "CheckpointLevel",
    "CheckpointedWindow",
    "CorruptDataError",
    "PairStore",
    "SealedPair",
    "StoreError",
    "StoreStats",
    "StoreUnavailableError",
    "WindowStore",
    "WouldBlock",
    "check_sizes",
]

Pair = list[Any]  # [e0, e1], local and mutable (head, tail)
SealedPair = tuple[Any, Any]  # immutable once sealed


class WouldBlock(Exception):
    """Raised, before anything changed, by an operation called with ``nonblocking=True`` (the
    window holds its store in ``nonblocking`` mode for the call) when it would have to wait
    for the store (a cache miss, a pending refill, write back-pressure, a journal append). The
    caller retries it where waiting is fine."""


class StoreError(RuntimeError):
    """The store behind a window failed; the window reloads its last durable state from the
    store on its next operation."""


class StoreUnavailableError(StoreError):
    """The store cannot be reached (connection refused, timeout, loading, ...)."""


class CorruptDataError(StoreError):
    """Bytes under a window's keys are not what this window wrote there."""


class StoreStats:
    """Counters of one store (shared by its levels)."""

    __slots__ = (
        "blocks_deleted",
        "bytes_read",
        "bytes_written",
        "checkpoints",
        "log_appends",
        "misses",
        "pairs_read",
        "pairs_written",
        "reads",
        "refills",
        "round_trips",
        "writes",
    )

    def __init__(self) -> None:
        self.reads = 0  # read requests (misses, refills, commit fetches)
        self.pairs_read = 0
        self.writes = 0  # write requests (flushed buffers)
        self.pairs_written = 0
        self.misses = 0  # synchronous reads of pairs that were not local
        self.refills = 0  # cache refills
        self.round_trips = 0  # to a remote store
        self.bytes_read = 0
        self.bytes_written = 0
        self.checkpoints = 0
        self.log_appends = 0
        self.blocks_deleted = 0

    def as_dict(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in self.__slots__}


@runtime_checkable
class PairStore(Protocol):
    """Where the middle of every level queue lives. Positions are absolute per level.

    A store instance holds one window. ``write`` may overwrite positions (after an undone
    insert); ``drop`` says positions ``< stop`` are evicted and will not be read again.

    ``nonblocking`` is set by the window that holds the store, for the duration of one call
    made with ``nonblocking=True`` (and nobody else): meanwhile reads that would wait raise
    :class:`WouldBlock` and full write buffers wait for the end of the call to be flushed.
    """

    block_size: int
    cache_size: int
    refill_at: int
    stats: StoreStats
    nonblocking: bool

    def write(self, level: int, start: int, pairs: Sequence[SealedPair]) -> None: ...

    def read(self, level: int, start: int, stop: int) -> list[SealedPair]: ...

    def prefetch(self, level: int, start: int, stop: int) -> Future[list[SealedPair]]:
        """``read`` in the background (a head-cache refill)."""
        ...

    def read_points(self, points: Sequence[tuple[int, int]]) -> list[SealedPair]:
        """Single pairs at (level, position), fetched together (one round trip remotely)."""
        ...

    def drop(self, level: int, stop: int) -> None: ...


@runtime_checkable
class WindowStore(PairStore, Protocol):
    """A :class:`PairStore` that also keeps the window it holds durable (the Redis store).

    A window given such a store calls ``attach(window)`` once when it is built (the store
    records the window's definition or, for an existing one, restores its state into it),
    ``record`` after every operation it applied, ``checkpoint`` on ``flush``, ``reload`` after a
    failure and ``close`` on close. Each of them may raise :class:`StoreError`. Before a call
    with ``nonblocking=True`` the window refuses (``WouldBlock``) when the store is ``durable``
    (every operation waits for its log append), and it leaves the level buffers that filled up
    meanwhile for later while the store is ``backlogged``.
    """

    window_id: str
    durable: bool  # every operation is appended to a log before it returns
    checkpoint_meta: dict[str, Any] | None  # the caller's ``meta`` of the loaded checkpoint

    def attach(self, window: CheckpointedWindow) -> None: ...

    def record(
        self,
        window: CheckpointedWindow,
        op: str,
        items: Sequence[Any],
        producer: str | None,
        seq: int | None,
    ) -> None:
        """``op`` (``x`` extend, ``p`` per-item, ``i`` insert, ``e`` enforce, ``c`` clear) was
        applied with these lifted ``items`` and idempotency key; log it, checkpoint when due."""
        ...

    def checkpoint(
        self, window: CheckpointedWindow, *, wait: bool = True, meta: dict[str, Any] | None = None
    ) -> Future[None]: ...

    def reload(self, window: CheckpointedWindow) -> None:
        """Restore the window's last durable state into ``window`` (after a failure)."""
        ...

    def backlogged(self) -> bool:
        """Whether one more block write would wait for the writer (back-pressure)."""
        ...

    def close(self, *, wait: bool = True) -> None:
        """Stop the store's I/O (``wait``: after the queued writes; else they are done
        already and the writer thread ends by itself) and release its connections."""
        ...


class CheckpointLevel(Protocol):
    """What a checkpoint touches of a level queue of the window."""

    @property
    def index(self) -> int: ...

    @property
    def start(self) -> int:
        """Absolute position of the head pair: positions below are evicted."""
        ...

    def flush(self) -> None:
        """Write the buffered sealed pairs to the store."""
        ...


class CheckpointedWindow(Protocol):
    """What a :class:`WindowStore` may call on the window it holds (nothing else).

    ``snapshot`` gives the window's local state as plain data (ints, strings, lists and dicts
    of them) and the lifted values it holds, in a fixed order; ``restore`` is its inverse over
    the store's levels (``state=None``: a new, empty window); ``replay`` applies one logged
    operation again (as ``record`` received it). ``level_queues`` are the window's level
    queues, bottom first: a checkpoint flushes them before ``snapshot`` and keeps the blocks
    from each queue's ``start`` on.
    """

    @property
    def algorithm(self) -> str: ...

    @property
    def monoid(self) -> Any: ...

    @property
    def policy(self) -> Any: ...

    @property
    def level_queues(self) -> Sequence[CheckpointLevel]: ...

    def snapshot(self) -> tuple[dict[str, Any], list[Any]]: ...

    def restore(self, state: dict[str, Any] | None, values: list[Any]) -> None: ...

    def replay(
        self, op: str, items: Sequence[Any], producer_id: str | None, sequence: int | None
    ) -> None: ...


def check_sizes(owner: str, block_size: int, cache_size: int, refill_at: int, **more: int) -> None:
    """Validate a store's sizes (and further ``name=value`` ints that must be >= 1)."""
    for name, v, low in (
        ("block_size", block_size, 1),
        ("cache_size", cache_size, 1),
        ("refill_at", refill_at, 0),
        *((k, v, 1) for k, v in more.items()),
    ):
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            msg = f"{owner}: {name} must be an int >= {low}, got {v!r}"
            raise ValueError(msg)
    if refill_at > cache_size:
        msg = f"{owner}: refill_at must be <= cache_size ({cache_size}), got {refill_at}"
        raise ValueError(msg)
