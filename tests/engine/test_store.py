"""Storage tiers: tails, heads, write buffer and head cache local; the middle in a PairStore.

The state-machine tests already run every algorithm over tiny stores; these tests pin down the
memory and round-trip bounds that make the tiering worth having."""

from __future__ import annotations

import pytest

from mtawindows.server.engine.amta import AmortizedMTA
from mtawindows.server.engine.lmta import LogMTA
from mtawindows.server.engine.monoids import Count, Max, Record, Sum
from mtawindows.server.engine.policies import CountPolicy, TimeRangePolicy
from mtawindows.server.sentinels import EMPTY
from mtawindows.server.storage.memory import MemoryStore
from mtawindows.server.storage.protocol import PairStore

ALGS = [AmortizedMTA, LogMTA]


@pytest.mark.parametrize("algorithm", ALGS)
def test_local_memory_is_logarithmic_in_the_window(algorithm: type) -> None:
    store = MemoryStore(block_size=16, cache_size=16, refill_at=8)
    w = algorithm(Record(n=Count(), s=Sum()), CountPolicy(50_000), store=store)
    for i in range(80_000):
        w.push(i)
    st = w.stats()
    assert st["size"] == 50_000
    # per level: head + tail + at most one block in the buffer + the cache
    assert st["local_pairs"] <= st["levels"] * (2 + 16 + 16)
    assert st["local_pairs"] < 1_000
    # evicted positions are dropped from the store: it holds about the live pairs only
    live_pairs = sum(len(lv) for lv in w.level_queues)
    assert store.pair_count() <= live_pairs
    assert store.pair_count() >= live_pairs - st["levels"] * (2 + 16)
    assert st["store"]["writes"] > 0 and st["store"]["refills"] > 0


@pytest.mark.parametrize("algorithm", ALGS)
def test_bulk_eviction_of_a_cold_window_reads_log_n_pairs(algorithm: type) -> None:
    store = MemoryStore(block_size=64, cache_size=64, refill_at=32)
    w = algorithm(Record(n=Count(), t=Max()), TimeRangePolicy(1_000_000), store=store)
    n = 2**16
    w.extend(range(n))
    before = dict(store.stats.as_dict())
    w.push(n + 1_000_000 - 10)  # evicts all but the newest ~10 leaves in one enforcement
    after = store.stats.as_dict()
    #  keeps t > newest - range = n - 10: leaves n-9 .. n-1 and the new one
    assert len(w) == 10
    assert w.query() == {"n": 10, "t": n + 1_000_000 - 10}
    reads = after["reads"] - before["reads"]
    assert reads <= 4 * w.stats()["levels"] + 8  # O(log n) round trips, not O(n)


def test_store_protocol_and_validation() -> None:
    store = MemoryStore(block_size=4)
    assert isinstance(store, PairStore)
    with pytest.raises(ValueError, match="block_size must be an int >= 1, got 0"):
        MemoryStore(block_size=0)
    with pytest.raises(ValueError, match="refill_at must be <= cache_size"):
        MemoryStore(cache_size=4, refill_at=5)
    with pytest.raises(LookupError, match="level 3 has no pair at position 7"):
        store.read(3, 7, 8)


def test_empty_slot_marker_is_not_the_identity() -> None:
    assert EMPTY != 0 and EMPTY is not None
    assert repr(EMPTY) == "∅"
