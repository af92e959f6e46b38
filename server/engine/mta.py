"""Monoid Tree Aggregator windows: Log MTA and Amortized MTA (paper sections 4.1 and 4.2).

Fact cards (same shape as IBM's sliding-window-aggregators README):

==================  ===========================  ==================================
                    LogMTA                       AmortizedMTA
==================  ===========================  ==================================
ordering            FIFO (in order)              FIFO (in order)
operator            monoid (associative +        monoid (associative + identity);
requirements        identity); no inverse,       no inverse, no commutativity
                    no commutativity
insert              O(log n)                     O(1) amortized, O(log n) worst
single eviction     O(log n)                     O(1) amortized, O(log n) worst
bulk eviction       O(log n) for any count       O(log n) for any count
query               O(1)                         O(1)
space               O(n), O(log n) local with    O(n), O(log n) local with a store
                    a store
first appeared      Villalba, Berral, Carrera:   same paper, section 4.2
                    "Constant-Time Sliding
                    Window Framework with
                    Reduced Memory Footprint
                    and Efficient Bulk
                    Evictions", TPDS 2019, 4.1
==================  ===========================  ==================================

Invariants (paper Invariants 1-3), drawn for the AMTA forest of the paper's Fig. 4 after a
few evictions (``∅`` is the engine's :data:`~mtawindows.server.store.EMPTY`, never the
monoid identity)::

    level 2   [<∅, 8>]                      <- top: exactly one pair, root of the leftmost tree
    level 1   [<∅, 3>, <3, 5>]  [<4, ∅>]    <- head may be <∅,*>; the tail is its own tree (AMTA)
    level 0   [<∅, 2>, <1, 2>, <1, 2>, <2, 2>]  [<1, 3>]
               head                               tail
    stack     [..., 5, 3]   result pair R = <R0, R1>: R0 = leftmost tree, R1 = the other trees

1. Only the head pair of a level may be ``<∅, *>`` and only the tail may be ``<*, ∅>``.
2. No pair is ``<∅, ∅>``.
3. (AMTA) The tail pair of every level is the root of its own tree; only sealed pairs have a
   parent. (LMTA) Every pair has a parent except the single pair of the top level.

Positions are absolute: leaf ``i`` is slot ``i & 1`` of pair ``i >> 1`` on level 0, and pair
``p`` of level ``l`` has its parent in slot ``p & 1`` of pair ``p >> 1`` on level ``l + 1``.
The element ``m`` of level ``l`` covers leaves ``[m << l, (m + 1) << l)``. Keys in a remote
store therefore never move, and bulk eviction is a pure function of the new first leaf.

Deviations from the paper, and why:

* **Search, then commit.** Algorithm 2 interleaves the policy search with the removals. Here
  enforcement first *plans* (calls the policy and the monoid, reads pairs, changes nothing),
  then *commits* the eviction of the ``k`` leaves it found. Same O(log n) bound, and a policy
  or monoid that raises leaves the window exactly as it was. ``push``/``extend`` undo their
  inserts if the plan raises.
* **Whole-window eviction.** Algorithm 2 never empties a window; a policy may (``CountPolicy(0)``,
  a bounded sum with one huge item), so the plan tests the whole window when every smaller
  prefix may leave.
* **LMTA O(1) plans for k <= 1.** LMTA first tests the oldest leaf alone (when it may not
  leave, no prefix may, by prefix-monotonicity) and then the two oldest: the O(log n)
  descent only runs when at least two leaves leave.
* **AMTA R0 on tree removal.** When single evictions remove the whole leftmost tree, the
  paper's Algorithm 6 recomputes R1 only; R0 and the stack must then describe the next tree,
  so both halves of R are recomputed.
* **One recomputation per operation** (section 5.2): an insert that merges trees and an
  eviction that removes the leftmost tree only *request* it; the operation runs it once at its
  end. Meanwhile the plan takes the total by associativity (previous total + new items), the
  bulk search reads the leftmost tree's aggregate from the refreshed leftmost branch, and
  evictions use the structural (bulk) removal.
* **AMTA bulk eviction** (section 4.2.4) tests the forest's trees whole, from the oldest, and
  descends (Algorithm 2) into the first one that may not leave, after refreshing the stale
  values of the leftmost branch. The switch happens after ``bulk_factor * log2(n)`` leaves
  passed the policy one by one.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar

from ..sentinels import EMPTY, UNSET
from ..storage.levels import MemoryLevel, TieredLevel
from ..storage.protocol import PairStore, StoreError, WouldBlock
from .monoids import Monoid
from .policies import bind_policy

__all__ = ["AmortizedMTA", "LogMTA", "WindowCorruptedError"]


class WindowCorruptedError(RuntimeError):
    """The window's structure could not be completed because the monoid broke its contract
    (``combine`` raised on aggregates it had produced itself). The window refuses further use."""


class _MTAWindow:
    """What Log MTA and Amortized MTA share: level queues, absolute positions, the policy
    search descent, bulk removal by leaf position, undo of inserts, statistics."""

    algorithm: ClassVar[str] = ""
    _total: Any  # aggregate of the window (lifted), UNSET when unknown; set by _reset_results
    __slots__ = (
        "__weakref__",
        "_broken",
        "_bulk_evicted",
        "_combine",
        "_first",
        "_grave",
        "_hook",
        "_identity",
        "_levels",
        "_lift",
        "_lower",
        "_next",
        "_origin",
        "_policy",
        "_producers",
        "_stale",
        "_total",
        "bulk_evictions",
        "debug",
        "monoid",
        "policy",
        "recomputes",
        "store",
    )

    def __init__(
        self,
        monoid: Monoid,
        policy: Any,
        *,
        store: PairStore | None = None,
        debug: bool = False,
    ) -> None:
        for attr in ("identity", "lift", "combine", "lower"):
            if not hasattr(monoid, attr):
                msg = (
                    f"{type(self).__name__}: monoid must have identity, lift, combine and lower; "
                    f"{type(monoid).__name__} has no {attr!r}"
                )
                raise TypeError(msg)
        self.monoid = monoid
        self.policy = policy
        self.store = store
        self.debug = debug
        self._policy: Callable[[Any, Any], bool] = bind_policy(policy, monoid)
        self._lift = monoid.lift
        self._combine = monoid.combine
        self._lower = monoid.lower
        self._identity = monoid.identity
        self._levels: list[Any] = []
        self._grave: deque[list[Any]] = deque()  # evicted pairs freed a few per insert
        self._origin = 0  # absolute index of the first leaf ever (counters derive from it)
        self._first = 0  # absolute index of the oldest leaf in the window
        self._next = 0  # absolute index the next inserted leaf gets
        self._broken: BaseException | None = None
        # statistics; inserted/evicted derive from the positions (no work on the hot path)
        self._bulk_evicted = 0  # items that left by bulk eviction or clear()
        self.bulk_evictions = 0
        self.recomputes = 0
        self._producers: dict[str, int] = {}  # idempotency: last sequence applied per producer
        self._stale = False  # a store failure: reload the durable state before the next op
        self._reset_results()
        attach = getattr(store, "attach", None)
        self._hook: Any = store if attach is not None else None
        if attach is not None:
            attach(self)

    @classmethod
    def open(
        cls,
        window_id: str,
        monoid: Monoid,
        policy: Any,
        *,
        url: str | None = None,
        **options: Any,
    ) -> Any:
        """Reopen the Redis-backed window ``window_id`` (its state after the last acknowledged
        operation). ``options`` go to :class:`~mtawindows.server.store.RedisStore` (block and
        cache sizes, ``durable``, ...) or to the window (``debug``, ``bulk_factor``)."""
        from ..storage.redis_store import RedisStore

        if not RedisStore.exists(url, window_id, prefix=options.get("prefix", "mtaw")):
            msg = f"{cls.__name__}.open: no window {window_id!r} at that Redis"
            raise LookupError(msg)
        own = {k: options.pop(k) for k in ("debug", "bulk_factor") if k in options}
        store = RedisStore(url, window_id=window_id, **options)
        return cls(monoid, policy, store=store, **own)

    @property
    def window_id(self) -> str | None:
        """The id of a store-backed window (reopen it with ``open``); ``None`` in memory."""
        return getattr(self.store, "window_id", None)

    def flush(self, *, wait: bool = True, meta: dict[str, Any] | None = None) -> Any:
        """Make everything applied so far durable (a checkpoint in the store). No-op in memory.
        ``wait=False`` queues the checkpoint behind the pending writes and returns at once.
        ``meta`` (plain data, e.g. a journal position) is saved with the checkpoint and comes
        back as ``store.checkpoint_meta`` when the window is reopened from it. Returns the
        checkpoint's future (``None`` in memory)."""
        self._check_usable()
        if self._hook is not None:
            try:
                return self._hook.checkpoint(self, wait=wait, meta=meta)
            except StoreError as ex:
                self._store_failed(ex)
                raise
        return None

    def close(self) -> None:
        """Flush, then release the store's thread and connections."""
        if self._hook is not None:
            if self._broken is None:
                self.flush()
            self._hook.close()

    @property
    def stale(self) -> bool:
        """A store failure left the local state unsure: the next call reloads the window's
        last durable state (or the owner calls :meth:`reload` first)."""
        return self._stale

    def reload(self) -> None:
        """Rebuild the window from its store's durable state (its last checkpoint and log)."""
        if self._hook is None:
            msg = f"{type(self).__name__}: a window in memory has no durable state to reload"
            raise TypeError(msg)
        self._reload()

    def last_sequence(self, producer_id: str) -> int | None:
        """The last ``sequence`` applied for ``producer_id`` (idempotency), or ``None``."""
        return self._producers.get(producer_id)

    def _start_at(self, position: int) -> None:
        """Place the next leaf at ``position`` (tests use it: alignment must not matter)."""
        if self._levels:
            msg = "_start_at needs an empty, unused window"
            raise RuntimeError(msg)
        self._origin = self._first = self._next = position

    @property
    def inserted(self) -> int:
        """Items inserted so far (undone inserts do not count)."""
        return self._next - self._origin

    @property
    def evicted(self) -> int:
        """Items evicted so far."""
        return self._first - self._origin

    @property
    def single_evictions(self) -> int:
        """Items evicted one at a time (Algorithm 6)."""
        return self.evicted - self._bulk_evicted

    # ------------------------------------------------------------------ public API
    def __len__(self) -> int:
        return self._next - self._first

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(size={len(self)}, levels={len(self._levels)}, "
            f"monoid={self.monoid!r}, policy={self.policy!r})"
        )

    def enforce(self) -> int:
        """Apply the slide policy: evict the longest prefix it allows. Returns how many left."""
        self._check_usable()
        k = self._enforce()
        if k and self._hook is not None:
            self._record("e", ())
        if self.debug:
            self.check_invariants()
        return k

    def _enforce(self) -> int:
        k = self._plan()
        if k:
            self._commit(k)
        self._settle()
        return k

    def push(self, x: Any, producer_id: str | None = None, sequence: int | None = None) -> Any:
        """Insert ``x``, enforce the policy and return the result: the reactive pipeline.

        With ``producer_id`` and ``sequence`` (idempotency key), a push whose sequence is not
        above the producer's last applied one is a duplicate: nothing changes."""
        if producer_id is not None or sequence is not None:
            if self._duplicate(producer_id, sequence):
                return self.query()
        else:
            self._check_usable()
        u = self._lift(x)
        self._extend_lifted([u])
        self._applied("x", (u,), producer_id, sequence)
        if self.debug:
            self.check_invariants()
        return self.query()

    def extend(
        self, xs: Iterable[Any], producer_id: str | None = None, sequence: int | None = None
    ) -> int:
        """Insert every item, then enforce once. Returns the number of items evicted.

        All or nothing: if an item is refused (by ``lift`` or ``combine``) or the policy
        raises, the window is left as it was. The final state equals pushing each item for
        time-monotone policies (all built-ins). With ``producer_id`` and ``sequence``, a
        batch already applied (sequence not above the producer's last) changes nothing and
        returns 0."""
        if producer_id is not None or sequence is not None:
            if self._duplicate(producer_id, sequence):
                return 0
        else:
            self._check_usable()
        lift = self._lift
        lifted = [lift(x) for x in xs]
        k = self._extend_lifted(lifted)
        self._applied("x", lifted, producer_id, sequence)
        if self.debug:
            self.check_invariants()
        return k

    def apply_lifted(
        self,
        lifted: list[Any],
        producer_id: str | None = None,
        sequence: int | None = None,
        *,
        per_item: bool = False,
        totals: list[Any] | None = None,
        sizes: list[int] | None = None,
    ) -> int:
        """Apply items already lifted (by ``monoid.lift``): the service lifts a whole batch for
        every window before it changes any. By default as :meth:`extend` (insert all, enforce
        once); with ``per_item`` (or ``totals``) as :meth:`push` per item, which is what
        policies that are not time-monotone need for a batch to equal its rows one by one;
        ``totals`` and ``sizes`` (lists, given together) get the window's lifted aggregate and
        size after every item (the service lowers them a column at a time). Returns the number
        of items evicted; a duplicate key applies nothing.

        With the store in ``nonblocking`` mode, anything that would wait for it (a journal
        append, a reload, a miss, a large eviction) raises ``WouldBlock`` with the window
        unchanged; with ``per_item``, only a one-item batch is all-or-nothing that way."""
        store = self.store
        if getattr(store, "nonblocking", False) and (
            getattr(store, "durable", False) or self._stale
        ):
            raise WouldBlock
        if producer_id is not None or sequence is not None:
            if self._duplicate(producer_id, sequence):
                return 0
        else:
            self._check_usable()
        if totals is None and not per_item:
            k = self._extend_lifted(lifted)
            self._applied("x", lifted, producer_id, sequence)
        else:
            k = 0
            # the inline path cannot stop before a change: not when the store may not wait
            one = (
                _MTAWindow._push_one
                if getattr(store, "nonblocking", False)
                else type(self)._push_one
            )
            if (totals is None) != (sizes is None):
                msg = "apply_lifted: totals and sizes go together"
                raise TypeError(msg)
            keep = None if totals is None else totals.append
            size = None if sizes is None else sizes.append
            for u in lifted:
                total, evicted = one(self, u)
                k += evicted
                if keep is not None:
                    keep(self.aggregate() if total is UNSET else total)
                    size(self._next - self._first)  # type: ignore[misc]
            self._applied("p", lifted, producer_id, sequence)
        if self.debug:
            self.check_invariants()
        return k

    def _push_one(self, u: Any) -> tuple[Any, int]:
        """Insert the lifted ``u`` and enforce: (the total, or ``UNSET`` for "ask
        :meth:`query`"; items evicted). Algorithms override it with inline fast paths."""
        return UNSET, self._extend_lifted([u])

    NONBLOCKING_MAX_EVICT = 64  # larger evictions are left to a caller that may wait

    def _extend_lifted(self, lifted: list[Any]) -> int:
        nxt = self._next
        try:
            self._insert_many(lifted)
            k = self._plan()
            if k and getattr(self.store, "nonblocking", False):
                self._ensure_local(k)
        except BaseException:
            self._undo_inserts(nxt)
            raise
        if k:
            self._commit(k)
        self._settle()
        return k

    def insert(self, x: Any) -> None:
        """Lift ``x`` and append it to the window; no eviction."""
        self._check_usable()
        u = self._lift(x)
        self._insert_or_undo(u)
        self._settle()
        if self._hook is not None:
            self._record("i", (u,))
        if self.debug:
            self.check_invariants()

    def _duplicate(self, producer_id: Any, sequence: Any) -> bool:
        """Validate an idempotency key; whether it was applied already."""
        if not isinstance(producer_id, str) or not producer_id:
            msg = (
                f"{type(self).__name__}: producer_id must be a non-empty string (with "
                f"sequence), got {producer_id!r}"
            )
            raise ValueError(msg)
        if isinstance(sequence, bool) or not isinstance(sequence, int) or sequence < 0:
            msg = (
                f"{type(self).__name__}: sequence must be an int >= 0 (with producer_id), "
                f"got {sequence!r}"
            )
            raise ValueError(msg)
        self._check_usable()
        last = self._producers.get(producer_id)
        return last is not None and sequence <= last

    def _applied(
        self, op: str, items: Sequence[Any], producer_id: str | None, sequence: int | None
    ) -> None:
        """After an operation applied: remember its idempotency key, tell the store."""
        if producer_id is not None:
            self._producers[producer_id] = sequence  # type: ignore[assignment]
        if self._hook is not None:
            self._record(op, items, producer_id, sequence)

    def _record(
        self,
        op: str,
        items: Sequence[Any],
        producer_id: str | None = None,
        sequence: int | None = None,
    ) -> None:
        try:
            self._hook.record(self, op, items, producer_id, sequence)
        except StoreError as ex:
            self._store_failed(ex)
            raise

    def _failed_midway(self, ex: BaseException, doing: str) -> BaseException:
        """An exception after the window began to change; returns what to raise. A store
        failure makes the window reload its durable state on its next call (the exception
        itself); a monoid failure makes it unusable (a :class:`WindowCorruptedError`)."""
        if isinstance(ex, StoreError):
            self._store_failed(ex)
            return ex
        self._broken = ex
        msg = f"{type(self).__name__}: the monoid raised while {doing}"
        return WindowCorruptedError(msg)

    def _store_failed(self, ex: BaseException) -> None:
        """The store failed: the local state may be ahead of what Redis holds durably."""
        self._broken = ex
        self._stale = True

    def invalidate(self, ex: BaseException) -> None:
        """The store lost or may have lost state (a restarted Redis): reload the last durable
        state on the next call, as after a store failure. No-op without a store."""
        if self._hook is not None:
            self._store_failed(ex)

    def _insert_or_undo(self, u: Any, r1: Any = UNSET) -> None:
        """Insert a lifted item; if the monoid raises half-way, take the insert back."""
        nxt = self._next
        try:
            self._insert_lifted(u, r1)
        except BaseException:
            if self._next != nxt:
                self._undo_inserts(nxt)
            raise

    def query(self) -> Any:
        """``lower`` of the aggregate of the window, O(1)."""
        self._check_usable()
        total = self._total
        if total is UNSET:
            total = self._total = self._window_aggregate()
        return self._lower(total)

    def aggregate(self) -> Any:
        """The lifted aggregate of the whole window (the ``total`` a policy sees)."""
        self._check_usable()
        total = self._total
        if total is UNSET:
            total = self._total = self._window_aggregate()
        return total

    def clear(self) -> None:
        """Evict everything."""
        self._check_usable()
        self._bulk_evicted += len(self)
        self._clear()
        if self._hook is not None:
            self._record("c", ())

    @property
    def levels(self) -> int:
        return len(self._levels)

    def stats(self) -> dict[str, Any]:
        """Size, levels, counters and local memory use (pairs held in the process)."""
        out: dict[str, Any] = {
            "algorithm": self.algorithm,
            "size": len(self),
            "levels": len(self._levels),
            "inserted": self.inserted,
            "evicted": self.evicted,
            "single_evictions": self.single_evictions,
            "bulk_evictions": self.bulk_evictions,
            "recomputes": self.recomputes,
            "local_pairs": sum(lv.local_pairs() for lv in self._levels),
        }
        if self.store is not None:
            out["store"] = self.store.stats.as_dict()
        return out

    def check_invariants(self) -> None:
        """Check the paper's invariants and every stored aggregate (debug mode runs this after
        each operation). Raises :class:`~mtawindows.server.validate.InvariantError`."""
        from .validate import check_window

        store = self.store
        held = getattr(store, "nonblocking", False)
        if held:  # the checker reads everything, waiting as it must
            store.nonblocking = False  # type: ignore[union-attr]
        try:
            check_window(self)
        finally:
            if held:
                store.nonblocking = True  # type: ignore[union-attr]

    # ------------------------------------------------------------------ shared machinery
    def _check_usable(self) -> None:
        if self._broken is not None:
            if self._stale:
                self._reload()
                return
            msg = (
                f"{type(self).__name__} is unusable: its monoid raised while the window was being "
                f"restructured ({self._broken!r}); rebuild the window"
            )
            raise WindowCorruptedError(msg) from self._broken

    def _new_level(self, index: int, pos: int, pair: list[Any]) -> Any:
        if self.store is None:
            return MemoryLevel(index, pos, pair, self._grave)
        return TieredLevel(self.store, index, pos, pair)

    def _pair_agg(self, p: Any) -> Any:
        a, b = p[0], p[1]
        if a is EMPTY:
            return b
        if b is EMPTY:
            return a
        return self._combine(a, b)

    def _clear(self) -> None:
        for lv in self._levels:
            lv.discard()
        self._levels = []
        self._first = self._next
        self._reset_results()

    def _descend(self, total: Any, top: int, g: int, sub: Any) -> int:
        """Algorithm 2's root-to-leaf search, read-only.

        From level ``top`` down to the leaves, test the element ``g >> l`` when it is the left
        element of a full pair (otherwise it equals its parent, already rejected); when the
        policy lets ``sub + element`` leave, move ``g`` past it. Returns the new first leaf.
        """
        levels = self._levels
        policy = self._policy
        combine = self._combine
        tiered = self._hook is not None
        for lvl in range(top, -1, -1):
            m = g >> lvl
            if m & 1:
                continue
            lv = levels[lvl]
            pos = m >> 1
            if tiered and pos != lv.start and not lv.has_local(pos):
                self._speculate(lvl, g)
            p = lv.head if pos == lv.start else lv.peek(pos)
            a = p[0]
            if a is EMPTY or p[1] is EMPTY:
                continue
            cand = a if sub is UNSET else combine(sub, a)
            if policy(total, cand):
                sub = cand
                g = (m + 1) << lvl
        return g

    SPECULATE_LEVELS = 3  # a descent miss also fetches what the next 3 levels may need

    def _speculate(self, lvl: int, g: int) -> None:
        """A miss in the descent at level ``lvl``: fetch that pair and every pair the next
        ``SPECULATE_LEVELS`` levels could need (both outcomes of each test), in one pipelined
        round trip, and pin them. About one round trip per four levels instead of one per
        level; what is not used is forgotten at the next eviction."""
        levels = self._levels
        points: dict[tuple[int, int], None] = {}
        gs = {g}
        for depth in range(lvl, max(-1, lvl - self.SPECULATE_LEVELS - 1), -1):
            lv = levels[depth]
            nxt = set()
            for x in gs:
                m = x >> depth
                nxt.add(x)
                if m & 1:
                    continue
                pos = m >> 1
                if lv.start < pos < lv.end - 1 and not lv.has_local(pos):
                    points[(depth, pos)] = None
                nxt.add((m + 1) << depth)
            gs = nxt
        if points:
            wanted = list(points)
            for (depth, pos), pair in zip(wanted, self.store.read_points(wanted), strict=True):  # type: ignore[union-attr]
                levels[depth].pin(pos, pair)

    def _recompute_leftmost_branch(self) -> None:
        """Bottom-up, each head's first element becomes the aggregate of the head below it."""
        levels = self._levels
        pair_agg = self._pair_agg
        for lvl in range(1, len(levels)):
            v = pair_agg(levels[lvl - 1].head)
            head = levels[lvl].head
            if head[0] is not EMPTY:
                head[0] = v
            else:
                head[1] = v

    def _drop_leaves(self, g: int) -> None:
        """Remove every leaf before ``g`` (and the elements above them): O(log n).

        The element of level ``l`` that holds leaf ``g`` is ``g >> l``; pairs before it go,
        and it becomes the head's right element when it is odd. Levels whose elements all
        lie before ``g`` go (they are always the top ones)."""
        levels = self._levels
        for lvl, lv in enumerate(levels):
            m = g >> lvl
            tail = lv.tail
            last = 2 * (lv.end - 1) + (0 if tail[1] is EMPTY else 1)
            if m > last:
                for gone in levels[lvl:]:
                    gone.discard()
                del levels[lvl:]
                break
            pos = m >> 1
            if pos > lv.start:
                lv.drop_front(pos)
            if m & 1:
                head = lv.head
                if head[0] is not EMPTY:
                    head[0] = EMPTY
        self._first = g

    def _truncate_leaves(self, new_next: int) -> None:
        """Remove the leaves ``>= new_next`` (undo of inserts), structure only."""
        last_leaf = new_next - 1
        if last_leaf < self._first:
            self._clear()
            self._first = self._next = new_next
            return
        levels = self._levels
        e = last_leaf
        for lvl, lv in enumerate(levels):
            if lvl:
                e = self._parent_of_last(e)
            head = lv.head
            first = 2 * lv.start + (1 if head[0] is EMPTY else 0)
            if e < first:
                for gone in levels[lvl:]:
                    gone.discard()
                del levels[lvl:]
                break
            end = (e >> 1) + 1
            if end < lv.end:
                lv.truncate(end)
            if not e & 1:
                lv.tail[1] = EMPTY
        self._next = new_next

    def _reload(self) -> None:
        """Rebuild the window from the store's durable state (after a store failure)."""
        try:
            self._hook.reload(self)
        except StoreError as ex:
            self._broken = ex
            raise
        self._broken = None
        self._stale = False

    def _undo_inserts(self, new_next: int) -> None:
        try:
            self._truncate_leaves(new_next)
            self._after_truncate()
        except BaseException as ex:
            err = self._failed_midway(ex, "undoing a refused insert")
            if err is ex:
                raise
            raise err from ex

    def _settle(self) -> None:
        """Run the recomputations the stages of this operation requested, once (section 5.2)."""

    def _commit(self, k: int) -> None:
        try:
            if self._hook is not None and k > 1:
                self._fetch_heads(self._first + k)
            self._evict(k)
        except BaseException as ex:
            err = self._failed_midway(ex, f"evicting {k} items")
            if err is ex:
                raise
            raise err from ex

    def flush_full_blocks(self) -> None:
        """Queue the writes of level buffers that filled up while the store was non-blocking
        (unless the writer is backlogged: they go with a later operation or checkpoint)."""
        store = self.store
        if store is None or getattr(store, "backlogged", lambda: False)():
            return
        for lv in self._levels:
            flush = getattr(lv, "flush_if_full", None)
            if flush is not None:
                flush()

    def _ensure_local(self, k: int) -> None:
        """With a non-blocking store, before committing an eviction of ``k`` leaves: every pair
        the commit may read (each level from its head to its new head) must be local and
        ready, else :class:`WouldBlock` (nothing has changed yet; the caller undoes the
        inserts and retries where it may wait)."""
        if k > self.NONBLOCKING_MAX_EVICT:
            raise WouldBlock
        g = self._first + k
        for lvl, lv in enumerate(self._levels):
            new_head = (g >> lvl) >> 1
            for pos in range(lv.start, min(new_head, lv.end - 1) + 1):
                if not lv.has_local(pos, ready=True):
                    raise WouldBlock

    def _fetch_heads(self, g: int) -> None:
        """Before evicting every leaf before ``g`` from a store-backed window: fetch the new
        head pair of every level that is not local, all in one round trip, and pin them."""
        points = []
        levels = self._levels
        for lvl, lv in enumerate(levels):
            pos = (g >> lvl) >> 1
            if lv.start < pos < lv.end - 1 and not lv.has_local(pos):
                points.append((lvl, pos))
        if points:
            for (lvl, pos), pair in zip(points, self.store.read_points(points), strict=True):  # type: ignore[union-attr]
                levels[lvl].pin(pos, pair)

    # ------------------------------------------------------------------ checkpoints
    def _snapshot(self) -> tuple[dict[str, Any], list[Any]]:
        """The local state as plain data + the lifted values it holds (for a checkpoint)."""
        self._settle()
        values: list[Any] = []

        def pair(p: Any) -> int:
            f = 0
            if p[0] is not EMPTY:
                f |= 1
                values.append(p[0])
            if p[1] is not EMPTY:
                f |= 2
                values.append(p[1])
            return f

        state: dict[str, Any] = {
            "algorithm": self.algorithm,
            "origin": self._origin,
            "first": self._first,
            "next": self._next,
            "bulk_evicted": self._bulk_evicted,
            "bulk_evictions": self.bulk_evictions,
            "recomputes": self.recomputes,
            "levels": [
                (lv.index, lv.start, lv.end, pair(lv.head), pair(lv.tail)) for lv in self._levels
            ],
            "producers": dict(self._producers),
        }
        self._snapshot_results(state, values)
        return state, values

    def _restore(self, state: dict[str, Any] | None, values: list[Any]) -> None:
        """Inverse of :meth:`_snapshot` over the store's levels (``None``: a new window)."""
        for lv in self._levels:
            lv.discard()
        self._levels = []
        self.recomputes = self.bulk_evictions = self._bulk_evicted = 0
        self._producers = {}
        if state is None:
            self._origin = self._first = self._next = 0
            self._reset_results()
            return
        if state["algorithm"] != self.algorithm:
            msg = f"checkpoint of a {state['algorithm']} window, opened as {self.algorithm}"
            raise ValueError(msg)
        it = iter(values)

        def pair(f: int) -> list[Any]:
            return [next(it) if f & 1 else EMPTY, next(it) if f & 2 else EMPTY]

        self._origin = int(state["origin"])
        self._first = int(state["first"])
        self._next = int(state["next"])
        self._bulk_evicted = int(state["bulk_evicted"])
        self.bulk_evictions = int(state["bulk_evictions"])
        self.recomputes = int(state["recomputes"])
        levels = []
        for index, start, end, hf, tf in state["levels"]:
            head = pair(hf)
            tail = pair(tf)
            levels.append(TieredLevel.restored(self.store, index, start, end, head, tail))  # type: ignore[arg-type]
        self._levels = levels
        self._producers = {str(k): int(v) for k, v in state["producers"].items()}
        self._reset_results()
        if levels:
            self._restore_results(state, it)
        if next(it, UNSET) is not UNSET:
            msg = "checkpoint holds more values than its structure uses"
            raise ValueError(msg)

    def _replay(
        self, op: str, items: Sequence[Any], producer_id: str | None, seq: int | None
    ) -> None:
        """Apply one logged operation (lifted items) again."""
        if op == "x":
            self._extend_lifted(list(items))
        elif op == "p":
            for u in items:
                self._extend_lifted([u])
        elif op == "i":
            for u in items:
                self._insert_or_undo(u)
            self._settle()
        elif op == "e":
            self._enforce()
        elif op == "c":
            self._bulk_evicted += len(self)
            self._clear()
        else:
            msg = f"unknown logged operation {op!r}"
            raise ValueError(msg)
        if producer_id is not None and seq is not None:
            self._producers[producer_id] = seq

    # ------------------------------------------------------------------ per algorithm
    def _snapshot_results(
        self, state: dict[str, Any], values: list[Any]
    ) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _restore_results(
        self, state: dict[str, Any], values: Any
    ) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _parent_of_last(self, e: int) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    def _reset_results(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _window_aggregate(self) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def _insert_lifted(self, u: Any, r1: Any = UNSET) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _insert_many(self, us: list[Any]) -> None:
        ins = self._insert_lifted
        for u in us:
            ins(u)

    def _plan(self) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    def _evict(self, k: int) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _after_truncate(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError


class LogMTA(_MTAWindow):
    """Log MTA (paper section 4.1): one binary tree as a list of level queues.

    Every element holds the exact aggregate of its subtree; the top level holds exactly one
    pair, whose aggregate is the window's. Insert O(log n), bulk eviction O(log n).
    """

    algorithm = "LMTA"
    __slots__ = ("_root",)

    # -- results
    def _reset_results(self) -> None:
        self._root: Any = self._identity
        self._total = self._identity

    def _window_aggregate(self) -> Any:
        return self._root

    def _snapshot_results(self, state: dict[str, Any], values: list[Any]) -> None:
        if self._levels:
            values.append(self._root)

    def _restore_results(self, state: dict[str, Any], values: Any) -> None:
        self._root = self._total = next(values)

    def _parent_of_last(self, e: int) -> int:
        return e >> 1  # every pair has a parent in Log MTA

    # -- insertion (Algorithm 1)
    def _insert_lifted(self, u: Any, r1: Any = UNSET) -> None:
        i = self._next
        levels = self._levels
        if not levels:
            levels.append(self._new_level(0, i >> 1, [EMPTY, u] if i & 1 else [u, EMPTY]))
            self._first = i
            self._next = i + 1
            self._root = self._total = u
            return
        self._next = i + 1
        self._total = UNSET
        lv = levels[0]
        if i & 1:
            lv.tail[1] = u
            new_elem = False
        else:
            lv.append([u, EMPTY])
            new_elem = True
        combine = self._combine
        lvl = 0
        top = len(levels) - 1
        while lvl < top:
            t = lv.tail
            a, b = t[0], t[1]
            v = a if b is EMPTY else (b if a is EMPTY else combine(a, b))
            m = lv.end - 1  # the tail's parent element on the level above
            lvl += 1
            lv = levels[lvl]
            if new_elem:
                if m & 1:
                    lv.tail[1] = v
                    new_elem = False
                else:
                    lv.append([v, EMPTY])
            else:
                lv.tail[m & 1] = v
        if len(lv) > 1:
            self._grow(lvl)
        self._root = self._pair_agg(levels[-1].head)
        self._total = self._root

    def _grow(self, lvl: int) -> None:
        """The top level got a second pair: add levels above until one pair remains."""
        levels = self._levels
        pair_agg = self._pair_agg
        while True:
            lv = levels[lvl]
            pairs: dict[int, list[Any]] = {}
            for pos in range(lv.start, lv.end):
                v = pair_agg(lv.peek(pos))
                pairs.setdefault(pos >> 1, [EMPTY, EMPTY])[pos & 1] = v
            keys = sorted(pairs)
            new = self._new_level(lvl + 1, keys[0], pairs[keys[0]])
            for k in keys[1:]:
                new.append(pairs[k])
            levels.append(new)
            lvl += 1
            if len(new) == 1:
                return

    def _after_truncate(self) -> None:
        """Recompute the right spine after an undo, drop degenerate top levels."""
        levels = self._levels
        for lvl in range(1, len(levels)):
            below = levels[lvl - 1]
            m = below.end - 1
            levels[lvl].tail[m & 1] = self._pair_agg(below.tail)
        self._normalize_top()
        self._root = self._pair_agg(levels[-1].head) if levels else self._identity
        self._total = self._root

    def _normalize_top(self) -> None:
        levels = self._levels
        while len(levels) >= 2 and len(levels[-2]) == 1:
            levels.pop().discard()

    # -- enforcement (Algorithm 2): plan, then commit
    def _plan(self) -> int:
        n = self._next - self._first
        if n == 0:
            return 0
        total = self._root
        policy = self._policy
        levels = self._levels
        f = self._first
        lv0 = levels[0]
        sub = lv0.head[f & 1]
        if not policy(total, sub):
            return 0
        if n == 1:
            return 1
        j = f + 1  # the second leaf: when it may not leave, k = 1 without the descent
        p = lv0.head if (j >> 1) == lv0.start else lv0.peek(j >> 1)
        if not policy(total, self._combine(sub, p[j & 1])):
            return 1
        g = self._descend(total, len(levels) - 1, f, UNSET)
        if g == self._next - 1 and policy(total, total):
            return n
        return g - f

    def _evict(self, k: int) -> None:
        self._bulk_evicted += k
        if k == len(self):
            self._clear()
            return
        self.bulk_evictions += 1
        self._drop_leaves(self._first + k)
        self._recompute_leftmost_branch()  # Algorithm 2, lines 21-27
        self._normalize_top()
        self._root = self._total = self._pair_agg(self._levels[-1].head)


class AmortizedMTA(_MTAWindow):
    """Amortized MTA (paper section 4.2): a forest, the result pair R and the stack.

    Insert and single eviction O(1) amortized, O(log n) worst case; bulk eviction O(log n).
    ``bulk_factor`` scales the number of one-by-one evictions (``bulk_factor * log2 n``)
    after which enforcement switches to bulk eviction (section 4.2.4).
    """

    algorithm = "AMTA"
    __slots__ = ("_dirty", "_r0", "_r1", "_stack", "bulk_factor")

    def __init__(
        self,
        monoid: Monoid,
        policy: Any,
        *,
        store: PairStore | None = None,
        debug: bool = False,
        bulk_factor: int = 1,
    ) -> None:
        if isinstance(bulk_factor, bool) or not isinstance(bulk_factor, int) or bulk_factor < 1:
            msg = f"AmortizedMTA: bulk_factor must be an int >= 1, got {bulk_factor!r}"
            raise ValueError(msg)
        self.bulk_factor = bulk_factor
        super().__init__(monoid, policy, store=store, debug=debug)

    # -- results
    def _reset_results(self) -> None:
        self._r0: Any = self._identity  # the leftmost tree
        self._r1: Any = self._identity  # every other tree
        self._stack: list[Any] = []  # suffixes of the leftmost tree, top = R0 minus its head
        self._dirty = False  # R0, R1 and the stack wait for a recomputation (section 5.2)
        self._total = self._identity

    def _window_aggregate(self) -> Any:
        return self._combine(self._r0, self._r1)

    def _snapshot_results(self, state: dict[str, Any], values: list[Any]) -> None:
        if self._levels:
            values.extend((self._r0, self._r1, *self._stack))
            state["stack"] = len(self._stack)

    def _restore_results(self, state: dict[str, Any], values: Any) -> None:
        self._r0 = next(values)
        self._r1 = next(values)
        self._stack = [next(values) for _ in range(int(state["stack"]))]
        self._total = UNSET

    def _parent_of_last(self, e: int) -> int:
        return (e >> 1) - 1  # only sealed pairs (not the tail) have a parent

    def _recompute(self) -> None:
        """compute_left_result (Algorithm 4) and compute_right_result (Algorithm 5)."""
        self.recomputes += 1
        levels = self._levels
        combine = self._combine
        stack: list[Any] = []
        top: Any = UNSET
        for lvl in range(len(levels) - 1, -1, -1):
            p = levels[lvl].head
            if p[0] is not EMPTY and p[1] is not EMPTY:
                top = p[1] if top is UNSET else combine(p[1], top)
                stack.append(top)
        h0 = levels[0].head
        leaf = h0[1] if h0[0] is EMPTY else h0[0]
        r0 = leaf if top is UNSET else combine(leaf, top)
        r1: Any = UNSET
        for lvl in range(len(levels) - 1):
            v = self._pair_agg(levels[lvl].tail)
            r1 = v if r1 is UNSET else combine(v, r1)
        self._stack = stack
        self._r0 = r0
        self._r1 = self._identity if r1 is UNSET else r1
        self._total = UNSET
        self._dirty = False

    def _settle(self) -> None:
        if self._dirty:
            try:
                self._recompute()
            except BaseException as ex:
                err = self._failed_midway(ex, "recomputing its result pair")
                if err is ex:
                    raise
                raise err from ex

    # -- insertion (Algorithm 3)
    def _insert_lifted(self, u: Any, r1: Any = UNSET) -> None:
        if r1 is UNSET:
            r1 = self._combine(self._r1, u)  # the first contact of u with the window: may refuse it
        i = self._next
        levels = self._levels
        self._total = UNSET
        if not levels:
            levels.append(self._new_level(0, i >> 1, [EMPTY, u] if i & 1 else [u, EMPTY]))
            self._first = i
            self._next = i + 1
            self._r0 = self._total = u
            self._r1 = self._identity
            self._stack = []
            return
        self._next = i + 1
        lv = levels[0]
        if i & 1:
            lv.tail[1] = u
            if len(levels) == 1:  # the leftmost tree grew: R must be recomputed
                self._dirty = True
            else:
                self._r1 = r1
            return
        self._r1 = r1
        combine = self._combine
        pair: list[Any] = [u, EMPTY]
        lvl = 0
        while True:
            t = lv.tail
            a, b = t[0], t[1]
            v = a if b is EMPTY else (b if a is EMPTY else combine(a, b))
            lv.append(pair)
            m = lv.end - 2  # the sealed pair's parent element on the level above
            lvl += 1
            if lvl == len(levels):
                levels.append(self._new_level(lvl, m >> 1, [EMPTY, v] if m & 1 else [v, EMPTY]))
                return
            lv = levels[lvl]
            if m & 1:
                lv.tail[1] = v
                if lvl == len(levels) - 1:  # the leftmost tree absorbed its neighbour
                    self._dirty = True
                return
            pair = [v, EMPTY]

    def _after_truncate(self) -> None:
        if self._levels:
            self._recompute()
        else:
            self._reset_results()

    def _fold_batch(self, us: list[Any]) -> Any:
        """Left fold of lifted items (the batch's own aggregate)."""
        combine = self._combine
        acc = us[0]
        for u in us[1:]:
            acc = combine(acc, u)
        return acc

    BULK_INSERT_MIN = 64  # batches at least this long are placed level by level

    def _insert_many(self, us: list[Any]) -> None:
        """Algorithm 3 for a batch: an item that lands in an open leaf pair is placed inline.
        Long batches are placed level by level (:meth:`_insert_bulk`)."""
        if len(us) >= self.BULK_INSERT_MIN and self._levels:
            self._insert_bulk(us)
            return
        combine = self._combine
        insert = self._insert_lifted
        levels = self._levels
        prev = self._total
        if prev is UNSET and us:
            prev = combine(self._r0, self._r1)
        for u in us:
            r1 = combine(self._r1, u)  # may refuse u: extend() then undoes the batch
            i = self._next
            if i & 1 and len(levels) > 1:
                levels[0].tail[1] = u
                self._r1 = r1
                self._next = i + 1
            else:
                insert(u, r1)
                levels = self._levels
        # a merge left R stale until the end of the operation: the plan needs the total now
        self._total = combine(prev, self._fold_batch(us)) if self._dirty else UNSET

    def _insert_bulk(self, us: list[Any]) -> None:
        """Algorithm 3 for a long batch, level by level: the same pairs and the same combines
        as inserting the items one at a time (each sealed pair's aggregate goes to the level
        above at the position of the pair), in tight loops per level, and one recomputation
        of R and the stack at the end instead of maintaining R1 per item.

        Every combine that touches a new item runs before the window changes, so a monoid
        that refuses an item leaves the window as it was."""
        combine = self._combine
        levels = self._levels
        lv = levels[0]
        pos = self._next
        n = len(us)
        # level 0, computed first: the aggregates of the pairs this batch seals
        j = 0
        if pos & 1:  # the open leaf pair takes the first item
            t = lv.tail
            fill = us[0]
            a = t[0]
            sealed_first = [fill if a is EMPTY else combine(a, fill)]
            j = 1
        else:
            t = lv.tail
            a, b = t[0], t[1]
            sealed_first = [a if b is EMPTY else (b if a is EMPTY else combine(a, b))]
        rest = us[j:]
        full = len(rest) & ~1
        pair_aggs = [combine(rest[k], rest[k + 1]) for k in range(0, full, 2)]
        if len(rest) & 1:
            combine(self._identity, rest[-1])  # first contact of the lone last item
        # commit level 0
        if j:
            lv.tail[1] = us[0]
        e = lv.end - 1  # the pair sealed first; its aggregate goes to position e above
        pairs: list[Any] = [(rest[k], rest[k + 1]) for k in range(0, full, 2)]
        if len(rest) & 1:
            pairs.append((rest[-1], EMPTY))
        ups = (sealed_first + pair_aggs)[: len(pairs)]  # each appended pair seals one
        lv.extend(pairs)
        self._next = pos + n
        self._total = UNSET
        # upper levels: ups land at positions e, e+1, ...
        lvl = 1
        xs = ups
        pos = e
        while xs:
            if lvl == len(levels):
                x0 = xs[0]
                levels.append(
                    self._new_level(lvl, pos >> 1, [EMPTY, x0] if pos & 1 else [x0, EMPTY])
                )
                xs = xs[1:]
                pos += 1
                if not xs:
                    break
            lv = levels[lvl]
            k = 0
            if pos & 1:
                lv.tail[1] = xs[0]
                k = 1
            e = lv.end - 1
            m = len(xs)
            new: list[Any] = [(xs[q], xs[q + 1]) for q in range(k, m - 1, 2)]
            if (m - k) & 1:
                new.append((xs[-1], EMPTY))
            nxt: list[Any] = []
            if new:
                t = lv.tail
                a, b = t[0], t[1]
                nxt.append(a if b is EMPTY else (b if a is EMPTY else combine(a, b)))
                nxt.extend([combine(p[0], p[1]) for p in new[:-1]])
                lv.extend(new)
            xs = nxt
            pos = e
            lvl += 1
        self._recompute()  # R0, R1 and the stack from the new heads and tails: O(log n)

    # -- enforcement: single evictions (Algorithms 6-7), bulk after log n (4.2.4)
    def _plan(self) -> int:
        n = self._next - self._first
        if n == 0:
            return 0
        total = self._total
        if total is UNSET:
            total = self._total = self._combine(self._r0, self._r1)
        f = self._first
        sub = self._levels[0].head[f & 1]
        if not self._policy(total, sub):
            return 0
        return self._plan_from(total, sub, 1)

    def _plan_from(self, total: Any, sub: Any, k: int) -> int:
        """Go on testing leaves one by one after ``k`` passed (``sub`` is their aggregate);
        switch to the bulk search after ``bulk_factor * log2(n)`` of them (section 4.2.4)."""
        n = self._next - self._first
        policy = self._policy
        combine = self._combine
        lv0 = self._levels[0]
        f = self._first
        limit = max(2, self.bulk_factor * n.bit_length())
        if k > limit:
            return self._search(total)
        while k < n:
            i = f + k
            pos = i >> 1
            p = lv0.head if pos == lv0.start else lv0.peek(pos)
            cand = combine(sub, p[i & 1])
            if not policy(total, cand):
                return k
            sub = cand
            k += 1
            if k > limit:
                return self._search(total)
        return n

    def push(self, x: Any, producer_id: str | None = None, sequence: int | None = None) -> Any:
        """Insert ``x``, enforce the policy and return the result: the reactive pipeline.

        The common cases of a sliding window (one leaf in, at most one leaf out) run inline;
        everything else goes through the general paths. Same states as insert + enforce.
        ``producer_id`` + ``sequence``: see :meth:`extend`."""
        if producer_id is not None or sequence is not None:
            if self._duplicate(producer_id, sequence):
                return self.query()
        elif self._broken is not None:
            self._check_usable()
        u = self._lift(x)
        total = self._push_one(u)[0]
        if producer_id is not None or self._hook is not None:
            self._applied("x", (u,), producer_id, sequence)
        if self.debug:
            self.check_invariants()
        return self._lower(total)

    def _push_one(self, u: Any) -> tuple[Any, int]:
        """Insert the lifted ``u`` and enforce: (the window's total, items evicted). The
        inline cases of :meth:`push`; no journal, no duplicate check."""
        combine = self._combine
        prev = self._total
        r1 = combine(self._r1, u)  # first contact of u with the window: may refuse it
        if prev is UNSET:
            prev = combine(self._r0, self._r1)
        i = self._next
        levels = self._levels
        h = len(levels)
        if h > 1:
            lv0 = levels[0]
            if i & 1:
                lv0.tail[1] = u  # Algorithm 3, the leaf pair is open: no propagation
                self._r1 = r1
                self._next = i + 1
            else:
                t = lv0.tail
                a = t[0]
                v = t[1] if a is EMPTY else combine(a, t[1])
                m = lv0.end - 1  # the sealed pair's parent element on level 1
                up = levels[1]
                if m & 1 and h > 2:
                    lv0.append([u, EMPTY])
                    up.tail[1] = v
                    self._r1 = r1
                    self._next = i + 1
                elif h > 3 and (up.end - 1) & 1:
                    # one level more: level 1's tail pair is sealed too and its aggregate
                    # fills the open slot of level 2 (not the top: no recomputation)
                    t = up.tail
                    a, b = t[0], t[1]
                    v1 = a if b is EMPTY else (b if a is EMPTY else combine(a, b))
                    lv0.append([u, EMPTY])
                    up.append([v, EMPTY])
                    levels[2].tail[1] = v1
                    self._r1 = r1
                    self._next = i + 1
                else:
                    self._insert_or_undo(u, r1)
        else:
            self._insert_or_undo(u, r1)
            levels = self._levels
            lv0 = levels[0]
        f = self._first
        head = lv0.head
        policy = self._policy
        try:
            total = combine(prev, u)  # R may wait for a recomputation; associativity does not
            sub = head[f & 1]
            if not policy(total, sub):
                k = 0
            elif i == f:  # a window of one item that may leave
                k = 1
            else:
                j = f + 1
                p = head if (j >> 1) == lv0.start else lv0.peek(j >> 1)
                cand = combine(sub, p[j & 1])
                k = self._plan_from(total, cand, 2) if policy(total, cand) else 1
        except BaseException:
            self._total = UNSET
            self._undo_inserts(i)
            raise
        if k:
            try:
                if k == 1 and i != f and not self._dirty:
                    stack = self._stack
                    if head[0] is not EMPTY and head[1] is not EMPTY:
                        # Algorithm 6, the oldest leaf's pair is full: pop R0, clear the slot
                        head[0] = EMPTY
                        self._r0 = stack.pop()
                        self._first = f + 1
                    elif (
                        stack
                        and (h1 := self._levels[1].head)[0] is not EMPTY
                        and h1[1] is not EMPTY
                    ):
                        # Algorithm 6 + 7, the leaf pair goes and its parent's pair is full
                        r0 = stack.pop()
                        lv0.drop_front(lv0.start + 1)
                        nh = lv0.head
                        h1[0] = EMPTY
                        if nh[0] is not EMPTY and nh[1] is not EMPTY:
                            stack.append(combine(nh[1], stack[-1]) if stack else nh[1])
                        self._r0 = r0
                        self._first = f + 1
                    elif (
                        stack
                        and h > 2
                        and (h2 := self._levels[2].head)[0] is not EMPTY
                        and h2[1] is not EMPTY
                        and lv0.end - lv0.start > 1
                        and (lv1 := self._levels[1]).end - lv1.start > 1
                    ):
                        # Algorithm 6 + 7 one level higher: the leaf pair and its parent's
                        # pair go, the grandparent's pair is full; new heads pushed top first
                        r0 = stack.pop()
                        lv0.drop_front(lv0.start + 1)
                        lv1.drop_front(lv1.start + 1)
                        h2[0] = EMPTY
                        for nh in (lv1.head, lv0.head):
                            if nh[0] is not EMPTY and nh[1] is not EMPTY:
                                stack.append(combine(nh[1], stack[-1]) if stack else nh[1])
                        self._r0 = r0
                        self._first = f + 1
                    else:
                        self._evict_one()
                else:
                    if k > 1 and self._hook is not None:
                        self._fetch_heads(f + k)
                    self._evict(k)
                if self._dirty:  # the one recomputation of this operation
                    self._recompute()
                total = combine(self._r0, self._r1) if self._levels else self._identity
            except BaseException as ex:
                err = self._failed_midway(ex, f"evicting {k} item(s)")
                if err is ex:
                    raise
                raise err from ex
        elif self._dirty:
            self._settle()
        self._total = total
        return total, k

    def _search(self, total: Any) -> int:
        """Bulk search over the forest: whole trees from the oldest, then Algorithm 2 inside
        the first tree that may not leave. Read-only except the leftmost-branch refresh."""
        levels = self._levels
        policy = self._policy
        combine = self._combine
        h = len(levels)
        sub: Any = UNSET
        self._recompute_leftmost_branch()  # single evictions leave it stale; R0 may be too
        for j in range(h - 1, -1, -1):
            agg = self._pair_agg(levels[j].head if j == h - 1 else levels[j].tail)
            cand = agg if sub is UNSET else combine(sub, agg)
            if not policy(total, cand):
                break
            sub = cand
        else:
            return len(self)
        # the first leaf of tree j: the window's own, or where the tree at level j's tail starts
        g = self._first if j == h - 1 else (levels[j].end - 1) << (j + 1)
        return self._descend(total, j, g, sub) - self._first

    def _evict(self, k: int) -> None:
        n = self._next - self._first
        if k == n:
            self._bulk_evicted += k
            self._clear()
            return
        if k <= max(2, self.bulk_factor * n.bit_length()):
            for done in range(k):
                if self._dirty:  # R and the stack are stale: remove the rest structurally
                    self._bulk_evicted += k - done
                    self._drop_leaves(self._first + k - done)
                    break
                self._evict_one()
            self._total = UNSET
            return
        self.bulk_evictions += 1
        self._bulk_evicted += k
        self._drop_leaves(self._first + k)
        self._dirty = True
        self._total = UNSET

    def _evict_one(self) -> None:
        """Algorithm 6 with the stack update of Algorithm 7."""
        stack = self._stack
        levels = self._levels
        self._r0 = stack.pop() if stack else self._identity
        self._first += 1
        new_heads: list[list[Any]] = []
        lvl = 0
        h = len(levels)
        while lvl < h:
            lv = levels[lvl]
            p = lv.head
            if p[0] is not EMPTY and p[1] is not EMPTY:
                p[0] = EMPTY
                break
            if lv.end - lv.start == 1:  # the top pair went: the leftmost tree is gone
                lv.discard()
                levels.pop()
                self._dirty = True  # the next tree becomes the leftmost one
                return
            lv.drop_front(lv.start + 1)
            p = lv.head
            if p[0] is not EMPTY and p[1] is not EMPTY:
                new_heads.append(p)
            lvl += 1
        if new_heads:
            combine = self._combine
            for idx in range(len(new_heads) - 1, -1, -1):  # highest level first
                nh = new_heads[idx]
                stack.append(combine(nh[1], stack[-1]) if stack else nh[1])
