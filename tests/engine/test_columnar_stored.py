"""A columnar window with its Redis tier (a SliceStore on a real Redis): sealed slices written
once and dropped from memory, checkpoints, and a reload after a crash give the answers of the
per-row engine fed only what was acknowledged (every batch before the last checkpoint), every
per-row result compared; nothing of an evicted slice stays in Redis; memory holds a bounded
number of slices whatever the window's length; a store that refuses writes stops the window."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import numpy as np
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mtawindows.server.engine import AmortizedMTA, CountPolicy, Record, TimeRangePolicy
from mtawindows.server.engine.columnar import ColumnarWindow
from mtawindows.server.engine.columnar.window import MAX_PENDING
from mtawindows.server.storage.fencing import Fence, FencedError
from mtawindows.server.storage.protocol import CorruptDataError, StoreError
from mtawindows.server.storage.slice_store import SliceStore

from .test_columnar_window import (
    APPROX,
    RECORDS,
    _plain,
    _row,
    assert_row,
    batches,
    long_batches,
)

# after a batch: go on, checkpoint, checkpoint then crash, or crash (losing what followed
# the last checkpoint)
STEPS = st.sampled_from(["go", "go", "checkpoint", "checkpoint+crash", "crash"])


def _store(url: str, window_id: str, **kw: Any) -> SliceStore:
    return SliceStore(url, window_id=window_id, **kw)


class _Oracle:
    """The per-row engine fed the acknowledged batches, and the rows in its window."""

    def __init__(self, monoid: Any, policy: Any) -> None:
        self.monoid, self.policy = monoid, policy
        self.engine = AmortizedMTA(monoid, policy)
        self.window: list[dict[str, Any]] = []

    def feed(
        self, cols: dict[str, np.ndarray]
    ) -> tuple[list[dict[str, Any]], list[Any], list[int]]:
        n = len(cols["ts"])
        rows = [_row(cols, i) for i in range(n)]
        totals: list[Any] = []
        sizes: list[int] = []
        self.engine.apply_lifted([self.monoid.lift(r) for r in rows], totals=totals, sizes=sizes)
        return rows, totals, sizes


def _check(fast: ColumnarWindow, oracle: _Oracle, cols: dict[str, np.ndarray]) -> None:
    got = fast.apply(cols, per_row=True)
    rows, totals, sizes = oracle.feed(cols)
    assert got.sizes is not None and got.rows is not None
    assert got.sizes.tolist() == sizes
    for i, (g, t) in enumerate(zip(got.rows.to_pylist(), totals, strict=True)):
        oracle.window = ([*oracle.window, rows[i]])[len(oracle.window) + 1 - sizes[i] :]
        assert_row(i, g, oracle.monoid.lower(t), oracle.window)
    assert len(fast) == len(oracle.engine)
    final, want = fast.query(), oracle.engine.query()
    for name, ref_v in want.items():
        if name not in APPROX:
            assert _plain(final[name]) == _plain(ref_v), (name, final[name], ref_v)
    # query-time ranges: suffixes by count and (a time window's) by time
    n = len(fast)
    asks: list[dict[str, Any]] = [{"count": c} for c in (0, 1, n // 2, n, n + 3)]
    if isinstance(oracle.policy, TimeRangePolicy):
        asks += [{"time_range": r, "field": "ts"} for r in (0, 1, 2.5, 7, 10**6)]
    for ask in asks:
        agg, size = fast.aggregate_range(**ask)
        ref_agg, ref_size = oracle.engine.aggregate_range(**ask)
        assert size == ref_size, (ask, size, ref_size)
        got_l, ref_l = oracle.monoid.lower(agg), oracle.monoid.lower(ref_agg)
        # the suffix's rows: approximate fields at least as close to the exact answer
        got_p = {k: _plain(v) for k, v in got_l.items()}
        assert_row(-1, got_p, ref_l, oracle.window[len(oracle.window) - size :] if size else [])


POLICIES = st.one_of(
    st.integers(0, 40).map(lambda n: CountPolicy(n, field="n")),
    st.integers(1, 30).map(lambda r: TimeRangePolicy(r, field="ts")),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(sorted(RECORDS)),
    policy=POLICIES,
    slice_rows=st.sampled_from([2, 3, 8, 64]),
    local=st.sampled_from([1, 2, 4]),
    data=batches(),
    steps=st.lists(STEPS, min_size=12, max_size=12),
)
def test_a_stored_window_reloads_what_was_acknowledged(
    redis_url: str,
    kind: str,
    policy: Any,
    slice_rows: int,
    local: int,
    data: list[dict[str, np.ndarray]],
    steps: list[str],
) -> None:
    _run(redis_url, kind, policy, slice_rows, local, data, steps)


def test_a_sliding_window_of_many_stored_slices_reloads_exactly(redis_url: str) -> None:
    """A window far longer than a batch, its slices in Redis but the oldest one, a crash
    every few batches (half of them after a checkpoint): every per-row result is the per-row
    engine's over what was acknowledged."""
    data = long_batches(11, 40, keys=5)
    steps = ["go", "checkpoint", "go", "checkpoint+crash", "go", "crash", "go", "checkpoint"] * 5
    _run(redis_url, "extremes", TimeRangePolicy(2000, field="ts"), 64, 1, data, steps)
    _run(redis_url, "ordered", CountPolicy(3000, field="n"), 32, 1, data, steps)


def _run(
    redis_url: str,
    kind: str,
    policy: Any,
    slice_rows: int,
    local: int,
    data: list[dict[str, np.ndarray]],
    steps: list[str],
) -> None:
    wid = f"test-cs-{uuid.uuid4().hex}"
    monoid = RECORDS[kind]()

    def open_window() -> ColumnarWindow:
        return ColumnarWindow(
            monoid, policy, slice_rows=slice_rows, store=_store(redis_url, wid), local_slices=local
        )

    fast = open_window()
    oracle = _Oracle(monoid, policy)
    acked: list[dict[str, np.ndarray]] = []  # batches a checkpoint covers
    since: list[dict[str, np.ndarray]] = []  # batches after it
    try:
        for cols, step in zip(data, steps, strict=False):
            _check(fast, oracle, cols)
            since.append(cols)
            if "checkpoint" in step:
                fast.checkpoint(meta={"batches": len(acked) + len(since)})
                acked += since
                since = []
            if "crash" in step:  # the process dies: its queued writes may or may not land
                fast.store.abandon()
                fast = open_window()
                assert (fast.checkpoint_meta or {}).get("batches", 0) == len(acked)
                oracle = _Oracle(monoid, policy)
                for old in acked:
                    oracle.feed(old)
                oracle.window = _window_rows(acked, oracle)
                since = []
                assert len(fast) == len(oracle.engine)
        fast.checkpoint()
        _no_leftovers(redis_url, fast)
    finally:
        fast.store.delete_window()
        fast.close()


def _window_rows(acked: list[dict[str, np.ndarray]], oracle: _Oracle) -> list[dict[str, Any]]:
    rows = [_row(b, i) for b in acked for i in range(len(b["ts"]))]
    return rows[len(rows) - len(oracle.engine) :]


def _no_leftovers(url: str, w: ColumnarWindow) -> None:
    """After a checkpoint, Redis holds exactly the window's live slices (the head and the
    tree's), each with its header: nothing of an evicted slice stays."""
    assert w.store is not None
    client = redis.Redis.from_url(url)
    try:
        live = {sl.index for sl in (w.head, *w.slices) if sl is not None}
        index = {int(k) for k in client.hkeys(w.store.index_key)}
        values = {
            int(k.decode().rsplit(":", 1)[1])
            for k in client.scan_iter(match=f"{w.store.keys.tag}:s:*", count=1000)
        }
        # slices sealed after the last checkpoint but before a crash are not counted by
        # any checkpoint; sealing them again overwrites them
        assert live <= index and live <= values
        assert {k for k in index if k < w.sealed} == live
        assert {k for k in values if k < w.sealed} == live
    finally:
        client.close()


def test_a_long_window_keeps_a_few_slices_in_memory(redis_url: str) -> None:
    """200,000 rows in a window that keeps them all: the columns of at most
    ``local_slices`` + 1 slices in memory, the rest in Redis; reloaded, the same answers as
    the window that never stopped, and the per-row results of the next batch too."""
    m = Record(n=_count(), s=_sum("v"), mx=_max("v"), ts=_max("ts"))
    policy = TimeRangePolicy(10**9, field="ts")
    wid = f"test-cs-{uuid.uuid4().hex}"
    w = ColumnarWindow(m, policy, slice_rows=1024, store=_store(redis_url, wid))
    mem = ColumnarWindow(m, policy, slice_rows=1024)
    rng = np.random.default_rng(3)
    try:
        t = 0
        for _ in range(20):
            n = 10_000
            ts = t + np.cumsum(rng.integers(0, 3, n))
            t = int(ts[-1])
            cols = {"ts": ts, "v": rng.normal(0, 1, n)}
            w.apply(cols)
            mem.apply(cols)
            # the oldest, the head, and those whose writes are still queued
            assert w.stats()["local_slices"] <= w.local_slices + 1 + MAX_PENDING
        w.store.sync()
        t += 1
        one = {"ts": np.array([t]), "v": np.array([0.5])}
        w.apply(one)
        mem.apply(one)
        assert w.stats()["local_slices"] <= w.local_slices + 1, w.stats()
        assert w.stats()["slices"] >= 190
        w.checkpoint()
        assert w.query() == mem.query()
        w.store.abandon()
        back = ColumnarWindow(m, policy, slice_rows=1024, store=_store(redis_url, wid))
        assert back.query() == mem.query() and len(back) == len(mem) == 200_001
        ts = t + np.arange(1, 5001)
        cols = {"ts": ts, "v": rng.normal(0, 1, 5000)}
        a = back.apply(cols, per_row=True)
        b = mem.apply(cols, per_row=True)
        assert a.rows is not None and b.rows is not None
        assert a.rows.equals(b.rows)
        back.store.delete_window()
        back.close()
    finally:
        w.close(wait=False)


def test_evicted_slices_leave_redis_with_the_checkpoint(redis_url: str) -> None:
    m = Record(n=_count(), s=_sum("v"))
    wid = f"test-cs-{uuid.uuid4().hex}"
    w = ColumnarWindow(m, CountPolicy(100, field="n"), slice_rows=16, store=_store(redis_url, wid))
    try:
        for b in range(50):
            w.apply({"v": np.arange(40.0) + b})
            if b % 7 == 0:
                w.checkpoint()
                _no_leftovers(redis_url, w)
        w.checkpoint()
        _no_leftovers(redis_url, w)
        assert w.sealed > 100 and len(w.slices) <= 8
    finally:
        w.store.delete_window()
        w.close()


def test_an_idle_windows_checkpoint_is_not_written_again(redis_url: str) -> None:
    """A checkpoint holds the tail's rows: a window that took no row and evicted nothing
    since its last one writes nothing (an idle stream's periodic flush costs no Redis write);
    a new row, an eviction or other meta write again, and a reload reads the last one."""
    m = Record(n=_count(), s=_sum("v"))
    wid = f"test-cs-{uuid.uuid4().hex}"
    w = ColumnarWindow(m, CountPolicy(100, field="n"), slice_rows=16, store=_store(redis_url, wid))
    try:
        w.apply({"v": np.arange(40.0)})
        w.checkpoint(meta={"lsn": 1})
        written = w.store.stats.checkpoints, w.store.stats.bytes_written
        for _ in range(5):
            w.checkpoint(meta={"lsn": 1})
            w.checkpoint(wait=False, meta={"lsn": 1}).result()
        assert (w.store.stats.checkpoints, w.store.stats.bytes_written) == written
        w.checkpoint(meta={"lsn": 2})  # other meta: written
        assert w.store.stats.checkpoints == written[0] + 1
        w.apply({"v": np.array([7.0])})  # a row: written
        w.checkpoint(meta={"lsn": 2})
        assert w.store.stats.checkpoints == written[0] + 2
        w.apply({"v": np.arange(200.0)})  # evictions, slices dropped: written
        w.checkpoint(meta={"lsn": 2})
        w.checkpoint(meta={"lsn": 2})
        assert w.store.stats.checkpoints == written[0] + 3
        _no_leftovers(redis_url, w)
        want = w.query()
        w.reload()
        assert w.query() == want and w.checkpoint_meta == {"lsn": 2}
        w.checkpoint(meta={"lsn": 2})  # once after a reload (its first)
        w.checkpoint(meta={"lsn": 2})
        assert w.store.stats.checkpoints == written[0] + 4
    finally:
        w.store.delete_window()
        w.close()


def test_a_fenced_store_stops_the_window(redis_url: str) -> None:
    """A newer owner took the stream (the fence moved on): the next slice write or
    checkpoint is refused (FencedError), and so is every later batch; Redis keeps the last
    checkpoint the old owner made."""
    client = redis.Redis.from_url(redis_url)
    fence_key = f"test-cs-fence-{uuid.uuid4().hex}"
    client.set(fence_key, 1)
    wid = f"test-cs-{uuid.uuid4().hex}"
    fence = Fence(fence_key, 1)
    m = Record(n=_count(), s=_sum("v"))
    w = ColumnarWindow(
        m, CountPolicy(1000, field="n"), slice_rows=8, store=_store(redis_url, wid, fence=fence)
    )
    try:
        w.apply({"v": np.arange(20.0)})
        w.checkpoint()
        client.incr(fence_key)  # a newer owner
        w.apply({"v": np.arange(20.0)})  # seals two slices: their writes are refused
        with pytest.raises(FencedError):
            w.checkpoint()
        with pytest.raises(FencedError):
            w.apply({"v": np.arange(3.0)})
        back = ColumnarWindow(
            m, CountPolicy(1000, field="n"), slice_rows=8, store=_store(redis_url, wid)
        )
        assert len(back) == 20 and back.query()["s"] == sum(range(20))
        back.close()
    finally:
        client.delete(fence_key)
        client.close()
        w.close(wait=False)


def test_what_a_reload_refuses(redis_url: str) -> None:
    m = Record(n=_count(), s=_sum("v"))
    wid = f"test-cs-{uuid.uuid4().hex}"
    w = ColumnarWindow(m, CountPolicy(1000, field="n"), slice_rows=8, store=_store(redis_url, wid))
    w.apply({"v": np.arange(40.0)})
    w.checkpoint()
    w.close()
    with pytest.raises(ValueError, match="would give wrong results"):
        ColumnarWindow(m, CountPolicy(999, field="n"), slice_rows=8, store=_store(redis_url, wid))
    client = redis.Redis.from_url(redis_url)
    try:
        store = _store(redis_url, wid)
        client.delete(store.slice_key(1))  # a slice lost behind the window's back
        back = ColumnarWindow(
            m, CountPolicy(1000, field="n"), slice_rows=8, store=store, local_slices=1
        )
        with pytest.raises(CorruptDataError, match=r"slice\(s\) \[1\] are not in Redis"):
            back.apply({"v": np.arange(1000.0)}, per_row=True)
        store.delete_window()
        store.close()
    finally:
        client.close()


def _count() -> Any:
    from mtawindows.server.engine import Count

    return Count()


def _sum(f: str) -> Any:
    from mtawindows.server.engine import Sum

    return Sum(f)


def _max(f: str) -> Any:
    from mtawindows.server.engine import Max

    return Max(f)


def test_a_failed_write_is_raised_and_a_failed_reload_keeps_the_window_stale(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The service's face of a stored columnar window (ColumnarEngine): a slice write that
    fails in the background is raised by the next call, the window left as it is (the owner
    decides: a journaled stream replays its journal after the reload); a reload that fails
    (Redis down) leaves it stale, refusing batches, never answering from a state Redis does
    not hold; once Redis answers, the reload gives the last checkpoint exactly."""
    from mtawindows.server.engine.columnar.engine import ColumnarEngine
    from mtawindows.server.storage.protocol import StoreError, StoreUnavailableError

    client = redis.Redis.from_url(redis_url)
    fence_key = f"test-cs-fence-{uuid.uuid4().hex}"
    client.set(fence_key, 1)
    wid = f"test-cs-{uuid.uuid4().hex}"
    m = Record(n=_count(), s=_sum("v"))
    policy = CountPolicy(1000, field="n")

    def engine() -> ColumnarEngine:
        store = _store(redis_url, wid, fence=Fence(fence_key, 1))
        return ColumnarEngine(m, policy, store=store, slice_rows=4, local_slices=1)

    e = engine()
    try:
        e.apply(e.prepare({"v": np.arange(20.0)}))
        e.flush()  # the checkpoint: 20 rows, 5 slices
        client.set(fence_key, 2)  # writes refused from now on
        # seals 35 slices: written WRITE_SLICES at a time, in the background: refused
        e.apply(e.prepare({"v": np.arange(140.0)}))
        deadline = time.monotonic() + 10
        while e.store.failed is None:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert e.stale
        with pytest.raises(FencedError):
            e.prepare({"v": np.ones(1)})
        client.set(fence_key, 1)  # writes accepted again; Redis does not answer a load
        real = e.store.load

        def down() -> Any:
            raise StoreUnavailableError("Redis is down (injected)")

        monkeypatch.setattr(e.store, "load", down)
        for _ in range(2):
            with pytest.raises(StoreError, match="injected"):
                e.prepare({"v": np.ones(1)})
            assert e.stale
            with pytest.raises(StoreError, match="injected"):
                e.window.apply({"v": np.ones(1)})
        monkeypatch.setattr(e.store, "load", real)
        batch = e.prepare({"v": np.ones(3)})  # reloads the checkpoint first
        assert not e.stale and len(e) == 20 and e.query() == {"n": 20, "s": 190.0}
        e.apply(batch)
        e.flush()
        e.store.abandon()
        back = engine()
        assert len(back) == 23 and back.query() == {"n": 23, "s": 193.0}
        back.store.delete_window()
        back.close()
    finally:
        client.delete(fence_key)
        client.close()
        e.window.close(wait=False)


def test_edges_of_ranges_and_memory() -> None:
    """A time range reaching below every int64 is the whole window (as the engine's); a
    sealed slice holds copies, not views that keep a whole batch's arrays alive."""
    m = Record(n=_count(), s=_sum("v"), ts=_max("ts"))
    w = ColumnarWindow(m, TimeRangePolicy(10**6, field="ts"), slice_rows=8)
    ts = np.arange(-(2**63) + 10, -(2**63) + 30, dtype=np.int64)
    w.apply({"ts": ts, "v": np.ones(20)})
    ref = AmortizedMTA(m, TimeRangePolicy(10**6, field="ts"))
    for t in ts.tolist():
        ref.push({"ts": t, "v": 1.0})
    for r in (2**63 - 1, 5, 0):
        agg, size = w.aggregate_range(time_range=r, field="ts")
        assert (size, m.lower(agg)) == (
            ref.aggregate_range(time_range=r, field="ts")[1],
            m.lower(ref.aggregate_range(time_range=r, field="ts")[0]),
        )
    big = ColumnarWindow(m, CountPolicy(10**7, field="n"), slice_rows=1024)
    big.apply({"ts": np.arange(500_000), "v": np.ones(500_000)})
    assert all(a.base is None for sl in big.slices if sl.cols is not None for a in sl.cols.values())


def _sliding(n_batches: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    out, t = [], 0
    for _ in range(n_batches):
        ts = t + np.cumsum(rng.integers(0, 3, 700))
        t = int(ts[-1])
        out.append({"ts": ts, "v": rng.normal(0, 1, 700)})
    return out


def test_the_slices_where_the_window_starts_are_read_ahead(redis_url: str) -> None:
    """A sliding window of many stored slices whose start moves a few slices a batch: the
    slices it reads come from the read ahead started after the batch before (in the
    background), and every per-row result is the in-memory window's."""
    m = Record(n=_count(), s=_sum("v"), mx=_max("v"), ts=_max("ts"))
    policy = TimeRangePolicy(3_000, field="ts")  # about 3,000 rows: 47 slices of 64
    wid = f"test-cs-{uuid.uuid4().hex}"
    w = ColumnarWindow(m, policy, slice_rows=64, local_slices=2, store=_store(redis_url, wid))
    mem = ColumnarWindow(m, policy, slice_rows=64)
    try:
        for cols in _sliding(30, 5):
            w.store.sync()  # the read ahead of the batch before done (not a race with it)
            a = w.apply(cols, per_row=True)
            b = mem.apply(cols, per_row=True)
            assert a.rows is not None and b.rows is not None and a.rows.equals(b.rows)
            assert a.sizes is not None and b.sizes is not None
            assert a.sizes.tolist() == b.sizes.tolist()
            assert w.query() == mem.query()
        stats = w.stats()
        assert stats["slices"] > 30
        assert stats["read_ahead"] > 100  # about 11 slices a batch leave the window
    finally:
        w.store.delete_window()
        w.close()


def test_a_read_ahead_does_not_wait_for_the_windows_writes(redis_url: str) -> None:
    """A read ahead runs beside the window's queued writes, not behind them (a group of
    slices' write takes ~8 ms: the batch that needed the slices waited for it too); the
    results stay the in-memory window's."""
    m = Record(n=_count(), s=_sum("v"), ts=_max("ts"))
    policy = TimeRangePolicy(9_000, field="ts")  # about 140 slices of 64
    wid = f"test-cs-{uuid.uuid4().hex}"
    w = ColumnarWindow(m, policy, slice_rows=64, local_slices=2, store=_store(redis_url, wid))
    mem = ColumnarWindow(m, policy, slice_rows=64)
    data = _sliding(40, 6)
    try:
        for cols in data[:20]:
            w.apply(cols)
            mem.apply(cols)
        w.store.sync()
        read = False
        i = 20
        while not read and i < 30:  # a batch after which slices are read ahead
            hold = threading.Event()
            w.store._submit("hold the store's writer", hold.wait)
            try:
                last = w._ahead
                w.apply(data[i])
                mem.apply(data[i])
                if w._ahead is not None and w._ahead is not last:  # read, the writer held
                    read = len(w._ahead[1].result(timeout=10)) == len(w._ahead[0])
            finally:
                hold.set()
            i += 1
        assert read
        for cols in data[i:]:
            a = w.apply(cols, per_row=True)
            b = mem.apply(cols, per_row=True)
            assert a.rows is not None and b.rows is not None and a.rows.equals(b.rows)
        assert w.stats()["read_ahead"] > 0
    finally:
        w.store.delete_window()
        w.close()


def test_a_failed_read_ahead_is_not_an_answer(redis_url: str) -> None:
    """The slices read ahead are gone from Redis when the read runs: the window does not use
    the failed read; the batch that needs the slices (the next or the one after: a read
    ahead looks two batches ahead) reads them itself and is refused with the store's error
    (CorruptDataError), changing nothing."""
    m = Record(n=_count(), s=_sum("v"), ts=_max("ts"))
    policy = TimeRangePolicy(9_000, field="ts")  # about 140 slices of 64
    wid = f"test-cs-{uuid.uuid4().hex}"
    w = ColumnarWindow(m, policy, slice_rows=64, local_slices=2, store=_store(redis_url, wid))
    data = _sliding(40, 6)
    client = redis.Redis.from_url(redis_url)
    try:
        for cols in data[:20]:
            w.apply(cols)
        w.store.sync()
        hold = threading.Event()
        read = w.store._read

        def held(ks: list[int]) -> list[bytes]:  # the read ahead runs once the slices are gone
            if threading.current_thread() is not threading.main_thread():
                hold.wait()
            return read(ks)

        w.store._read = held  # type: ignore[method-assign]
        i = 20
        last = w._ahead  # (a read ahead issued before: done)
        while w._ahead is None or w._ahead is last:  # a batch after which slices are read ahead
            last = w._ahead
            w.apply(data[i])
            i += 1
            assert i < 30
        assert w._ahead is not None and not w._ahead[1].done()  # held
        ahead = w._ahead[0]
        client.delete(*[w.store.slice_key(sl.index) for sl in ahead])
        hold.set()
        w._ahead[1].exception()  # (done: failed)
        w.store._read = read  # type: ignore[method-assign]
        raised = False
        for cols in data[i : i + 4]:  # the batch whose starts reach the slices reads them
            before = (len(w), w.query())
            try:
                w.apply(cols, per_row=True)
            except CorruptDataError as ex:
                assert "not in Redis" in str(ex)
                assert (len(w), w.query()) == before
                raised = True
                break
        assert raised
        assert all(sl.cols is None for sl in ahead if sl in w.slices or sl is w.head)
    finally:
        client.close()
        w.store.delete_window()
        w.close()


def test_sealed_slices_are_written_together_and_only_if_they_stay(redis_url: str) -> None:
    """A Redis write per batch cost a third of a batch's time (Redis syncs its log at every
    write): sealed slices go in groups of ``WRITE_SLICES`` and with each checkpoint, which
    finds every slice it names in Redis (reloaded: the same answers); a slice that leaves
    the window before its group is written is never written."""
    from mtawindows.server.engine.columnar.window import WRITE_SLICES

    m = Record(n=_count(), s=_sum("v"))
    wid = f"test-cs-{uuid.uuid4().hex}"
    w = ColumnarWindow(m, CountPolicy(10**6, field="n"), slice_rows=4, store=_store(redis_url, wid))
    short = ColumnarWindow(
        m, CountPolicy(3, field="n"), slice_rows=4, store=_store(redis_url, wid + "-short")
    )
    try:
        for b in range(WRITE_SLICES + 8):  # a slice sealed per batch
            w.apply({"v": np.arange(4.0) + b})
            short.apply({"v": np.arange(4.0) + b})
        assert w.store.stats.writes == 1  # the first WRITE_SLICES slices, together
        assert short.store.stats.writes == 0  # its slices left before a group was full
        w.checkpoint()
        short.checkpoint()
        assert w.store.stats.writes == 2  # the other 8, before the checkpoint
        assert short.store.stats.writes <= 1  # its head only, if it is a sealed slice
        for win in (w, short):
            win.store.abandon()
        for win, policy in ((w, CountPolicy(10**6, field="n")), (short, CountPolicy(3, field="n"))):
            back = ColumnarWindow(
                m, policy, slice_rows=4, store=_store(redis_url, win.store.window_id)
            )
            assert back.query() == win.query() and len(back) == len(win)
            _no_leftovers(redis_url, back)
            back.store.delete_window()
            back.close()
    finally:
        w.close(wait=False)
        short.close(wait=False)


def _fenced_window(redis_url: str, fence_key: str) -> ColumnarWindow:
    m = Record(n=_count(), s=_sum("v"))
    wid = f"test-cs-{uuid.uuid4().hex}"
    return ColumnarWindow(
        m,
        CountPolicy(10**6, field="n"),
        slice_rows=4,
        store=_store(redis_url, wid, fence=Fence(fence_key, 1)),
    )


def test_a_group_of_slices_goes_in_a_transaction_checking_the_fence(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fenced window's group of slices (megabytes) is written in one optimistic
    transaction (the fence watched and read, then MULTI/EXEC), not through the fence script,
    which copies every argument into Lua and back: Redis took 8-16 ms a group of 32. The
    fence is checked all the same: reloaded, the window answers as before."""
    from mtawindows.server.engine.columnar.window import WRITE_SLICES
    from mtawindows.server.storage import fencing

    client = redis.Redis.from_url(redis_url)
    fence_key = f"test-cs-fence-{uuid.uuid4().hex}"
    client.set(fence_key, 1)
    scripts = []
    script = fencing.fenced
    monkeypatch.setattr(
        "mtawindows.server.storage.slice_store.fenced",
        lambda *a, **k: scripts.append(a[2]) or script(*a, **k),
    )
    w = _fenced_window(redis_url, fence_key)
    try:
        for b in range(WRITE_SLICES):  # a slice sealed per batch: one group
            w.apply({"v": np.arange(4.0) + b})
        w.store.sync()
        assert w.store.stats.writes == 1
        assert scripts == []  # the group went in the transaction
        w.checkpoint()
        w.store.abandon()
        back = ColumnarWindow(
            w.monoid,
            CountPolicy(10**6, field="n"),
            slice_rows=4,
            store=_store(redis_url, w.store.window_id),
        )
        assert back.query() == w.query() and len(back) == len(w) == 4 * WRITE_SLICES
        back.store.delete_window()
        back.close()
    finally:
        client.delete(fence_key)
        client.close()
        w.close(wait=False)


def test_a_newer_owner_between_the_watch_and_the_exec_refuses_the_group(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A newer owner takes the stream (INCR of its fence) after the transaction read the
    fence and before its EXEC: Redis aborts the EXEC, the fence script then refuses the
    group (FencedError, the fence marked lost), nothing of it is written, and the window
    stops."""
    from mtawindows.server.engine.columnar.window import WRITE_SLICES
    from mtawindows.server.storage.resp import PackedPipeline

    client = redis.Redis.from_url(redis_url)
    fence_key = f"test-cs-fence-{uuid.uuid4().hex}"
    client.set(fence_key, 1)
    watched = PackedPipeline.watched
    raced = []

    def racing(self: Any, keys: Any, commands: Any) -> Any:
        def between(values: list[Any]) -> Any:
            client.incr(fence_key)  # the newer owner, between the WATCH and the EXEC
            raced.append(values)
            return commands(values)

        return watched(self, keys, between)

    monkeypatch.setattr(PackedPipeline, "watched", racing)
    w = _fenced_window(redis_url, fence_key)
    try:
        for b in range(WRITE_SLICES):
            w.apply({"v": np.arange(4.0) + b})
        with pytest.raises(StoreError) as info:
            w.store.sync()  # (the sync is skipped after the refused write: it names it)
        assert isinstance(info.value, FencedError) or isinstance(info.value.__cause__, FencedError)
        assert raced  # the transaction ran, and its EXEC was aborted
        assert w.store.fence is not None and w.store.fence.lost
        assert not client.exists(w.store.slice_key(0))  # nothing of the group written
        with pytest.raises(FencedError):
            w.apply({"v": np.arange(4.0)})
    finally:
        client.delete(fence_key)
        client.close()
        w.close(wait=False)
