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

import random
import threading
from typing import Any

import pytest

from mtawindows.server.monoids import Concat, Count, Max, Record, Sum
from mtawindows.server.mta import AmortizedMTA, LogMTA
from mtawindows.server.naive import NaiveWindow
from mtawindows.server.policies import CountPolicy
from mtawindows.server.store import RedisStore

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
