"""A stream journal's trim after a commit whose reply was lost (real Redis): the commit may or
may not have run, and the next one must drop exactly the entries its state covers, never an
entry after it (a trim counted from a stale first entry dropped acknowledged batches that no
saved state held: lost at the next crash)."""

from __future__ import annotations

import uuid

import pytest
import redis

from mtawindows.server.storage.journal import StreamJournal
from mtawindows.testing import shared_redis_url

pytestmark = [pytest.mark.redis]


def _journal() -> tuple[StreamJournal, redis.Redis]:
    client = redis.Redis.from_url(shared_redis_url())
    return StreamJournal(client, f"jt{uuid.uuid4().hex[:12]}", "s"), client


def _append(j: StreamJournal, lsns: range) -> None:
    for lsn in lsns:
        j.append(lsn, "p", lsn, "NONE", (), {"v": ("DOUBLE", [float(lsn)])})


def _lost_reply(j: StreamJournal, client: redis.Redis, lsn: int, applied: bool) -> None:
    """A commit at ``lsn`` whose reply never came: applied by Redis, or not."""
    ops = j.commit_ops(b"state", lsn)
    if applied:
        pipe = client.pipeline(transaction=True)
        for cmd, key, args in ops:
            pipe.execute_command(cmd, key, *args)
        pipe.execute()
    j.unsure()  # what a failed round trip tells the journal


@pytest.mark.parametrize("applied", [True, False], ids=["applied", "not-applied"])
def test_a_commit_after_a_lost_reply_keeps_every_later_entry(applied: bool) -> None:
    j, client = _journal()
    _append(j, range(1, 6))
    _lost_reply(j, client, 5, applied)
    _append(j, range(6, 10))
    j.commit_state(b"state9", 7)  # covers 1..7: 8 and 9 must stay
    assert [e.lsn for e in j.entries()] == [8, 9]
    _append(j, range(10, 12))
    j.commit_state(b"state11", 10)
    assert [e.lsn for e in j.entries()] == [11]
    assert client.get(j.state_key) == b"state11"


def test_an_empty_journal_after_a_lost_reply() -> None:
    j, client = _journal()
    _append(j, range(1, 4))
    _lost_reply(j, client, 3, True)
    j.commit_state(b"s3", 3)  # nothing left to trim
    assert j.entries() == []
    _append(j, range(4, 6))
    j.commit_state(b"s4", 4)
    assert [e.lsn for e in j.entries()] == [5]
