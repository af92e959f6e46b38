"""The registry of a server's streams (:class:`Registry`): create and delete streams and
windows, their definitions persisted in Redis next to the windows' data, each stream's flush
(checkpoints and saved state) and its recovery; opening a stream from Redis (:meth:`adopt`: a
restarted server, or a new owner, reopens every window where its last acknowledged batch left
it) and letting it go (:meth:`release` with a last flush, :meth:`drop` without a write).

Keys of a stream, all under its hash tag (one Redis Cluster slot; see storage/cluster.py and
storage/journal.py)::

    {prefix}:svc:{<stream>}:def      hash    "spec": StreamSpec; "w:<window>": its record
    {prefix}:svc:{<stream>}:journal / :state / :lease / :fence
    {prefix}:{<stream>}:w:<id>:...   the windows' data
    {prefix}:svc:index               set     every stream's name (the only key of all)

Every write of a stream goes through its fence (the owner's token) when it has one.

Calls on one stream must be serialized by the caller (the gRPC layer holds a per-stream lock
and runs them on worker threads); different streams run in parallel.
"""

from __future__ import annotations

import functools
import logging
import threading
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import redis

from mtawindows.v1 import convert
from mtawindows.v1 import windows_pb2 as pb
from mtawindows.v1.reasons import Reason
from mtawindows.v1.types import StreamInfo, StreamSpec, WindowInfo, WindowResult, WindowSpec

from ..engine.amta import AmortizedMTA
from ..engine.lmta import LogMTA
from ..storage.cluster import Fence, Op, fenced, stream_tag
from ..storage.journal import StreamJournal
from ..storage.protocol import StoreError
from .catalog import Built, DefinitionError, build_window
from .errors import ServiceError, not_found, store_unavailable
from .limits import Limits
from .specs import check_storage, check_stream_spec
from .state import StreamState, state_from_json, state_json
from .stream import Stream
from .window import Window

log = logging.getLogger("mtawindows.service")

T = TypeVar("T")


def _stream_locked(method: Callable[..., T]) -> Callable[..., T]:
    """Run a Registry method whose first argument is a Stream under that stream's lock."""

    @functools.wraps(method)
    def run(self: Registry, stream: Stream, *args: Any, **kwargs: Any) -> T:
        with stream.lock:
            return method(self, stream, *args, **kwargs)

    return run


class Registry:
    """All streams of a server, their definitions persisted under ``{prefix}:svc:*`` in Redis."""

    def __init__(
        self,
        redis_url: str | None,
        *,
        limits: Limits | None = None,
        prefix: str = "mtaw",
        wait: Callable[..., Any] | None = None,
    ) -> None:
        from ..storage.connect import connect
        from ..storage.embedded import default_url

        self.url = redis_url or default_url()
        self.limits = limits or Limits()
        self.prefix = prefix
        self.redis: Any = connect(self.url, timeout=5.0)
        self.wait = wait  # journal writes wait for replicas through it (storage.connect)
        self.streams: dict[str, Stream] = {}
        self.guard = threading.RLock()  # create/delete/adopt/release of streams and windows

    # -- keys
    @property
    def index_key(self) -> str:
        return f"{self.prefix}:svc:index"

    def _def_key(self, stream: str) -> str:
        return f"{stream_tag(self.prefix, stream)}:def"

    # the layout before streams had keys of their own (migrated by restore)
    @property
    def _streams_key(self) -> str:
        return f"{self.prefix}:svc:streams"

    @property
    def _windows_key(self) -> str:
        return f"{self.prefix}:svc:windows"

    @property
    def _state_key(self) -> str:
        return f"{self.prefix}:svc:state"

    def _write(self, s: Stream, ops: list[Op]) -> None:
        """A fenced write of the stream's definitions (a refusal: FENCED, nothing written)."""
        try:
            fenced(self.redis, s.fence, ops)
        except (StoreError, redis.RedisError) as ex:
            raise store_unavailable(s.spec.name, ex) from None

    # -- lookup
    def stream(self, name: str) -> Stream:
        s = self.streams.get(name)
        if s is None:
            raise not_found(Reason.STREAM_NOT_FOUND, f"no stream named {name!r}", stream=name)
        return s

    def window(self, stream: str, name: str) -> Window:
        s = self.stream(stream)
        w = s.windows.get(name)
        if w is None:
            raise not_found(
                Reason.WINDOW_NOT_FOUND,
                f"stream {stream!r} has no window {name!r}; its windows are {sorted(s.windows)}",
                stream=stream,
                window=name,
            )
        return w

    def result(self, stream: str, name: str) -> WindowResult:
        """A window's current result (under the stream's lock)."""
        w = self.window(stream, name)
        s = self.stream(stream)
        with s.lock:
            s.ensure_current()
            try:
                return w.result()
            except StoreError as ex:
                if s.journal is not None:
                    s.stale = True
                raise store_unavailable(stream, ex, window=name) from None

    # -- streams
    def create_stream(self, spec: StreamSpec, fence: Fence | None = None) -> StreamInfo:
        """Create a stream (under ``fence``, the lease the caller took for its name)."""
        check_stream_spec(spec)
        with self.guard:
            if spec.name in self.streams:
                raise ServiceError(
                    "ALREADY_EXISTS",
                    Reason.STREAM_EXISTS,
                    f"stream {spec.name!r} already exists",
                    metadata={"stream": spec.name},
                )
            if len(self.streams) >= self.limits.max_streams:
                raise ServiceError(
                    "RESOURCE_EXHAUSTED",
                    Reason.TOO_MANY_STREAMS,
                    f"the server holds its limit of {self.limits.max_streams} streams; delete one first",
                )
            blob = convert.stream_spec_to_proto(spec).SerializeToString()
            s = self._new_stream(spec, fence)
            try:
                s.state_store.delete()  # leftovers of an earlier stream of that name
            except StoreError as ex:
                raise store_unavailable(spec.name, ex) from None
            key = self._def_key(spec.name)
            self._write(s, [("DEL", key, ()), ("HSET", key, ("spec", blob))])
            self.redis.sadd(self.index_key, spec.name)
            self.streams[spec.name] = s
            return s.info()

    def _new_stream(self, spec: StreamSpec, fence: Fence | None = None) -> Stream:
        s = Stream(spec)
        s.fence = fence
        s.state_store = StreamJournal(self.redis, self.prefix, spec.name, fence, wait=self.wait)
        s.recover = functools.partial(self._recover_stream, s)
        return s

    def delete_stream(self, name: str) -> None:
        with self.guard:
            s = self.stream(name)
            for wname in list(s.windows):
                self._drop_window(s, wname)
            try:
                s.state_store.delete()
            except StoreError as ex:
                raise store_unavailable(name, ex) from None
            self._write(s, [("DEL", self._def_key(name), ())])
            self.redis.srem(self.index_key, name)
            s.gone = True
            del self.streams[name]

    # -- windows
    def create_window(self, spec: WindowSpec) -> WindowInfo:
        with self.guard:
            s = self.stream(spec.stream)
            if spec.name in s.windows:
                raise ServiceError(
                    "ALREADY_EXISTS",
                    Reason.WINDOW_EXISTS,
                    f"stream {spec.stream!r} already has a window {spec.name!r}",
                    metadata={"stream": spec.stream, "window": spec.name},
                )
            if len(s.windows) >= self.limits.max_windows_per_stream:
                raise ServiceError(
                    "RESOURCE_EXHAUSTED",
                    Reason.TOO_MANY_WINDOWS,
                    f"stream {spec.stream!r} holds its limit of {self.limits.max_windows_per_stream} windows",
                )
            check_storage(spec)
            try:
                built = build_window(s.spec, spec)
            except DefinitionError as ex:
                raise ServiceError(
                    "INVALID_ARGUMENT",
                    ex.reason,
                    str(ex),
                    [(ex.field, ex.description)],
                    ex.metadata,
                ) from None
            s.ensure_current()  # the new window joins at the stream's state: the current one
            # "s:<hex>": the window's keys share its stream's hash tag (and fence)
            window_id = f"s:{uuid.uuid4().hex}" if spec.storage.kind == "redis" else ""
            engine = self._engine(s, spec, built, window_id)
            w = Window(
                s.spec,
                spec,
                built,
                engine,
                history=self.limits.result_history,
                sequence=s.state.sequence,
            )
            w.timestamp = s.state.newest or 0
            # a window created on a stream with rows joins from now on (at the stream's lsn)
            w.lsn = s.state.lsn
            if engine.store is not None:  # its first checkpoint says where it joined
                engine.flush(meta=self._window_meta(s, w, state_json(s.state)))
            record = pb.WindowInfo(spec=convert.window_spec_to_proto(spec))
            blob = _window_blob(record, window_id)
            self._write(s, [("HSET", self._def_key(spec.stream), (f"w:{spec.name}", blob))])
            s.windows[spec.name] = w
            self._journal_if_durable(s)
            return w.info(s.state.rows_late)

    def delete_window(self, stream: str, name: str) -> None:
        with self.guard:
            s = self.stream(stream)
            self.window(stream, name)
            self._drop_window(s, name)
            self._journal_if_durable(s)

    def _drop_window(self, s: Stream, name: str) -> None:
        self._write(s, [("HDEL", self._def_key(s.spec.name), (f"w:{name}",))])
        w = s.windows.pop(name)
        store = w.engine.store
        if store is not None and hasattr(store, "delete_window"):
            try:
                store.delete_window()
                store.close()
            except StoreError:  # pragma: no cover - logged, keys expire with the data
                log.warning("could not delete the data of window %s/%s", s.spec.name, name)

    def _engine(self, s: Stream, spec: WindowSpec, built: Built, window_id: str) -> Any:
        cls = AmortizedMTA if spec.algorithm == "AMTA" else LogMTA
        if spec.storage.kind == "memory":
            return cls(built.monoid, built.policy)
        from ..storage.redis_store import RedisStore

        # No log per window and no checkpoint of its own: the stream's journal makes durable
        # windows durable, and the stream's flush checkpoints every window with its lsn.
        opts: dict[str, Any] = {
            "durable": False,
            "checkpoint_every": 1 << 62,
            "prefix": self.prefix,
            "fence": s.fence,
            "client": self.redis,  # one connection pool for every window of the server
        }
        if window_id.startswith("s:"):  # keys under the stream's hash tag
            window_id = window_id[2:]
            opts["tag"] = s.spec.name
        if spec.storage.block_size:
            opts["block_size"] = spec.storage.block_size
        if spec.storage.cache_size:
            opts["cache_size"] = spec.storage.cache_size
            opts["refill_at"] = max(1, spec.storage.cache_size // 2)
        store = RedisStore(self.url, window_id=window_id, **opts)
        return cls(built.monoid, built.policy, store=store)

    # -- durability (the order of writes is in journal.py)
    def _journal_if_durable(self, s: Stream) -> None:
        """Start or stop journaling when the stream gains its first durable window or loses
        its last. Either way every window is checkpointed with its lsn and the state saved at
        the same lsn first, so the journal starts (or ends) exactly there."""
        durable = any(w.spec.storage.durable for w in s.windows.values())
        if durable == (s.journal is not None):
            return
        self.flush(s, wait=True)
        if durable:
            s.journal = s.state_store
            s.journal.first = s.state.lsn + 1
        else:
            s.journal = None
            s.state_store.drop_journal()

    def _window_meta(self, s: Stream, w: Window, state: str) -> dict[str, Any]:
        """What a window's checkpoint carries: its lsn, and without a journal to replay the
        stream's state (``state``, its JSON), since recovery then takes the newest saved."""
        meta: dict[str, Any] = {"lsn": w.lsn}
        if s.journal is None:
            meta["state"] = state
        return meta

    @_stream_locked
    def flush(self, stream: Stream, *, wait: bool = True, final: bool = False) -> None:
        """Checkpoint every Redis window of ``stream`` and save the stream's state.
        ``wait=False`` (the periodic flush) only queues the windows' checkpoints behind their
        pending writes, so appends to the stream are not held up by the round trips; with a
        journal, the state they reach is saved (and the journal trimmed) by the next flush,
        once they committed."""
        s = stream
        s.ensure_current()
        pending = s.pending_state
        if pending is not None and s.journal is not None:
            lsn, blob, futures = pending
            if all(f.done() for f in futures):
                s.pending_state = None
                if not any(f.cancelled() or f.exception() is not None for f in futures):
                    try:
                        s.journal.commit_state(blob, lsn)
                    except StoreError:
                        s.stale = True
                        raise
        futures = []
        blob = state_json(s.state, clean=final)
        try:
            for w in s.windows.values():
                if w.engine.store is not None:
                    futures.append(w.engine.flush(wait=wait, meta=self._window_meta(s, w, blob)))
            if s.journal is None:
                s.state_store.save_state(blob)
            elif wait:
                s.pending_state = None
                s.journal.commit_state(blob, s.state.lsn)
            else:
                s.pending_state = (s.state.lsn, blob, futures)
        except StoreError:
            if s.journal is not None:
                s.stale = True
            raise

    @_stream_locked
    def _recover_stream(self, s: Stream, *, reload: bool = True) -> None:
        """Rebuild ``s`` from Redis: each Redis window from its checkpoint, the stream's state,
        then the journal's entries after that state (see journal.py). ``reload=False``: the
        windows were just opened (start-up)."""
        try:
            if reload:
                for w in s.windows.values():
                    if w.engine.store is not None:
                        w.engine.reload()
            blob = s.state_store.load_state()
            journaled = s.journal is not None
            state = state_from_json(blob, journaled=journaled) if blob else StreamState()
            metas = {
                n: (w.engine.store.checkpoint_meta or {})
                for n, w in s.windows.items()
                if w.engine.store is not None
            }
            if not journaled:  # the newest state that reached Redis (never go back)
                for meta in metas.values():
                    if "state" in meta:
                        other = state_from_json(meta["state"])
                        if other.lsn > state.lsn:
                            state = other
            live = s.state.lsn
            s.state = state
            s.pending_state = None
            entries = s.journal.entries() if s.journal is not None else []
            if s.journal is not None:
                s.journal.first = entries[0].lsn if entries else state.lsn + 1
            end = max(state.lsn, entries[-1].lsn) if entries else state.lsn
            for n, w in s.windows.items():
                if n in metas:
                    w.lsn = int(metas[n].get("lsn", state.lsn))
                elif not reload:
                    w.lsn = end  # in memory: empty after a restart, joins after the journal
            for e in entries:
                if e.lsn > state.lsn:
                    s.replay(e)
            for w in s.windows.values():
                w.sequence = s.state.sequence
                w.timestamp = s.state.newest or 0
            if reload and s.state.lsn < live:  # pragma: no cover - a journal shorter than acked
                log.error("stream %s recovered at lsn %d < %d", s.spec.name, s.state.lsn, live)
        except StoreError as ex:
            s.stale = True
            raise store_unavailable(s.spec.name, ex) from None
        s.stale = False

    def restore(self) -> int:
        """Open every stream of the Redis (a server that owns them all: no cluster); returns
        the windows opened."""
        self.migrate()
        count = 0
        for name in self.names():
            s = self.adopt(name)
            count += len(s.windows) if s is not None else 0
        return count

    def names(self) -> list[str]:
        """Every stream's name in the Redis (the index), sorted."""
        raw = self.redis.smembers(self.index_key)
        return sorted(r.decode() if isinstance(r, bytes) else str(r) for r in raw)

    def exists(self, name: str) -> bool:
        return bool(self.redis.sismember(self.index_key, name))

    def adopt(self, name: str, fence: Fence | None = None) -> Stream | None:
        """Open stream ``name`` from Redis (its definitions, its windows from their checkpoints,
        its state, then its journal's entries after that state), under ``fence``; None when
        there is no such stream. A stream already open is returned as is."""
        with self.guard:
            s = self.streams.get(name)
            if s is not None:
                return s
            defs = self.redis.hgetall(self._def_key(name))
            spec_blob = defs.pop(b"spec", None)
            if spec_blob is None:
                return None
            spec = convert.stream_spec_from_proto(pb.StreamSpec.FromString(spec_blob))
            s = self._new_stream(spec, fence)
            try:
                for key, blob in sorted(defs.items()):
                    wname = key.decode()[2:]
                    info, window_id = _window_from_blob(blob)
                    wspec = convert.window_spec_from_proto(info.spec)
                    built = build_window(s.spec, wspec)
                    engine = self._engine(s, wspec, built, window_id)
                    s.windows[wname] = Window(
                        s.spec, wspec, built, engine, history=self.limits.result_history
                    )
                if any(w.spec.storage.durable for w in s.windows.values()):
                    s.journal = s.state_store
                self._recover_stream(s, reload=False)
                if s.journal is None:
                    # from now on a stop without a final flush is unclean
                    s.state_store.save_state(state_json(s.state))
            except BaseException:
                self._abandon(s)
                raise
            self.streams[name] = s
            return s

    def release(self, name: str) -> None:
        """Let stream ``name`` go with a last flush (its windows' checkpoints and its state, so
        the next owner opens it without replaying much), then close its windows' stores."""
        with self.guard:
            s = self.streams.pop(name, None)
        if s is None:
            return
        with s.lock:
            try:
                if not s.gone:
                    self.flush(s, final=True)
            except (StoreError, ServiceError):
                log.warning("last flush of stream %s before its move failed", name)
            s.gone = True
            self._abandon(s, closing=True)

    def drop(self, name: str) -> None:
        """Forget stream ``name`` without writing anything (another server owns it now)."""
        with self.guard:
            s = self.streams.pop(name, None)
        if s is not None:
            with s.lock:
                s.gone = True
                self._abandon(s)

    def _abandon(self, s: Stream, *, closing: bool = False) -> None:
        """Close the stores of ``s``'s windows: after their queued writes (``closing``), or
        dropping them unwritten."""
        for w in s.windows.values():
            store = w.engine.store
            if store is None:
                continue
            try:
                if closing:
                    store.close()
                elif hasattr(store, "abandon"):
                    store.abandon()
            except Exception:  # pragma: no cover - logged; the next owner reopens from Redis
                log.exception("closing the store of window %s/%s", s.spec.name, w.spec.name)

    def migrate(self) -> None:
        """Definitions saved by an earlier release (two hashes for all streams) go to each
        stream's own keys (idempotent: servers starting together may all run it)."""
        old = self.redis.hgetall(self._streams_key)
        if not old:
            return
        windows = self.redis.hgetall(self._windows_key)
        states = self.redis.hgetall(self._state_key)
        for raw_name, blob in old.items():
            name = raw_name.decode()
            mapping: dict[Any, Any] = {"spec": blob}
            for key, wblob in windows.items():
                sname, _, wname = key.decode().partition("/")
                if sname == name:
                    mapping[f"w:{wname}"] = wblob
            self.redis.hset(self._def_key(name), mapping=mapping)
            state = states.get(raw_name)
            journal = StreamJournal(self.redis, self.prefix, name)
            if state is not None and journal.load_state() is None:
                journal.save_state(state)
            self.redis.sadd(self.index_key, name)
        self.redis.delete(self._streams_key, self._windows_key, self._state_key)
        log.info("definitions of %d streams moved to their own keys", len(old))

    def close(self) -> None:
        for s in self.streams.values():
            with s.lock:
                try:
                    self.flush(s, final=True)
                except Exception:  # pragma: no cover - logged at shutdown
                    log.exception("flush of stream %s failed at shutdown", s.spec.name)
                for w in s.windows.values():
                    if w.engine.store is not None:
                        try:
                            w.engine.close()
                        except Exception:  # pragma: no cover
                            log.exception("close of window %s failed", w.spec.name)
        self.redis.close()


def _window_blob(info: pb.WindowInfo, window_id: str) -> bytes:
    # "<window id>\n<WindowInfo protobuf>": the id is hex, never holds a newline
    return window_id.encode() + b"\n" + bytes(info.SerializeToString())


def _window_from_blob(blob: bytes) -> tuple[pb.WindowInfo, str]:
    window_id, _, rest = blob.partition(b"\n")
    return pb.WindowInfo.FromString(rest), window_id.decode()
