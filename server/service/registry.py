"""The registry of a server's streams (:class:`Registry`): create and delete streams and
windows (their definitions persisted by :mod:`.definitions`), opening a stream from Redis
(:meth:`adopt`: a restarted server, or a new owner, reopens every window where its last
acknowledged batch left it, :mod:`.durability`) and letting it go (:meth:`release` with a last
flush, :meth:`drop` without a write). The Redis keys are those of
:mod:`mtawindows.server.storage.keys`.

Calls on one stream must be serialized by the caller (the gRPC layer holds a per-stream lock
and runs them on worker threads); different streams run in parallel.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from typing import Any

from mtawindows.v1.reasons import Reason
from mtawindows.v1.types import StreamInfo, StreamSpec, WindowInfo, WindowResult, WindowSpec

from ..engine.amta import AmortizedMTA
from ..engine.lmta import LogMTA
from ..storage.fencing import Fence
from ..storage.journal import StreamJournal
from ..storage.keys import DEFAULT_PREFIX
from ..storage.protocol import StoreError
from . import durability
from .compiled import Built, DefinitionError
from .definitions import Definitions
from .hosted_window import HostedWindow
from .limits import Limits
from .refusals import ServiceError, not_found, store_unavailable
from .specs import check_policy_numbers, check_stream_spec
from .state import state_json
from .stream import Stream
from .window_builder import build_window

log = logging.getLogger("mtawindows.service")


class Registry:
    """All streams of a server, their definitions persisted in Redis under ``prefix``."""

    def __init__(
        self,
        redis_url: str | None,
        *,
        limits: Limits | None = None,
        prefix: str = DEFAULT_PREFIX,
        wait: Callable[..., Any] | None = None,
    ) -> None:
        from ..storage.connect import connect
        from ..storage.embedded import default_url

        self.url = redis_url or default_url()
        self.limits = limits or Limits()
        self.prefix = prefix
        self.redis: Any = connect(self.url, timeout=5.0)
        self.wait = wait  # journal writes wait for replicas through it (storage.replication)
        self.definitions = Definitions(self.redis, prefix)
        self.streams: dict[str, Stream] = {}
        self.guard = threading.RLock()  # create/delete/adopt/release of streams and windows

    # -- lookup
    def stream(self, name: str) -> Stream:
        s = self.streams.get(name)
        if s is None:
            raise not_found(Reason.STREAM_NOT_FOUND, f"no stream named {name!r}", stream=name)
        return s

    def window(self, stream: str, name: str) -> HostedWindow:
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
            s = self._new_stream(spec, fence)
            try:
                s.state_store.delete()  # leftovers of an earlier stream of that name
            except StoreError as ex:
                raise store_unavailable(spec.name, ex) from None
            self.definitions.save_stream(spec, fence)
            self.streams[spec.name] = s
            return s.info()

    def _new_stream(self, spec: StreamSpec, fence: Fence | None = None) -> Stream:
        s = Stream(spec)
        s.fence = fence
        s.state_store = StreamJournal(self.redis, self.prefix, spec.name, fence, wait=self.wait)
        s.recover = lambda: durability.recover(s)
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
            self.definitions.delete_stream(name, s.fence)
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
            check_policy_numbers(spec)
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
            w = HostedWindow(
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
                engine.flush(meta=durability.window_meta(s, w, state_json(s.state)))
            self.definitions.save_window(spec, window_id, s.fence)
            s.windows[spec.name] = w
            durability.journal_if_durable(s)
            return w.info(s.state.rows_late)

    def delete_window(self, stream: str, name: str) -> None:
        with self.guard:
            s = self.stream(stream)
            self.window(stream, name)
            self._drop_window(s, name)
            durability.journal_if_durable(s)

    def _drop_window(self, s: Stream, name: str) -> None:
        self.definitions.delete_window(s.spec.name, name, s.fence)
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

    def flush(self, stream: Stream, *, wait: bool = True, final: bool = False) -> None:
        """Checkpoint ``stream``'s Redis windows and save its state (:func:`.durability.flush`)."""
        durability.flush(stream, wait=wait, final=final)

    def restore(self) -> int:
        """Open every stream of the Redis (a server that owns them all: no cluster); returns
        the windows opened."""
        count = 0
        for name in self.names():
            s = self.adopt(name)
            count += len(s.windows) if s is not None else 0
        return count

    def names(self) -> list[str]:
        """Every stream's name in the Redis (the index), sorted."""
        return self.definitions.names()

    def exists(self, name: str) -> bool:
        return self.definitions.exists(name)

    def adopt(self, name: str, fence: Fence | None = None) -> Stream | None:
        """Open stream ``name`` from Redis (its definitions, its windows from their checkpoints,
        its state, then its journal's entries after that state), under ``fence``; None when
        there is no such stream. A stream already open is returned as is."""
        with self.guard:
            s = self.streams.get(name)
            if s is not None:
                return s
            stored = self.definitions.load(name)
            if stored is None:
                return None
            s = self._new_stream(stored.spec, fence)
            try:
                for sw in stored.windows:
                    built = build_window(s.spec, sw.spec)
                    engine = self._engine(s, sw.spec, built, sw.window_id)
                    s.windows[sw.name] = HostedWindow(
                        s.spec, sw.spec, built, engine, history=self.limits.result_history
                    )
                if any(w.spec.storage.durable for w in s.windows.values()):
                    s.journal = s.state_store
                durability.recover(s, reload=False)
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
                    durability.flush(s, final=True)
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

    def close(self) -> None:
        for s in self.streams.values():
            with s.lock:
                try:
                    durability.flush(s, final=True)
                except Exception:  # pragma: no cover - logged at shutdown
                    log.exception("flush of stream %s failed at shutdown", s.spec.name)
                for w in s.windows.values():
                    if w.engine.store is not None:
                        try:
                            w.engine.close()
                        except Exception:  # pragma: no cover
                            log.exception("close of window %s failed", w.spec.name)
        self.redis.close()
