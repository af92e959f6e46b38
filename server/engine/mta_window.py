"""The MTA window both algorithms share (:class:`MTAWindow`): the public operations (push,
extend, apply_lifted, insert, enforce, query, clear), how each runs over the level machinery
of :class:`~.forest.LevelForest`, the window's store (open, flush, close, the durability seam
of :mod:`.checkpoint`) and what a failure leaves (a store failure: reload; a monoid failure:
:class:`WindowCorruptedError`). The algorithms are :class:`~.lmta.LogMTA` and
:class:`~.amta.AmortizedMTA`; :mod:`mtawindows.server.engine` is their public face.

Deviations from the paper shared by both algorithms, and why:

* **Search, then commit.** Algorithm 2 interleaves the policy search with the removals. Here
  enforcement first *plans* (calls the policy and the monoid, reads pairs, changes nothing),
  then *commits* the eviction of the ``k`` leaves it found. Same O(log n) bound, and a policy
  or monoid that raises leaves the window exactly as it was. ``push``/``extend`` undo their
  inserts if the plan raises.
* **Whole-window eviction.** Algorithm 2 never empties a window; a policy may (``CountPolicy(0)``,
  a bounded sum with one huge item), so the plan tests the whole window when every smaller
  prefix may leave.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar, NoReturn

from ..sentinels import UNSET
from ..storage import reopen_store
from ..storage.protocol import PairStore, StoreError
from . import checkpoint
from .forest import LevelForest
from .ledger import Ledger
from .monoids import Monoid
from .nonblocking import MAX_EVICT, NonBlockingCall, WaitingAllowed, ensure_local
from .policies import bind_policy
from .seam import StoreSeam, WindowCorruptedError, require_monoid
from .suffix import check_suffix

__all__ = ["MTAWindow", "WindowCorruptedError"]


class MTAWindow(StoreSeam, LevelForest):
    """What Log MTA and Amortized MTA share: the public operations over the level queues,
    undo of inserts, the idempotency ledger, the store, failures, statistics."""

    algorithm: ClassVar[str] = ""
    _total: Any  # aggregate of the window (lifted), UNSET when unknown; set by _reset_results
    __slots__ = (
        "_broken",
        "_bulk_evicted",
        "_ledger",
        "_lift",
        "_lower",
        "_stale",
        "_total",
        "bulk_evictions",
        "debug",
        "monoid",
        "on_stale",
        "policy",
        "recomputes",
    )

    NONBLOCKING_MAX_EVICT = MAX_EVICT  # a non-blocking call leaves larger evictions to a retry

    def __init__(
        self,
        monoid: Monoid,
        policy: Any,
        *,
        store: PairStore | None = None,
        debug: bool = False,
    ) -> None:
        require_monoid(type(self).__name__, monoid)
        super().__init__(bind_policy(policy, monoid), monoid.combine, monoid.identity, store)
        self.monoid = monoid
        self.policy = policy
        self.debug = debug
        self._lift = monoid.lift
        self._lower = monoid.lower
        self._broken: BaseException | None = None
        # statistics; inserted/evicted derive from the positions (no work on the hot path)
        self._bulk_evicted = 0  # items that left by bulk eviction or clear()
        self.bulk_evictions = 0
        self.recomputes = 0
        self._ledger = Ledger()  # idempotency: last sequence applied per producer
        self._stale = False  # a store failure: reload the durable state before the next op
        # set by an owner that reloads the window itself (with what its own journal holds
        # beyond the checkpoint): called on a store failure; the window then refuses use
        # (StoreUnavailableError) instead of reloading its last checkpoint by itself
        self.on_stale: Callable[[], None] | None = None
        self._reset_results()
        if self._hook is not None:
            self._hook.attach(self)

    # ------------------------------------------------------------------ the store
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
        operation). ``options`` go to :class:`~mtawindows.server.storage.redis_store.RedisStore`
        (block and cache sizes, ``durable``, ...) or to the window (``debug``,
        ``bulk_factor``)."""
        own = {k: options.pop(k) for k in ("debug", "bulk_factor") if k in options}
        try:
            store = reopen_store(window_id, url=url, **options)
        except LookupError as ex:
            msg = f"{cls.__name__}.open: {ex}"
            raise LookupError(msg) from None
        return cls(monoid, policy, store=store, **own)

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

    def flush_full_blocks(self) -> None:
        """Queue the writes of level buffers that filled up while the store was non-blocking
        (unless the writer is backlogged: they go with a later operation or checkpoint)."""
        if self.store is None or (self._hook is not None and self._hook.backlogged()):
            return
        for lv in self._levels:
            lv.flush_if_full()

    # -- the durability seam (storage.protocol.CheckpointedWindow): what a store may call
    @property
    def level_queues(self) -> tuple[Any, ...]:
        """The level queues, bottom first (a checkpoint flushes them and keeps their blocks
        from each queue's ``start`` on)."""
        return tuple(self._levels)

    def snapshot(self) -> tuple[dict[str, Any], list[Any]]:
        """The local state as plain data + the lifted values it holds (for a checkpoint)."""
        return checkpoint.snapshot(self)

    def restore(self, state: dict[str, Any] | None, values: list[Any]) -> None:
        """Inverse of :meth:`snapshot` over the store's levels (``None``: a new window)."""
        checkpoint.restore(self, state, values)

    def replay(
        self, op: str, items: Sequence[Any], producer_id: str | None, sequence: int | None
    ) -> None:
        """Apply one logged operation (lifted items) again."""
        checkpoint.replay(self, op, items, producer_id, sequence)

    # ------------------------------------------------------------------ failures
    def _raise_midway(self, ex: BaseException, doing: str) -> NoReturn:
        """Raise for an exception after the window began to change. A store failure makes the
        window reload its durable state on its next call (the exception itself goes on); a
        monoid failure makes it unusable (a :class:`WindowCorruptedError`)."""
        if isinstance(ex, StoreError):
            self._store_failed(ex)
            raise ex
        self._broken = ex
        msg = f"{type(self).__name__}: the monoid raised while {doing}"
        raise WindowCorruptedError(msg) from ex

    # ------------------------------------------------------------------ idempotency
    def _record(
        self,
        op: str,
        items: Sequence[Any],
        producer_id: str | None = None,
        sequence: int | None = None,
    ) -> None:
        try:
            self._hook.record(self, op, items, producer_id, sequence)  # type: ignore[union-attr]
        except StoreError as ex:
            self._store_failed(ex)
            raise

    # ------------------------------------------------------------------ counters
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

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(size={len(self)}, levels={len(self._levels)}, "
            f"monoid={self.monoid!r}, policy={self.policy!r})"
        )

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
        each operation). Raises :class:`~mtawindows.server.engine.validate.InvariantError`."""
        from .validate import check_window

        with WaitingAllowed(self.store):  # the checker reads everything, waiting as it must
            check_window(self)

    # ------------------------------------------------------------------ operations
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
        if self._admit(producer_id, sequence):
            return self.query()
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
        if self._admit(producer_id, sequence):
            return 0
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
        nonblocking: bool = False,
    ) -> int:
        """Apply items already lifted (by ``monoid.lift``): the service lifts a whole batch for
        every window before it changes any. By default as :meth:`extend` (insert all, enforce
        once); with ``per_item`` (or ``totals``) as :meth:`push` per item, which is what
        policies that are not time-monotone need for a batch to equal its rows one by one;
        ``totals`` and ``sizes`` (lists, given together) get the window's lifted aggregate and
        size after every item (the service lowers them a column at a time). Returns the number
        of items evicted; a duplicate key applies nothing.

        With ``nonblocking`` (a caller that must not wait: the service's event loop), the
        window holds its store in non-blocking mode for the call: anything that would wait for
        it (a journal append, a reload, a miss, a large eviction) raises ``WouldBlock`` with
        the window unchanged; with ``per_item``, only a one-item batch is all-or-nothing that
        way. A window in memory never waits: the flag changes nothing there."""
        store = self.store
        if nonblocking and store is not None:
            with NonBlockingCall(store, self._hook, self._stale, self.flush_full_blocks):
                return self._apply_lifted(
                    lifted, producer_id, sequence, per_item, totals, sizes, True
                )
        return self._apply_lifted(lifted, producer_id, sequence, per_item, totals, sizes, False)

    def _apply_lifted(
        self,
        lifted: list[Any],
        producer_id: str | None,
        sequence: int | None,
        per_item: bool,
        totals: list[Any] | None,
        sizes: list[int] | None,
        nonblocking: bool,
    ) -> int:
        if self._admit(producer_id, sequence):
            return 0
        if totals is None and not per_item:
            k = self._extend_lifted(lifted, nonblocking)
            self._applied("x", lifted, producer_id, sequence)
        else:
            k = 0
            if nonblocking:  # the inline path cannot stop before a change: the general one

                def one(u: Any) -> tuple[Any, int]:
                    return UNSET, self._extend_lifted([u], True)

            else:
                one = self._push_one
            if (totals is None) != (sizes is None):
                msg = "apply_lifted: totals and sizes go together"
                raise TypeError(msg)
            keep = None if totals is None else totals.append
            size = None if sizes is None else sizes.append
            for u in lifted:
                total, evicted = one(u)
                k += evicted
                if keep is not None:
                    keep(self.aggregate() if total is UNSET else total)
                    size(self._next - self._first)  # type: ignore[misc]
            self._applied("p", lifted, producer_id, sequence)
        if self.debug:
            self.check_invariants()
        return k

    def preview_lifted(
        self,
        lifted: list[Any],
        *,
        per_item: bool = False,
        totals: list[Any] | None = None,
        sizes: list[int] | None = None,
    ) -> Any:
        """What :meth:`apply_lifted` with the same arguments would make of ``lifted``, without
        applying it: the window's lifted aggregate after the batch (with ``totals`` and
        ``sizes``, also the aggregate and the size after every item), the window left as it
        was (positions, contents, results, ledger; no operation logged: blocks a tiered level
        wrote for the items are past the window's end, and rewritten by the next inserts).
        The service lowers these before it applies a batch, so that a ``lower`` that refuses
        a result refuses the batch with nothing changed. Never non-blocking: it may read the
        store.

        How: the items are inserted, then taken back (as when a plan raises); in between the
        policy is planned without committing and the aggregates are read from the levels
        (:meth:`_fold`). Batch-wise, the plan is the window's own (:meth:`_plan`). Item by
        item (``per_item`` or ``totals``), the oldest leaf moves on as the policy lets each
        item's window go: the longest prefix, tested leaf by leaf (the policies' semantics,
        which the engines' searches compute for prefix-monotone policies; see
        :mod:`.policies`). Costs the inserts twice and O(log n) per item; the policy is
        called here too (a CEL policy counts its errors again: the caller resets them)."""
        self._check_usable()
        nxt = self._next
        try:
            self._insert_many(lifted)
            if totals is None and not per_item:
                return self._fold(self._first + self._plan(), self._next)
            if (totals is None) != (sizes is None):
                msg = "preview_lifted: totals and sizes go together"
                raise TypeError(msg)
            s = self._first
            total: Any = UNSET
            for end in range(nxt + 1, self._next + 1):
                total = self._fold(s, end)
                k = self._leaving(s, end, total)
                if k:
                    s += k
                    total = self._fold(s, end)
                if totals is not None:
                    totals.append(total)
                    sizes.append(end - s)  # type: ignore[union-attr]
            return self._fold(s, nxt) if total is UNSET else total
        finally:
            if self._next != nxt:
                self._undo_inserts(nxt)

    def _leaving(self, s: int, e: int, total: Any) -> int:
        """How many of the leaves ``[s, e)`` leave a window that holds them (aggregate
        ``total``): the longest prefix the policy lets go, tested from the oldest leaf."""
        policy = self._policy
        combine = self._combine
        lv0 = self._levels[0]
        k = 0
        sub: Any = UNSET
        while s + k < e:
            i = s + k
            pos = i >> 1
            u = (lv0.head if pos == lv0.start else lv0.peek(pos))[i & 1]
            cand = u if sub is UNSET else combine(sub, u)
            if not policy(total, cand):
                break
            sub = cand
            k += 1
        return k

    def _push_one(self, u: Any) -> tuple[Any, int]:
        """Insert the lifted ``u`` and enforce: (the total, or ``UNSET`` for "ask
        :meth:`query`"; items evicted). Algorithms override it with inline fast paths."""
        return UNSET, self._extend_lifted([u])

    def _extend_lifted(self, lifted: list[Any], nonblocking: bool = False) -> int:
        nxt = self._next
        try:
            self._insert_many(lifted)
            k = self._plan()
            if k and nonblocking:
                ensure_local(self._levels, self._first, k, self.NONBLOCKING_MAX_EVICT)
        except BaseException:
            self._undo_inserts(nxt)
            raise
        if k:
            self._commit(k)
        self._settle()
        return k

    def load_lifted(self, lifted: list[Any]) -> None:
        """Append items already lifted and already enforced (a keyed stream's compact window
        growing into a tree): no policy runs. All or nothing."""
        self._check_usable()
        nxt = self._next
        try:
            self._insert_many(lifted)
        except BaseException:
            self._undo_inserts(nxt)
            raise
        self._settle()
        self._total = UNSET
        if self.debug:
            self.check_invariants()

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

    #: answers query-time ranges (:mod:`.suffix`): every MTA window does
    answers_ranges: ClassVar[bool] = True

    def aggregate_range(
        self,
        *,
        count: int | None = None,
        time_range: Any = None,
        field: str | None = None,
    ) -> tuple[Any, int]:
        """The lifted aggregate of a suffix of the window and how many items it holds: the
        newest ``count`` items, or those a :class:`~.policies.TimeRangePolicy` of
        ``time_range`` over ``field`` would keep (:mod:`.suffix`). Read-only, O(log n):
        the boundary searched over the aggregates (Algorithm 2's descent, nothing evicted),
        then the fewest elements inside the suffix combined oldest first; the pairs of the
        middle levels read through the head cache, else fetched together (one round trip for
        a count, a few for a time range), never pinned or cached."""
        q = check_suffix(f"{type(self).__name__}.aggregate_range", count, time_range, field)
        self._check_usable()
        n = self._next - self._first
        got: dict[tuple[int, int], Any] = {}
        if q.count is not None:
            s = self._next - min(n, q.count)
        else:
            keep = q.keep(self.monoid)
            if not n:
                return self._identity, 0
            s = self._suffix_start(self.aggregate(), keep, got)
        if s == self._first:
            return self.aggregate(), n
        if s == self._next:
            return self._identity, 0
        return self._suffix_fold(s, got), self._next - s

    def clear(self) -> None:
        """Evict everything."""
        self._check_usable()
        self._bulk_evicted += len(self)
        self._clear()
        if self._hook is not None:
            self._record("c", ())

    def _undo_inserts(self, new_next: int) -> None:
        try:
            self._truncate_leaves(new_next)
            self._after_truncate()
        except BaseException as ex:
            self._raise_midway(ex, "undoing a refused insert")

    def _commit(self, k: int) -> None:
        try:
            if self._hook is not None and k > 1:
                self._fetch_heads(self._first + k)
            self._evict(k)
        except BaseException as ex:
            self._raise_midway(ex, f"evicting {k} items")

    def _settle(self) -> None:
        """Run the recomputations the stages of this operation requested, once (section 5.2)."""

    def _insert_many(self, us: list[Any]) -> None:
        ins = self._insert_lifted
        for u in us:
            ins(u)

    # ------------------------------------------------------------------ per algorithm
    def _snapshot_results(
        self, state: dict[str, Any], values: list[Any]
    ) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _restore_results(
        self, state: dict[str, Any], values: Any
    ) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _window_aggregate(self) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def _insert_lifted(self, u: Any, r1: Any = UNSET) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _plan(self) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    def _evict(self, k: int) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _after_truncate(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError
