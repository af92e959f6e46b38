"""A keyed stream's keys, by key group (:class:`GroupTable`), and one key's state
(:class:`KeyState`): its counters and its instance of every window.

A group is the unit of storage, journaling and flushing (never a key). In Redis (keys.py,
:class:`~mtawindows.server.storage.keys.GroupKeys`, under the stream's hash tag and fence):

    g:<g>:keys     hash    key -> msgpack [newest, rows, late, touched_ms, batches, windows]
                           windows: {name: ["i", items] | ["c", items packed by the
                           monoid's codec] | ["f", lsn, tree id]}
    g:<g>:touch    hash    key -> touched_ms (streams with key_ttl, to expire keys after a restart)
    g:<g>:state    string  JSON: lsn, producers' last sequences, counters
    g:<g>:journal  list    entries of the group's batches and key deletions when a window is
                           durable

Writes: an append journals the group's rows (durable windows) before any key changes, a
DeleteKey or a key_ttl expiry the group's deleted keys; a flush writes the group's **dirty**
keys (and drops deleted ones, with the Redis keys of their full windows) with its state in
**one** fenced script, after the full-form windows of the dirty keys checkpointed, so the
hash, the full windows and the state are always one consistent cut at the state's lsn, and
recovery replays the journal after it. A deleted key's full windows stay in Redis until that
flush: a replay of the entries before its deletion still finds them. A group nobody appended
to since its last flush costs nothing.

In memory a group holds every key's name (``index``, in least-recently-touched order, for
key_ttl) and the states of the keys the cache holds (``hot``); the others load from the hash
on first touch.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

from ...engine.ledger import Ledger
from ...storage.codecs import packb, packb_each, unpackb
from ...storage.fencing import Fence, Op
from ...storage.journal import StreamJournal
from ...storage.keys import GroupKeys
from ...storage.protocol import CorruptDataError
from ...storage.resp import Packed
from .window import KeyWindow

__all__ = ["FIELDS_PER_OP", "INLINE", "GroupState", "GroupTable", "KeyState"]

# a window whose items msgpack packs as they are (the engine's own types): written inline in
# the key's value (``["i", items]``), not packed apart by a codec (``["c", bytes]``)
INLINE: Any = object()

# Lua's unpack() takes at most ~8000 values: a flush's HSET goes in chunks of this many fields
FIELDS_PER_OP = 2000


class KeyState:
    """One key: its counters and its instance of each window (by window name; a window
    created after the key's last row holds nothing for it yet)."""

    __slots__ = ("batches", "key", "late", "nbytes", "newest", "rows", "touched", "windows")

    def __init__(self, key: str) -> None:
        self.key = key
        self.newest: int | None = None
        self.rows = 0
        self.late = 0
        self.touched = 0  # ms, when it last took a row (the server's clock)
        self.batches = 0  # batches that changed it: its results' sequence
        self.windows: dict[str, KeyWindow] = {}
        self.nbytes = 0  # what the key cache counts for it

    @property
    def full(self) -> bool:
        """Whether a window of it is a full MTA (a tree with its own Redis keys)."""
        return any(kw.engine is not None for kw in self.windows.values())

    def pack(self, packers: dict[str, Any], labels: Mapping[str, str] | None = None) -> bytes:
        """Its one Redis value (``packers``: each window's item codec, or :data:`INLINE` for
        items msgpack takes as they are: written inside the value, one pack for the key;
        ``labels``: each window's label in it, see :meth:`record`)."""
        return packb(self.record(packers, labels=labels))

    def record(
        self, packers: dict[str, Any], full: Any = None, labels: Mapping[str, str] | None = None
    ) -> list[Any]:
        """What :meth:`pack` packs. ``full(state)``: called once before the first full-form
        window is read, when the key has one (the flush checkpoints its trees there: the
        value names the lsn each checkpoint took). Each window is stored under its label
        (``labels``: its definition's id, so that a window deleted and made again under its
        name never reads the old one's entry), else its name."""
        ws: dict[str, Any] = {}
        for name, kw in self.windows.items():
            hop = kw.hop
            if kw.engine is not None:
                if full is not None:
                    full(self)
                    full = None
                w = ["f", kw.lsn, kw.wid]
            elif kw.items or hop is not None or kw.hop_state is not None:
                packer = packers[name]
                w = ["i", kw.items] if packer is INLINE else ["c", packer(kw.items)]
            else:
                continue
            if hop is not None or kw.hop_state is not None:  # a hopping window's hopper
                w += [None] * (3 - len(w)) + [hop.state() if hop is not None else kw.hop_state]
            ws[labels.get(name, name) if labels else name] = w
        return [self.newest, self.rows, self.late, self.touched, self.batches, ws]

    @classmethod
    def unpack(
        cls,
        key: str,
        blob: bytes,
        unpackers: dict[str, Any],
        from_rows: Any = None,
        names: Mapping[str, str] | None = None,
    ) -> KeyState:
        """A state from its Redis value; a window unknown to ``unpackers`` (deleted) is
        skipped, as is an entry whose label (``names``: label -> the window's name) is none
        of the windows' now (a window of that name deleted since: its entry is not the new
        one's); an entry under a bare name (written before labels) is that window's. A
        full-form window comes back as a :class:`KeyWindow` with ``engine`` None and
        ``lsn`` and ``wid`` set and no engine yet: the stream opens its tree. A key written
        from a slab (slab.py: ``["r", k]`` windows and its rows last) gets each window's
        items from ``from_rows(window, k, rows)``."""
        try:
            newest, rows, late, touched, batches, ws, *extra = unpackb(blob)
        except (ValueError, TypeError) as ex:
            msg = f"key {key!r}: its stored state is not valid ({ex})"
            raise CorruptDataError(msg) from ex
        st = cls(key)
        st.newest, st.rows, st.late, st.touched, st.batches = newest, rows, late, touched, batches
        for label, (form, data, *rest) in dict(ws).items():
            name = names.get(label, label) if names is not None else label
            unpack = unpackers.get(name)
            if unpack is None:
                continue
            if form == "f":
                kw = KeyWindow()
                kw.lsn = int(data)
                kw.wid = str(rest[0])
            elif form == "i":
                kw = KeyWindow(list(data))
            elif form == "r":
                if from_rows is None or not extra:
                    msg = f"key {key!r}: its stored window {name!r} names rows it does not hold"
                    raise CorruptDataError(msg)
                kw = KeyWindow(from_rows(name, int(data), extra[0]))
            else:
                kw = KeyWindow(unpack(data))
            if len(rest) >= 2:  # a hopping window's hopper: [form, data, wid or None, hop]
                kw.hop_state = rest[1]
            st.windows[name] = kw
        return st

    @staticmethod
    def tree_ids(blob: bytes) -> list[str]:
        """The Redis ids of the full-form windows in a key's stored value (every window's,
        also one deleted since)."""
        try:
            ws = unpackb(blob)[5]
            return [str(w[2]) for w in dict(ws).values() if w[0] == "f"]
        except (ValueError, TypeError, IndexError) as ex:
            msg = f"a key's stored state is not valid ({ex})"
            raise CorruptDataError(msg) from ex


class GroupState:
    """A group's state beside its keys: the lsn of its last entry (a batch or a deletion), its
    producers' last sequences (idempotency is per group: a batch split over groups is applied
    exactly once in each; every group a batch names records it, also one whose rows were all
    late), and its counters: ``rows`` applied here, ``late`` rows of its keys dropped,
    ``batches`` and ``duplicates`` counted here (a batch counts in the group of its first
    row's key, once: the stream's counts are the groups' sums), and ``expired`` keys."""

    __slots__ = ("batches", "duplicates", "expired", "late", "lsn", "newest", "producers", "rows")

    def __init__(self) -> None:
        self.lsn = 0
        self.newest = 0
        self.producers = Ledger()
        self.rows = 0
        self.late = 0
        self.batches = 0
        self.duplicates = 0
        self.expired = 0

    def to_json(self, *, clean: bool = False) -> str:
        return json.dumps(
            {
                "lsn": self.lsn,
                "producers": self.producers.snapshot(),
                "rows": self.rows,
                "late": self.late,
                "batches": self.batches,
                "duplicates": self.duplicates,
                "expired": self.expired,
                "newest": self.newest,
                "clean": clean,
            }
        )

    @classmethod
    def from_json(cls, blob: bytes | str) -> GroupState:
        d = json.loads(blob)
        st = cls()
        st.lsn = int(d["lsn"])
        st.producers = Ledger(d.get("producers"))
        for name in ("rows", "late", "batches", "duplicates", "expired", "newest"):
            setattr(st, name, int(d.get(name, 0)))
        return st


class GroupTable:
    """One key group of a keyed stream held by this server (see the module docstring)."""

    def __init__(self, group: int, keys: GroupKeys, journal: StreamJournal) -> None:
        self.group = group
        self.keys = keys
        self.journal = journal  # its state and (durable windows) its journal
        self.fence: Fence | None = None  # a cluster's: its writes' (journal, trees, flush)
        self.state = GroupState()
        # every key of the group -> touched_ms, least recently touched first (key_ttl)
        self.index: dict[str, int] = {}
        # the key cache: states as objects (the recently touched, in touch order), and the
        # others in their packed form (their Redis value), until they leave memory too
        self.hot: dict[str, KeyState] = {}
        self.packed: dict[str, bytes] = {}
        self.dirty: set[str] = set()  # changed since the last flush (hot or packed)
        self.deleted: set[str] = set()  # dropped since the last flush
        # the Redis ids of the full windows of keys dropped since the last flush: their keys
        # go in the flush that drops the keys (before it, a replay may still need them)
        self.doomed: set[str] = set()
        self.closed = False  # let go: out of its stream's groups, its memory being reaped
        self.state_changed = False  # the state changed besides its keys (counters, producers)
        self.journaled = False  # entries after state.lsn may exist (a durable window)
        self.key_moves = 0  # keys added or dropped (a change of the key set: sorted_keys)
        # the keys of a flush being written outside the stream's lock (they stay in memory)
        self.inflight: AbstractSet[str] = frozenset()
        self._sorted: tuple[tuple[int, int, int], list[str]] | None = None

    def sorted_keys(self) -> list[str]:
        """Every key of the group in text order (ListKeys pages: sorted once per change of
        the key set, not per page)."""
        stamp = (id(self.index), len(self.index), self.key_moves)
        if self._sorted is None or self._sorted[0] != stamp:
            self._sorted = (stamp, sorted(self.index))
        return self._sorted[1]

    def touch(self, key: str, now_ms: int) -> None:
        index = self.index
        if key in index:
            del index[key]  # to the end: the index stays in touch order
        index[key] = now_ms

    def flush_ops(
        self,
        packers: dict[str, Any],
        ttl: bool,
        full: Any = None,
        columnar: tuple[Sequence[str], list[Packed]] | None = None,
        strays: Callable[[list[str]], list[tuple[str, bytes]]] | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> list[Op]:
        """The writes of a flush: the dirty keys' values (and touch times), the deleted keys
        dropped (``full``: as :meth:`KeyState.record`'s, for each key with a full-form
        window; ``columnar``: keys of the stream's slab in this group and their field-value
        pairs, packed together (the names may be left out when no key is dirty here and
        ``ttl`` is off);
        ``strays``: the names and values of dirty keys in neither form here nor in
        ``columnar``, from the slab). The caller clears the dirty marks (and
        restores them when the write fails)."""
        fields: list[Any] = []
        dirty: AbstractSet[str] = self.dirty
        ops: list[Op] = []
        if columnar is not None:
            keys, chunks = columnar
            ops += [("HSET", self.keys.keys, (chunk,)) for chunk in chunks]
            if keys and dirty:
                dirty = self.dirty.difference(keys)
        hot = self.hot
        packed = self.packed
        names: list[str] = []  # the keys held as objects, packed together below
        records: list[Any] = []
        elsewhere: list[str] = []
        for key in dirty:
            st = hot.get(key)
            if st is not None:
                names.append(key)
                records.append(st.record(packers, full, labels))
            else:
                blob = packed.get(key)
                if blob is None:  # in the slab (its dirty mark missed)
                    elsewhere.append(key)
                    continue
                fields += (key, blob)
        for key, blob in zip(names, packb_each(records), strict=True):
            fields += (key, blob)
        if elsewhere and strays is not None:
            for key, blob in strays(elsewhere):
                fields += (key, blob)
        touches: list[Any] = []
        if ttl:  # (the slab's keys by name: the caller names them all when the TTL is on)
            index = self.index
            changed = self.dirty if columnar is None else self.dirty.union(columnar[0])
            for key in changed:
                touches += (key, index.get(key, 0))
        ops += _chunked("HSET", self.keys.keys, fields)
        ops += _chunked("HSET", self.keys.touch, touches)
        if self.deleted:
            gone = sorted(self.deleted)
            ops += _chunked("HDEL", self.keys.keys, gone, 1)
            ops += _chunked("HDEL", self.keys.touch, gone, 1)
        return ops

    def clean(self) -> None:
        self.dirty.clear()
        self.deleted.clear()
        self.doomed.clear()
        self.state_changed = False

    @property
    def changed(self) -> bool:
        return bool(self.dirty or self.deleted or self.doomed or self.state_changed)


def _chunked(cmd: str, key: str, args: list[Any], per: int = 2) -> Iterable[Op]:
    step = FIELDS_PER_OP * per
    for i in range(0, len(args), step):
        yield (cmd, key, args[i : i + step])
