"""An in-process :class:`~mtawindows.server.storage.protocol.PairStore`."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future

from .protocol import SealedPair, StoreStats, check_sizes

__all__ = ["MemoryStore"]


class MemoryStore:
    """A :class:`PairStore` in process memory: the reference implementation, used to test the
    tiered levels (tiny block and cache sizes exercise every flush, refill and miss path)."""

    nonblocking = False  # never waits: reads are local

    def __init__(
        self, *, block_size: int = 512, cache_size: int = 512, refill_at: int = 256
    ) -> None:
        check_sizes("MemoryStore", block_size, cache_size, refill_at)
        self.block_size = block_size
        self.cache_size = cache_size
        self.refill_at = refill_at
        self.stats = StoreStats()
        self._levels: dict[int, dict[int, SealedPair]] = {}
        self._low: dict[int, int] = {}

    def write(self, level: int, start: int, pairs: Sequence[SealedPair]) -> None:
        d = self._levels.setdefault(level, {})
        for i, p in enumerate(pairs):
            d[start + i] = (p[0], p[1])  # a copy, as a remote store would keep
        self._low.setdefault(level, start)
        self.stats.writes += 1
        self.stats.pairs_written += len(pairs)

    def read(self, level: int, start: int, stop: int) -> list[SealedPair]:
        d = self._levels.get(level, {})
        try:
            out = [d[p] for p in range(start, stop)]
        except KeyError as ex:
            msg = f"MemoryStore: level {level} has no pair at position {ex.args[0]}"
            raise LookupError(msg) from None
        self.stats.reads += 1
        self.stats.pairs_read += len(out)
        return out

    def prefetch(self, level: int, start: int, stop: int) -> Future[list[SealedPair]]:
        fut: Future[list[SealedPair]] = Future()
        try:
            fut.set_result(self.read(level, start, stop))
        except Exception as ex:
            fut.set_exception(ex)
        return fut

    def read_points(self, points: Sequence[tuple[int, int]]) -> list[SealedPair]:
        out = []
        for level, pos in points:
            out.extend(self.read(level, pos, pos + 1))
        return out

    def drop(self, level: int, stop: int) -> None:
        d = self._levels.get(level)
        if not d:
            return
        low = self._low.get(level, stop)
        for p in range(low, stop):
            d.pop(p, None)
        self._low[level] = max(low, stop)

    def pair_count(self) -> int:
        """Pairs held (for tests: evicted positions must not linger)."""
        return sum(len(d) for d in self._levels.values())
