"""What a store of level pairs promises the engine (paper section 4.1.5): the
:class:`PairStore` protocol, its counters, its errors and the size checks every store shares.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "CorruptDataError",
    "PairStore",
    "SealedPair",
    "StoreError",
    "StoreStats",
    "StoreUnavailableError",
    "WouldBlock",
    "check_sizes",
]

Pair = list[Any]  # [e0, e1], local and mutable (head, tail)
SealedPair = tuple[Any, Any]  # immutable once sealed


class WouldBlock(Exception):
    """Raised, before anything changed, by an operation attempted with the store in
    ``nonblocking`` mode when it would have to wait for the store (a cache miss, a pending
    refill, write back-pressure). The caller retries it where waiting is fine."""


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
    """

    block_size: int
    cache_size: int
    refill_at: int
    stats: StoreStats
    nonblocking: bool  # reads that would wait raise WouldBlock; full buffers wait to flush

    def write(self, level: int, start: int, pairs: Sequence[SealedPair]) -> None: ...

    def read(self, level: int, start: int, stop: int) -> list[SealedPair]: ...

    def prefetch(self, level: int, start: int, stop: int) -> Future[list[SealedPair]]:
        """``read`` in the background (a head-cache refill)."""
        ...

    def read_points(self, points: Sequence[tuple[int, int]]) -> list[SealedPair]:
        """Single pairs at (level, position), fetched together (one round trip remotely)."""
        ...

    def drop(self, level: int, stop: int) -> None: ...


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
