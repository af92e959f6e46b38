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

import dataclasses
import functools
import logging
import os
import threading
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from mtawindows.v1.keys import DEFAULT_KEY_GROUPS, group_unit, split_unit
from mtawindows.v1.reasons import Reason
from mtawindows.v1.types import StreamSpec, WindowInfo, WindowResult, WindowSpec

from ..engine.algorithms import engine_class
from ..storage.fencing import Fence
from ..storage.journal import StreamJournal
from ..storage.keys import DEFAULT_PREFIX
from ..storage.protocol import StoreError
from . import durability
from .compiled import Built, DefinitionError
from .definitions import Definitions
from .hosted_window import HostedWindow, columnar_state
from .keyed import KeyCache, KeyedStream, not_keyed
from .limits import Limits
from .ranges import RangeQuery, check_range, suffix_result
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
        self.streams: dict[str, Stream | KeyedStream] = {}
        # keyed streams' keys in memory, within --key-cache-mb (all keyed streams together)
        self.key_cache = KeyCache(self.limits.key_cache_bytes, self.limits.max_keys)
        self.guard = threading.RLock()  # create/delete/adopt/release of streams and windows
        # a member of a cluster: a keyed stream's key groups are owned one by one (units
        # "<stream>#<g>", adopted, released and dropped on their own); else every group of a
        # keyed stream opens with it
        self.clustered = False
        # (stream, groups) -> None, or raises where they are: set by the cluster (a keyed
        # stream asks it before it serves any key group)
        self.serve_groups: Callable[[str, Any], None] | None = None
        # a cluster: whether this server holds the stream's own lease, fresh (its windows
        # then change here only: an append need not ask Redis for their version)
        self.owns_fresh: Callable[[str], bool] | None = None
        # streams a stop past its grace left with a batch still running (abandon)
        self.abandoned: set[str] = set()

    def abandon(self, name: str) -> None:
        """Stream ``name`` still runs a batch at a stop past its grace: neither saved by
        :meth:`close` nor handed over by the cluster (``Ownership.stop``), as after a kill
        (saving it would write half a batch)."""
        self.abandoned.add(name)

    # -- lookup
    def stream(self, name: str) -> Any:
        s = self.streams.get(name)
        if s is None:
            raise not_found(Reason.STREAM_NOT_FOUND, f"no stream named {name!r}", stream=name)
        return s

    def window(self, stream: str, name: str) -> Any:
        return self.window_of(self.stream(stream), name)

    def window_of(self, s: Any, name: str) -> Any:
        stream = s.spec.name
        w = s.windows.get(name)
        if w is None:
            raise not_found(
                Reason.WINDOW_NOT_FOUND,
                f"stream {stream!r} has no window {name!r}; its windows are {sorted(s.windows)}",
                stream=stream,
                window=name,
            )
        return w

    def result(self, stream: str, name: str, q: RangeQuery | None = None) -> WindowResult:
        """A window's current result (under the stream's lock); with ``q``, over that suffix
        of the window (ranges.py)."""
        w = self.window(stream, name)
        s = self.stream(stream)
        if isinstance(s, KeyedStream):
            raise not_keyed(stream, "is keyed: name the key whose window to query")
        with s.lock:
            if q is not None:
                check_range(s.spec, w, q)  # a refusal before a reload
            s.ensure_current()
            try:
                result: WindowResult = w.result() if q is None else suffix_result(s.spec, w, q)
                return result
            except StoreError as ex:
                if s.journal is not None:
                    s.stale = True
                raise store_unavailable(stream, ex, window=name) from None

    # -- streams
    def create_stream(self, spec: StreamSpec, fence: Fence | None = None) -> Any:
        """Create a stream (under ``fence``, the lease the caller took for its name)."""
        check_stream_spec(spec)
        if spec.key and not spec.key_groups:  # stored (and read back) as the number it has
            spec = dataclasses.replace(spec, key_groups=DEFAULT_KEY_GROUPS)
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

    def _new_stream(self, spec: StreamSpec, fence: Fence | None = None) -> Any:
        if spec.key:
            return self._new_keyed(spec, fence)
        s = Stream(spec)
        s.fence = fence
        s.state_store = StreamJournal(self.redis, self.prefix, spec.name, fence, wait=self.wait)
        s.recover = lambda: durability.recover(s)
        return s

    def _new_keyed(self, spec: StreamSpec, fence: Fence | None) -> KeyedStream:
        def engine(w: HostedWindow, wid: str, group_fence: Fence | None) -> Any:
            e = self._engine(ks, w.spec, w.built, f"s:{wid}", group_fence)
            if hasattr(e, "on_stale"):  # the stream reloads it, with its group's journal
                e.on_stale = ks.engine_failed
            return e

        def serve(groups: Any) -> None:
            if self.serve_groups is not None:
                self.serve_groups(spec.name, groups)

        def resync() -> None:  # a cluster: the windows as the stream's owner last defined them
            if not ks.resync_due and self.owns_fresh is not None and self.owns_fresh(spec.name):
                return  # the owner, since it last asked: its windows change here only
            ks.resync_due = False  # (before asking: an adoption meanwhile sets it again)
            try:
                version = self.definitions.version(spec.name)
                if version > ks.defs_version:
                    stored = self.definitions.load(spec.name)
                    if stored is not None:
                        self._define_keyed(ks, stored)
                    ks.defs_version = version
            except BaseException:
                ks.resync_due = True
                raise

        ks = KeyedStream(
            spec,
            client=self.redis,
            prefix=self.prefix,
            fence=fence,
            wait=self.wait,
            cache=self.key_cache,
            compact_items=self.limits.key_compact_items,
            make_engine=engine,
            all_groups=not self.clustered,
            serve=serve,
        )
        if self.clustered:
            ks.resync = resync
        return ks

    def delete_stream(self, name: str) -> None:
        with self.guard:
            s = self.stream(name)
            with s.lock:
                for wname in list(s.windows)[::-1]:  # members before the windows they share
                    self._drop_window(s, wname)
                for hidden in list(getattr(s, "retired", ())):  # pragma: no cover - gone above
                    self.definitions.delete_window(name, hidden, s.fence)
                    self._delete_data(s, s.retired.pop(hidden), hidden)
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
            if isinstance(s, KeyedStream):
                return self._create_keyed_window(s, spec, built)
            s.ensure_current()  # the new window joins at the stream's state: the current one
            # "s:<hex>": the window's keys share its stream's hash tag (and fence); "c:<hex>":
            # the same for a window whose state is columnar (its slices in Redis)
            kind = "c" if columnar_state(spec, built, s.spec.timestamp_field) else "s"
            window_id = f"{kind}:{uuid.uuid4().hex}" if spec.storage.kind == "redis" else ""
            host = _host_for(s, spec, built) if kind == "c" and window_id else None
            if host is not None:  # "m:<the host's id>": it shares the host's rows
                window_id = f"m:{host.engine.window_id}"
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
            try:
                if host is not None:  # the host's checkpoint says where it joined
                    w.host = host.spec.name
                    host.engine.flush(meta=durability.window_meta(s, host, state_json(s.state)))
                elif engine.store is not None:  # its first checkpoint says where it joined
                    engine.flush(meta=durability.window_meta(s, w, state_json(s.state)))
                self.definitions.save_window(spec, window_id, s.fence)
            except BaseException:
                if host is not None:  # not made: the host holds no rows for it
                    engine.detach()
                raise
            s.windows[spec.name] = w
            s.hop_groups()  # a hopping window may share the slices of others
            durability.journal_if_durable(s)
            return w.info(s.state.rows_late)

    def _create_keyed_window(self, s: KeyedStream, spec: WindowSpec, built: Built) -> WindowInfo:
        """A window of a keyed stream: defined once, an instance per key from its next row.
        Its keys' states are in Redis (a memory window has nowhere to put cold keys)."""
        if spec.storage.kind != "redis":
            raise ServiceError(
                "INVALID_ARGUMENT",
                Reason.INVALID_DEFINITION,
                f"stream {s.spec.name!r} is keyed: its windows keep cold keys in Redis, so "
                f"storage {spec.storage.kind!r} is not possible; use storage 'redis'",
                [("spec.storage.kind", "a keyed stream's windows are stored in Redis")],
            )
        w = HostedWindow(s.spec, spec, built, None, history=1)
        if w.checks_results:
            raise ServiceError(
                "INVALID_ARGUMENT",
                Reason.INVALID_DEFINITION,
                f"stream {s.spec.name!r} is keyed: a plugin output with a lower of its own is "
                "not supported on keyed streams yet",
                [("spec.aggregations", "a plugin monoid that lowers")],
            )
        with s.lock:
            s.ensure_current()
            # the definition's own id: a holder of other groups tells a window deleted and
            # created again under its name from the one it has
            w.def_id = f"kw:{uuid.uuid4().hex}"  # type: ignore[attr-defined]
            self.definitions.save_window(spec, w.def_id, s.fence)  # type: ignore[attr-defined]
            s.define(w)
        return w.info(0) if w.engine is not None else s.window_info(spec.name)

    def delete_window(self, stream: str, name: str) -> None:
        with self.guard:
            s = self.stream(stream)
            self.window(stream, name)
            self._drop_window(s, name)
            if not isinstance(s, KeyedStream):
                durability.journal_if_durable(s)

    def _drop_window(self, s: Any, name: str) -> None:
        if not isinstance(s, KeyedStream) and s.members_of(s.windows[name]):
            with s.lock:  # others share its rows: it stays, hidden, until they go
                self._retire(s, s.windows[name])
            return
        self.definitions.delete_window(s.spec.name, name, s.fence)
        if isinstance(s, KeyedStream):
            with s.lock:
                s.drop_window(name)
            return
        w = s.windows[name]
        if w.host is not None:  # it leaves the rows it shared; a retired host with it
            with s.lock:
                w.engine.detach()
                del s.windows[name]
                host = _hosting(s, w.engine.host)
                if host is None:  # pragma: no cover - a member's host is always there
                    return
                if host in s.retired and not s.members_of(s.retired[host]):
                    self.definitions.delete_window(s.spec.name, host, s.fence)
                    self._delete_data(s, s.retired.pop(host), host)
                else:
                    self._flush_host(s, s.hosted()[host])
            return
        del s.windows[name]
        s.hop_groups()
        self._delete_data(s, w, name)

    def _delete_data(self, s: Any, w: HostedWindow, name: str) -> None:
        store = w.engine.store
        if store is not None and hasattr(store, "delete_window"):
            try:
                store.delete_window()
                store.close()
            except StoreError:  # pragma: no cover - logged, keys expire with the data
                log.warning("could not delete the data of window %s/%s", s.spec.name, name)

    def _retire(self, s: Stream, w: HostedWindow) -> None:
        """Window ``w`` is deleted while others share its rows: its own policy holds no row
        from now on, and it stays as a hidden host ("~<its id>", in the stream's ``retired``
        and its definitions) that takes every batch for them, until the last of them goes."""
        hidden = f"~{w.engine.window_id}"
        # its hidden definition before its own goes: a crash between leaves both (the
        # window, not deleted yet) or the hidden one, never members without their host
        self.definitions.save_window(w.spec, f"c:{w.engine.window_id}", s.fence, key=hidden)
        self.definitions.delete_window(s.spec.name, w.spec.name, s.fence)
        w.engine.window.retire()
        del s.windows[w.spec.name]
        s.retired[hidden] = w
        for m in s.members_of(w):
            s.windows[m].host = f"{w.spec.name} (deleted)"
        self._flush_host(s, w)

    def _flush_host(self, s: Stream, host: HostedWindow) -> None:
        """Checkpoint ``host`` now: its members as they are (joined, left, retired)."""
        try:
            host.engine.flush(meta=durability.window_meta(s, host, state_json(s.state)))
        except StoreError as ex:
            s.stale = True  # a journaled stream recovers; any other reloads its checkpoint
            raise store_unavailable(s.spec.name, ex) from None

    def _engine(
        self, s: Any, spec: WindowSpec, built: Built, window_id: str, fence: Fence | None = None
    ) -> Any:
        """A window's engine; its Redis store writes through ``fence`` (default: the stream's;
        a keyed stream's key window: its group's). A window whose id says its state is
        columnar ("c:<hex>"), or a memory window that may be one now (:func:`columnar_state`:
        it starts empty either way), is a :class:`~..engine.columnar.engine.ColumnarEngine`."""
        if window_id.startswith("m:"):  # a window sharing the rows of its host
            from ..engine.columnar.engine import MemberEngine

            host = _hosting_id(s, window_id[2:])
            if host is None:
                msg = f"window {spec.name!r} shares the rows of window {window_id[2:]!r}: gone"
                raise StoreError(msg)
            return MemberEngine(s.hosted()[host].engine, spec.name, built.monoid, built.policy)
        memory = spec.storage.kind == "memory"
        columnar = window_id.startswith("c:") or (
            memory and columnar_state(spec, built, s.spec.timestamp_field)
        )
        if columnar:
            from ..engine.columnar.engine import ColumnarEngine

            cls: Any = ColumnarEngine
        else:
            cls = engine_class(spec.algorithm)
        # a hopping window's engine is its final aggregator, over slices
        monoid = built.slice_monoid or built.monoid
        policy = built.slice_policy or built.policy
        if memory:
            return cls(monoid, policy)
        from ..storage.redis_store import RedisStore
        from ..storage.slice_store import SliceStore

        # No log per window and no checkpoint of its own: the stream's journal makes durable
        # windows durable, and the stream's flush checkpoints every window with its lsn.
        opts: dict[str, Any] = {
            "durable": False,
            "checkpoint_every": 1 << 62,
            "prefix": self.prefix,
            "fence": fence if fence is not None else s.fence,
            "client": self.redis,  # one connection pool for every window of the server
        }
        if window_id.startswith(("s:", "c:")):  # keys under the stream's hash tag
            window_id = window_id[2:]
            opts["tag"] = s.spec.name
        if spec.storage.block_size:
            opts["block_size"] = spec.storage.block_size
        if spec.storage.cache_size:
            opts["cache_size"] = spec.storage.cache_size
            opts["refill_at"] = max(1, spec.storage.cache_size // 2)
        store = (SliceStore if columnar else RedisStore)(self.url, window_id=window_id, **opts)
        return cls(monoid, policy, store=store)

    def flush(self, stream: Any, *, wait: bool = True, final: bool = False) -> None:
        """Checkpoint ``stream``'s Redis windows and save its state (:func:`.durability.flush`);
        a keyed stream drops its expired keys, then writes the groups that changed."""
        if isinstance(stream, KeyedStream):
            stream.expire()
            stream.flush(wait=wait, final=final)
            return
        durability.flush(stream, wait=wait, final=final)

    def flush_begin(self, stream: Any) -> Any:
        """The periodic flush of ``stream``: a keyed stream drops its expired keys and
        prepares its writes, returned to run outside its lock
        (:class:`~.keyed.stream.GroupWrites`, None when nothing changed); any other is
        flushed here (None)."""
        if isinstance(stream, KeyedStream):
            stream.expire()
            return stream.flush_begin()
        durability.flush(stream, wait=False)
        return None

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

    def units(self) -> list[str]:
        """Every unit of ownership in the Redis: streams, and keyed streams' key groups."""
        return self.definitions.units()

    def unit_exists(self, unit: str) -> bool:
        return self.definitions.unit_exists(unit)

    def held(self, unit: str) -> Any:
        """The stream of ``unit`` when it is open here: a stream's name (a keyed stream's part
        here, whatever groups it holds), or a key group this server holds open."""
        name, group = split_unit(unit)
        s = self.streams.get(name)
        if group is None or s is None:
            return s
        return s if isinstance(s, KeyedStream) and s.holds(group) else None

    def open_part(self, name: str) -> KeyedStream | None:
        """This server's part of keyed stream ``name`` (opened holding no group yet: the groups
        its calls need are adopted as they come); None when ``name`` is not a keyed stream."""
        with self.guard:
            s = self.streams.get(name)
            if s is not None:
                return s if isinstance(s, KeyedStream) else None
            try:
                if name not in self.definitions.key_groups():
                    return None
            except Exception as ex:
                raise store_unavailable(name, ex) from None
            part = self.adopt(name, None)
            return part if isinstance(part, KeyedStream) else None

    def prune(self, held: Any, serialize: Callable[[str, Callable[[], Any]], Any]) -> list[str]:
        """Close the keyed streams' parts that held no group and not the stream (``held``:
        the units this server holds) at two calls running, each between its stream's calls
        (``serialize``); their names."""
        empty = []
        with self.guard:
            for name, s in list(self.streams.items()):
                if not isinstance(s, KeyedStream):
                    continue
                now = name not in held and not s.holds_any()
                if now and s.empty_seen:
                    empty.append(name)
                s.empty_seen = now
        return [n for n in empty if serialize(n, functools.partial(self._prune, n, held))]

    def _prune(self, name: str, held: Any) -> bool:
        with self.guard:
            s = self.streams.get(name)
            if not isinstance(s, KeyedStream) or name in held or s.holds_any():
                return False
            del self.streams[name]
        s.close(flush=False)  # outside the guard (see _let_go_keyed)
        return True

    def sync_definitions(self, versions: dict[str, int]) -> None:
        """Reload the windows of the keyed streams whose definitions changed (``versions``:
        stream -> its definitions version in Redis), on this server's parts of them."""
        for name, version in versions.items():
            s = self.streams.get(name)
            if not isinstance(s, KeyedStream) or s.defs_version >= version or s.gone:
                continue
            try:
                stored = self.definitions.load(name)
                if stored is None:
                    continue
                with s.lock:
                    self._define_keyed(s, stored)
                    s.defs_version = version
            except (StoreError, ServiceError) as ex:
                log.warning("could not reload the windows of keyed stream %s: %s", name, ex)

    def adopt(self, name: str, fence: Fence | None = None) -> Any:
        """Open stream ``name`` from Redis (its definitions, its windows from their checkpoints,
        its state, then its journal's entries after that state), under ``fence``; None when
        there is no such stream. A stream already open is returned as is."""
        name, group = split_unit(name)
        with self.guard:
            s = self.streams.get(name)
            if isinstance(s, KeyedStream) and self.clustered:
                if group is not None:  # one more group of a stream open here
                    s.open_group(group, fence)
                elif s.fence is not fence and fence is not None:
                    s.fence = fence  # the stream's own calls come here now
                    s.resync_due = True  # (its windows as they are now: asked once)
                return s
            if s is not None:
                return s if group is None else None
            version = self.definitions.version(name)
            stored = self.definitions.load(name)
            if stored is None or (group is not None and not stored.spec.key):
                return None
            s = self._new_stream(stored.spec, None if group is not None else fence)
            if isinstance(s, KeyedStream):
                s.defs_version = version
                return self._adopt_keyed(s, stored, group, fence)
            try:
                # hosts first: a window sharing the rows of another ("m:<id>") joins it
                for sw in sorted(stored.windows, key=lambda sw: sw.window_id.startswith("m:")):
                    built = build_window(s.spec, sw.spec)
                    engine = self._engine(s, sw.spec, built, sw.window_id)
                    w = HostedWindow(
                        s.spec, sw.spec, built, engine, history=self.limits.result_history
                    )
                    if sw.name.startswith("~"):  # a deleted window whose rows others share
                        engine.window.retire()
                        s.retired[sw.name] = w
                        continue
                    if sw.window_id.startswith("m:"):
                        host = s.hosted()[_hosting_id(s, sw.window_id[2:]) or ""]
                        w.host = host.spec.name + (
                            " (deleted)" if host in s.retired.values() else ""
                        )
                    s.windows[sw.name] = w
                s.hop_groups()
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

    def adopt_groups(self, stream: str, fences: Mapping[int, Fence | None]) -> Any:
        """:meth:`adopt` of several key groups of keyed stream ``stream`` (a cluster's) at once,
        under their fences: opened together (one round of Redis work); the stream, or None
        when there is no such keyed stream."""
        if not fences:
            return self.streams.get(stream)
        first, *rest = fences.items()
        s = self.adopt(group_unit(stream, first[0]), first[1])
        if not isinstance(s, KeyedStream):
            return None
        if rest:
            s.open_groups(dict(rest))
        return s

    def release_groups(self, stream: str, fences: Mapping[int, Fence | None]) -> None:
        """Let several key groups of ``stream`` go with one last flush for all of them."""
        with self.guard:
            s = self.streams.get(stream)
        if not isinstance(s, KeyedStream) or not self.clustered:
            for g, fence in fences.items():
                self._let_go_keyed(group_unit(stream, g), flush=True, fence=fence)
            return
        with s.lock:
            s.close_groups(fences, flush=True)

    def reap(self, stream: str) -> None:
        """Forget the memory of the key groups of ``stream`` let go here, a slice at a time
        (the lock free in between: the groups still held serve meanwhile)."""
        with self.guard:
            s = self.streams.get(stream)
        if isinstance(s, KeyedStream):
            while s.reap():
                pass

    def _adopt_keyed(
        self, s: KeyedStream, stored: Any, group: int | None, fence: Fence | None
    ) -> KeyedStream:
        """Open a keyed stream: on a cluster the one group ``group`` (or none: the stream's own
        calls only), else every group."""
        self._define_keyed(s, stored)
        if not self.clustered:
            s.load()
        elif group is not None:
            s.open_group(group, fence)
        self.streams[s.spec.name] = s
        return s

    def _define_keyed(self, s: KeyedStream, stored: Any) -> None:
        """``s``'s windows as ``stored`` defines them (new ones added, deleted ones dropped)."""
        ids = {sw.name: sw.window_id for sw in stored.windows}
        # deleted, or deleted and created again under the same name (another definition id:
        # its keys start afresh)
        for gone in [n for n, w in s.windows.items() if ids.get(n) != _def_id(w)]:
            s.drop_window(gone)
        for sw in stored.windows:
            if sw.name not in s.windows:
                built = build_window(s.spec, sw.spec)
                w = HostedWindow(s.spec, sw.spec, built, None, history=1)
                w.def_id = sw.window_id  # type: ignore[attr-defined]
                s.define(w)

    def release(self, name: str) -> None:
        """Let stream ``name`` go with a last flush (its windows' checkpoints and its state, so
        the next owner opens it without replaying much), then close its windows' stores."""
        if self._let_go_keyed(name, flush=True):
            return
        with self.guard:
            s = self.streams.pop(name, None)
        if not isinstance(s, Stream):
            return
        with s.lock:
            try:
                if not s.gone:
                    durability.flush(s, final=True)
            except (StoreError, ServiceError):
                log.warning("last flush of stream %s before its move failed", name)
            s.gone = True
            self._abandon(s, closing=True)

    def drop(self, name: str, fence: Fence | None = None) -> None:
        """Forget stream ``name`` without writing anything (another server owns it now); a
        keyed stream's unit only if held under ``fence`` (when given)."""
        if self._let_go_keyed(name, flush=False, fence=fence):
            return
        with self.guard:
            s = self.streams.pop(name, None)
        if isinstance(s, Stream):
            with s.lock:
                s.gone = True
                self._abandon(s)

    def _let_go_keyed(self, unit: str, *, flush: bool, fence: Fence | None = None) -> bool:
        """Release (``flush``) or drop a keyed stream's unit: one group of it, or its own
        calls (on a cluster), or the whole stream; the part closes once it holds neither.
        False when ``unit`` is not a keyed stream's."""
        name, group = split_unit(unit)
        # the registry's guard is never held while waiting for a stream's lock (a call holds
        # that lock and may adopt a group, which takes the guard)
        with self.guard:
            s = self.streams.get(name)
            if not isinstance(s, KeyedStream):
                return group is not None
            whole = not self.clustered
            if whole:
                del self.streams[name]
        if whole:
            s.close(flush=flush)
            return True
        with s.lock:
            if group is not None:
                s.close_group(group, flush=flush, fence=fence)
            elif fence is None or s.fence is fence:
                s.fence = None
        # a part left holding nothing stays open (a call may hold it): prune() closes it,
        # between its stream's calls, once it stayed empty for a rebalance
        return True

    def _abandon(self, s: Stream, *, closing: bool = False) -> None:
        """Close the stores of ``s``'s windows: after their queued writes (``closing``), or
        dropping them unwritten."""
        for w in s.hosted().values():
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
            if s.spec.name in self.abandoned:
                continue
            if isinstance(s, KeyedStream):
                s.close(flush=True)
                continue
            with s.lock:
                try:
                    durability.flush(s, final=True)
                except Exception:  # pragma: no cover - logged at shutdown
                    log.exception("flush of stream %s failed at shutdown", s.spec.name)
                for w in s.hosted().values():
                    if w.engine.store is not None:
                        try:
                            w.engine.close()
                        except Exception:  # pragma: no cover
                            log.exception("close of window %s failed", w.spec.name)
        self.redis.close()


def _def_id(w: HostedWindow) -> str:
    """A keyed stream's window's definition id ("" for one defined before ids)."""
    return str(getattr(w, "def_id", ""))


def _host_for(s: Stream, spec: WindowSpec, built: Built) -> HostedWindow | None:
    """The window of ``s`` whose rows a new columnar window of ``spec`` shares: the first
    columnar window in Redis (not itself sharing another's) whose aggregations include the
    new one's, under a count or a time range over the same timestamps; None when none fits
    or sharing is off (``$MTAWINDOWS_SHARED_ROWS=0``, ``serve --no-shared-rows``). A host
    left stale by a store failure reloads its checkpoint first, as its next call would (a
    journaled stream's windows are current already: :meth:`Stream.ensure_current`); while
    Redis fails that raises, and the new window is refused, not made apart."""
    if os.environ.get("MTAWINDOWS_SHARED_ROWS", "1") == "0":
        return None
    for w in s.windows.values():
        engine = w.engine
        if w.host is not None or not w.columnar or engine.store is None:
            continue
        if w.spec.storage.kind != spec.storage.kind:
            continue
        if engine.window.fits(built.monoid, built.policy) is not None:
            continue
        if engine.stale and s.journal is None:
            engine.reload()
        if not engine.stale:
            return w
    return None


def _hosting_id(s: Stream, window_id: str) -> str | None:
    """The name (in ``s.hosted()``) of the columnar window whose store is ``window_id``."""
    for name, w in s.hosted().items():
        stored = w.host is None and w.columnar and w.engine.store is not None
        if stored and str(w.engine.window_id) == window_id:
            return name
    return None


def _hosting(s: Stream, engine: Any) -> str | None:
    """The name (in ``s.hosted()``) of the window whose engine is ``engine``."""
    return next((n for n, w in s.hosted().items() if w.engine is engine), None)
