"""The Redis tier (paper sections 4.1.5 and 5.1): the middle of every level queue in Redis.

A window keeps in its process only what the algorithms touch: per level the head, the tail, a
write buffer and a head cache (:class:`~mtawindows.server.engine.levels.TieredLevel`), plus the stack
and the result pair. Everything else lives under the window's keys, which share one hash tag
so that a window sits in one Redis Cluster slot and pipelines, MULTI and Lua work on a
cluster::

    mtaw:{<window_id>}:meta         hash    format, algorithm, monoid, policy, codec, block_size
    mtaw:{<window_id>}:ckpt         string  the last checkpoint of the local state
    mtaw:{<window_id>}:log          list    operations applied since that checkpoint (durable)
    mtaw:{<window_id>}:b:<l>:<b>    block b of level l: ``block_size`` pairs, positions
                                    [b * block_size, (b + 1) * block_size)

A block is a string of fixed-size records when the monoid's codec has a fixed record size
(one pair = one ``GETRANGE`` at a computed offset, a refill = one ``GETRANGE``/``GET``), else a
hash of one msgpack record per position (``HGET`` / ``HMGET``).

**I/O.** All block I/O runs on one background thread per store, in submission order:
buffer flushes and cache refills never block the caller; a synchronous read (a miss) waits
for the writes queued before it. The new heads of a bulk eviction are fetched in one
pipelined round trip before the eviction commits.

**Durability.** A *checkpoint* (``flush()``, and automatically every ``checkpoint_every``
items) writes every buffered pair, then the local state (tails, heads, stack, result pair,
counters, idempotency keys) with ``MULTI``: checkpoint ``SET`` + log ``DEL`` in one atomic
write. Blocks that only hold evicted pairs are deleted after the checkpoint that no longer
needs them. With ``durable=True`` each operation is also appended to the log (one ``RPUSH``,
carrying its idempotency key) before it returns. An operation is **acknowledged** when it
returned, with ``durable=True``; without it, when a later ``flush()`` returned. Reopening the
window (same ``window_id``) loads the checkpoint and replays the log: the state after the
last acknowledged operation, exactly (possibly more: an operation in flight when the process
died may have reached the log).

**Failures.** Redis errors surface as :class:`~mtawindows.server.storage.protocol.StoreUnavailableError`
(bounded by ``timeout``); bytes that are not this window's as
:class:`~mtawindows.server.storage.protocol.CorruptDataError`. The window then reloads its last durable
state from Redis on its next operation, so it is never left half-written.
"""

from __future__ import annotations

import contextlib
import re
import time
import uuid
import zlib
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import redis

from .codecs import CodecError, codec_for, packb, stamp, stamps, unpackb
from .connect import connect, is_unavailable
from .fencing import Fence, FencedError, Op, fenced
from .keys import DEFAULT_PREFIX, WindowKeys
from .protocol import (
    CheckpointedWindow,
    CorruptDataError,
    SealedPair,
    StoreError,
    StoreStats,
    StoreUnavailableError,
    WouldBlock,
    check_sizes,
)

__all__ = ["FORMAT", "RedisStore"]

FORMAT = "1"
_WINDOW_ID = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
_T = TypeVar("_T")
_MAX_INFLIGHT = 32  # queued block writes before write() waits for the oldest


def _safe_url(url: str) -> str:
    """The URL without its password (for error messages)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<invalid url>"
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _describe(obj: Any) -> str:
    """A stable description of a monoid or policy (saved with the window, checked on reopen)."""
    describe = getattr(obj, "describe", None)
    if callable(describe):
        with contextlib.suppress(Exception):
            return repr(describe())
    if hasattr(obj, "__dataclass_fields__"):
        return repr(obj)
    if hasattr(obj, "__qualname__"):
        return f"{getattr(obj, '__module__', '?')}.{obj.__qualname__}"
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def _resolve(url: str | None) -> str:
    """``url``, or for ``None`` ``$MTAWINDOWS_REDIS_URL`` or else the embedded server's."""
    if url is None:
        from .embedded import default_url

        return default_url()
    return url


def _checked_url(url: Any, window_id: Any, prefix: Any, timeout: Any) -> str:
    """Validate a store's options (``ValueError`` naming the first bad one); the URL to use."""
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
        msg = f"RedisStore: timeout must be a number of seconds > 0, got {timeout!r}"
        raise ValueError(msg)
    if window_id is not None and (
        not isinstance(window_id, str) or not _WINDOW_ID.fullmatch(window_id)
    ):
        msg = (
            "RedisStore: window_id must be 1-128 characters of letters, digits and _.:-, "
            f"got {window_id!r}"
        )
        raise ValueError(msg)
    if not isinstance(prefix, str) or not _WINDOW_ID.fullmatch(prefix):
        msg = f"RedisStore: prefix must be 1-128 characters of letters, digits and _.:-, got {prefix!r}"
        raise ValueError(msg)
    url = _resolve(url)
    schemes = ("redis://", "rediss://", "unix://", "redis+cluster://", "rediss+cluster://")
    if not isinstance(url, str) or not url.startswith(schemes):
        msg = f"RedisStore: url must start with one of {', '.join(schemes)}, got {_safe_url(str(url))!r}"
        raise ValueError(msg)
    return url


class RedisStore:
    """A :class:`~mtawindows.server.storage.protocol.WindowStore`: keeps one window's levels in
    Redis, and the window durable.

    ``url`` is a ``redis://``, ``rediss://`` (TLS) or ``unix://`` URL; ``None`` uses
    ``$MTAWINDOWS_REDIS_URL`` or else the embedded server
    (:func:`~mtawindows.server.storage.embedded.default_url`). ``window_id=None`` makes a fresh
    window; an existing id reopens that window (its checkpoint and log are replayed when the
    window is built; :meth:`reopen` insists that it exists). See the module docstring for
    durability. The store sees its window only through
    :class:`~mtawindows.server.storage.protocol.CheckpointedWindow`.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        window_id: str | None = None,
        block_size: int = 512,
        cache_size: int = 512,
        refill_at: int = 256,
        durable: bool = False,
        checkpoint_every: int = 65536,
        codec: Any = None,
        timeout: float = 5.0,
        prefix: str = DEFAULT_PREFIX,
        tag: str | None = None,
        fence: Fence | None = None,
        client: Any = None,
    ) -> None:
        check_sizes(
            "RedisStore", block_size, cache_size, refill_at, checkpoint_every=checkpoint_every
        )
        self.url = url = _checked_url(url, window_id, prefix, timeout)
        self.window_id = window_id or uuid.uuid4().hex
        self.reopened = False  # set by attach when the window existed
        self.block_size = block_size
        self.cache_size = cache_size
        self.refill_at = refill_at
        self.durable = bool(durable)
        self.checkpoint_every = checkpoint_every
        self.timeout = float(timeout)
        self.keys = WindowKeys(prefix, self.window_id, tag)
        # the owner's fencing token (the service's windows): every write is refused by Redis
        # once a newer owner holds the stream (FencedError); None: unfenced
        self.fence = fence
        self.stats = StoreStats()
        self.codec: Any = codec
        self._salt = zlib.crc32(self.keys.tag.encode())
        # a client of ``connect`` shared with others (the service's windows share their
        # registry's: one connection pool, no connection set-up per window), else its own
        self._owns_client = client is None
        self._client = connect(url, timeout=self.timeout, retries=1) if client is None else client
        self._exec = self._new_executor()
        # set by the window for a call made with nonblocking=True (the service's event loop):
        # a miss, a refill in flight or write back-pressure raises WouldBlock meanwhile
        self.nonblocking = False
        self._failed: StoreError | None = None  # a background write failed: stop writing
        self._drop_upto: dict[int, int] = {}  # per level: positions below are evicted
        self._deleted_upto: dict[int, int] = {}  # per level: blocks below are deleted (or unused)
        self._since_checkpoint = 0
        self._replaying = False
        self._attached = False
        self._inflight: deque[Future[None]] = deque()  # queued block writes
        # The log's order: every entry carries a log sequence number (lsn), the checkpoint the
        # lsn of the last entry it covers. Entries are only removed by the checkpoint that
        # covers them (LTRIM of exactly the entries pushed before its snapshot), so an entry
        # pushed while a checkpoint waits in the writer's queue survives that checkpoint.
        self._lsn = 0  # lsn of the last logged operation
        self._untrimmed = 0  # entries pushed since the last snapshot (the next trim removes them)
        self.checkpoint_meta: dict[str, Any] | None = None  # the caller's, of the loaded checkpoint

    @classmethod
    def reopen(cls, window_id: str, *, url: str | None = None, **options: Any) -> RedisStore:
        """The store of the existing window ``window_id`` at ``url`` (``LookupError`` when
        there is none); ``options`` as for the constructor."""
        if not cls.exists(url, window_id, prefix=options.get("prefix", DEFAULT_PREFIX)):
            msg = f"no window {window_id!r} at that Redis"
            raise LookupError(msg)
        return cls(url, window_id=window_id, **options)

    def _new_executor(self) -> ThreadPoolExecutor:
        return ThreadPoolExecutor(1, thread_name_prefix=f"mtaw-store-{self.window_id[:8]}")

    def __repr__(self) -> str:
        return (
            f"RedisStore({_safe_url(self.url)!r}, window_id={self.window_id!r}, "
            f"block_size={self.block_size}, cache_size={self.cache_size}, "
            f"refill_at={self.refill_at}, durable={self.durable})"
        )

    # ------------------------------------------------------------------ errors
    def _translate(self, ex: BaseException, doing: str) -> StoreError:
        where = f"window {self.window_id!r} at {_safe_url(self.url)}"
        if isinstance(ex, StoreError):
            return ex
        if isinstance(ex, redis.ResponseError) and str(ex).startswith("FENCED"):
            return FencedError(f"{where}: {doing}: {ex}")
        if isinstance(ex, redis.ResponseError) and "WRONGTYPE" in str(ex):
            msg = f"{where}: {doing}: a key of the window holds another type of data ({ex})"
            return CorruptDataError(msg)
        if is_unavailable(ex) or isinstance(ex, redis.BusyLoadingError | OSError):
            msg = (
                f"{where}: {doing}: Redis is unavailable ({type(ex).__name__}: {ex}); the "
                "window reloads its last durable state once Redis answers again"
            )
            return StoreUnavailableError(msg)
        if isinstance(ex, CodecError):
            msg = f"{where}: {doing}: {ex}"
            return StoreError(msg)
        msg = f"{where}: {doing}: {type(ex).__name__}: {ex}"
        return StoreError(msg)

    def _direct(self, doing: str, fn: Callable[[], _T]) -> _T:
        """Run a Redis call on the caller's thread, translating errors."""
        try:
            return fn()
        except Exception as ex:
            raise self._translate(ex, doing) from ex

    def _submit(
        self, doing: str, fn: Callable[..., _T], *args: Any, write: bool = False
    ) -> Future[_T]:
        return self._exec.submit(self._run, doing, write, fn, *args)

    def _run(self, doing: str, write: bool, fn: Callable[..., _T], *args: Any) -> _T:
        failed = self._failed
        if failed is not None:
            msg = f"window {self.window_id!r}: {doing}: skipped after an earlier failure ({failed})"
            raise StoreUnavailableError(msg) from failed
        try:
            return fn(*args)
        except Exception as ex:
            err = self._translate(ex, doing)
            if write:
                self._failed = err
            raise err from ex

    def _wait(self, fut: Future[_T]) -> _T:
        return fut.result()

    # ------------------------------------------------------------------ PairStore
    def write(self, level: int, start: int, pairs: Sequence[SealedPair]) -> None:
        """Queue ``pairs`` (positions ``start ..``) for the background writer. Never raises:
        a failed write is reported by the next operation of the window."""
        full = self.backlogged()
        if full and self.nonblocking:
            raise WouldBlock
        st = self.stats
        st.writes += 1
        st.pairs_written += len(pairs)
        if level not in self._deleted_upto:  # the first block this level ever used
            self._deleted_upto[level] = start // self.block_size
        inflight = self._inflight
        if full:  # back-pressure: bounded local memory
            with contextlib.suppress(Exception):  # a failure is reported by the next operation
                inflight.popleft().result()
        inflight.append(
            self._submit(f"write level {level}", self._do_write, level, start, pairs, write=True)
        )

    def _checks(self, level: int, start: int, stop: int) -> list[int]:
        return stamps(self._salt, level, start, stop)

    def _segments(self, start: int, stop: int) -> list[tuple[int, int, int]]:
        """(block, first position, stop position) of each block that [start, stop) touches."""
        bs = self.block_size
        out = []
        pos = start
        while pos < stop:
            b = pos // bs
            end = min(stop, (b + 1) * bs)
            out.append((b, pos, end))
            pos = end
        return out

    def _do_write(self, level: int, start: int, pairs: Sequence[SealedPair]) -> None:
        codec = self.codec
        stop = start + len(pairs)
        checks = self._checks(level, start, stop)
        bs = self.block_size
        size = codec.record_size
        nbytes = 0
        ops: list[Op] = []
        if size:
            data = codec.encode_run(pairs, checks)
            nbytes = len(data)
            for b, lo, hi in self._segments(start, stop):
                chunk = data[(lo - start) * size : (hi - start) * size]
                ops.append(("SETRANGE", self.keys.block(level, b), ((lo - b * bs) * size, chunk)))
        else:
            enc = codec.encode_record
            for b, lo, hi in self._segments(start, stop):
                args: list[Any] = []
                for p in range(lo, hi):
                    rec = enc(pairs[p - start], checks[p - start])
                    nbytes += len(rec)
                    args.append(p - b * bs)
                    args.append(rec)
                ops.append(("HSET", self.keys.block(level, b), args))
        fenced(self._client, self.fence, ops)
        st = self.stats
        st.round_trips += 1
        st.bytes_written += nbytes

    def _do_read(self, level: int, start: int, stop: int) -> list[SealedPair]:
        codec = self.codec
        pipe = self._client.pipeline(transaction=False)
        bs = self.block_size
        size = codec.record_size
        segs = self._segments(start, stop)
        for b, lo, hi in segs:
            key = self.keys.block(level, b)
            if size:
                pipe.getrange(key, (lo - b * bs) * size, (hi - b * bs) * size - 1)
            else:
                pipe.hmget(key, list(range(lo - b * bs, hi - b * bs)))
        replies = pipe.execute()
        st = self.stats
        st.round_trips += 1
        st.reads += 1
        st.pairs_read += stop - start
        out: list[SealedPair] = []
        for (b, lo, hi), rep in zip(segs, replies, strict=True):
            key = self.keys.block(level, b)
            checks = self._checks(level, lo, hi)
            try:
                if size:
                    st.bytes_read += len(rep)
                    if not rep:
                        msg = "the block is missing"
                        raise CorruptDataError(msg)
                    out.extend(codec.decode_run(rep, checks))
                else:
                    for p, raw in zip(range(lo, hi), rep, strict=True):
                        if raw is None:
                            msg = f"no record for position {p}"
                            raise CorruptDataError(msg)
                        st.bytes_read += len(raw)
                        out.append(codec.decode_record(raw, checks[p - lo]))
            except CorruptDataError as ex:
                msg = (
                    f"window {self.window_id!r}: key {key!r} (level {level}, positions {lo}..{hi - 1}): "
                    f"{ex}; the data there is not this window's (foreign or corrupt)"
                )
                raise CorruptDataError(msg) from ex
        return out

    def backlogged(self) -> bool:
        """Whether one more block write would wait for the writer thread (back-pressure);
        forgets the writes that are done."""
        inflight = self._inflight
        while inflight and inflight[0].done():
            inflight.popleft()
        return len(inflight) >= _MAX_INFLIGHT

    def read(self, level: int, start: int, stop: int) -> list[SealedPair]:
        if self.nonblocking:
            raise WouldBlock
        return self._wait(
            self._submit(f"read level {level} [{start}, {stop})", self._do_read, level, start, stop)
        )

    def prefetch(self, level: int, start: int, stop: int) -> Future[list[SealedPair]]:
        return self._submit(f"refill level {level}", self._do_read, level, start, stop)

    def read_points(self, points: Sequence[tuple[int, int]]) -> list[SealedPair]:
        """One pipelined round trip for single pairs on several levels."""
        if self.nonblocking:
            raise WouldBlock
        return self._wait(self._submit("fetch eviction heads", self._do_points, list(points)))

    def _do_points(self, points: list[tuple[int, int]]) -> list[SealedPair]:
        pipe = self._client.pipeline(transaction=False)
        bs = self.block_size
        size = self.codec.record_size
        for level, pos in points:
            b, off = divmod(pos, bs)
            key = self.keys.block(level, b)
            if size:
                pipe.getrange(key, off * size, (off + 1) * size - 1)
            else:
                pipe.hget(key, off)
        replies = pipe.execute()
        st = self.stats
        st.round_trips += 1
        st.reads += 1
        st.pairs_read += len(points)
        out: list[SealedPair] = []
        for (level, pos), rep in zip(points, replies, strict=True):
            check = stamp(self._salt, level, pos)
            try:
                if rep is None or rep == b"":
                    msg = "the record is missing"
                    raise CorruptDataError(msg)
                st.bytes_read += len(rep)
                if size:
                    out.extend(self.codec.decode_run(rep, [check]))
                else:
                    out.append(self.codec.decode_record(rep, check))
            except CorruptDataError as ex:
                msg = (
                    f"window {self.window_id!r}: level {level} position {pos}: {ex}; the data "
                    "there is not this window's (foreign or corrupt)"
                )
                raise CorruptDataError(msg) from ex
        return out

    def drop(self, level: int, stop: int) -> None:
        """Positions ``< stop`` of ``level`` are evicted: their blocks go after the next
        checkpoint (the last one may still need them)."""
        if stop > self._drop_upto.get(level, 0):
            self._drop_upto[level] = stop

    # ------------------------------------------------------------------ window life cycle
    def attach(self, window: CheckpointedWindow) -> None:
        """Bind to ``window``: record (or check) its definition and, for an existing window,
        restore its checkpoint and replay its log into ``window``. A window stored in its
        codec's ``legacy`` form (by an earlier release: a StructCodec's) keeps that form."""
        if self._attached:
            msg = f"RedisStore {self.window_id!r} already belongs to a window; make one store per window"
            raise RuntimeError(msg)
        if self.codec is None:
            self.codec = codec_for(window.monoid)
        desc = {
            "format": FORMAT,
            "algorithm": window.algorithm,
            "monoid": _describe(window.monoid),
            "policy": _describe(window.policy),
            "codec": str(self.codec.name),
            "block_size": str(self.block_size),
        }
        raw = self._direct(
            "read the window definition", lambda: self._client.hgetall(self.keys.meta)
        )
        if not raw:
            fields = [x for kv in desc.items() for x in kv]
            self._direct(
                "create the window",
                lambda: fenced(self._client, self.fence, [("HSET", self.keys.meta, fields)]),
            )
            self._attached = True
            return
        try:
            meta = {_text(k): _text(v) for k, v in raw.items()}
            stored_bs = int(meta["block_size"])
        except (UnicodeDecodeError, KeyError, ValueError) as ex:
            msg = f"window {self.window_id!r}: key {self.keys.meta!r} is not a window definition ({ex!r})"
            raise CorruptDataError(msg) from ex
        legacy = getattr(self.codec, "legacy", None)
        if legacy is not None and meta.get("codec") == legacy.name:
            self.codec = legacy  # stored by an earlier release: its blocks keep their layout
            desc["codec"] = legacy.name
        for field in ("format", "algorithm", "monoid", "policy", "codec"):
            if meta.get(field) != desc[field]:
                msg = (
                    f"window {self.window_id!r} was created with {field} {meta.get(field)!r}; "
                    f"reopening it with {desc[field]!r} would give wrong results"
                )
                raise ValueError(msg)
        self.block_size = stored_bs  # a layout property of the stored window
        self.reopened = True
        self._attached = True
        self._load(window)

    def _load(self, window: CheckpointedWindow) -> None:
        def fetch() -> tuple[Any, Any]:
            pipe = self._client.pipeline(transaction=True)
            pipe.get(self.keys.checkpoint)
            pipe.lrange(self.keys.log, 0, -1)
            ckpt, log = pipe.execute()
            return ckpt, log

        ckpt, log = self._direct("load the checkpoint and log", fetch)
        self.stats.round_trips += 1
        self._drop_upto = {}
        self._deleted_upto = {}
        self._lsn = 0
        self.checkpoint_meta = None
        try:
            if ckpt is not None:
                state = unpackb(ckpt)
                if not isinstance(state, dict) or state.get("format") != FORMAT:
                    msg = "not a checkpoint of this format"
                    raise CorruptDataError(msg)
                values = self.codec.unpack_values(state["values"])
                window.restore(state, values)
                self._deleted_upto = {int(k): int(v) for k, v in state.get("deleted", {}).items()}
                self._lsn = int(state.get("lsn", 0))
                meta = state.get("meta")
                self.checkpoint_meta = meta if isinstance(meta, dict) else None
            else:
                window.restore(None, [])
        except CorruptDataError as ex:
            msg = f"window {self.window_id!r}: the checkpoint at {self.keys.checkpoint!r} is not valid: {ex}"
            raise CorruptDataError(msg) from ex
        except (KeyError, TypeError, ValueError, IndexError) as ex:
            msg = f"window {self.window_id!r}: key {self.keys.checkpoint!r} is not a valid checkpoint ({ex!r})"
            raise CorruptDataError(msg) from ex
        self._replaying = True
        try:
            for n, raw in enumerate(log):
                try:
                    entry = unpackb(raw)
                    if len(entry) == 5:
                        lsn, op, producer, seq, payload = entry
                    else:  # written before entries carried an lsn: none is covered
                        op, producer, seq, payload = entry
                        lsn = self._lsn + 1
                    lsn = int(lsn)
                    if lsn <= self._lsn:
                        continue  # covered by the checkpoint (pushed before its snapshot)
                    items = self.codec.unpack_values(payload)
                except (CorruptDataError, ValueError, TypeError) as ex:
                    msg = f"window {self.window_id!r}: log entry {n} of {self.keys.log!r} is not valid ({ex})"
                    raise CorruptDataError(msg) from ex
                window.replay(op, items, producer, seq)
                self._lsn = lsn
        finally:
            self._replaying = False
        self._since_checkpoint = 0
        self._untrimmed = len(log)
        if log:
            self.checkpoint(window, meta=self.checkpoint_meta)  # compact the log

    def record(
        self,
        window: CheckpointedWindow,
        op: str,
        items: Sequence[Any],
        producer: str | None,
        seq: int | None,
    ) -> None:
        """Called after every applied operation: log it (durable mode), checkpoint when due."""
        failed = self._failed
        if failed is not None:
            raise failed
        if self._replaying:
            return
        if self.durable:
            lsn = self._lsn + 1
            entry = packb((lsn, op, producer, seq, self.codec.pack_values(items)))
            self._direct(
                "append to the log",
                lambda: fenced(self._client, self.fence, [("RPUSH", self.keys.log, (entry,))]),
            )
            self._lsn = lsn
            self._untrimmed += 1
            st = self.stats
            st.log_appends += 1
            st.round_trips += 1
            st.bytes_written += len(entry)
        self._since_checkpoint += len(items) or 1
        if self._since_checkpoint >= self.checkpoint_every and not self.nonblocking:
            with contextlib.suppress(StoreError):  # retried at the next operation
                self.checkpoint(window)

    def checkpoint(
        self, window: CheckpointedWindow, *, wait: bool = True, meta: dict[str, Any] | None = None
    ) -> Future[None]:
        """Write every buffered pair, then the window's local state, and remove the log entries
        it covers, atomically. Returns when Redis has it (everything applied so far is then
        acknowledged); with ``wait=False`` as soon as it is queued behind the block writes (the
        writer thread is FIFO; a failure is reported by the next operation, like a failed block
        write). ``meta`` (plain data) is saved with the checkpoint and comes back as
        :attr:`checkpoint_meta` when the window is loaded from it. Returns the commit's future
        (done when ``wait``)."""
        for lv in window.level_queues:
            lv.flush()
        state, values = window.snapshot()
        starts = {lv.index: lv.start for lv in window.level_queues}
        deletions: dict[int, tuple[int, int]] = {}
        for level, upto in self._drop_upto.items():
            safe = min(upto, starts.get(level, upto)) // self.block_size
            done = self._deleted_upto.get(level)
            if done is not None and safe > done:
                deletions[level] = (done, safe)
        state["format"] = FORMAT
        state["lsn"] = self._lsn
        if meta is not None:
            state["meta"] = meta
        state["values"] = self.codec.pack_values(values)
        state["deleted"] = {
            str(k): v
            for k, v in {**self._deleted_upto, **{lv: r[1] for lv, r in deletions.items()}}.items()
        }
        blob = packb(state)
        # The entries pushed before this snapshot, and only those: later ones (pushed on the
        # caller's thread while this commit waits behind the block writes) must survive it.
        # Commits run in order on the writer thread, so when this one runs the log starts
        # with exactly these entries.
        trim = self._untrimmed
        self._untrimmed = 0

        def commit() -> None:
            ops: list[Op] = [("SET", self.keys.checkpoint, (blob,))]
            if trim:
                ops.append(("LTRIM", self.keys.log, (trim, -1)))
            fenced(self._client, self.fence, ops)  # one script: atomic
            self.stats.round_trips += 1
            self.stats.bytes_written += len(blob)

        queued = self._submit("write a checkpoint", commit, write=True)
        if wait:
            self._wait(queued)
        else:
            self._inflight.append(queued)
        self.stats.checkpoints += 1
        self._since_checkpoint = 0
        for level, (lo, hi) in deletions.items():
            self._deleted_upto[level] = hi
            self._submit("delete evicted blocks", self._do_delete, level, lo, hi, write=True)
        return queued

    def _do_delete(self, level: int, lo: int, hi: int) -> None:
        for b0 in range(lo, hi, 256):
            keys = [self.keys.block(level, b) for b in range(b0, min(hi, b0 + 256))]
            fenced(self._client, self.fence, [("UNLINK", k, ()) for k in keys])
            self.stats.round_trips += 1
            self.stats.blocks_deleted += len(keys)

    def reload(self, window: CheckpointedWindow) -> None:
        """After a failure: drop queued I/O, then restore the last durable state from Redis."""
        self.restart()
        self._load(window)

    def restart(self) -> None:
        """After a failure: drop the queued I/O and let new writes run (the window then
        loads its last durable state)."""
        old = self._exec
        old.shutdown(wait=True, cancel_futures=True)
        self._exec = self._new_executor()
        self._failed = None

    def sync(self) -> None:
        """Wait until every queued write reached Redis (raises if one failed)."""
        self._wait(self._submit("sync", lambda: None))
        if self._failed is not None:
            raise self._failed

    def abandon(self) -> None:
        """Drop the queued I/O unwritten and close the connections: the window's stream moved
        to another owner (its writes would be refused anyway)."""
        self._failed = FencedError(f"window {self.window_id!r}: the store was abandoned")
        self._exec.shutdown(wait=True, cancel_futures=True)
        if self._owns_client:
            self._client.close()

    def close(self, *, wait: bool = True) -> None:
        """Stop the background thread (after the queued I/O; ``wait=False``: the caller
        waited for it, the thread ends by itself) and close the connections."""
        self._exec.shutdown(wait=wait)
        if self._owns_client:
            self._client.close()

    def delete_window(self) -> int:
        """Delete every key of this window. Returns the number of keys deleted."""
        self._exec.shutdown(wait=True, cancel_futures=True)
        self._exec = self._new_executor()

        def unlink(keys: list[Any]) -> int:
            fenced(self._client, self.fence, [("UNLINK", k, ()) for k in keys])
            return len(keys)

        def go() -> int:
            n = 0
            batch: list[Any] = []
            for key in self._client.scan_iter(match=self.keys.pattern, count=1000):
                batch.append(key)
                if len(batch) >= 500:
                    n += unlink(batch)
                    batch = []
            if batch:
                n += unlink(batch)
            return n

        return self._direct("delete the window", go)

    @staticmethod
    def exists(
        url: str | None, window_id: str, *, prefix: str = DEFAULT_PREFIX, timeout: float = 5.0
    ) -> bool:
        """Whether a window with this id exists at ``url``."""
        url = _resolve(url)
        try:
            client = connect(url, timeout=timeout)
        except redis.RedisError as ex:
            msg = f"window {window_id!r} at {_safe_url(url)}: Redis is unavailable ({ex})"
            raise StoreUnavailableError(msg) from ex
        try:
            return bool(client.exists(WindowKeys(prefix, window_id).meta))
        except redis.RedisError as ex:
            msg = f"window {window_id!r} at {_safe_url(url)}: Redis is unavailable ({ex})"
            raise StoreUnavailableError(msg) from ex
        finally:
            client.close()


def wait_for(url: str, timeout: float = 10.0) -> None:
    """Block until the Redis at ``url`` answers PING (tests, restarts)."""
    deadline = time.monotonic() + timeout
    client = connect(url, timeout=1)
    try:
        while True:
            try:
                if client.ping():
                    return
            except redis.RedisError:
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.02)
    finally:
        client.close()
