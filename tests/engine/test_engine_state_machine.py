"""Every algorithm against NaiveWindow after every step (hypothesis state machine).

Matrix: {AMTA, LMTA} x {memory, tiered MemoryStore and RedisStore with block/cache sizes 1, 2, 3,
8} x the cases of
``cases.py`` (count, time range, bounded sum, max sub-window, combinations, floating-point
statistics, a non-commutative Concat field, values whose lift equals the identity). Windows run
in debug mode, so the paper's invariants are checked in full after every operation. Redis-backed
windows are also reopened from Redis at random points (as a crashed process would, for durable
ones) and must go on exactly like the oracle.
"""

from __future__ import annotations

from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import note
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from mtawindows.server.engine.laws import approx_equal
from mtawindows.server.engine.naive import NaiveWindow
from mtawindows.server.storage.memory import MemoryStore
from tests.support.cases import ALGORITHMS, CASES, STORES

pytestmark = [pytest.mark.slow]


class WindowMachine(RuleBasedStateMachine):
    """One window under test and its oracle, driven by random pushes, inserts, enforcements,
    batches, time gaps (bulk evictions) and clears."""

    def __init__(self) -> None:
        super().__init__()
        self.t = 0
        self.window: Any = None
        self.oracle: Any = None

    @initialize(
        algorithm=st.sampled_from(sorted(ALGORITHMS)),
        store=st.sampled_from(sorted(STORES)),
        case=st.sampled_from(sorted(CASES)),
        start=st.integers(0, 2**40),
        bulk_factor=st.sampled_from([1, 1, 2, 5]),
    )
    def setup(self, algorithm: str, store: str, case: str, start: int, bulk_factor: int) -> None:
        c = CASES[case]
        self.case = c
        kw = {"bulk_factor": bulk_factor} if algorithm == "AMTA" else {}
        self.kw = kw
        self.window = ALGORITHMS[algorithm](
            c.monoid, c.policy, store=STORES[store](), debug=True, **kw
        )
        # Start the absolute positions anywhere: alignment of the first leaf must not matter.
        self.window._start_at(start)
        self.oracle = NaiveWindow(c.monoid, c.policy)
        note(f"{algorithm} store={store} case={case} start={start} bulk_factor={bulk_factor}")

    def item(self, v: int, dt: int) -> Any:
        self.t += dt
        if self.case.values == "zeros":
            return {"v": 1 if v == 5 else 0, "t": self.t}
        return {"v": v, "t": self.t, "p": v + 1}

    def same(self, a: Any, b: Any) -> None:
        assert approx_equal(a, b), f"window gave {a!r}, oracle {b!r}"

    @rule(v=st.integers(0, 5), dt=st.sampled_from([0, 0, 1, 1, 1, 2, 3]))
    def push(self, v: int, dt: int) -> None:
        x = self.item(v, dt)
        self.same(self.window.push(x), self.oracle.push(x))

    @rule(v=st.integers(0, 5), dt=st.sampled_from([0, 1, 2]))
    def insert(self, v: int, dt: int) -> None:
        x = self.item(v, dt)
        self.window.insert(x)
        self.oracle.insert(x)

    @rule()
    def enforce(self) -> None:
        assert self.window.enforce() == self.oracle.enforce()

    @rule(
        vs=st.lists(st.tuples(st.integers(0, 5), st.sampled_from([0, 1, 1, 2])), max_size=70),
    )
    def extend(self, vs: list[tuple[int, int]]) -> None:
        xs = [self.item(v, dt) for v, dt in vs]
        assert self.window.extend(xs) == self.oracle.extend(xs)

    @rule(gap=st.integers(4, 200), v=st.integers(0, 5))
    def time_gap(self, gap: int, v: int) -> None:
        """A burst of silence then one item: time windows evict in bulk."""
        x = self.item(v, gap)
        self.same(self.window.push(x), self.oracle.push(x))

    @rule(v=st.sampled_from([0, 5]), count=st.integers(20, 300))
    def burst(self, v: int, count: int) -> None:
        """Many items at once: deep trees, then whatever the next rules evict."""
        xs = [self.item(v, 0) for _ in range(count)]
        assert self.window.extend(xs) == self.oracle.extend(xs)

    @precondition(lambda self: self.window is not None and len(self.window) > 0)
    @rule()
    def clear(self) -> None:
        self.window.clear()
        self.oracle.clear()

    @precondition(lambda self: self.window is not None and self.window.window_id is not None)
    @rule(crash=st.booleans())
    def reopen(self, crash: bool) -> None:
        """Reopen the window by its id: a durable one as after a crash (no flush), any one
        after flush(). The reopened window must hold exactly the oracle's state."""
        w = self.window
        store = w.store
        if crash and store.durable:
            store._exec.shutdown(wait=False, cancel_futures=True)  # queued writes are lost
        else:
            w.flush()
            store.close()
        opts = {
            k: getattr(store, k)
            for k in ("block_size", "cache_size", "refill_at", "durable", "checkpoint_every")
        }
        self.window = type(w).open(
            w.window_id,
            self.case.monoid,
            self.case.policy,
            url=store.url,
            debug=True,
            **self.kw,
            **opts,
        )
        note(f"reopened {w.window_id} crash={crash and store.durable}")

    @invariant()
    def agrees_with_oracle(self) -> None:
        if self.window is None:
            return
        assert len(self.window) == len(self.oracle)
        self.same(self.window.query(), self.oracle.query())
        self.same(self.window.aggregate(), self.oracle.aggregate())
        self.window.check_invariants()


TestWindowMachine = WindowMachine.TestCase


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
@pytest.mark.parametrize("case", sorted(CASES))
def test_each_case_streams_like_the_oracle(algorithm: str, case: str) -> None:
    """Every (algorithm, case) pair, deterministic: a stream with bursts and gaps, the tiered
    store with the smallest sizes, compared with the oracle after every push."""
    import random

    c = CASES[case]
    rnd = random.Random(f"{algorithm}-{case}")
    for store in (None, MemoryStore(block_size=1, cache_size=2, refill_at=1)):
        w = ALGORITHMS[algorithm](c.monoid, c.policy, store=store, debug=True)
        o = NaiveWindow(c.monoid, c.policy)
        t = 0
        for step in range(600):
            t += rnd.choice([0, 1, 1, 2, 3]) if rnd.random() > 0.02 else rnd.randint(20, 100)
            v = rnd.randint(0, 5)
            x = {"v": (1 if v == 5 else 0) if c.values == "zeros" else v, "t": t, "p": v + 1}
            assert approx_equal(w.push(x), o.push(x)), (step, x)
            assert len(w) == len(o)


@pytest.mark.parametrize("store", [None, "tiered"])
def test_result_pair_is_recomputed_at_most_once_per_operation(store: str | None) -> None:
    """Section 5.2: an insert that merges trees and an eviction that removes the leftmost tree
    both request a recomputation of R; it runs once per push/extend/enforce."""
    import random

    from mtawindows.server.engine.amta import AmortizedMTA

    c = CASES["time-10"]
    rnd = random.Random(5)
    st = MemoryStore(block_size=2, cache_size=2, refill_at=1) if store else None
    w = AmortizedMTA(c.monoid, c.policy, store=st, debug=True)
    o = NaiveWindow(c.monoid, c.policy)
    t = 0
    saw_merge_and_eviction = False
    for _ in range(3000):
        before = w.recomputes
        t += rnd.choice([0, 1, 1, 2, 15])
        if rnd.random() < 0.1:
            xs = [{"v": 1, "t": t + i} for i in range(rnd.randint(1, 40))]
            t += len(xs)
            assert w.extend(xs) == o.extend(xs)
        else:
            x = {"v": 1, "t": t}
            assert approx_equal(w.push(x), o.push(x))
        assert w.recomputes - before <= 1
        saw_merge_and_eviction |= w.recomputes - before == 1
    assert saw_merge_and_eviction
