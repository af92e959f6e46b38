"""The durability promise of one Redis-backed window, attacked where it broke: a checkpoint
queued behind block writes (``flush(wait=False)``, the service's periodic flush) while the
caller goes on appending to the log.

    caller thread:   extend(s1) RPUSH  flush(wait=False)  extend(s2) RPUSH ... (ack s2)
    writer thread:   [blocks s1] ........ [blocks]  [SET ckpt(s1) + trim the log] ...

The checkpoint covers s1 only; the entry of s2 was pushed while it waited. Removing the whole
log with it (the old ``DEL``) lost s2 although s2 was acknowledged; it must remove exactly the
entries its snapshot covers.
"""

from __future__ import annotations

import contextlib
import random
import threading
from typing import Any

import pytest

from mtawindows.server.engine.amta import AmortizedMTA
from mtawindows.server.engine.lmta import LogMTA
from mtawindows.server.engine.monoids import Concat, Count, Max, Record, Sum
from mtawindows.server.engine.naive import NaiveWindow
from mtawindows.server.engine.policies import CountPolicy
from mtawindows.server.storage.redis_store import RedisStore

pytestmark = [pytest.mark.slow, pytest.mark.server, pytest.mark.redis]

ALGS = [AmortizedMTA, LogMTA]
MONOID = Record(n=Count(), s=Sum("v"), t=Max("t"), cat=Concat("v"))


def _rows(seq: int, n: int) -> list[dict[str, Any]]:
    rnd = random.Random(seq)
    return [{"v": rnd.randint(-9, 9), "t": seq * 10_000 + i} for i in range(n)]


def _hold_writer(store: RedisStore) -> threading.Event:
    """Park the store's writer thread until the returned event is set: every write queued
    after this call waits behind it (the FIFO order the store relies on)."""
    release = threading.Event()
    store._exec.submit(release.wait, 10)
    return release


@pytest.mark.parametrize("cls", ALGS, ids=lambda c: c.__name__)
def test_entries_pushed_while_a_checkpoint_waits_survive_it(cls: Any, redis_url: str) -> None:
    policy = CountPolicy(700)
    store = RedisStore(redis_url, durable=True, block_size=16, cache_size=16, refill_at=8)
    w = cls(MONOID, policy, store=store)
    oracle = NaiveWindow(MONOID, policy)
    seq = 0
    for _ in range(3):
        seq += 1
        w.extend(_rows(seq, 90), producer_id="p", sequence=seq)
        oracle.extend(_rows(seq, 90))
    release = _hold_writer(store)
    w.flush(wait=False)  # queued: its snapshot covers sequences 1-3
    for _ in range(4):  # acknowledged (durable) while the checkpoint waits
        seq += 1
        w.extend(_rows(seq, 70), producer_id="p", sequence=seq)
        oracle.extend(_rows(seq, 70))
    release.set()
    store.sync()  # the checkpoint has committed; the process now "dies" without a flush
    reopened = cls.open(w.window_id, MONOID, policy, url=redis_url, durable=True)
    assert reopened.last_sequence("p") == seq
    assert reopened.query() == oracle.query()
    assert len(reopened) == len(oracle)
    # and a retry of an acknowledged batch is a duplicate
    reopened.extend(_rows(seq, 70), producer_id="p", sequence=seq)
    assert reopened.query() == oracle.query()
    reopened.close()


@pytest.mark.parametrize("cls", ALGS, ids=lambda c: c.__name__)
def test_many_queued_checkpoints_interleaved_with_appends(cls: Any, redis_url: str) -> None:
    """Random interleavings of appends, queued and waited checkpoints, and reopenings (a crash:
    the old instance is abandoned, never flushed): the reopened window always equals the model
    of every acknowledged batch."""
    rnd = random.Random(7)
    policy = CountPolicy(500)
    store = RedisStore(redis_url, durable=True, block_size=8, cache_size=8, refill_at=4)
    w = cls(MONOID, policy, store=store)
    wid = w.window_id
    oracle = NaiveWindow(MONOID, policy)
    seq = 0
    held: threading.Event | None = None
    for _ in range(120):
        op = rnd.random()
        if op < 0.6:
            seq += 1
            n = rnd.choice([1, 3, 7, 8, 9, 15, 16, 17, 40])
            w.extend(_rows(seq, n), producer_id="p", sequence=seq)
            oracle.extend(_rows(seq, n))
        elif op < 0.8:
            if held is None and rnd.random() < 0.5:
                held = _hold_writer(w.store)
            w.flush(wait=False)
        elif op < 0.9 and held is not None:
            held.set()
            held = None
        else:
            if held is not None:
                held.set()
                held = None
            w.store.sync()  # whatever was queued has landed (or not: a crash keeps the log)
            w = cls.open(wid, MONOID, policy, url=redis_url, durable=True)
            assert w.last_sequence("p") == (seq or None)
            assert w.query() == oracle.query()
    if held is not None:
        held.set()
    w.close()


# ----------------------------------------------------------------------------- the service
def _abandon(reg: Any) -> None:
    """A crash as far as Redis can tell: nothing flushed; stop the windows' writer threads
    after their queued writes (what had reached the socket before a kill -9)."""
    for s in reg.streams.values():
        for w in s.windows.values():
            if w.engine.store is not None:
                w.engine.store.sync()
                w.engine.store._exec.shutdown(wait=True)


@pytest.mark.parametrize("flush_every", [0, 3, 7])
def test_a_journaled_stream_comes_back_exactly_reorder_buffer_included(
    redis_url: str, flush_every: int
) -> None:
    """DROP with allowed lateness (a reorder buffer), a durable and a non-durable Redis window:
    a registry abandoned without a final flush (queued checkpoints in between, every
    ``flush_every`` batches) is restored with the same stream state (buffer, newest,
    counters, sequences) and the same window results as the live one had."""
    from datetime import timedelta

    from mtawindows.server.service import Registry
    from mtawindows.v1.types import Aggregation, Field, Policy, Storage, StreamSpec, WindowSpec

    prefix = f"dur{flush_every}{random.randrange(1 << 30)}"
    aggs = (
        Aggregation("n", "count"),
        Aggregation("s", "sum", "v"),
        Aggregation("first", "first", "v"),
        Aggregation("last", "last", "v"),
    )
    reg = Registry(redis_url, prefix=prefix)
    spec = StreamSpec("r", (Field("v", "DOUBLE"),), late_policy="DROP",
                      allowed_lateness=timedelta(seconds=5), wall_clock=False)  # fmt: skip
    reg.create_stream(spec)
    reg.create_window(WindowSpec("r", "d", aggs, Policy.count(300),
                                 storage=Storage(durable=True, block_size=8, cache_size=8)))  # fmt: skip
    reg.create_window(WindowSpec("r", "plain", aggs, Policy.count(100), "LMTA"))
    s = reg.stream("r")
    rnd = random.Random(flush_every)
    t = 10**12
    for seq in range(1, 40):
        n = rnd.choice([1, 5, 9, 40])
        ts = [t + rnd.randint(-7, 3) * 10**9 + i for i in range(n)]  # some late, some reordered
        t += 2 * 10**9
        cols = {"ts": ("TIMESTAMP", ts), "v": ("DOUBLE", [float(rnd.randint(-9, 9)) for _ in ts])}
        s.append(cols, producer_id="p", sequence=seq)
        if flush_every and seq % flush_every == 0:
            reg.flush(s, wait=False)
    live_state = s.info()
    live = {n: s.windows[n].result() for n in s.windows}
    buffer = list(s.state.buffer)
    _abandon(reg)

    again = Registry(redis_url, prefix=prefix)
    again.restore()
    s2 = again.stream("r")
    assert s2.info() == live_state
    assert sorted(s2.state.buffer) == sorted(buffer)
    for n, r in live.items():
        got = s2.windows[n].result()
        assert (got.values, got.size, got.sequence) == (r.values, r.size, r.sequence), n
    # every acknowledged sequence is a duplicate; the next one applies
    assert s2.append({"ts": ("TIMESTAMP", [t]), "v": ("DOUBLE", [1.0])},
                     producer_id="p", sequence=39).duplicate  # fmt: skip
    again.close()


def test_a_stream_without_journal_comes_back_at_its_last_flush_consistently(
    redis_url: str,
) -> None:
    """No durable window: after a crash the Redis windows and the stream's state come back at
    the last flush together (the rows after it are the documented loss of non-durable windows),
    never a state older than a window: no late row gets in, no sequence a window holds applies
    twice."""
    from mtawindows.server.service import Registry, ServiceError
    from mtawindows.v1.types import Aggregation, Field, Policy, StreamSpec, WindowSpec

    prefix = f"nodur{random.randrange(1 << 30)}"
    aggs = (Aggregation("n", "count"), Aggregation("s", "sum", "v"))
    reg = Registry(redis_url, prefix=prefix)
    reg.create_stream(StreamSpec("r", (Field("v", "DOUBLE"),), wall_clock=False))
    reg.create_window(WindowSpec("r", "w", aggs, Policy.count(1000)))
    s = reg.stream("r")

    def batch(seq: int) -> dict[str, Any]:
        return {"ts": ("TIMESTAMP", [seq * 10 + i for i in range(5)]), "v": ("DOUBLE", [1.0] * 5)}

    for seq in range(1, 11):
        s.append(batch(seq), producer_id="p", sequence=seq)
    reg.flush(s, wait=False)
    at_flush = (s.info(), s.windows["w"].result())
    for seq in range(11, 15):  # not flushed: lost with the process
        s.append(batch(seq), producer_id="p", sequence=seq)
    _abandon(reg)

    again = Registry(redis_url, prefix=prefix)
    again.restore()
    s2 = again.stream("r")
    info, res = at_flush
    got = s2.windows["w"].result()
    assert (got.values, got.size) == (res.values, res.size)
    assert (s2.info().rows_appended, s2.info().newest_timestamp) == (
        info.rows_appended,
        info.newest_timestamp,
    )
    assert s2.append(batch(10), producer_id="p", sequence=10).duplicate
    with pytest.raises(ServiceError) as late:
        s2.append({"ts": ("TIMESTAMP", [info.newest_timestamp - 1]), "v": ("DOUBLE", [1.0])})
    assert late.value.reason == "OUT_OF_ORDER"
    again.close()


def test_appends_whose_deadline_expires_mid_apply_never_run_beside_the_next(
    tmp_path: Any,
) -> None:
    """A client's deadline cancels the call, not the worker thread applying its batch: the next
    call on the stream used to run beside that thread (two appends inside one window at once:
    wrong sums, broken levels). Big batches with a tiny deadline, each followed at once by the
    next sequence: at the end the windows equal the model of every batch the server took."""
    from mtawindows.client import (
        Aggregation,
        DeadlineExceededError,
        Field,
        Policy,
        Storage,
        StreamSpec,
        WindowClient,
        WindowSpec,
    )
    from mtawindows.testing import LocalServer

    aggs = (Aggregation("n", "count"), Aggregation("s", "sum", "v"), Aggregation("f", "first", "v"))
    with LocalServer(tmp_path / "deadline") as srv, WindowClient(srv.target, timeout=60) as c:
        c.create_stream(StreamSpec("d", (Field("v", "DOUBLE"),), wall_clock=False))
        c.create_window(WindowSpec("d", "w", aggs, Policy.count(50_000), "LMTA",
                                   Storage(durable=True, block_size=16)))  # fmt: skip
        c.create_window(WindowSpec("d", "m", aggs, Policy.count(50_000), storage=Storage("memory")))
        batches = {}
        t = 0
        for seq in range(1, 13):
            n = 40_000 if seq % 2 else 50
            rnd = random.Random(seq)
            batches[seq] = {
                "ts": list(range(t, t + n)),
                "v": [float(rnd.randint(-5, 5)) for _ in range(n)],
            }
            t += n
            # cancelled by the client: applied or not, the retries below settle it
            with contextlib.suppress(DeadlineExceededError):
                c.append("d", batches[seq], producer_id="p", sequence=seq,
                         timeout=0.02 if n > 50 else 60)  # fmt: skip
        for seq, b in batches.items():  # settle every batch (duplicates where applied)
            c.append("d", b, producer_id="p", sequence=seq, timeout=60)
        vs = [v for seq in sorted(batches) for v in batches[seq]["v"]][-50_000:]
        want = {"n": len(vs), "s": float(sum(vs)), "f": vs[0]}
        for name in ("w", "m"):
            got = c.query("d", name)
            assert {k: got.values[k] for k in want} == want, name
