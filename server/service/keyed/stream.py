"""A keyed stream (:class:`KeyedStream`): windows defined once, one instance per key.

An Append carries rows of any number of keys. It is checked whole before anything changes
(schema, idempotency, each key's order under the late policy, the lift of every row for
every window, the key limit); then, per key group it names, its rows are journaled (a
durable window) and applied key by key, each key's rows in input order; per-row results come
back in input order, FINAL results one per (window, key) touched. Idempotency is per group: a
(producer, sequence) a group already applied is skipped there, applied elsewhere, so a batch
resent after a failure that left some groups applied is applied exactly once in each. Every
group the batch names records its sequence, also one whose rows were all dropped as late (a
resent batch applies nothing anywhere, even after the key changed), and the group's journal
entry holds those rows too (a replay drops them again). The stream's counters are sums over
its groups: a late row counts in its key's group, a batch in the group of its first row's
key (once, whatever groups resent it later).

DeleteKey and key_ttl expiry are entries of their groups' journals too (a durable stream):
a deleted key stays deleted after a crash. Its full windows' Redis keys go with the flush
that drops the key from Redis (table.py), never before.

Keys live in their group's table (table.py); the key cache (:class:`KeyCache`) holds the
recently touched keys' states in memory within ``Limits.key_cache_bytes`` (all keyed streams
together) and writes the others back to Redis; they load again on their next row or read.
A flush writes the groups that changed, nothing else: an idle stream costs no Redis command.
"""

from __future__ import annotations

import bisect
import collections
import contextlib
import functools
import heapq
import itertools
import logging
import operator
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np
import redis

from mtawindows.v1.convert import timestamp_text
from mtawindows.v1.keys import (
    DEFAULT_KEY_GROUPS,
    group_unit,
    key_group,
    key_refusal,
    key_text,
)
from mtawindows.v1.reasons import Reason
from mtawindows.v1.types import (
    AppendResult,
    FieldType,
    KeyInfo,
    StreamInfo,
    StreamSpec,
    WindowResult,
    clip,
    show,
)

from ...engine.hopping import HopGroup
from ...engine.policies import bind_policy
from ...sentinels import UNSET
from ...storage.codecs import StructCodec, codec_for, packb, unpackb
from ...storage.fencing import Fence, FencedError, Op, check_reply, fenced, fenced_together
from ...storage.journal import JournalEntry, StreamJournal
from ...storage.keys import GroupKeys, group_lease_keys, key_window_base
from ...storage.protocol import CorruptDataError, StoreError, StoreUnavailableError
from ...storage.resp import arg_count, packed_chunks
from ..batch import FINAL, NONE, PER_ROW
from ..cel import CelPolicy
from ..columns import Columns, KeyBytes, Schema, plain_lists
from ..hosted_window import HostedWindow
from ..ranges import RangeQuery, check_range, suffix_of
from ..refusals import (
    ServiceError,
    batch_too_large,
    fenced_out,
    int64_row_result,
    invalid,
    moved_after_journal,
    not_found,
    store_unavailable,
)
from ..stream import _gc_paused
from .slab import Counters, KeySlab, rows_of_record, slab_plan
from .table import FIELDS_PER_OP, INLINE, GroupState, GroupTable, KeyState
from .window import KeyWindow, WindowOps

__all__ = ["KeyCache", "KeyedStream"]

log = logging.getLogger("mtawindows.service")

T = TypeVar("T")

# rough bytes of a key's state in memory (the cache's accounting): the state, its dicts,
# and per compact item (a lifted tuple of a few numbers); a full window's local part
_KEY_BYTES = 600
_ITEM_BYTES = 130
_FULL_BYTES = 64 * 1024
_PACKED_BYTES = 120  # a packed key's dict entry and bytes object, beside its bytes
# every key's name stays in memory (its group's index, in touch order, and the sorted list
# ListKeys pages through): its string, its index entry and touch time, its list slot. Counted
# in the budget, so the states the cache holds shrink as the key space grows (measured: 1,063
# MB of RSS at 10^6 keys with a 512 MB budget when the names went uncounted)
_INDEX_BYTES = 170
# the dirty keys one periodic flush writes at most (whole groups: see flush_begin)
FLUSH_KEYS = 100_000
# the most rows a key keeps in the slab (slab.py), past which it becomes an object: 12 rows
# of a timestamp and a double are 192 bytes, ~300 with the slot's own: a million such keys
# and their names fit the default 512 MB key cache (16 rows did not: the cache evicted and
# reloaded keys at every pass)
SLAB_ROWS = 12


def _locked(method: Callable[..., T]) -> Callable[..., T]:
    @functools.wraps(method)
    def run(self: KeyedStream, *args: Any, **kwargs: Any) -> T:
        with self.lock:
            return method(self, *args, **kwargs)

    return run


# a periodic flush's fenced groups go in transactions of about this many arguments (two per
# key written): Redis runs an EXEC whole (~1.3 us a field: ~20 ms), the other calls wait
_ARGS_PER_TRANSACTION = 16_384
_UNSENT = object()  # a group's write not sent: an earlier run of the flush failed
_OPS_PER_SCRIPT = 640  # a stream deletion's writes per fenced script (KEYS and ARGV stay small)


class KeyCache:
    """The server's budget for keys in memory (every keyed stream's hot keys together) and
    its counters (metrics)."""

    def __init__(self, budget_bytes: int, max_keys: int) -> None:
        self.budget = budget_bytes
        # the share of the budget for states as objects (the most recently touched keys);
        # the rest holds keys packed (their Redis value, a fifth of the memory)
        self.hot_budget = budget_bytes // 4
        self.max_keys = max_keys
        self.used = 0  # estimated bytes of the keys in memory
        self.hot_used = 0  # of which states as objects
        self.keys = 0  # keys held (hot or not)
        self.hot = 0
        self.evictions = 0
        self.loads = 0
        self.lock = threading.Lock()

    def add(self, nbytes: int, hot: int = 0, keys: int = 0, objects: int | None = None) -> None:
        """``nbytes`` more in memory, of which ``objects`` (default: all of them, when keys
        enter or leave as objects) in states as objects; ``keys`` more names held (each
        counted in :attr:`used` too: a name stays in memory whatever its state's form)."""
        with self.lock:
            self.used += nbytes + keys * _INDEX_BYTES
            self.hot_used += nbytes if objects is None else objects
            self.hot += hot
            self.keys += keys

    @property
    def over(self) -> bool:
        return self.used > self.budget

    @property
    def hot_over(self) -> bool:
        return self.hot_used > self.hot_budget


def not_keyed(stream: str, what: str, code: str = "FAILED_PRECONDITION") -> ServiceError:
    return ServiceError(
        code, Reason.NOT_KEYED, f"stream {stream!r} {what}", metadata={"stream": stream}
    )


def key_not_found(stream: str, key: str) -> ServiceError:
    return not_found(
        Reason.KEY_NOT_FOUND, f"stream {stream!r} has no key {key!r}", stream=stream, key=key
    )


class _Plan:
    """An Append checked and lifted, before anything changed: per group, its keys and each
    key's row positions (input order) and lifted items per window."""

    __slots__ = (
        "counter",
        "fast",
        "groups",
        "late",
        "late_keys",
        "late_of",
        "lifted",
        "named",
        "new_keys",
        "positions",
        "rows_applied",
        "rows_of",
        "skipped",
    )

    def __init__(self) -> None:
        self.groups: dict[int, dict[str, list[int]]] = {}  # rows applied, per group and key
        # every group the batch names but those that had it already, with its keys (also
        # those whose rows were all late): each records the batch (lsn, sequence, counters)
        self.named: dict[int, list[str]] = {}
        self.rows_of: dict[str, list[int]] = {}  # every input row of each key
        self.late_of: dict[int, int] = {}  # rows dropped as late, per group
        self.late_keys: dict[int, dict[str, int]] = {}  # and per key (KeyInfo.rows_late)
        # the group the batch counts in (batches_appended, or batches_duplicate when it had
        # the batch already); None: nowhere (a replay of another group's part)
        self.counter: int | None = None
        self.lifted: dict[str, list[Any]] = {}
        self.positions: list[int] = []  # input rows applied, in input order
        self.late = 0
        self.new_keys = 0
        self.rows_applied = 0
        self.skipped: set[int] = set()  # groups that had the batch already (duplicate)
        # the slab takes the rows of the keys it holds and of new keys (no results asked)
        self.fast = False

    def rows_by_group(self) -> dict[int, list[int]]:
        """The input rows of each group the batch names (ascending): what it journals."""
        rows_of = self.rows_of
        return {g: sorted(i for k in keys for i in rows_of[k]) for g, keys in self.named.items()}


class KeyedStream:
    """A keyed stream held by this server: every key group of it (see the module docstring)."""

    keyed = True

    @property
    def takes_arrays(self) -> bool:
        """Whether an Arrow batch's numbers may come as numpy arrays (Stream.takes_arrays):
        with a key slab, whose path reads arrays; the key-by-key path makes lists of them."""
        return self.slab is not None

    @property
    def key_bytes(self) -> str | None:
        """The key column, when an Arrow batch may give it as its bytes (``KeyBytes``: a
        STRING key, the keys in a slab that finds them by their bytes), else None."""
        return self.spec.key if self.slab is not None and not self.int_keys else None

    def __init__(
        self,
        spec: StreamSpec,
        *,
        client: Any,
        prefix: str,
        fence: Fence | None,
        wait: Any,
        cache: KeyCache,
        compact_items: int,
        make_engine: Callable[[HostedWindow, str, Fence | None], Any],
        all_groups: bool = True,
        serve: Callable[[Any], None] | None = None,
    ) -> None:
        self.spec = spec
        self.schema = Schema(spec)
        self.n_groups = spec.key_groups or DEFAULT_KEY_GROUPS
        self.key_index = self.schema.order.index(spec.key)
        self.int_keys = self.schema.types[spec.key] == FieldType.INT64.value
        self.ttl_ms = int(spec.key_ttl.total_seconds() * 1000)
        self.windows: dict[str, HostedWindow] = {}
        self.ops: dict[str, WindowOps] = {}
        self.packers: dict[str, Any] = {}
        # set while no flush is being written outside the lock (flush_begin / GroupWrites)
        self._writing = threading.Event()
        self._writing.set()
        # a written or failed flush's slab marks to change (slab, slots, failed): queued by
        # the flush thread, applied under the lock (:meth:`_settle`): the slab's arrays are
        # the appends' (an append may grow them, or free a slot, meanwhile)
        self._slab_after: collections.deque[tuple[KeySlab, np.ndarray, bool]] = collections.deque()
        self.unpackers: dict[str, Any] = {}
        # each window's label in a key's stored value (its definition's id, else its name:
        # KeyState.record) and back
        self.labels: dict[str, str] = {}
        self.names: dict[str, str] = {}
        self.client = client
        self.prefix = prefix
        self.fence = fence
        self.wait = wait
        self.cache = cache
        self.compact_items = compact_items
        self.make_engine = make_engine
        self.lock = threading.RLock()
        self.listeners: list[Callable[[int, Mapping[str, Any]], None]] = []
        self.batches = 0
        self.gone = False
        self.stale = False
        self.recover: Callable[[], None] = self.load
        self.journal: bool = False  # a durable window: every group journals
        # every key held -> its group (a group let go: until its memory is reaped, its keys
        # may still name it, a closed table)
        self.where: dict[str, GroupTable] = {}
        self._retired: list[GroupTable] = []  # groups let go, their memory not yet reaped
        # the key groups held here: every one (a server on its own), or on a cluster those
        # this server holds (open_group / close_group), each under its own fence
        self.groups: dict[int, GroupTable] = (
            {g: self._table(g, fence) for g in range(self.n_groups)} if all_groups else {}
        )
        # on a cluster: (groups) -> None when this server may serve them now, else raises
        # where they are (NOT_OWNER, STREAM_MOVING); asked before any group is touched
        self.serve = None if all_groups else serve
        self.defs_version = 0  # of the definitions this stream's windows follow (cluster)
        # a cluster: whether an append must ask Redis for the definitions' version even when
        # this server holds the stream's own lease (it took it since it last asked)
        self.resync_due = True
        self.empty_seen = False  # holding no group at the last rebalance (cluster)
        # a cluster: follow the stream's definitions before an append (one GET): a window
        # created on the stream's owner before the append started is in it everywhere
        self.resync: Callable[[], None] | None = None
        self._group_now: GroupTable | None = None  # the group _apply is in (its fence)
        self.state_store = _StreamKeysStore(self)  # the registry's delete() of leftovers
        self.pending_state = None
        # small keys in columns (slab.py) when every window allows it; else why not
        self.slab: KeySlab | None = None
        self.slab_why = "the stream has no window"
        self._flush_next = 0  # the group the next periodic flush starts at (_flush_turn)

    def _table(self, g: int, fence: Fence | None) -> GroupTable:
        keys = GroupKeys.of(self.prefix, self.spec.name, g)
        journal = StreamJournal(
            self.client,
            self.prefix,
            self.spec.name,
            fence,
            wait=self.wait,
            keys=(keys.journal, keys.state),
        )
        table = GroupTable(g, keys, journal)
        table.fence = fence
        return table

    def _script_pipeline(self) -> Any:
        """A pipeline that takes scripts on Redis Cluster too: on the stream's slot's node
        (every key of the stream shares its hash tag)."""
        from ...storage.connect import pipeline_on_key_node

        return pipeline_on_key_node(self.client, GroupKeys.of(self.prefix, self.spec.name, 0).keys)

    # -- key groups (a cluster holds them one by one)
    def holds(self, g: int) -> bool:
        return g in self.groups

    def holds_any(self) -> bool:
        return bool(self.groups)

    def held_groups(self) -> list[int]:
        return sorted(self.groups)

    def unit(self, table: GroupTable) -> str:
        """The unit of ownership of ``table``'s group: ``"<stream>#<g>"``."""
        return group_unit(self.spec.name, table.group)

    def _fenced_out(self, table: GroupTable | None) -> ServiceError:
        """A write of ``table``'s group (None: the stream's) was refused by its fence."""
        ex = fenced_out(self.spec.name)
        if table is not None and table.fence is not None:
            ex.metadata["unit"] = self.unit(table)
        return ex

    @_locked
    def open_group(self, g: int, fence: Fence | None) -> None:
        """Hold key group ``g`` here from now on, under ``fence``: its state, its keys'
        names, then its journal's entries after that state (durable windows)."""
        old = self.groups.get(g)
        if old is not None:
            if old.fence is fence:
                return
            self._close_tables([old], flush=False)  # held under an older token: gone
        table = self._table(g, fence)
        self.groups[g] = table
        try:
            self._load_tables([table])
        except BaseException:
            self._close_tables([table], flush=False)
            raise

    @_locked
    def open_groups(self, fences: Mapping[int, Fence | None]) -> None:
        """:meth:`open_group` of several groups together: their states, keys' names and
        journals read in one pipeline (a member taking many groups at once, as when it joins,
        does one round of Redis work, not one per group). All or nothing."""
        tables: list[GroupTable] = []
        for g, fence in fences.items():
            old = self.groups.get(g)
            if old is not None:
                if old.fence is fence:
                    continue
                self._close_tables([old], flush=False)
            table = self._table(g, fence)
            self.groups[g] = table
            tables.append(table)
        if not tables:
            return
        try:
            self._load_tables(tables)
        except BaseException:
            self._close_tables(tables, flush=False)
            raise

    @_locked
    def close_groups(self, groups: Mapping[int, Fence | None], *, flush: bool) -> None:
        """:meth:`close_group` of several groups (each only when held under its fence, when
        given): one last flush for all of them."""
        tables = [
            t
            for g, fence in groups.items()
            if (t := self.groups.get(g)) is not None and (fence is None or t.fence is fence)
        ]
        if tables:
            self._close_tables(tables, flush=flush)

    @_locked
    def close_group(self, g: int, *, flush: bool, fence: Fence | None = None) -> None:
        """Let key group ``g`` go: a last flush (``flush``), then its keys' memory; only when
        held under ``fence`` (when given: not one taken back meanwhile)."""
        table = self.groups.get(g)
        if table is not None and (fence is None or table.fence is fence):
            self._close_tables([table], flush=flush)

    def _close_tables(self, tables: list[GroupTable], *, flush: bool) -> None:
        if flush and self.stale and not self.gone:
            # memory is unsure (a store failure): Redis keeps the last flush and the journal
            log.warning(
                "groups of keyed stream %s let go without a last flush: a store failure "
                "left memory unsure (Redis holds the last flush and the journal)",
                self.spec.name,
            )
            flush = False
        flushed = False
        if flush and not self.gone:
            try:
                self._flush_tables(tables, final=True)
                flushed = True
            except (StoreError, ServiceError) as ex:
                log.warning(
                    "last flush of groups of keyed stream %s failed: %s", self.spec.name, ex
                )
        if flush:
            # after the last flush every tree's checkpoint is current (those of the keys it
            # wrote were just taken; the others' at their last change)
            states = [st for table in tables for st in table.hot.values()]
            _close_full(states, checkpoint=not flushed)
        else:
            for table in tables:
                for st in table.hot.values():
                    _abandon_full(st)
        self._slab_forget(tables)  # written by the last flush (or not: Redis is the truth)
        for table in tables:
            table.closed = True
            if self.groups.get(table.group) is table:
                del self.groups[table.group]
        # their memory goes in slices (:meth:`reap`): a member handing groups over lets their
        # leases go first, and the other groups' calls wait for a slice, not for all of it
        self._retired.extend(tables)
        self.batches = sum(t.state.batches for t in self.groups.values())

    @_locked
    def reap(self, max_keys: int = 20_000) -> bool:
        """Forget the memory of groups let go (their keys' names and states), ``max_keys``
        keys at most; whether some is left (call again: the lock is free in between)."""
        self._reap(max_keys)
        return bool(self._retired)

    def _reap(self, max_keys: int | None) -> None:
        self._settle()  # a flush being written keeps its keys until it is
        left = max_keys
        while self._retired:
            table = self._retired[0]
            n = len(table.index) + len(table.hot)
            if left is not None and n > left:
                if left <= 0:
                    return
                self._forget_part(table, left)
                return
            self._forget_tables([table])
            self._retired.pop(0)
            if left is not None:
                left -= n

    def _forget_part(self, table: GroupTable, n: int) -> None:
        """Forget ``n`` of a retired table's keys (their names, then their states)."""
        where, cache = self.where, self.cache
        index = table.index
        for k in list(itertools.islice(index, n)):
            del index[k]
            if where.get(k) is table:
                del where[k]
            blob = table.packed.pop(k, None)
            if blob is not None:
                cache.add(-(len(blob) + _PACKED_BYTES), objects=0)
            st = table.hot.pop(k, None)
            if st is not None:
                _abandon_full(st)
                cache.add(-_size(st), hot=-1)
            cache.add(0, keys=-1)

    @_locked
    def define(self, w: HostedWindow) -> None:
        """A window of the stream's definitions: a durable one starts every group's journal
        at its state (a flush first)."""
        was = self.journal
        if w.spec.storage.durable and not was:
            self.flush()  # the journal starts at every group's state
        self.add_window(w)
        if self.journal and not was:
            for table in self.groups.values():
                table.journal.first = table.state.lsn + 1

    # -- windows
    def add_window(self, w: HostedWindow) -> None:
        """A new window (or one reopened): keys get their instance at their next row."""
        built = w.built
        # a hopping window's instances hold slices (its final aggregator's items)
        monoid = built.slice_monoid or built.monoid
        name = w.spec.name
        self.ops[name] = ops = WindowOps(
            name,
            monoid.combine,
            monoid.identity,
            bind_policy(built.slice_policy or built.policy, monoid),
            batch_safe=built.batch_safe,
            threshold=self.compact_items,
            make_engine=functools.partial(self._new_engine, w),
        )
        if built.hop is not None:
            ops.hop, ops.record, ops.cutoff = built.hop, built.monoid, built.slice_policy
            ops.codec = codec_for(monoid)
        codec = getattr(monoid, "codec", None)
        if codec is not None and not isinstance(codec, StructCodec):  # a plugin's own
            self.packers[name] = codec.pack_values
            self.unpackers[name] = codec.unpack_values
        else:
            self.packers[name] = INLINE
            self.unpackers[name] = INLINE
        self.windows[name] = w
        label = str(getattr(w, "def_id", "") or name)
        self.labels[name] = label
        self.names[label] = name
        self.journal = any(x.spec.storage.durable for x in self.windows.values())
        self._replan_slab()

    def _new_engine(self, w: HostedWindow) -> tuple[Any, str]:
        """A key's window grown into a tree: its Redis keys under its group's fence."""
        wid = f"k:{uuid.uuid4().hex}"
        table = self._group_now
        return self.make_engine(w, wid, table.fence if table is not None else None), wid

    def drop_window(self, name: str) -> None:
        """Forget a window: every key's instance goes (a full one's Redis keys too)."""
        self.windows.pop(name, None)
        self.ops.pop(name, None)
        self.packers.pop(name, None)
        self.unpackers.pop(name, None)
        self.names.pop(self.labels.pop(name, name), None)
        self.journal = any(x.spec.storage.durable for x in self.windows.values())
        for table in self.groups.values():
            for st in table.hot.values():
                kw = st.windows.pop(name, None)
                if kw is not None and kw.engine is not None:
                    _drop_engine(kw.engine)
                    table.dirty.add(st.key)
        self._replan_slab()

    # -- the slab (slab.py): small keys in columns
    def _replan_slab(self) -> None:
        """After the windows changed: the keys in the slab leave it in their packed form, with
        the windows that remain (a window made now, also one under a deleted one's name,
        holds nothing for them yet), and new keys go into a slab of the new windows, when they
        all allow one."""
        old = self.slab
        if old is not None and len(old):
            by_table: dict[int, tuple[GroupTable, list[str]]] = {}
            for key, s in old.slot.items():
                t = old.tables[s]
                by_table.setdefault(id(t), (t, []))[1].append(key)
                if old.unwritten(s):  # changed or being written: dirty as packed
                    t.dirty.add(key)
            for table, keys in by_table.values():
                for key, blob in zip(keys, old.blobs(keys, set(self.windows)), strict=True):
                    table.packed[key] = blob
                    self.cache.add(len(blob) + _PACKED_BYTES - old.slot_bytes, objects=0)
        plan = slab_plan(self.spec.timestamp_field, self.schema.types, self.windows)
        capacity = min(SLAB_ROWS, self.compact_items)
        if isinstance(plan, str) or capacity < 1:
            self.slab = None
            self.slab_why = plan if isinstance(plan, str) else "compact windows hold no row"
            return
        self.slab = KeySlab(*plan, capacity)
        self.slab.labels = self.labels
        self.slab_why = ""

    def _slab_rows(self, name: str, k: int, rows: Any) -> list[Any]:
        """Window ``name``'s items from a stored slab record's rows: the lift of the newest
        ``k`` (KeyState.unpack's ``from_rows``)."""
        cols = rows_of_record(rows, self.spec.timestamp_field, self.schema.types)
        return self._lift_rows(name, k, cols)

    def _lift_rows(self, name: str, k: int, cols: Mapping[str, Any]) -> list[Any]:
        n = len(cols[self.spec.timestamp_field])
        if not 0 <= k <= n:
            msg = f"a key's window {name!r} holds {k} of its {n} rows"
            raise CorruptDataError(msg)
        sub = {c: a[n - k :].tolist() for c, a in cols.items()}
        return list(self.windows[name].lift_columns(sub))  # type: ignore[misc]

    def _object_of(
        self,
        table: GroupTable,
        key: str,
        counters: Counters | None,
        cols: Mapping[str, Any],
        lsn: int,
        evicted: Mapping[str, int],
        *,
        cache: bool,
    ) -> KeyState:
        """A key of the slab as an object: its counters (None: a new key) and each window's
        items, the lift of the rows it holds (a window past the compact threshold grows into
        its tree; ``lsn``: the entry its windows hold; ``evicted``: the rows each window's last
        batch evicted); with ``cache``, into ``table``'s cache (else made for one read)."""
        slab = self.slab
        assert slab is not None
        st = KeyState(key)
        if counters is not None:
            st.newest, st.rows, st.late, st.touched, st.batches = counters
        ts = cols[self.spec.timestamp_field]
        n = len(ts)
        if n:
            keeps = slab.keep_of(np.array([n]), np.asarray(ts)[None, :])
        self._group_now = table
        try:
            for name, ops in self.ops.items():
                k = int(keeps[name][0]) if n else 0
                kw = KeyWindow(self._lift_rows(name, k, cols))
                kw.lsn = lsn
                kw.evicted = evicted.get(name, 0)
                if len(kw.items) > ops.threshold:
                    kw._promote(ops)
                st.windows[name] = kw
        finally:
            self._group_now = None
        if cache:
            table.hot[key] = st
            size = _size(st)
            self.cache.add(size, hot=1, objects=size)
        return st

    def _view(self, table: GroupTable, key: str) -> KeyState:
        """The state of an existing ``key`` to read: an object (loaded when cold); a key in
        the slab stays there, read through an object made for this read (its windows hold at
        most the slab's rows: compact, no tree)."""
        slab = self.slab
        if slab is not None and key not in table.hot and slab.table_of(key) is table:
            counters, cols, evicted = slab.peek(key)
            return self._object_of(table, key, counters, cols, 0, evicted, cache=False)
        return self._state(table, key)

    def _unslab(self, table: GroupTable, key: str) -> KeyState:
        """``key`` out of the slab, into ``table``'s cache as an object."""
        slab = self.slab
        assert slab is not None
        s = slab.slot[key]
        if slab.unwritten(s):  # changed, or being written: dirty as an object
            table.dirty.add(key)
        counters, cols, evicted = slab.take(key)
        self.cache.add(-slab.slot_bytes, objects=0)
        return self._object_of(table, key, counters, cols, 0, evicted, cache=True)

    def _slab_load(self, table: GroupTable, key: str, blob: bytes) -> bool:
        """``key``'s stored value back into the slab, when it was written from one whose
        windows were the stream's windows now (each window's reach as stored); else False
        (it becomes an object)."""
        slab = self.slab
        assert slab is not None
        try:
            record = unpackb(blob)
            if len(record) != 7:
                return False
            newest, rows, late, touched, batches, ws, stored = record
            ws = {self.names.get(label, label): w for label, w in dict(ws).items()}
            if set(ws) != set(self.windows) or any(w[0] != "r" for w in ws.values()):
                return False
            cols = rows_of_record(stored, self.spec.timestamp_field, self.schema.types)
        except (CorruptDataError, TypeError, ValueError, IndexError):
            return False  # the object path names what is wrong
        counters = (int(newest), int(rows), int(late), int(touched), int(batches))
        if not slab.load(key, table, counters, cols, {n: int(w[1]) for n, w in ws.items()}):
            return False
        self.cache.add(slab.slot_bytes, objects=0)
        return True

    def _slab_fields(self, tables: Sequence[GroupTable]) -> dict[int, tuple[np.ndarray, list[Any]]]:
        """The slab's keys of ``tables`` changed since a flush took them (its marks, cleared
        here), by group: their slots, and their ``HSET`` field-value pairs packed in Redis's
        wire form for all of them in one pass (:meth:`KeySlab.fields_at`)."""
        slab = self.slab
        if slab is None or not len(slab) or not tables:
            return {}
        want = np.zeros(self.n_groups, dtype=bool)
        want[[t.group for t in tables]] = True
        size = slab.size
        group = slab.group[:size]
        dirty = slab.dirty[:size]
        slots = np.flatnonzero(dirty & want[np.clip(group, 0, self.n_groups - 1)])
        if not len(slots):
            return {}
        slots = slots[np.argsort(group[slots], kind="stable")]
        dirty[slots] = False
        data, ends = slab.fields_at(slots)
        out: dict[int, tuple[np.ndarray, list[Any]]] = {}
        g_sorted = group[slots]
        bounds = np.append(_run_starts(g_sorted), len(slots)).tolist()
        for lo, hi in itertools.pairwise(bounds):
            start = int(ends[lo - 1]) if lo else 0
            chunk = np.asarray(ends[lo:hi]) - start
            out[int(g_sorted[lo])] = (
                slots[lo:hi],
                packed_chunks(data[start : int(ends[hi - 1])], chunk, FIELDS_PER_OP),
            )
        return out

    def changed_keys(self, g: int) -> set[str]:
        """The keys of group ``g`` changed since a flush took them: its dirty set and the
        slab's marks."""
        out = set(self.groups[g].dirty)
        slab = self.slab
        if slab is not None:
            at = np.flatnonzero(slab.dirty[: slab.size] & (slab.group[: slab.size] == g))
            out.update(slab.keys[s] for s in at.tolist())  # type: ignore[misc]
        return out

    def _slab_dirty(self) -> np.ndarray | None:
        """How many of the slab's keys are marked changed, per group (None: no slab)."""
        slab = self.slab
        if slab is None or not len(slab):
            return None
        size = slab.size
        at = np.flatnonzero(slab.dirty[:size])
        return np.bincount(slab.group[at], minlength=self.n_groups)

    def _slab_strays(self, keys: list[str]) -> list[tuple[str, bytes]]:
        """Keys of the slab a group's dirty set holds that its dirty marks missed (marked back
        after a failed write, a late row counted): their names and stored values."""
        slab = self.slab
        if slab is None:
            return []
        held = [k for k in keys if k in slab]
        return list(zip(held, slab.blobs(held), strict=True))

    def _slab_forget(self, tables: Sequence[GroupTable]) -> None:
        """The slab's keys of ``tables`` leave memory (groups let go or reloaded)."""
        slab = self.slab
        if slab is None or not len(slab):
            return
        n = 0
        for table in tables:
            for k in table.index:
                if slab.table_of(k) is table:
                    slab.remove(k)
                    n += 1
        self.cache.add(-n * slab.slot_bytes, objects=0)

    # -- info
    def info(self) -> StreamInfo:
        """The stream's figures: its groups' here; on a cluster the other groups' as their
        holders last flushed them (read from Redis)."""
        rows = late = batches = dups = expired = 0
        newest = 0
        states = [t.state for t in self.groups.values()]
        keys = self.key_count
        if self.serve is not None and len(self.groups) < self.n_groups:
            others, n_keys = self._stored_states(
                [g for g in range(self.n_groups) if g not in self.groups]
            )
            states += others
            keys += n_keys
        for st in states:
            rows += st.rows
            late += st.late
            batches += st.batches
            dups += st.duplicates
            expired += st.expired
            newest = max(newest, st.newest)
        return StreamInfo(
            self.spec,
            list(self.windows),
            rows,
            late,
            batches,
            dups,
            newest,
            0,
            keys,
            expired,
        )

    def _stored_states(self, groups: list[int]) -> tuple[list[GroupState], int]:
        """The states of ``groups`` as Redis holds them, and how many keys they hold."""
        pipe = self.client.pipeline(transaction=False)
        for g in groups:
            ks = GroupKeys.of(self.prefix, self.spec.name, g)
            pipe.get(ks.state)
            pipe.hlen(ks.keys)
        try:
            replies = pipe.execute()
        except redis.RedisError as ex:
            raise store_unavailable(self.spec.name, ex) from None
        states = [GroupState.from_json(r) for r in replies[0::2] if r]
        return states, sum(int(n) for n in replies[1::2])

    @property
    def rows_late(self) -> int:
        return sum(t.state.late for t in self.groups.values())

    def window_info(self, name: str) -> Any:
        return self.windows[name].info(self.rows_late)

    @property
    def key_count(self) -> int:
        return sum(len(t.index) for t in self.groups.values())

    def engine_failed(self) -> None:
        """A key's tree lost its store (a write failed): it holds its last checkpoint only,
        so the stream reloads from Redis (every group's state, the trees' checkpoints, the
        journal replayed) before its next call. Any thread (a store's writer) may call it."""
        self.stale = True

    def ensure_current(self) -> None:
        # on a cluster the stream's own fence guards its definitions only: its key groups'
        # calls go on when the stream's own calls moved to another member
        lost = self.fence is not None and self.fence.lost and self.serve is None
        if self.gone or lost:
            raise fenced_out(self.spec.name)
        if self.stale:
            self.load()

    def inline_ok(self, n_rows: int, mode: str) -> bool:
        return False

    def inline_arrays_ok(self) -> bool:
        return False

    def decode(self, columns: Columns) -> tuple[int, list[list[Any]]]:
        return self.schema.decode(columns)

    # -- ingestion
    @_locked
    def append(
        self,
        columns: Columns,
        *,
        producer_id: str = "",
        sequence: int = 0,
        mode: str = "NONE",
        which: Sequence[str] = (),
        max_rows: int = 500_000,
        nonblocking: bool = False,
        counted: bool = True,
    ) -> AppendResult:
        """Apply a batch (see the module docstring). ``counted=False``: a part of a batch the
        SDK split by key-group holder other than the part with its first row (it counts the
        batch in batches_appended / batches_duplicate, once)."""
        self.ensure_current()
        if self._slab_after:  # a flush written meanwhile: its keys no longer in flight
            self._slab_ended()
        if self.resync is not None:
            try:
                self.resync()
            except (redis.RedisError, StoreError) as ex:
                raise store_unavailable(self.spec.name, ex) from None
        for w in which:
            if w not in self.windows:
                msg = f"stream {self.spec.name!r} has no window {w!r}"
                raise not_found(Reason.WINDOW_NOT_FOUND, msg, stream=self.spec.name, window=w)
        n_rows, decoded = self.decode(columns)
        cols: list[Any] = decoded  # (lists, or arrays for a stream that takes them)
        if n_rows > max_rows:
            raise batch_too_large(n_rows, max_rows)
        if (producer_id or sequence) and (not producer_id or sequence <= 0):
            raise invalid(
                "producer_id" if not producer_id else "sequence",
                "idempotency needs both a producer_id and a sequence > 0, got "
                f"producer_id={show(producer_id)}, sequence={sequence}",
            )
        if n_rows == 0:
            return self._empty(mode, which)
        # no cyclic collection meanwhile (as an unkeyed stream's): a batch of new keys makes
        # states, windows and items by the thousand, and the collector's passes over the
        # keys already held cost a third of the ingest at 10^5 keys
        with _gc_paused(n_rows):
            fast = self.slab is not None and mode == NONE and not self.listeners
            if fast:
                done = self._append_slab(cols, producer_id, sequence, counted, columns, which)
                if done is not None:
                    return done
            if any(isinstance(c, KeyBytes | np.ndarray) for c in cols):
                # the key-by-key path reads lists (the keys as texts)
                cols = [c.tolist() if isinstance(c, KeyBytes | np.ndarray) else c for c in cols]
                columns = plain_lists(columns)
            plan = self._plan(cols, producer_id, sequence, fast=fast)
            if mode == PER_ROW:
                self._check_row_ints(plan, which)
            if not counted:
                plan.counter = None
            if plan.named and self.journal:
                rows = plan.rows_by_group()
                self._journal_rows(rows, plan.counter, columns, producer_id, sequence, mode, which)
            return self._apply(plan, cols, producer_id, sequence, mode, which)

    def _append_slab(
        self,
        cols: list[list[Any]],
        producer_id: str,
        sequence: int,
        counted: bool,
        columns: Columns,
        which: Sequence[str] = (),
    ) -> AppendResult | None:
        """A batch without results whose every key is in the slab or new, in array passes
        from the rows to the groups' counters (no Python work per row but a dict lookup of its
        key, none per key but a new key's): the common case of a keyed stream's ingest. None,
        and nothing changed, when the batch needs :meth:`_plan`'s key-by-key path: a key held
        as an object, in Redis only or to be refused, a row older than its key's newest (late
        or out of order), a duplicate batch, a group this server may not serve."""
        slab = self.slab
        assert slab is not None
        ts_in = cols[0]
        n = len(ts_in)
        raw: Any = cols[self.key_index]
        if isinstance(raw, KeyBytes):  # found by their bytes, in one compiled pass
            sl = slab.find(raw.offsets, raw.data)
        else:
            texts = self._key_texts(raw)
            sl = np.fromiter(map(slab.slot.get, texts, itertools.repeat(-1)), np.int64, n)
        miss = np.flatnonzero(sl < 0)
        new_keys: list[str] = []
        new_groups: list[int] = []
        base = slab.size  # a new key's id: base + its index in new_keys, until it has a slot
        ids = sl
        if len(miss):
            missing = (
                raw.take(miss) if isinstance(raw, KeyBytes) else [texts[i] for i in miss.tolist()]
            )
            first_of = dict.fromkeys(missing)
            new_keys = list(first_of)
            g_of = self.n_groups
            new_groups = [key_group(key, g_of) for key in new_keys]
        old = sl[sl >= 0]
        named = set(slab.group[old].tolist()) if len(old) else set()
        named.update(new_groups)
        if self.serve is not None:  # a cluster: may open a group (its keys known from then)
            freed = slab.freed
            self.serve(named)
            if self.slab is not slab or slab.freed != freed:
                return None  # a group closed meanwhile (its slots freed): the slots read are stale
        if new_keys:
            where = self.where
            for key in new_keys:  # the key-by-key path refuses or loads these
                if key in where or key_refusal(key, False) is not None:
                    return None
            if self._key_limit_refusal(len(new_keys)) is not None:
                return None
            for j, key in enumerate(new_keys):
                first_of[key] = base + j
            ids = sl.copy()
            ids[miss] = np.fromiter(map(first_of.__getitem__, missing), np.int64, len(miss))
        groups = self.groups
        if any(g not in groups for g in named):
            return None
        if producer_id and any(
            groups[g].state.producers.is_duplicate(producer_id, sequence) for g in named
        ):
            return None
        ts = np.asarray(ts_in, dtype=np.int64)
        order = np.argsort(ids, kind="stable")  # rows by key, each key's in input order
        key_of = ids[order]
        ts_sorted = ts[order]
        starts = _run_starts(key_of)
        back = ts_sorted[1:] < ts_sorted[:-1]  # a row older than the row before it
        back[starts[1:] - 1] = False  # (the row before another key's)
        if back.any():
            return None  # a key's rows out of order
        heads = key_of[starts]
        known = heads < base
        if known.any():
            at = heads[known]
            if (ts_sorted[starts[known]] < slab.newest[at]).any():
                return None  # a row older than its key's newest
        order_of = self.schema.order
        arrays = {slab.ts_name: ts}
        try:
            arrays |= {
                name: np.asarray(cols[order_of.index(name)], dtype=dtype)
                for name, dtype in slab.columns.items()
                if name != slab.ts_name
            }
        except (TypeError, ValueError, OverflowError):
            return None  # the key-by-key path's lift names the value
        r0 = int(ids[0])  # the batch counts in the group of its first row's key
        counter = int(slab.group[r0]) if r0 < base else new_groups[r0 - base]
        gids = np.empty(len(heads), dtype=np.int64)  # each key's group
        gids[known] = slab.group[heads[known]]
        if new_keys:
            gids[~known] = np.asarray(new_groups, dtype=np.int64)[heads[~known] - base]
        counts = np.diff(np.append(starts, n))
        if self.journal:  # durable: each group's rows journaled before anything changes
            columns = plain_lists(columns)
            row_group = np.empty(n, dtype=np.int64)
            row_group[order] = np.repeat(gids, counts)
            by_row = np.argsort(row_group, kind="stable")  # by group, rows ascending
            parts = np.split(by_row, _run_starts(row_group[by_row])[1:])
            rows = {int(row_group[part[0]]): part.tolist() for part in parts}
            self._journal_rows(
                rows, counter if counted else None, columns, producer_id, sequence, NONE, which
            )
        # -- nothing refuses the batch from here
        try:
            before = len(slab)
            if new_keys:
                tables = [groups[g] for g in new_groups]
                got = slab.add(new_keys, tables)
                for key, table in zip(new_keys, tables, strict=True):
                    self._index_new(table, key)
                heads = heads.copy()
                heads[~known] = got[heads[~known] - base]
            ttl = self.ttl_ms > 0
            names: Sequence[str] = ()
            if ttl:
                names = _pick(slab.keys, heads.tolist())  # type: ignore[arg-type]
            lasts = ts_sorted[np.append(starts[1:], n) - 1]
            now_ms = int(time.time() * 1000)
            out = slab.apply_slots(heads, counts, order, arrays, now_ms, ~known)
            self.cache.add((len(slab) - before) * slab.slot_bytes, keys=len(new_keys), objects=0)
            for i, counters, held, evicted, key in out:  # keys that outgrew the slab: objects
                table = groups[int(gids[i])]
                table.dirty.add(key)  # (those in the slab are marked there: apply_slots)
                # (a window past the compact threshold grows its tree in Redis)
                st = self._object_of(
                    table, key, counters, held, table.state.lsn + 1, evicted, cache=True
                )
                st.rows += int(counts[i])
                last = int(lasts[i])
                if st.newest is None or last > st.newest:
                    st.newest = last
                st.touched = now_ms
                st.batches += 1
            # each group's counters, its keys dirty and touched in order of first appearance
            # (as the key-by-key path: the TTL index's order)
            by_first = np.argsort(order[starts], kind="stable")
            by_group = by_first[np.argsort(gids[by_first], kind="stable")]
            g_sorted = gids[by_group]
            bounds = np.append(_run_starts(g_sorted), len(g_sorted))
            rows_of = np.add.reduceat(counts[by_group], bounds[:-1])
            high_of = np.maximum.reduceat(lasts[by_group], bounds[:-1])
            for j, (lo, hi) in enumerate(itertools.pairwise(bounds.tolist())):
                g = int(g_sorted[lo])
                table = groups[g]
                if ttl:
                    for key in _pick(names, by_group[lo:hi].tolist()):
                        table.touch(key, now_ms)
                gst = table.state
                gst.lsn += 1
                high = int(high_of[j])
                if high > gst.newest:
                    gst.newest = high
                gst.rows += int(rows_of[j])
                if producer_id:
                    gst.producers.record(producer_id, sequence)
                table.state_changed = True
            if counted:
                groups[counter].state.batches += 1
                self.batches += 1
        except StoreError as ex:
            raise self._store_failed(ex) from None
        except (TypeError, ValueError, ArithmeticError) as ex:
            raise self._half_applied(ex) from None
        self._account(0, 0)
        return AppendResult(rows_applied=n, rows_late=0, duplicate=False)

    def _empty(self, mode: str, which: Sequence[str]) -> AppendResult:
        res = AppendResult()
        if mode == PER_ROW:
            res.row_results = {
                n: self.windows[n].row_results([], []) for n in which or self.windows
            }
        return res

    def _plan(
        self,
        cols: list[list[Any]],
        producer_id: str,
        sequence: int,
        *,
        replay: bool = False,
        fast: bool = False,
    ) -> _Plan:
        """Everything that can refuse the batch, before any change (the cold keys it names
        load into the cache first: that changes no state). ``fast``: the keys in the slab
        stay there and take the batch's rows (else they become objects first)."""
        plan = _Plan()
        plan.fast = fast
        slab = self.slab if fast else None
        in_slab: dict[str, int] = slab.slot if slab is not None else {}
        ts = cols[0]
        raw_keys: Any = cols[self.key_index]
        texts = self._key_texts(raw_keys)
        rows_of: dict[str, list[int]] = {}
        for i, k in enumerate(texts):
            r = rows_of.get(k)
            if r is None:
                rows_of[k] = [i]
            else:
                r.append(i)
        n = self.n_groups
        known = self.where
        if self.serve is not None and not replay:  # a cluster: may this server serve them?
            self.serve({known[k].group if k in known else key_group(k, n) for k in rows_of})
        groups = self.groups
        where: dict[str, GroupTable] = {}
        cold: dict[GroupTable, list[str]] = {}
        new_keys = 0
        for key in rows_of:
            table = known.get(key)
            if table is None or table.closed:
                table = groups[key_group(key, n)]
                where[key] = table
                new_keys += 1
                refused = self._new_key_refusal(key, rows_of[key][0])
                if refused is not None:
                    raise refused
                continue
            where[key] = table
            if key not in table.hot and key not in in_slab:
                cold.setdefault(table, []).append(key)
        if new_keys and not replay:
            refused = self._key_limit_refusal(new_keys)
            if refused is not None:
                raise refused
        if cold:
            self._load_many(cold, slab=fast)
        # (after the loads: a key loaded into the slab may have grown its arrays)
        slab_newest = slab.newest if slab is not None else None
        out: dict[int, dict[str, list[int]]] = {}
        named = plan.named
        late_of = plan.late_of
        dup: dict[int, bool] = {}
        drop = self.spec.late_policy == "DROP"
        late = 0
        left = 0  # rows not applied (late, or a duplicate's)
        for key, idx in rows_of.items():
            table = where[key]
            g = table.group
            if producer_id:
                d = dup.get(g)
                if d is None:
                    d = dup[g] = table.state.producers.is_duplicate(producer_id, sequence)
                if d:
                    plan.skipped.add(g)
                    left += len(idx)
                    continue
            ks = named.get(g)
            if ks is None:
                named[g] = [key]
            else:
                ks.append(key)
            st = table.hot.get(key)
            if st is not None:
                newest = st.newest
            else:
                s = in_slab.get(key)
                newest = None if s is None else int(slab_newest[s])  # type: ignore[index]
            if len(idx) == 1:  # the common case: one row of the key
                if newest is not None and ts[idx[0]] < newest:
                    if not drop:
                        self._out_of_order(key, idx[0], ts[idx[0]], newest, False)
                    late += 1
                    left += 1
                    late_of[g] = late_of.get(g, 0) + 1
                    plan.late_keys.setdefault(g, {})[key] = 1
                    continue
            elif drop:  # each key's rows in order, none older than the key's newest
                good = []
                for i in idx:
                    t = ts[i]
                    if newest is None or t >= newest:
                        good.append(i)
                        newest = t
                if len(good) < len(idx):
                    n_late = len(idx) - len(good)
                    late += n_late
                    left += n_late
                    late_of[g] = late_of.get(g, 0) + n_late
                    plan.late_keys.setdefault(g, {})[key] = n_late
                if not good:
                    continue
                idx = good
            else:
                prev = newest
                for j, i in enumerate(idx):
                    t = ts[i]
                    if prev is not None and t < prev:
                        self._out_of_order(key, i, t, prev, j > 0)
                    prev = t
            keys = out.get(g)
            if keys is None:
                out[g] = {key: idx}
            else:
                keys[key] = idx
        plan.groups = out
        plan.rows_of = rows_of
        plan.late = late
        plan.new_keys = new_keys
        # the batch counts in the group of its first row's key (a replay says where it did):
        # applied there, or a duplicate
        plan.counter = where[texts[0]].group
        if left:
            positions = [i for keys in out.values() for idx in keys.values() for i in idx]
            positions.sort()
        else:
            positions = list(range(len(ts)))
        plan.positions = positions
        plan.rows_applied = len(positions)
        # no row to apply (a duplicate, or every row late): no lift, but every window named
        plan.lifted = (
            self._lift(cols, positions, len(ts)) if positions else {n: [] for n in self.windows}
        )
        return plan

    def _check_row_ints(self, plan: _Plan, which: Sequence[str]) -> None:
        """Refuse a batch asking for per-row results when a key's INT64 sum would pass
        int64 after one of its rows (``BAD_VALUES``, naming the window, the sum, the key and
        the request's row: the first such row), before anything changes: a window's
        instances hold exact integers, past int64 too, but a per-row result carries them as
        INT64 (it was answered INTERNAL after the batch had been applied). Each key's
        instance previews its rows (:meth:`KeyWindow.preview`: the instance unchanged); a
        hopping window answers boundaries and is left alone, as an unkeyed one is."""
        found: tuple[int, str, str, str, int] | None = None  # (row, window, sum, key, value)
        for name in which or self.windows:
            w = self.windows[name]
            if not w.checks_row_ints:
                continue
            ops = self.ops[name]
            lifted = plan.lifted[name]
            policy = w.built.policy
            errors = policy.errors[0] if isinstance(policy, CelPolicy) else None
            try:
                for g, keys in plan.groups.items():
                    hot = self.groups[g].hot
                    for key, idx in keys.items():
                        st = hot.get(key)  # (_plan loaded every key it applies rows to)
                        kw = st.windows.get(name) if st is not None else None
                        totals: list[Any] = []
                        (kw or KeyWindow()).preview(ops, [lifted[i] for i in idx], totals, [])
                        past = w.int64_past(totals)
                        if past is not None and (found is None or idx[past[1]] < found[0]):
                            found = (idx[past[1]], name, past[0], key, past[2])
            except StoreError as ex:  # (a full instance reads its tree): nothing changed
                raise store_unavailable(self.spec.name, ex, window=name) from None
            finally:
                if errors is not None:  # (the apply counts a CEL policy's errors)
                    policy.errors[0] = errors
        if found is not None:
            row, name, out, key, value = found
            raise int64_row_result(self.spec.name, name, out, row, value, key=key)

    def _key_texts(self, raw: Any) -> list[str]:
        """A batch's key column as the keys' texts (an INT64 key's decimal text)."""
        if isinstance(raw, np.ndarray):
            raw = raw.tolist()
        return [str(k) for k in raw] if self.int_keys else raw

    def _new_key_refusal(self, key: str, row: int) -> ServiceError | None:
        """Why a batch may not create ``key`` (first at input row ``row``): the rule of
        :func:`~mtawindows.v1.keys.key_refusal` (a key's text comes from a row, so an INT64
        key's is always an int64's), or None."""
        why = key_refusal(key, False)
        if why is None:
            return None
        if key:
            why = f"{why}, got {show(key)}"
        return invalid(
            f"columns[{self.spec.key}][{row}]",
            f"row {row}: {why}",
            Reason.BAD_VALUES,
            {"row": str(row)},
        )

    def _key_limit_refusal(self, new_keys: int) -> ServiceError | None:
        """Why a batch may not create ``new_keys`` keys (``--max-keys``), or None."""
        if self.cache.keys + new_keys <= self.cache.max_keys:
            return None
        return ServiceError(
            "RESOURCE_EXHAUSTED",
            Reason.TOO_MANY_KEYS,
            f"the batch would create {new_keys} keys and the server holds "
            f"{self.cache.keys} of its limit of {self.cache.max_keys}; delete keys, set "
            "key_ttl, or raise --max-keys. Nothing was applied",
            metadata={"stream": self.spec.name, "limit": str(self.cache.max_keys)},
        )

    def _out_of_order(self, key: str, row: int, t: int, prev: int, within: bool) -> None:
        whose = "the key's previous row's" if within else "the key's newest"

        def when(ns: int) -> str:
            return timestamp_text(ns, self.spec)

        raise ServiceError(
            "FAILED_PRECONDITION",
            Reason.OUT_OF_ORDER,
            f"row {row} (key {key!r}) has timestamp {when(t)}, older than {whose} "
            f"({when(prev)}); the stream rejects late rows (late_policy REJECT), so nothing "
            "was applied",
            [
                (
                    f"columns[{self.spec.timestamp_field}][{row}]",
                    f"timestamp {when(t)} < {when(prev)}",
                )
            ],
            {"row": str(row), "timestamp": str(t), "newest": str(prev), "key": key},
        )

    def _lift(
        self, cols: list[list[Any]], positions: list[int], n_rows: int
    ) -> dict[str, list[Any]]:
        """Every window's lifted items, indexed by input row (rows not applied: None)."""
        names = self.schema.order
        sub = cols if len(positions) == n_rows else [[c[i] for i in positions] for c in cols]
        columns_of = dict(zip(names, sub, strict=True))
        out: dict[str, list[Any]] = {}
        for name, win in self.windows.items():
            if win.lift_columns is not None:
                got = win.lift_columns(columns_of)
            else:
                lift = win.lift
                try:
                    got = [lift(dict(zip(names, r, strict=True))) for r in zip(*sub, strict=True)]
                except (TypeError, ValueError) as ex:
                    raise invalid(
                        "columns",
                        f"window {name!r} refused a row: {clip(str(ex))}",
                        Reason.BAD_VALUES,
                    ) from None
            if len(positions) == n_rows:
                out[name] = got
            else:
                full: list[Any] = [None] * n_rows
                for p, u in zip(positions, got, strict=True):
                    full[p] = u
                out[name] = full
        return out

    def _index_of(self, key: str) -> GroupTable | None:
        """The table of ``key`` when the key exists."""
        table = self.where.get(key)
        return None if table is None or table.closed else table

    def _journal_rows(
        self,
        rows: Mapping[int, Sequence[int]],
        counter: int | None,
        columns: Columns,
        producer_id: str,
        sequence: int,
        mode: str,
        which: Sequence[str],
    ) -> None:
        """Each group's input rows (``rows``: ascending), one entry per group the batch names
        (also its late rows: a replay drops them again), pipelined, before any key changes;
        the batch counted in group ``counter``."""
        names = list(columns)
        windows = sorted(self.labels.values())
        entries: list[tuple[GroupTable, list[Any]]] = []
        for g, group_rows in rows.items():
            table = self.groups[g]
            at = list(group_rows)
            cols = {n: [columns[n][0], list(_pick(columns[n][1], at))] for n in names}
            # the windows the entry goes to (their definitions' ids): a replay gives it to
            # those only, not to a window made after it (or deleted and made again)
            extra: dict[str, Any] = {"windows": windows}
            if g == counter:
                extra["batch"] = 1
            lsn = table.state.lsn + 1
            entries.append((table, [lsn, producer_id, sequence, mode, list(which), cols, extra]))
        self._push(entries)

    def _push(self, entries: Sequence[tuple[GroupTable, list[Any]]]) -> None:
        """Journal one entry (``[lsn, producer, sequence, mode, which, columns, extra]``) in
        each of some groups, pipelined (one round trip)."""
        pipe = self._script_pipeline()
        for table, entry in entries:
            op: Op = ("RPUSH", table.keys.journal, (packb(entry),))
            fenced(self.client, table.fence, [op], pipe=pipe)
        try:
            replies = pipe.execute(raise_on_error=False)
        except redis.RedisError as ex:
            self.stale = True
            raise store_unavailable(self.spec.name, ex) from None
        for (table, _entry), reply in zip(entries, replies, strict=True):
            if isinstance(reply, Exception):
                self.stale = True  # some entries may have landed: reload before the next call
                err = check_reply(reply, table.fence)
                if isinstance(err, FencedError):
                    raise self._fenced_out(table)
                raise store_unavailable(self.spec.name, err) from None
        for table, _entry in entries:
            table.journaled = True

    def _apply(
        self,
        plan: _Plan,
        cols: list[list[Any]],
        producer_id: str,
        sequence: int,
        mode: str,
        which: Sequence[str],
        *,
        replay: bool = False,
        only: set[str] | None = None,
    ) -> AppendResult:
        """Apply the checked batch, group by group, key by key; ``only``: to those windows
        (a replayed entry, to the windows that existed when it was journaled)."""
        ts = cols[0]
        now_ms = int(time.time() * 1000)
        per_row = {n for n in (which or self.windows)} if mode == PER_ROW else set()
        final = mode == FINAL
        n_rows = len(ts)
        row_totals = {n: [UNSET] * n_rows for n in per_row}
        row_sizes = {n: [0] * n_rows for n in per_row}
        finals: list[WindowResult] = []
        evictions: dict[str, int] = {}
        touched: list[tuple[str, KeyState]] = []
        listening = bool(self.listeners) and not replay
        lifted = plan.lifted
        ops = self.ops if only is None else {n: o for n, o in self.ops.items() if n in only}
        ttl = self.ttl_ms > 0
        fast = [
            (name, o, lifted[name], o.combine, o.policy)
            for name, o in ops.items()
            if o.batch_safe and name not in per_row and not final and o.hop is None
        ]
        fast_names = {f[0] for f in fast}
        slow = [(name, o, lifted[name]) for name, o in ops.items() if name not in fast_names]
        new_keys = 0
        items_added = 0
        grown = 0  # bytes the windows grew by besides (a compact one into a tree: its size)
        columnar: set[str] = set()  # the keys the slab took the rows of
        try:
            if plan.fast and self.slab is not None:
                columnar = self._apply_slab(plan, cols, now_ms)
            for g in plan.named:
                table = self._group_now = self.groups[g]
                gst = table.state
                lsn = gst.lsn + 1
                keys = plan.groups.get(g) or {}  # none: every row of its keys was late
                hot = table.hot
                dirty_add = table.dirty.add
                high = gst.newest
                for key, idx in keys.items():
                    if key in columnar:
                        last = ts[idx[-1]]
                        if last > high:
                            high = last
                        if ttl:
                            table.touch(key, now_ms)
                        continue  # (marked changed in the slab)
                    st = hot.pop(key, None)  # back in at the end: the group's LRU order
                    if st is None:
                        st = self._new_key(table, key)
                        new_keys += 1
                    hot[key] = st
                    windows = st.windows
                    one = idx[0] if len(idx) == 1 else -1
                    for name, win_ops, lw, combine, policy in fast:
                        kw = windows.get(name)
                        if kw is None:
                            kw = windows[name] = KeyWindow()
                        elif kw.lsn >= lsn:  # replay: a full window that holds it already
                            continue
                        kw.lsn = lsn
                        if kw.engine is None and one >= 0:
                            # the common case inline: one compact item, nothing leaves
                            u = lw[one]
                            total = kw.total
                            items = kw.items
                            if total is UNSET:
                                total = kw.aggregate(win_ops)
                            total = combine(total, u)
                            items.append(u)
                            if not policy(total, items[0]) and len(items) <= win_ops.threshold:
                                kw.total = total
                                kw.evicted = 0
                                items_added += 1
                                continue
                            items.pop()  # the general path takes it from the start
                            kw.total = UNSET
                            us = [u]
                        else:
                            us = [lw[i] for i in idx]
                        b0 = _window_bytes(kw)
                        kw.apply(win_ops, us)
                        grown += _window_bytes(kw) - b0
                    for name, win_ops, lw in slow:
                        kw = windows.get(name)
                        if kw is None:
                            kw = windows[name] = KeyWindow()
                        elif kw.lsn >= lsn:
                            continue
                        kw.lsn = lsn
                        us = [lw[i] for i in idx]
                        b0 = _window_bytes(kw)
                        if win_ops.hop is not None:  # a hopping window: the key's hopper
                            lists: tuple[list[Any], list[int]] | None = (
                                ([], []) if name in per_row else None
                            )
                            hop_ts = [ts[i] for i in idx]
                            kw.closed, evicted = HopGroup([kw.hopper(win_ops)]).apply(
                                us, hop_ts, [lists]
                            )[0]
                            kw.evicted = evicted
                            if lists is not None:
                                rt, rs = row_totals[name], row_sizes[name]
                                for i, t, sz in zip(idx, *lists, strict=True):
                                    rt[i] = t
                                    rs[i] = sz
                        elif name in per_row:
                            totals: list[Any] = []
                            sizes: list[int] = []
                            evicted = kw.apply(win_ops, us, totals, sizes)
                            rt, rs = row_totals[name], row_sizes[name]
                            for i, t, sz in zip(idx, totals, sizes, strict=True):
                                rt[i] = t
                                rs[i] = sz
                        else:
                            evicted = kw.apply(win_ops, us)
                        grown += _window_bytes(kw) - b0
                        if final and (not which or name in which):
                            evictions[name] = evicted
                    st.rows += len(idx)
                    last = ts[idx[-1]]
                    if st.newest is None or last > st.newest:
                        st.newest = last
                    if last > high:
                        high = last
                    st.touched = now_ms
                    st.batches += 1
                    if evictions:
                        for name, evicted in evictions.items():
                            finals.append(self._result(name, st, windows[name], evicted))
                        evictions.clear()
                    if ttl:
                        table.touch(key, now_ms)
                    dirty_add(key)
                    if listening:
                        touched.append((key, st))
                for key, n_late in plan.late_keys.get(g, {}).items():
                    st = hot.get(key)
                    if st is not None:
                        st.late += n_late
                        dirty_add(key)
                    elif self.slab is not None and key in self.slab:
                        self.slab.add_late(key, n_late)  # (marked changed there)
                gst.newest = high
                gst.lsn = lsn
                gst.rows += sum(len(i) for i in keys.values())
                gst.late += plan.late_of.get(g, 0)
                if g == plan.counter:
                    gst.batches += 1
                    self.batches += 1
                if producer_id:
                    gst.producers.record(producer_id, sequence)
                table.state_changed = True
        except StoreError as ex:
            raise self._store_failed(ex) from None
        except (TypeError, ValueError, ArithmeticError) as ex:
            raise self._half_applied(ex) from None
        finally:
            self._group_now = None
        if plan.counter in plan.skipped:  # it counts where it counted when applied
            skipped = self.groups[plan.counter]
            skipped.state.duplicates += 1
            skipped.state_changed = True
        result = AppendResult(
            rows_applied=plan.rows_applied,
            rows_late=plan.late,
            duplicate=bool(plan.skipped) and not plan.named,
        )
        result.key_results = finals
        for name in per_row:
            rt = row_totals[name]
            rs = row_sizes[name]
            pos = plan.positions
            result.row_results[name] = self.windows[name].row_results(
                [rt[i] for i in pos], [rs[i] for i in pos]
            )
        if per_row and len(plan.positions) < n_rows:
            result.row_positions = list(plan.positions)
        self._account(new_keys, items_added, grown)
        if touched:
            self._tell(touched)
        return result

    def _half_applied(self, ex: Exception) -> ServiceError:
        """The error to raise when a monoid refused what its lift let through while a batch
        was being applied: that key's window is as it was, but the batch is applied in part
        (a durable stream's journal has it all); the stream reloads before its next call."""
        self.stale = True
        return invalid("columns", f"a window refused a row: {clip(str(ex))}", Reason.BAD_VALUES)

    def _store_failed(self, ex: StoreError) -> ServiceError:
        """The error to raise for a store failure while a batch was being applied (the
        stream reloads before its next call)."""
        self.stale = True
        table_now = self._group_now
        if isinstance(ex, FencedError) and table_now is not None and self.serve is not None:
            # a cluster: the group moved on (a newer holder's token): it goes from here
            if not self.journal:
                return self._fenced_out(table_now)
            err = moved_after_journal(self.spec.name)
            err.metadata["unit"] = self.unit(table_now)
            return err
        if self.journal and isinstance(ex, FencedError):
            return moved_after_journal(self.spec.name)
        return store_unavailable(self.spec.name, ex)

    def _apply_slab(self, plan: _Plan, cols: list[list[Any]], now_ms: int) -> set[str]:
        """The slab's part of a batch: the rows of the keys it holds, and of new keys, in
        array passes (slab.py). A key that outgrows it becomes an object holding the batch
        (its windows' lsn the batch's: the object path skips them but counts the rows).
        Returns the keys the slab took."""
        slab = self.slab
        assert slab is not None
        keys: list[str] = []
        tables: list[GroupTable] = []
        idx: list[list[int]] = []
        new = 0
        for g, by_key in plan.groups.items():
            table = self.groups[g]
            hot = table.hot
            for key, positions in by_key.items():
                if key in hot:
                    continue
                if key not in slab:  # a new key (the plan loaded every other one)
                    self._index_new(table, key)
                    new += 1
                keys.append(key)
                tables.append(table)
                idx.append(positions)
        if not keys:
            return set()
        order = self.schema.order
        arrays = {
            name: np.asarray(cols[order.index(name)], dtype=dtype)
            for name, dtype in slab.columns.items()
        }
        before = len(slab)
        out = slab.apply(keys, tables, idx, arrays, now_ms)
        self.cache.add((len(slab) - before) * slab.slot_bytes, keys=new, objects=0)
        took = set(keys)
        for i, counters, held, evicted, _key in out:
            table = tables[i]
            lsn = table.state.lsn + 1
            self._object_of(table, keys[i], counters, held, lsn, evicted, cache=True)
            took.discard(keys[i])
        return took

    def _result(
        self, name: str, st: KeyState, kw: KeyWindow, evicted: int | None = None
    ) -> WindowResult:
        """``kw``'s result; ``evicted``: the rows its last batch evicted (default: as kept)."""
        w = self.windows[name]
        if evicted is None:
            evicted = kw.evicted
        ops = self.ops[name]
        if ops.hop is not None:  # a hopping window's: its last closed boundary's
            last = kw.hopper(ops).last
            return self._boundary_result(name, st, last, evicted)
        if kw.engine is not None:
            lowered = kw.engine.query()
        else:
            lowered = w.built.monoid.lower(kw.aggregate(self.ops[name]))
        size = len(kw)
        return WindowResult(
            name, w.values(lowered, size), size, evicted, st.batches, st.newest or 0, st.key
        )

    def _boundary_result(self, name: str, st: KeyState, b: Any, evicted: int) -> WindowResult:
        """A key's hopping window's result at boundary ``b`` (None: none closed yet)."""
        closed = st.windows[name].hopper(self.ops[name]).closed if b is not None else 0
        return self.windows[name].boundary_result(
            b, evicted=evicted, sequence=closed, timestamp=st.newest or 0, key=st.key
        )

    def _suffix_result(
        self, name: str, st: KeyState, kw: KeyWindow, q: RangeQuery, field: str | None
    ) -> WindowResult:
        """``kw``'s result over the suffix ``q``: :meth:`_result`'s shape, its size the rows
        in the suffix (a full window's engine answers, a compact one folds its items)."""
        w = self.windows[name]
        aggregate_range = functools.partial(kw.aggregate_range, self.ops[name], w.built.monoid)
        lowered, size = suffix_of(self.spec, w, q, field, aggregate_range)
        return WindowResult(
            name, w.values(lowered, size), size, kw.evicted, st.batches, st.newest or 0, st.key
        )

    def _tell(self, touched: list[tuple[str, KeyState]]) -> None:
        """Subscribers: each window's result for each key the batch changed (a hopping
        window's: one per boundary the batch closed for the key)."""
        out: dict[str, list[WindowResult]] = {}
        for name in self.windows:
            rs = out[name] = []
            hopping = self.ops[name].hop is not None
            for _key, st in touched:
                kw = st.windows.get(name)
                if kw is None:
                    continue
                if not hopping:
                    rs.append(self._result(name, st, kw))
                    continue
                hop = kw.hopper(self.ops[name])
                first = hop.closed - len(kw.closed)
                for i, b in enumerate(kw.closed):
                    r = self._boundary_result(name, st, b, kw.evicted)
                    r.sequence = first + i + 1
                    rs.append(r)
        for listener in list(self.listeners):
            listener(self.batches, out)

    def _new_key(self, table: GroupTable, key: str) -> KeyState:
        self._index_new(table, key)
        return KeyState(key)

    def _index_new(self, table: GroupTable, key: str) -> None:
        """A new key's name in ``table`` (an object's, or the slab's)."""
        table.index[key] = 0
        table.key_moves += 1
        self.where[key] = table
        if table.deleted:
            table.deleted.discard(key)

    # -- the key cache
    def _state(self, table: GroupTable, key: str) -> KeyState:
        """The state of an existing ``key`` (loaded when cold)."""
        st = table.hot.get(key)
        if st is None:
            self._load_many({table: [key]})
            st = table.hot[key]
        return st

    def _load_many(self, cold: Mapping[GroupTable, list[str]], *, slab: bool = False) -> None:
        """Bring keys into the cache as objects: from their packed form in memory, else from
        Redis (one HMGET per group, one round trip). ``slab``: a key stored from the slab,
        as the windows are now, goes back into it instead."""
        need: list[tuple[GroupTable, list[str]]] = []
        for table, keys in cold.items():
            rest = []
            packed = table.packed
            for k in keys:
                if k in table.hot:
                    continue
                if self.slab is not None and k in self.slab:
                    if not slab:
                        self._unslab(table, k)
                    continue
                blob = packed.pop(k, None)
                if blob is not None:
                    self.cache.add(-(len(blob) + _PACKED_BYTES), objects=0)
                    if not (slab and self._slab_load(table, k, blob)):
                        self._open(table, k, blob)
                else:
                    rest.append(k)
            if rest:
                need.append((table, rest))
        if not need:
            return
        try:
            pipe = self.client.pipeline(transaction=False)
            for table, keys in need:
                pipe.hmget(table.keys.keys, keys)
            replies = pipe.execute()
        except redis.RedisError as ex:
            raise store_unavailable(self.spec.name, ex) from None
        for (table, keys), blobs in zip(need, replies, strict=True):
            for k, blob in zip(keys, blobs, strict=True):
                if blob is None:  # in the index, never written: lost by a failed flush
                    msg = f"stream {self.spec.name!r}: key {k!r} has no stored state"
                    self.stale = True
                    raise store_unavailable(self.spec.name, CorruptDataError(msg))
                self.cache.loads += 1
                if not (slab and self._slab_load(table, k, blob)):
                    self._open(table, k, blob)

    def _open(self, table: GroupTable, key: str, blob: bytes) -> KeyState:
        st = KeyState.unpack(key, blob, self.unpackers, self._slab_rows, self.names)
        for name, kw in st.windows.items():
            if kw.wid and kw.engine is None:  # full form: open its tree
                kw.engine = self.make_engine(self.windows[name], kw.wid, table.fence)
                meta = kw.engine.store.checkpoint_meta or {}
                kw.lsn = int(meta.get("lsn", kw.lsn))
        table.hot[key] = st
        self.cache.add(_size(st), hot=1)
        return st

    def _account(self, new_keys: int, items: int, grown: int = 0) -> None:
        """Count a batch's new keys and compact items in the cache; past its budgets, the
        least recently touched keys of this stream move to their packed form, then the
        packed ones already in Redis leave memory."""
        nbytes = new_keys * _KEY_BYTES + items * _ITEM_BYTES + grown
        self.cache.add(nbytes, hot=new_keys, keys=new_keys)
        self._fit()

    def _fit(self, keep: str | None = None) -> None:
        """Past the cache's budget (an append's keys, or a read's loaded), evict (``keep``: a
        key just read stays an object, whatever its size)."""
        if self.cache.over:
            try:
                self.evict(keep)
            except StoreError as ex:  # applied or read: the keys stay in memory for now
                log.warning("key cache: could not write back keys of %s: %s", self.spec.name, ex)

    def evict(self, keep: str | None = None) -> int:
        """Within the cache's budgets: while the objects' share is over, the least recently
        touched objects (each group's hot keys are in touch order; the groups take turns) are
        packed (a full window checkpointed and closed first), but ``keep``; while the whole is
        over, packed keys that Redis holds as they are (not dirty) leave memory, oldest first.
        Returns the keys that left memory."""
        cache = self.cache

        def spare(t: GroupTable) -> int:  # its objects that may go
            return len(t.hot) - int(keep is not None and keep in t.hot)

        tables = [t for t in self.groups.values() if spare(t) > 0]
        while cache.hot_over and tables:
            for table in tables:
                if spare(table) <= 0:
                    continue
                it = iter(table.hot)
                key = next(it)
                if key == keep:
                    key = next(it)
                st = table.hot[key]
                if st.full:
                    self._checkpoint_full(table, st)  # may raise: the key stays
                blob = st.pack(self.packers, self.labels)
                del table.hot[key]
                _close_full([st])
                table.packed[key] = blob
                size = _size(st)
                cache.add(len(blob) + _PACKED_BYTES - size, hot=-1, objects=-size)
            tables = [t for t in tables if spare(t) > 0]
        n = 0
        if cache.over:
            for table in self.groups.values():
                packed = table.packed
                dirty = table.dirty
                inflight = table.inflight  # being written: it stays until it is
                gone = [k for k in packed if k not in dirty and k not in inflight]
                for k in gone:
                    cache.add(-(len(packed.pop(k)) + _PACKED_BYTES), objects=0)
                    n += 1
                    if cache.used <= cache.budget:
                        break
                if cache.used <= cache.budget:
                    break
        slab = self.slab
        if cache.over and slab is not None and len(slab):
            n += self._evict_slab(slab)
        cache.evictions += n
        return n

    def _evict_slab(self, slab: KeySlab) -> int:
        """Keys of the slab that Redis holds as they are (not dirty, not being written) leave
        memory, least recently touched first, down to 95% of the budget (evictions come in
        chunks, not a few keys every batch). Looks at twice as many candidates as it needs,
        found by a partition of the touch times (not a sort of every slot). Returns how many
        left."""
        cache = self.cache
        each = slab.slot_bytes
        need = -(-(cache.used - cache.budget * 95 // 100) // each)
        touched = slab.touched[: slab.size]
        k = min(len(touched), max(2 * need, 1024))
        cand = np.argpartition(touched, k - 1)[:k] if k < len(touched) else np.arange(k)
        cand = cand[np.argsort(touched[cand], kind="stable")]
        n = 0
        for s in cand.tolist():
            key = slab.keys[s]
            if key is None:
                continue
            table = slab.tables[s]
            if slab.unwritten(s) or key in table.dirty or key in table.inflight:
                continue
            slab.remove(key)
            n += 1
            if n >= need:
                break
        cache.add(-n * each, objects=0)
        return n

    def _checkpoint_full(
        self, table: GroupTable, st: KeyState, queued: list[Any] | None = None
    ) -> None:
        """Checkpoint the key's full-form windows; with ``queued``, queue the checkpoints and
        note them there (:meth:`_await_checkpoints` waits for them: many keys' checkpoints go
        at once instead of one round trip after the other)."""
        for kw in st.windows.values():
            if kw.engine is not None and kw.engine.stale:
                # its store failed: the tree holds its last checkpoint, not what the key's
                # lsn says (a checkpoint now would skip journal entries it lacks); the
                # stream reloads from Redis (checkpoints and the journal) before its next call
                self.stale = True
                msg = (
                    f"stream {self.spec.name!r}: key {st.key!r}'s window failed to write "
                    "earlier; the stream reloads from Redis before its next call"
                )
                raise StoreError(msg)
        for kw in st.windows.values():
            if kw.engine is not None:
                # a tree opened ahead of its group (a replay skips the entries it holds)
                # keeps its own lsn: the group's is behind it until the replay catches up
                lsn = max(kw.lsn, table.state.lsn)
                if queued is None:
                    kw.engine.flush(wait=True, meta={"lsn": lsn})
                else:
                    queued.append((kw, kw.lsn, kw.engine.flush(wait=False, meta={"lsn": lsn})))
                kw.lsn = lsn

    def _await_checkpoints(self, queued: list[Any]) -> None:
        """Wait for the checkpoints :meth:`_checkpoint_full` queued; a window whose checkpoint
        failed keeps its lsn as it was (its tree reloads with the stream: see
        :meth:`_checkpoint_full`), and the first failure is raised (after all)."""
        failed: StoreError | None = None
        for kw, old, fut in queued:
            try:
                kw.engine.wait_flushed(fut)
            except StoreError as ex:
                kw.lsn = old
                failed = failed or ex
        if failed is not None:
            self.stale = True
            raise failed

    # -- reads
    @_locked
    def query(self, window: str, key: Any, q: RangeQuery | None = None) -> WindowResult:
        """``key``'s result of ``window``; with ``q``, over that suffix (ranges.py: refused
        first when the window cannot answer it, whatever form the key's window is in)."""
        field = None if q is None else check_range(self.spec, self.windows[window], q)
        self.ensure_current()
        text = self._text(key)
        table = self._index_of(text)
        if table is None:
            raise key_not_found(self.spec.name, text)
        st = self._view(table, text)
        kw = st.windows.get(window)
        if kw is None:
            kw = KeyWindow()
        try:
            if q is None:
                result = self._result(window, st, kw)
            else:
                result = self._suffix_result(window, st, kw, q, field)
        except StoreError as ex:
            self.stale = True
            raise store_unavailable(self.spec.name, ex, window=window) from None
        self._fit(text)  # a cold key loaded: within the budget again (but for this key)
        return result

    def check_key(self, text: str, where: str = "key") -> None:
        """Refuse (INVALID_ARGUMENT, naming ``where``) a key a call names that no row could
        have made: empty, over MAX_KEY_BYTES, or not an int64's decimal text on a stream of
        INT64 keys (such a key would only ever be "not found")."""
        why = key_refusal(text, self.int_keys)
        if why is None:
            return
        if text:
            why = f"stream {self.spec.name!r}, key field {self.spec.key!r}: {why}, got {show(text)}"
        raise invalid(where, why)

    def _text(self, key: Any) -> str:
        """The text of ``key``; on a cluster, once this server may serve its group."""
        text = key if isinstance(key, str) and self.int_keys else key_text(key)
        self.check_key(text)
        if self.serve is not None:
            self.serve((key_group(text, self.n_groups),))
        return text

    @_locked
    def get_key(self, key: Any) -> KeyInfo:
        self.ensure_current()
        text = self._text(key)
        table = self._index_of(text)
        if table is None:
            raise key_not_found(self.spec.name, text)
        st = self._view(table, text)
        results = {}
        for name in self.windows:
            kw = st.windows.get(name) or KeyWindow()
            results[name] = self._result(name, st, kw)
        self._fit(text)
        return KeyInfo(text, table.group, st.rows, st.late, st.newest or 0, st.touched, results)

    @_locked
    def list_keys(self, prefix: str, limit: int, page_token: str) -> tuple[list[KeyInfo], str]:
        """Keys in order of their text, from after ``page_token``; and the next token."""
        self.ensure_current()
        limit = min(limit or 1000, 10_000)
        # keys after the token, from the prefix on: each group's sorted keys from there on,
        # merged, while they start with the prefix
        after = page_token >= prefix
        runs = []
        for t in self.groups.values():
            keys = t.sorted_keys()
            i = bisect.bisect_right(keys, page_token) if after else bisect.bisect_left(keys, prefix)
            runs.append(map(keys.__getitem__, range(i, len(keys))))
        names = list(
            itertools.islice(
                itertools.takewhile(lambda k: k.startswith(prefix), heapq.merge(*runs)),
                limit + 1,
            )
        )
        page = names[:limit]
        out = []
        slab = self.slab
        for k in page:
            table = self.groups[key_group(k, self.n_groups)]
            if slab is not None and slab.table_of(k) is table:
                newest, rows, late, touched, _b = slab.counters_of(k)
                out.append(KeyInfo(k, table.group, rows, late, newest, touched))
                continue
            st = self._state(table, k)
            out.append(KeyInfo(k, table.group, st.rows, st.late, st.newest or 0, st.touched))
            self._fit(k)  # a page of cold keys: loaded one at a time, within the budget
        nxt = page[-1] if len(names) > limit and page else ""
        return out, nxt

    @_locked
    def delete_key(self, key: Any) -> None:
        self.ensure_current()
        text = self._text(key)
        table = self._index_of(text)
        if table is None:
            raise key_not_found(self.spec.name, text)
        self._delete_keys({table: [text]}, expired=False)

    def _delete_keys(
        self, keys_of: Mapping[GroupTable, list[str]], *, expired: bool, replay: bool = False
    ) -> None:
        """Drop existing keys of some groups (DeleteKey, or key_ttl: ``expired``): an entry
        in each group's journal first (a durable stream; a ``replay`` of one: none), then
        from memory. Their full windows' Redis keys stay until the flush that drops the keys
        from Redis (``GroupTable.doomed``): until then a replay of the entries before the
        deletion finds them as they were."""
        trees = self._tree_ids(keys_of)  # before any change: it may fail
        if self.journal and not replay:
            entries: list[tuple[GroupTable, list[Any]]] = []
            for t, ks in keys_of.items():
                extra = {"delete": ks, "expired": expired}
                entries.append((t, [t.state.lsn + 1, "", 0, "NONE", [], {}, extra]))
            self._push(entries)
        for table, keys in keys_of.items():
            for k in keys:
                self._drop_key(table, k, trees.get(k, ()))
            gst = table.state
            gst.lsn += 1
            if expired:
                gst.expired += len(keys)
            table.state_changed = True

    def _tree_ids(self, keys_of: Mapping[GroupTable, list[str]]) -> dict[str, list[str]]:
        """The Redis ids of the full windows of the keys that are not objects in memory
        (packed; or only in Redis: read in one round trip)."""
        out: dict[str, list[str]] = {}
        need: list[tuple[GroupTable, list[str]]] = []
        try:
            for table, keys in keys_of.items():
                rest = []
                for k in keys:
                    if k in table.hot:
                        continue
                    if self.slab is not None and k in self.slab:
                        out[k] = []  # a key in the slab has no tree
                        continue
                    blob = table.packed.get(k)
                    if blob is None:
                        rest.append(k)
                    else:
                        out[k] = KeyState.tree_ids(blob)
                if rest:
                    need.append((table, rest))
            if need:
                pipe = self.client.pipeline(transaction=False)
                for table, keys in need:
                    pipe.hmget(table.keys.keys, keys)
                for (_table, keys), blobs in zip(need, pipe.execute(), strict=True):
                    for k, blob in zip(keys, blobs, strict=True):
                        out[k] = KeyState.tree_ids(blob) if blob is not None else []
        except (redis.RedisError, CorruptDataError) as ex:
            raise store_unavailable(self.spec.name, ex) from None
        return out

    def _drop_key(self, table: GroupTable, key: str, trees: Sequence[str] = ()) -> None:
        """Forget ``key`` (``trees``: its full windows' ids when it is not an object) and
        mark its full windows for the next flush to delete."""
        st = table.hot.pop(key, None)
        if st is not None:
            self.cache.add(-_size(st), hot=-1)
            _abandon_full(st)  # nothing more is written to them
            table.doomed.update(kw.wid for kw in st.windows.values() if kw.wid)
        elif self.slab is not None and self.slab.remove(key):
            self.cache.add(-self.slab.slot_bytes, objects=0)
        else:
            blob = table.packed.pop(key, None)
            if blob is not None:
                self.cache.add(-(len(blob) + _PACKED_BYTES), objects=0)
            table.doomed.update(trees)
        table.index.pop(key, None)
        table.key_moves += 1
        table.dirty.discard(key)
        table.deleted.add(key)
        self.where.pop(key, None)
        self.cache.add(0, keys=-1)

    # -- key_ttl
    @_locked
    def expire(self, now_ms: int | None = None) -> int:
        """Drop the keys that took no row for key_ttl: O(keys expired) (each group's index is
        in touch order)."""
        if not self.ttl_ms or self.gone:
            return 0
        self.ensure_current()  # a journaled deletion goes after every entry in Redis
        limit = (now_ms if now_ms is not None else int(time.time() * 1000)) - self.ttl_ms
        old_of: dict[GroupTable, list[str]] = {}
        for table in self.groups.values():
            old = []
            for k, t in table.index.items():
                if t > limit:
                    break
                old.append(k)
            if old:
                old_of[table] = old
        if old_of:
            self._delete_keys(old_of, expired=True)
        return sum(len(old) for old in old_of.values())

    # -- durability
    @_locked
    def flush(self, *, wait: bool = True, final: bool = False) -> None:
        """Write every group that changed since its last flush: its dirty keys, its deleted
        keys' removal with their full windows' Redis keys, and its state in one fenced script
        (after the full windows of the dirty keys checkpointed)."""
        if self.gone:
            return
        self.ensure_current()
        self._flush_tables(list(self.groups.values()), final=final)

    @_locked
    def flush_begin(self) -> GroupWrites | None:
        """The periodic flush's first half, under the calls' lock: every changed group's
        writes prepared (keys packed, full windows checkpointed, the state as it is now), the
        groups clean again. The second half, :meth:`GroupWrites.run`, writes them to Redis
        outside the lock (on the server's flush thread: appends go on meanwhile); until it
        is done the keys it writes stay in memory and the next flush, a group's move, a
        reload and a deletion wait for it. None when nothing changed.

        One flush takes whole groups, in turn from where the last one stopped, until they hold
        :data:`FLUSH_KEYS` dirty keys (or every changed group): its memory and the time it holds
        the lock stay bounded however many keys changed, and the next flush goes on with the
        others (a flush of a million keys at once held the lock for seconds and Redis for one
        long pipeline: the heartbeat waited behind it)."""
        if self.gone:
            return None
        self.ensure_current()
        self._settle()
        if self._retired:  # groups let go whose memory nobody reaped yet: a slice of it
            self._reap(20_000)
        jobs = self._prepare(self._flush_turn(), final=False)
        if not jobs:
            return None
        self._writing.clear()
        return GroupWrites(self, jobs)

    def flush_turns(self) -> int:
        """How many periodic flushes (:meth:`flush_begin`) the keys changed now call for
        (read without the lock: an estimate; 1 when the groups change meanwhile)."""
        try:
            dirty = sum(len(t.dirty) for t in list(self.groups.values()))
            slab = self.slab
            if slab is not None:
                dirty += int(np.count_nonzero(slab.dirty))
        except RuntimeError:  # pragma: no cover - a group opened or closed meanwhile
            return 1
        return max(1, -(-dirty // FLUSH_KEYS))

    def _flush_turn(self) -> list[GroupTable]:
        """The groups of the next periodic flush (see :meth:`flush_begin`)."""
        tables = [self.groups[g] for g in sorted(self.groups)]
        if not tables:
            return []
        start = self._flush_next % len(tables)
        out: list[GroupTable] = []
        keys = 0
        in_slab = self._slab_dirty()
        for i in range(len(tables)):
            table = tables[(start + i) % len(tables)]
            n = len(table.dirty) + (int(in_slab[table.group]) if in_slab is not None else 0)
            if not table.changed and not n:  # (as _prepare skips it)
                continue
            if out and keys + n > FLUSH_KEYS:
                self._flush_next = (start + i) % len(tables)
                return out
            out.append(table)
            keys += n
        self._flush_next = start
        return out

    def _settle(self) -> None:
        """Wait for the flush being written outside the lock (:meth:`flush_begin`); then
        (under the lock) its slab keys are no longer in flight, and those it did not write
        are marked changed again (the slots that still hold a key)."""
        if not self._writing.is_set():
            self._writing.wait()
        self._slab_ended()

    def _slab_ended(self) -> None:
        """Under the lock: the slab marks of the flushes that ended (``_slab_after``)."""
        q = self._slab_after
        while q:
            slab, slots, failed = q.popleft()
            if failed:
                slab.mark_held(slots)
            slab.inflight[slots] = False

    def _flush_tables(self, tables: list[GroupTable], *, final: bool) -> None:
        self._settle()
        try:
            self._write(self._prepare(tables, final=final))
        finally:
            self._slab_ended()

    def _prepare(self, tables: list[GroupTable], *, final: bool) -> list[_GroupWrite]:
        """Each changed group's flush as writes to make (the group clean again, its keys
        marked in flight); a failure marks back what it prepared."""
        ttl = self.ttl_ms > 0
        doomed = {wid for t in tables for wid in t.doomed}
        trees = self._tree_keys(doomed) if doomed else {}
        jobs: list[_GroupWrite] = []
        queued: list[Any] = []  # the full-form windows' checkpoints, all at once
        slab = self.slab
        columnar = self._slab_fields(tables)
        try:
            for table in tables:
                if (
                    not table.changed
                    and table.group not in columnar
                    and not (final and table.journaled)
                ):
                    continue
                # each dirty key's full windows checkpointed (queued) as its value is made
                full = functools.partial(self._checkpoint_full, table, queued=queued)
                fields = columnar.get(table.group)
                slots = None
                packed: tuple[Sequence[str], list[Any]] | None = None
                if fields is not None:
                    slots, chunks = fields
                    names: Sequence[str] = ()
                    if table.dirty or ttl:  # (other keys changed; touch times to write)
                        names = _pick(slab.keys, slots.tolist())  # type: ignore[union-attr,arg-type]
                    packed = (names, chunks)
                ops = table.flush_ops(
                    self.packers, ttl, full, packed, self._slab_strays, self.labels
                )
                for wid in table.doomed:
                    ops += [("UNLINK", k, ()) for k in trees.get(wid, ())]
                blob = table.state.to_json(clean=final)
                jobs.append(
                    _GroupWrite(table, ops, blob, self.journal, slab, slots, self._slab_after)
                )
                table.clean()
                table.journaled = False
            # every checkpoint in Redis before any group's keys name it (written after this)
            self._await_checkpoints(queued)
        except BaseException:
            with contextlib.suppress(StoreError):  # those that failed keep their lsn
                self._await_checkpoints(queued)
            for job in jobs:
                job.undo()
            if slab is not None:  # the slab's keys of the groups not reached: marked back
                reached = {job.table.group for job in jobs}
                for g, (slots, _) in columnar.items():
                    if g not in reached:
                        slab.mark_held(slots)
            raise
        return jobs

    def _write(self, jobs: list[_GroupWrite]) -> None:
        """Write prepared groups, one fenced script each; a group not written is marked
        back (its keys dirty again, as they are in memory, for the next flush). Fenced
        groups (a cluster's) go in one pipeline: one round trip for all of them; so do
        unfenced ones (a server on its own), each group's writes in a MULTI/EXEC of its own."""
        if len(jobs) > 1:
            if all(j.table.fence is not None and j.table.fence.active for j in jobs):
                self._write_pipelined(jobs)
                return
            if all(j.table.fence is None or not j.table.fence.active for j in jobs):
                self._write_transactions(jobs)
                return
        lost: GroupTable | None = None
        for i, job in enumerate(jobs):
            table = job.table
            try:
                if job.journal:
                    table.journal.commit_state(job.blob, job.lsn, job.ops)
                else:
                    table.journal.save_state(job.blob, job.ops)
            except FencedError:
                # nothing of the group was written (one script); on a cluster the group
                # moved on (the others still flush), else the stream is gone
                job.undo()
                if table.fence is None or self.serve is None:
                    for rest in jobs[i + 1 :]:
                        rest.undo()
                    raise
                lost = lost or table
                continue
            except BaseException:
                for rest in jobs[i:]:
                    rest.undo()
                raise
            job.done()
        if lost is not None:
            raise self._fenced_out(lost)

    def _write_transactions(self, jobs: list[_GroupWrite]) -> None:
        """:meth:`_write` of unfenced groups: each group's writes one ``MULTI``/``EXEC`` (as
        :meth:`StreamJournal.commit_state` and ``save_state`` write them), all of them in one
        round trip. A group whose transaction failed is marked back, as is every group when
        the round trip itself failed (none, some or all were applied: written again next
        time); the others are done. The first failure is raised as those methods raise it."""
        pipe = self._script_pipeline()  # (a plain pipeline, on the stream's node)
        ends: list[int] = []  # per job, the index of its last reply (its EXEC's)
        n = 0
        for job in jobs:
            j = job.table.journal
            ops = (
                j.commit_ops(job.blob, job.lsn, job.ops)
                if job.journal
                else j.state_ops(job.blob, job.ops)
            )
            several = len(ops) > 1
            if several:
                pipe.execute_command("MULTI")
            for cmd, key, args in ops:
                pipe.execute_command(cmd, key, *args)
            if several:
                pipe.execute_command("EXEC")
            n += len(ops) + 2 * several
            ends.append(n - 1)
        replies = _execute(pipe, jobs)
        failed: BaseException | None = None
        for job, end in zip(jobs, ends, strict=True):
            reply = replies[end]
            err = reply if isinstance(reply, Exception) else None
            if err is None and isinstance(reply, list):  # a command of the EXEC failed
                err = next((r for r in reply if isinstance(r, Exception)), None)
            j = job.table.journal
            if err is not None:
                job.undo()
                j.unsure()  # a command of a transaction failing leaves the others applied
                if failed is None:
                    doing = (
                        f"save the stream's state at lsn {job.lsn}"
                        if job.journal
                        else "save the stream's state"
                    )
                    failed = j.failed(err, doing)
                continue
            if job.journal:
                j.committed(job.lsn)
            job.done()
        if failed is not None:
            raise failed

    def _write_pipelined(self, jobs: list[_GroupWrite]) -> None:
        """:meth:`_write` of fenced groups, in runs of groups of about
        :data:`_ARGS_PER_TRANSACTION` arguments: each run's writes one optimistic
        transaction checking its groups' fences (:func:`fenced_together`: two round trips,
        no script; Redis runs an ``EXEC`` whole, so a run is kept short for the other calls
        waiting on it), or, when a fence does not hold its token (a group moved on), each
        group's writes one script (atomic, refused whole by a newer holder's token), the
        run's scripts in one round trip: the groups still held are written, the others
        lost. A run whose round trip failed, and every run after it, is marked back (none,
        some or all applied: written again next time)."""
        writes = []
        runs: list[list[int]] = [[]]
        size = 0
        for i, job in enumerate(jobs):
            j = job.table.journal
            if job.journal:
                ops = j.commit_ops(job.blob, job.lsn, job.ops)
            else:
                ops = j.state_ops(job.blob, job.ops)
            assert job.table.fence is not None
            writes.append((job.table.fence, ops))
            n = sum(arg_count(args) + 2 for _, _, args in ops)
            if runs[-1] and size + n > _ARGS_PER_TRANSACTION:
                runs.append([])
                size = 0
            runs[-1].append(i)
            size += n
        replies: list[Any] = []
        error: BaseException | None = None
        for run in runs:
            got: list[Any] = [_UNSENT] * len(run)
            if error is None:
                try:
                    pipe = self._script_pipeline()
                    both = fenced_together(pipe, [writes[i] for i in run])
                    if both is None:
                        for i in run:
                            fenced(self.client, *writes[i], pipe=pipe)
                        both = pipe.execute(raise_on_error=False)
                    got = both
                except (redis.RedisError, StoreError) as ex:
                    error = ex
            replies.extend(got)
        lost: GroupTable | None = None
        failed: BaseException | None = None
        for job, reply in zip(jobs, replies, strict=True):
            table = job.table
            if reply is _UNSENT or isinstance(reply, Exception):
                job.undo()
                table.journal.unsure()
                if not isinstance(reply, Exception):
                    continue
                err = check_reply(reply, table.fence)
                if isinstance(err, FencedError):  # the group moved on: the others still flush
                    lost = lost or table
                else:
                    failed = failed or table.journal.failed(err, "save a key group's state")
                continue
            if job.journal:
                table.journal.committed(job.lsn)
            job.done()
        if error is not None:
            raise jobs[0].table.journal.failed(error, "save key groups' states") from error
        if failed is not None:
            raise failed
        if lost is not None:
            raise self._fenced_out(lost)

    def _tree_keys(self, wids: set[str] | None) -> dict[str, list[str]]:
        """The Redis keys of the full key windows ``wids`` (None: every one of the stream),
        by id: one SCAN (the ids of the keys' windows are ``k:<hex>``)."""
        base = key_window_base(self.prefix, self.spec.name)
        pattern = "".join("\\" + c if c in "*?[]\\" else c for c in base) + "*"
        out: dict[str, list[str]] = {}
        try:
            for raw in self.client.scan_iter(match=pattern, count=1000):
                key = raw.decode() if isinstance(raw, bytes) else str(raw)
                if not key.startswith(base):  # pragma: no cover - the pattern says so
                    continue
                wid = "k:" + key[len(base) :].split(":", 1)[0]
                if wids is None or wid in wids:
                    out.setdefault(wid, []).append(key)
        except redis.RedisError as ex:
            msg = (
                f"stream {self.spec.name!r}: list the Redis keys of deleted keys' windows: "
                f"Redis is unavailable ({type(ex).__name__})"
            )
            raise StoreUnavailableError(msg) from ex
        return out

    @_locked
    def load(self) -> None:
        """(Re)open every group from Redis: its state, its keys' names (their states load on
        first touch), then its journal's entries after the state (durable windows)."""
        self._forget_tables(list(self.groups.values()))
        self._load_tables(list(self.groups.values()))

    def _load_tables(self, tables: list[GroupTable]) -> None:
        self._settle()  # Redis as the last flush leaves it
        try:
            pipe = self.client.pipeline(transaction=False)
            for table in tables:
                pipe.get(table.keys.state)
                pipe.hkeys(table.keys.keys)
                if self.ttl_ms:
                    pipe.hgetall(table.keys.touch)
            replies = pipe.execute()
            per = 3 if self.ttl_ms else 2
            now = int(time.time() * 1000)
            for i, table in enumerate(tables):
                state, names = replies[i * per], replies[i * per + 1]
                table.state = GroupState.from_json(state) if state else GroupState()
                touch = replies[i * per + 2] if self.ttl_ms else {}
                order = sorted(
                    ((int(touch.get(n, now)), n.decode()) for n in names), key=lambda p: p[0]
                )
                table.index = {n: t for t, n in order}
                for n in table.index:
                    self.where[n] = table
                self.cache.add(0, keys=len(order))
            self.batches = sum(t.state.batches for t in self.groups.values())
            if self.journal:
                for table in tables:
                    entries = table.journal.entries()
                    table.journal.first = entries[0].lsn if entries else table.state.lsn + 1
                    for e in entries:
                        if e.lsn > table.state.lsn:
                            self._replay(table, e)
                    table.journaled = bool(entries)
        except (redis.RedisError, StoreError) as ex:
            self.stale = True
            raise store_unavailable(self.spec.name, ex) from None
        self.stale = False

    def _replay(self, table: GroupTable, e: JournalEntry) -> None:
        """Apply a journaled entry of ``table`` again: a deletion of keys, or a batch (the
        same checks against the same state give the same rows, late ones the same; a full
        window that holds it already skips it)."""
        if e.lsn != table.state.lsn + 1:
            msg = (
                f"stream {self.spec.name!r}: group {table.group}'s journal skips from lsn "
                f"{table.state.lsn} to {e.lsn}"
            )
            raise CorruptDataError(msg)
        gone = e.extra.get("delete")
        if gone is not None:
            keys = [k for k in map(str, gone) if self.where.get(k) is table]
            self._delete_keys({table: keys}, expired=bool(e.extra.get("expired")), replay=True)
            return
        _n, cols = self.decode(e.columns)
        plan = self._plan(cols, "", 0, replay=True)
        if set(plan.named) - {table.group}:
            msg = f"stream {self.spec.name!r}: group {table.group}'s entry {e.lsn} holds other groups' keys"
            raise CorruptDataError(msg)
        plan.counter = table.group if e.extra.get("batch") else None
        only = None
        had = e.extra.get("windows")
        if had is not None:  # (entries of earlier releases name none: every window)
            had = set(map(str, had))
            only = {n for n, label in self.labels.items() if label in had}
        self._apply(plan, cols, e.producer_id, e.sequence, "NONE", (), replay=True, only=only)

    def _forget_memory(self) -> None:
        self._reap(None)
        self._forget_tables(list(self.groups.values()))

    def _forget_tables(self, tables: list[GroupTable]) -> None:
        self._settle()  # a flush being written keeps its keys until it is
        self._slab_forget(tables)
        for table in tables:
            for k in table.index:
                if self.where.get(k) is table:
                    del self.where[k]
            for st in table.hot.values():
                _abandon_full(st)
                self.cache.add(-_size(st), hot=-1)
            self.cache.add(0, keys=-len(table.index))
            self.cache.add(-sum(len(b) + _PACKED_BYTES for b in table.packed.values()), objects=0)
            table.packed.clear()
            table.hot.clear()
            table.index.clear()
            table.clean()
        gone = {id(t) for t in tables}
        self.batches = sum(t.state.batches for t in self.groups.values() if id(t) not in gone)

    def close(self, *, flush: bool) -> None:
        """Let the stream go: a last flush (``flush``), then its memory."""
        with self.lock:
            if flush and not self.gone:
                try:
                    self.flush(final=True)
                except (StoreError, ServiceError):
                    log.warning("last flush of keyed stream %s failed", self.spec.name)
            for table in self.groups.values():
                for st in table.hot.values():
                    if flush:
                        _close_full([st])
                    else:
                        _abandon_full(st)
            self._forget_memory()
            self.gone = True

    def delete_data(self) -> None:
        """Delete every group's keys and every full key window's data (a deleted stream). On
        a cluster every group's fence moves on too: the servers holding them write nothing
        more, and let them go."""
        had = any(t.index or t.doomed for t in self.groups.values())
        self._forget_memory()  # the full windows' stores dropped unwritten
        every = [GroupKeys.of(self.prefix, self.spec.name, g) for g in range(self.n_groups)]
        clustered = self.serve is not None
        if clustered and not had:  # groups held elsewhere: any key there?
            try:
                pipe = self.client.pipeline(transaction=False)
                for ks in every:
                    pipe.exists(ks.keys, ks.state)
                had = any(int(n) for n in pipe.execute())
            except redis.RedisError as ex:
                raise store_unavailable(self.spec.name, ex) from None
        if had:  # a stream just made has none (no SCAN)
            gone = [k for keys in self._tree_keys(None).values() for k in keys]
            for i in range(0, len(gone), 500):
                fenced(self.client, self.fence, [("UNLINK", k, ()) for k in gone[i : i + 500]])
        ops: list[Op] = []
        for ks in every:
            ops += [
                ("DEL", ks.keys, ()),
                ("DEL", ks.touch, ()),
                ("DEL", ks.state, ()),
                ("DEL", ks.journal, ()),
            ]
            if clustered:
                ops.append(("INCR", ks.fence, ()))
        if clustered:  # the holders find their groups gone at their next renewal
            holders, generation = group_lease_keys(self.prefix, self.spec.name)
            ops += [("DEL", holders, ()), ("INCR", generation, ())]
        # a few fenced scripts in one round trip (every key is in the stream's slot)
        pipe = self._script_pipeline()
        for i in range(0, len(ops), _OPS_PER_SCRIPT):
            fenced(self.client, self.fence, ops[i : i + _OPS_PER_SCRIPT], pipe=pipe)
        try:
            replies = pipe.execute(raise_on_error=False)
        except redis.RedisError as ex:
            raise store_unavailable(self.spec.name, ex) from None
        for reply in replies:
            if isinstance(reply, Exception):
                err = check_reply(reply, self.fence)
                if isinstance(err, FencedError):
                    raise fenced_out(self.spec.name)
                raise store_unavailable(self.spec.name, err)
        if clustered:
            self.groups.clear()

    def stats(self) -> dict[str, int]:
        hot = sum(len(t.hot) for t in self.groups.values())
        dirty = sum(len(t.dirty) for t in self.groups.values())
        if self.slab is not None:
            dirty += int(np.count_nonzero(self.slab.dirty))
        return {
            "keys": self.key_count,
            "slab_keys": len(self.slab) if self.slab is not None else 0,
            "hot_keys": hot,
            "dirty_keys": dirty,
            "groups": len(self.groups),
            "expired": sum(t.state.expired for t in self.groups.values()),
        }


class _StreamKeysStore:
    """What the registry asks of a stream's state store on creation (delete leftovers)."""

    def __init__(self, s: KeyedStream) -> None:
        self.s = s

    def delete(self) -> None:
        self.s.delete_data()


def _run_starts(a: np.ndarray) -> np.ndarray:
    """Where each run of equal values of ``a`` (not empty) starts: 0 first."""
    return np.flatnonzero(np.concatenate(([True], a[1:] != a[:-1])))


def _pick(seq: Sequence[T], at: list[int]) -> Sequence[T]:
    """``seq``'s items at ``at`` (a tuple made in C: no Python loop per item)."""
    if len(at) > 1:
        return operator.itemgetter(*at)(seq)  # type: ignore[no-any-return]
    return tuple(seq[i] for i in at)


def _size(st: KeyState) -> int:
    n = _KEY_BYTES
    for kw in st.windows.values():
        n += _window_bytes(kw)
    return n


def _window_bytes(kw: KeyWindow) -> int:
    """What the key cache counts for one window of a key: its compact items, or a tree."""
    return _FULL_BYTES if kw.engine is not None else _ITEM_BYTES * len(kw.items or ())


def _close_full(states: Sequence[KeyState], *, checkpoint: bool = True) -> None:
    """Close the full-form windows of ``states``: a last checkpoint of each (``checkpoint``;
    False: a flush just wrote every changed one), all queued at once and then waited for
    (not one round trip after the other: a member handing over groups of many large keys
    would outlive its lease), then their stores (their writer threads end by themselves)."""
    engines = [kw.engine for st in states for kw in st.windows.values() if kw.engine is not None]
    queued: list[tuple[Any, Any]] = []
    for st in states if checkpoint else ():
        for kw in st.windows.values():
            if kw.engine is None or kw.engine.stale:
                # (a tree whose store failed is not checkpointed: its last good checkpoint
                # and the journal hold it; see KeyedStream._checkpoint_full)
                continue
            try:
                # its last checkpoint still says which journal entry the tree holds (the
                # engine's own close() writes one without: a replay would apply them again)
                queued.append((kw.engine, kw.engine.flush(wait=False, meta={"lsn": kw.lsn})))
            except Exception:  # pragma: no cover - logged; its data is in Redis
                log.exception("closing a key's window")
    for engine, fut in queued:
        try:
            engine.wait_flushed(fut)
        except Exception:  # pragma: no cover - logged; its data is in Redis
            log.exception("closing a key's window")
    for engine in engines:
        try:
            engine.store.close(wait=False)  # its writes are done (waited for above)
        except Exception:  # pragma: no cover - logged
            log.exception("closing a key's window")


def _abandon_full(st: KeyState) -> None:
    for kw in st.windows.values():
        store = getattr(kw.engine, "store", None)
        if store is not None and hasattr(store, "abandon"):
            store.abandon()


def _drop_engine(engine: Any) -> None:
    store = getattr(engine, "store", None)
    if store is None:
        return
    try:
        store.delete_window()
        store.close()
    except StoreError:  # pragma: no cover - logged
        log.warning("could not delete a key window's data")


class _GroupWrite:
    """One group's prepared flush (see :meth:`KeyedStream.flush_begin`): its writes, its
    state's blob at its lsn, and what it cleared, to mark back when the write fails (the
    slab's keys by their slots: ``slots`` of ``slab``, their marks changed under the stream's
    lock, by :meth:`KeyedStream._settle`: its end may run on the flush thread)."""

    __slots__ = (
        "after",
        "blob",
        "deleted",
        "dirty",
        "doomed",
        "journal",
        "lsn",
        "ops",
        "slab",
        "slots",
        "table",
    )

    def __init__(
        self,
        table: GroupTable,
        ops: list[Op],
        blob: str,
        journal: bool,
        slab: KeySlab | None = None,
        slots: np.ndarray | None = None,
        after: collections.deque[Any] | None = None,
    ) -> None:
        self.table = table
        self.ops = ops
        self.blob = blob
        self.lsn = table.state.lsn
        self.journal = journal
        self.dirty = set(table.dirty)
        self.deleted = set(table.deleted)
        self.doomed = set(table.doomed)
        self.slab = slab
        self.slots = slots
        self.after = after  # where its end's slab marks go (KeyedStream._slab_after)
        table.inflight = self.dirty  # in memory until written: eviction leaves them
        if slab is not None and slots is not None:
            slab.inflight[slots] = True

    def undo(self) -> None:
        """Not written: the group changed again, as it was (a key dropped or made since
        keeps what it is now)."""
        t = self.table
        index = t.index
        t.dirty.update(k for k in self.dirty if k in index)
        t.deleted.update(k for k in self.deleted if k not in index)
        t.doomed.update(self.doomed)
        t.state_changed = True
        if self.journal:
            t.journaled = True
        self._end(failed=True)

    def done(self) -> None:
        self._end(failed=False)

    def _end(self, *, failed: bool) -> None:
        if self.table.inflight is self.dirty:
            self.table.inflight = _NOTHING
        if self.slab is not None and self.slots is not None and self.after is not None:
            self.after.append((self.slab, self.slots, failed))  # (KeyedStream._settle)
            self.after = None


_NOTHING: frozenset[str] = frozenset()


def _execute(pipe: Any, jobs: list[_GroupWrite]) -> list[Any]:
    """Send the groups' writes queued in ``pipe`` in one round trip; when the round trip
    fails, none, some or all were applied: every group is marked back (written again next
    time, its journal's start read again first) and the failure raised."""
    try:
        replies: list[Any] = pipe.execute(raise_on_error=False)
    except (redis.RedisError, StoreError) as ex:
        for job in jobs:
            job.undo()
            job.table.journal.unsure()
        raise jobs[0].table.journal.failed(ex, "save key groups' states") from ex
    return replies


class GroupWrites:
    """A periodic flush's writes prepared under the stream's lock, to run outside it, once:
    :meth:`run` writes them (raising what :meth:`KeyedStream.flush` raises), :meth:`abandon`
    marks them back unwritten. Either lets the stream's next flush go."""

    def __init__(self, stream: KeyedStream, jobs: list[_GroupWrite]) -> None:
        self.stream = stream
        self.jobs = jobs
        self._over = False

    def run(self) -> None:
        if self._over:
            return
        self._over = True
        try:
            self.stream._write(self.jobs)
        finally:
            self.stream._writing.set()

    def abandon(self) -> None:
        if self._over:
            return
        self._over = True
        for job in self.jobs:
            job.undo()
        self.stream._writing.set()
