"""A stream's write-ahead journal and its saved state, in Redis.

A stream with a durable window journals every append before any window sees it: one ``RPUSH``
of the batch as it came (its columns, producer id, sequence, result mode) under the next **log
sequence number** (lsn). The append is acknowledged after that write and after the windows
applied it, so "acknowledged" implies "journaled". Windows themselves keep no log: their
checkpoints (taken by the service's flush) record the lsn of the last entry they hold, and the
stream's state (newest timestamp, counters, producers' last sequences, reorder buffer) is saved
with the lsn it reflects. Keys, under the stream's own hash tag (one Redis Cluster slot, so the
state write and the journal trim are one ``MULTI``)::

    mtaw:svc:{<stream>}:journal   list    msgpack (lsn, producer, sequence, mode, windows, columns)
                                          (a key group's entries: and ``extra``, a map)
    mtaw:svc:{<stream>}:state     string  JSON of the stream's state, with its "lsn"

Order of writes (the invariants recovery relies on):

1. an append: ``RPUSH`` of entry ``lsn`` (its lsns are contiguous), then the windows;
2. a flush: each Redis window's checkpoint with ``{"lsn": <its last entry>}`` (queued behind
   its block writes); only **after those committed**, the stream's state at that lsn + ``LTRIM``
   of the entries it covers, atomically. Hence ``state.lsn <= every window's lsn``, and every
   entry after ``state.lsn`` is still in the journal;
3. recovery: the state, then every entry after ``state.lsn`` through the stream's own checks
   again (deterministic: same state, same batch, same outcome), applied to each window whose
   checkpoint does not hold it yet.

An entry that reached Redis although its ``RPUSH`` failed (a timeout after the write) is
replayed too: its append was never acknowledged, and its idempotency key makes the retry a
duplicate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis

from .codecs import packb, unpackb
from .fencing import Fence, FencedError, Op, fenced, is_fenced
from .keys import StreamKeys
from .protocol import CorruptDataError, StoreError, StoreUnavailableError

__all__ = ["JournalEntry", "StreamJournal"]


@dataclass(frozen=True)
class JournalEntry:
    lsn: int
    producer_id: str
    sequence: int
    mode: str
    which: tuple[str, ...]
    columns: dict[str, tuple[str, list[Any]]]
    # an optional seventh element, plain data: what a key group's entry says besides its rows
    # (keyed/stream.py: the batch counts there, or a deletion of keys); a stream's own entries
    # have none
    extra: dict[str, Any] = field(default_factory=dict)


class StreamJournal:
    """The journal and saved state of one stream (see the module docstring)."""

    def __init__(
        self,
        client: Any,
        prefix: str,
        stream: str,
        fence: Fence | None = None,
        *,
        wait: Any = None,
        keys: tuple[str, str] | None = None,
    ) -> None:
        self._client = client
        self.stream = stream
        if keys is None:  # a stream's own; a key group's are given (keys.GroupKeys)
            sk = StreamKeys.of(prefix, stream)
            keys = sk.journal, sk.state
        self.journal_key, self.state_key = keys
        self.first = 1  # lsn of the journal's first entry (entries are contiguous)
        # False after a commit whose outcome is unknown (its reply lost: its LTRIM may or may
        # not have run): the next commit reads the journal's first entry before it trims, as
        # a count from a stale ``first`` would drop entries no saved state covers
        self.first_known = True
        self.fence = fence  # the owner's: every write is refused once a newer owner exists
        # cluster.replicas_waiter: replicas must hold an entry before it is acknowledged
        self.wait = wait

    def _write(self, ops: list[Op]) -> Any:
        if self.wait is not None:
            write = lambda pipe: fenced(self._client, self.fence, ops, pipe=pipe)  # noqa: E731
            return self.wait(self._client, ops[0][1], write)
        return fenced(self._client, self.fence, ops)

    def _fail(self, ex: BaseException, doing: str) -> Exception:
        if isinstance(ex, StoreError):
            return ex
        if is_fenced(ex):
            if self.fence is not None:
                self.fence.lost = True
            return FencedError(f"stream {self.stream!r}: {doing}: {ex}")
        if isinstance(ex, redis.ResponseError) and "WRONGTYPE" in str(ex):
            return CorruptDataError(f"stream {self.stream!r}: {doing}: {ex}")
        return StoreUnavailableError(
            f"stream {self.stream!r}: {doing}: Redis is unavailable ({type(ex).__name__})"
        )

    def append(
        self,
        lsn: int,
        producer_id: str,
        sequence: int,
        mode: str,
        which: Sequence[str],
        columns: Mapping[str, tuple[str, Sequence[Any]]],
    ) -> None:
        """Journal one batch (one round trip). Raises ``StoreError``: the entry may or may not
        be there, so the caller reloads the stream before its next append."""
        cols = {  # no copy of a list; an array's values as a list (Stream.takes_arrays)
            name: [kind, values.tolist() if hasattr(values, "tolist") else values]
            for name, (kind, values) in columns.items()
        }
        blob = packb([lsn, producer_id, sequence, mode, list(which), cols])
        try:
            self._write([("RPUSH", self.journal_key, (blob,))])
        except (redis.RedisError, StoreError) as ex:
            raise self._fail(ex, f"journal the batch of lsn {lsn}") from ex

    def entries(self) -> list[JournalEntry]:
        try:
            raw = self._client.lrange(self.journal_key, 0, -1)
        except redis.RedisError as ex:
            raise self._fail(ex, "read the journal") from ex
        out: list[JournalEntry] = []
        for n, blob in enumerate(raw):
            try:
                lsn, pid, seq, mode, which, cols, *rest = unpackb(blob)
                entry = JournalEntry(
                    int(lsn),
                    str(pid),
                    int(seq),
                    str(mode),
                    tuple(which),
                    {str(k): (str(v[0]), list(v[1])) for k, v in cols.items()},
                    {str(k): v for k, v in rest[0].items()} if rest else {},
                )
            except (ValueError, TypeError, AttributeError, IndexError, CorruptDataError) as ex:
                msg = f"stream {self.stream!r}: journal entry {n} of {self.journal_key!r} is not valid ({ex!r})"
                raise CorruptDataError(msg) from ex
            if out and entry.lsn != out[-1].lsn + 1:
                msg = (
                    f"stream {self.stream!r}: journal {self.journal_key!r} skips from lsn "
                    f"{out[-1].lsn} to {entry.lsn}"
                )
                raise CorruptDataError(msg)
            out.append(entry)
        return out

    def load_state(self) -> bytes | None:
        try:
            blob: bytes | None = self._client.get(self.state_key)
        except redis.RedisError as ex:
            raise self._fail(ex, "read the stream's state") from ex
        return blob

    def commit_state(self, blob: str | bytes, lsn: int, extra: Sequence[Op] = ()) -> None:
        """Save the state at ``lsn`` and drop the entries it covers, atomically (with the
        writes ``extra``: a key group's keys)."""
        try:
            fenced(self._client, self.fence, self.commit_ops(blob, lsn, extra))
        except (redis.RedisError, StoreError) as ex:
            self.unsure()
            raise self.failed(ex, f"save the stream's state at lsn {lsn}") from ex
        self.committed(lsn)

    def commit_ops(self, blob: str | bytes, lsn: int, extra: Sequence[Op] = ()) -> list[Op]:
        """:meth:`commit_state`'s writes, for a caller that sends many at once (it calls
        :meth:`committed` once they are applied, :meth:`unsure` when it cannot tell)."""
        if not self.first_known:
            self._read_first(lsn)
        drop = lsn - self.first + 1
        ops: list[Op] = [*extra, ("SET", self.state_key, (blob,))]
        if drop > 0:
            ops.append(("LTRIM", self.journal_key, (drop, -1)))
        return ops

    def committed(self, lsn: int) -> None:
        """The writes of :meth:`commit_ops` at ``lsn`` are applied."""
        if lsn >= self.first:
            self.first = lsn + 1

    def unsure(self) -> None:
        """The writes of :meth:`commit_ops` may or may not have been applied (an error, a
        reply lost): the next commit learns where the journal starts first."""
        self.first_known = False

    def _read_first(self, lsn: int) -> None:
        """``first`` from the journal itself (its first entry's lsn; none: past ``lsn``)."""
        try:
            head = self._client.lindex(self.journal_key, 0)
        except redis.RedisError as ex:
            raise self._fail(ex, "read the journal's first entry") from ex
        if head is None:
            self.first = lsn + 1
        else:
            try:
                self.first = int(unpackb(head)[0])
            except (ValueError, TypeError, IndexError, CorruptDataError) as ex:
                msg = f"stream {self.stream!r}: the first entry of {self.journal_key!r} is not valid ({ex!r})"
                raise CorruptDataError(msg) from ex
        self.first_known = True

    def state_ops(self, blob: str | bytes, extra: Sequence[Op] = ()) -> list[Op]:
        """:meth:`save_state`'s writes."""
        return [*extra, ("SET", self.state_key, (blob,))]

    def failed(self, ex: BaseException, doing: str) -> Exception:
        """The error to raise for a failed write of ``doing``: a :class:`FencedError` for a
        newer owner's refusal (the fence marked lost), else a :class:`StoreError`."""
        return self._fail(ex, doing)

    def save_state(self, blob: str | bytes, extra: Sequence[Op] = ()) -> None:
        """Save the state of a stream that keeps no journal (with the writes ``extra``)."""
        try:
            fenced(self._client, self.fence, self.state_ops(blob, extra))
        except (redis.RedisError, StoreError) as ex:
            raise self._fail(ex, "save the stream's state") from ex

    def drop_journal(self) -> None:
        try:
            fenced(self._client, self.fence, [("DEL", self.journal_key, ())])
        except (redis.RedisError, StoreError) as ex:
            raise self._fail(ex, "drop the journal") from ex

    def delete(self) -> None:
        try:
            ops: list[Op] = [("DEL", self.journal_key, ()), ("DEL", self.state_key, ())]
            fenced(self._client, self.fence, ops)
        except (redis.RedisError, StoreError) as ex:
            raise self._fail(ex, "delete the stream's keys") from ex
