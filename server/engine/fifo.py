"""The reference papers' FIFO aggregators behind one contract, and the window that hosts any of them.

An :class:`Aggregator` is an algorithm of one paper and nothing else: it holds lifted items in
arrival order and answers three calls, ``insert(u)`` (the newest), ``evict()`` (the oldest) and
``query()`` (the lifted aggregate of everything held, oldest first: ``combine`` is never asked
to commute unless the card says so). Each one carries its :class:`FactCard` (paper, ordering,
operator requirements, costs, deviations) and the monoid capabilities it needs
(``requires``, of :func:`~.monoids.capabilities`).

:class:`AggregatorWindow` gives any aggregator the contract of the MTA windows
(:class:`~.mta_window.MTAWindow`): ``push``, ``extend``, ``insert``, ``enforce``, ``query``,
``aggregate``, ``clear``, ``len``, ``apply_lifted`` with per-item totals, ``preview_lifted``,
``load_lifted``, idempotency keys, and the durability seam a Redis store calls (``snapshot``,
``restore``, ``replay``). So every engine is served, checkpointed, restored after kill -9 and
moved like an MTA window.

Enforcement has the MTA engines' semantics (:mod:`.policies`): after the inserts, the longest
prefix P (oldest first) with ``policy(total, agg(P))`` leaves, ``total`` being the aggregate
with the new items. **Search, then commit**: the prefix is found before anything changes
(``Aggregator.search`` walks the items oldest first, O(k + 1) combines for k leaving; FlatFAT
and B-Int descend their tree in O(log n)), so a policy or monoid that raises leaves the window
exactly as it was.

**Storage.** These algorithms keep every item in the process: none keeps a middle in Redis.
With a store, a checkpoint writes the window's items in full (O(n) per flush, where an MTA
window writes its few local pairs), and a restart rebuilds the structure from them (O(n)). For
large durable windows AMTA and LMTA are the right choice; ``GetWindow`` reports it (each
card's ``storage``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, ClassVar

from ..sentinels import UNSET
from ..storage.protocol import PairStore, StoreError, WindowStore
from .ledger import Ledger
from .monoids import Monoid, capabilities
from .policies import bind_policy
from .seam import StoreSeam, WindowCorruptedError, require_monoid
from .suffix import RangeNotSupportedError, check_suffix

__all__ = [
    "Aggregator",
    "AggregatorWindow",
    "EngineRefusal",
    "FactCard",
]


@dataclass(frozen=True)
class FactCard:
    """What a user weighs an algorithm by (shown by the docs and ``GetWindow``)."""

    name: str  # the enum name: "DABA"
    full_name: str
    paper: str  # which of ../shared/papers, and its authors
    ordering: str  # FIFO (in-order) for all of these
    requires: str  # the operator's requirements, in words
    time: str  # amortized / worst case per insert and evict, and query
    space: str
    bulk: str  # bulk eviction (and insertion)
    storage: str  # where the state lives (none of these keeps a middle in Redis)
    deviations: str  # from the paper, and why

    def as_dict(self) -> dict[str, str]:
        return dict(self.__dict__)


class EngineRefusal(ValueError):
    """An algorithm cannot run this monoid or policy (``field``: what is refused)."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.field = field


class Aggregator:
    """One FIFO aggregation algorithm over lifted items (see the module docstring).

    Subclasses implement ``__len__``, ``insert``, ``evict`` and ``query``, and ``items``
    (oldest first) unless they keep a list the default reads. The defaults of
    :meth:`evict_many`, :meth:`search` and :meth:`check` are correct for any of them; an
    algorithm with a faster way overrides them."""

    card: ClassVar[FactCard]
    #: monoid capabilities it needs, each of :func:`~.monoids.capabilities`' names
    requires: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, monoid: Monoid) -> None:
        self.monoid = monoid
        self.combine = monoid.combine
        self.identity = monoid.identity

    def __len__(self) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    def insert(self, u: Any) -> None:  # pragma: no cover - abstract
        """Append the lifted item ``u`` (the newest)."""
        raise NotImplementedError

    def evict(self) -> None:  # pragma: no cover - abstract
        """Remove the oldest item (the window is not empty)."""
        raise NotImplementedError

    def query(self) -> Any:  # pragma: no cover - abstract
        """The lifted aggregate of every item held, oldest first; the identity when empty."""
        raise NotImplementedError

    def items(self) -> Iterator[Any]:  # pragma: no cover - abstract
        """The lifted items, oldest first."""
        raise NotImplementedError

    #: answers a suffix of itself at query time (:mod:`.suffix`): ``query_suffix`` in
    #: O(log n) (FlatFIT: amortized O(1)) and the boundary of a time range by
    #: :meth:`leaving_items`; the others fold their items, and the service refuses them
    answers_ranges: ClassVar[bool] = False

    def leaving_items(self, leaves: Callable[[Any], bool]) -> int:
        """How many of the oldest items a query-time range leaves out: the longest prefix P
        with ``leaves(agg(P))``, for a time range's rule (``leaves`` is prefix-monotone, and
        true of a prefix exactly when true of its newest item: timestamps never go
        backwards). By default :meth:`search`; FlatFIT bisects its items."""
        return self.search(leaves)

    def query_suffix(self, r: int) -> Any:
        """The lifted aggregate of the newest ``r`` items, oldest first (the identity for
        ``r == 0``), for ``0 <= r <= len`` (ValueError otherwise): the query of a range ``r``
        over the same items (the papers' multi-query environments). By default a fold of
        :meth:`items`, O(n); FlatFAT and B-Int answer in O(log n), FlatFIT with its pointers
        (path compression shared by every range), SlickDeque from its deque or its running
        totals. Changes no item (FlatFIT compresses its pointers)."""
        n = len(self)
        if not 0 <= r <= n:
            msg = f"{type(self).__name__}.query_suffix: r = {r} is outside 0 .. len = {n}"
            raise ValueError(msg)
        combine = self.combine
        acc = self.identity
        skip = n - r
        for i, u in enumerate(self.items()):
            if i >= skip:
                acc = combine(acc, u)
        return acc

    def evict_many(self, k: int) -> None:
        """Remove the ``k`` oldest items (``k <= len``)."""
        evict = self.evict
        for _ in range(k):
            evict()

    def search(self, leaves: Callable[[Any], bool], extra: Sequence[Any] = ()) -> int:
        """The length of the longest prefix P of the items followed by ``extra`` (items about
        to be inserted) with ``leaves(agg(P))``, for a prefix-monotone ``leaves``: by default
        the items are walked oldest first, O(k + 1) combines for k leaving. Changes nothing."""
        combine = self.combine
        sub: Any = UNSET
        k = 0
        for u in self.items() if len(self) else ():
            cand = u if sub is UNSET else combine(sub, u)
            if not leaves(cand):
                return k
            sub = cand
            k += 1
        for u in extra:
            cand = u if sub is UNSET else combine(sub, u)
            if not leaves(cand):
                return k
            sub = cand
            k += 1
        return k

    def check(self) -> None:
        """Check the structure against a fold of its items (debug mode runs it after every
        operation); raises AssertionError naming what differs."""
        acc = self.identity
        for u in self.items():
            acc = self.combine(acc, u)
        got = self.query()
        from .laws import approx_equal

        if not approx_equal(got, acc):
            msg = f"{type(self).__name__}: query() gives {got!r}, a fold of its items {acc!r}"
            raise AssertionError(msg)


def check_engine(cls: type[Aggregator], monoid: Monoid, policy: Any = None) -> None:
    """Refuse (:class:`EngineRefusal`) a monoid without the capabilities ``cls`` needs, and a
    policy it cannot evaluate, naming what is missing."""
    refuse_monoid = getattr(cls, "refuse_monoid", None)
    if refuse_monoid is not None:
        why = refuse_monoid(monoid)
        if why:
            msg = f"{cls.card.name} {why}"
            raise EngineRefusal(msg, field="spec.algorithm")
    have = capabilities(monoid)
    missing = sorted(cls.requires - have)
    if missing:
        name = cls.card.name
        need = " and ".join(missing)
        kinds = _kinds(monoid)
        msg = (
            f"{name} needs a monoid with {need} ({cls.card.requires}); {kinds} "
            f"{'has' if ',' not in kinds else 'have'} {', '.join(sorted(have)) or 'none of these'}"
        )
        raise EngineRefusal(msg, field="spec.algorithm")
    refuse = getattr(cls, "refuse_policy", None)
    if refuse is not None and policy is not None:
        why = refuse(policy)
        if why:
            msg = f"{cls.card.name} {why}"
            raise EngineRefusal(msg, field="spec.policy")


def _kinds(monoid: Any) -> str:
    parts = getattr(monoid, "fields", None)
    if isinstance(parts, dict):
        return ", ".join(f"{n} ({type(m).__name__})" for n, m in parts.items())
    return type(monoid).__name__


class AggregatorWindow(StoreSeam):
    """A window run by an :class:`Aggregator` (``aggregator``, set by each engine's class),
    with the MTA windows' contract (see the module docstring).

    ``store``: a :class:`~mtawindows.server.storage.protocol.WindowStore` (the Redis store)
    keeps it durable through checkpoints of its items; a plain pair store adds nothing (these
    algorithms keep no level in it) and is ignored; ``None``: in memory."""

    aggregator: ClassVar[type[Aggregator]]

    def __init__(
        self,
        monoid: Monoid,
        policy: Any,
        *,
        store: PairStore | None = None,
        debug: bool = False,
    ) -> None:
        require_monoid(type(self).__name__, monoid)
        check_engine(self.aggregator, monoid, policy)
        self.monoid = monoid
        self.policy = policy
        self._policy = bind_policy(policy, monoid)
        self.debug = debug
        self._lift = monoid.lift
        self._combine = monoid.combine
        self._lower = monoid.lower
        self._core = self.aggregator(monoid)
        self._total: Any = UNSET
        self._inserted = 0
        self._evicted = 0
        self._bulk_evicted = 0
        self.bulk_evictions = 0
        self.recomputes = 0
        self._ledger = Ledger()
        # changes since it was made (operations recorded, log entries replayed) and as of its
        # last checkpoint with that checkpoint's meta: an unchanged window is not written again
        self._changes = 0
        self._clean: tuple[int, Any] = (-1, None)
        self._broken: BaseException | None = None
        self._stale = False
        self.on_stale: Callable[[], None] | None = None
        self.store = store if isinstance(store, WindowStore) else None
        self._hook: WindowStore | None = self.store
        if self._hook is not None:
            self._hook.attach(self)

    # ------------------------------------------------------------------ identity
    @property
    def algorithm(self) -> str:
        return self.aggregator.card.name

    @property
    def card(self) -> FactCard:
        return self.aggregator.card

    @classmethod
    def open(
        cls, window_id: str, monoid: Monoid, policy: Any, *, url: str | None = None, **options: Any
    ) -> Any:
        """Reopen the Redis-backed window ``window_id`` (its last checkpoint and log)."""
        from ..storage import reopen_store

        own = {k: options.pop(k) for k in ("debug",) if k in options}
        try:
            store = reopen_store(window_id, url=url, **options)
        except LookupError as ex:
            msg = f"{cls.__name__}.open: {ex}"
            raise LookupError(msg) from None
        return cls(monoid, policy, store=store, **own)

    def __len__(self) -> int:
        return len(self._core)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(size={len(self)}, monoid={self.monoid!r}, "
            f"policy={self.policy!r})"
        )

    @property
    def inserted(self) -> int:
        return self._inserted

    @property
    def evicted(self) -> int:
        return self._evicted

    @property
    def levels(self) -> int:
        return 0

    def items(self) -> list[Any]:
        """The lifted items in the window, oldest first."""
        return list(self._core.items())

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "algorithm": self.algorithm,
            "size": len(self),
            "levels": 0,
            "inserted": self._inserted,
            "evicted": self._evicted,
            "single_evictions": self._evicted - self._bulk_evicted,
            "bulk_evictions": self.bulk_evictions,
            "recomputes": self.recomputes,
            "local_pairs": 0,
            "local_items": len(self),
        }
        if self.store is not None:
            out["store"] = self.store.stats.as_dict()
        return out

    def check_invariants(self) -> None:
        self._core.check()

    # ------------------------------------------------------------------ reads
    def aggregate(self) -> Any:
        """The lifted aggregate of the whole window (the ``total`` a policy sees)."""
        self._check_usable()
        total = self._total
        if total is UNSET:
            total = self._total = self._core.query()
        return total

    def query(self) -> Any:
        """``lower`` of the aggregate of the window."""
        return self._lower(self.aggregate())

    @property
    def answers_ranges(self) -> bool:
        """Whether its algorithm answers query-time ranges (:mod:`.suffix`)."""
        return self.aggregator.answers_ranges

    def aggregate_range(
        self,
        *,
        count: int | None = None,
        time_range: Any = None,
        field: str | None = None,
    ) -> tuple[Any, int]:
        """The lifted aggregate of a suffix of the window and how many items it holds, as
        :meth:`~.mta_window.MTAWindow.aggregate_range`: the aggregator's ``query_suffix``
        over the newest ``count`` items, or over those a time range keeps (the boundary by
        the aggregator's :meth:`~Aggregator.leaving_items`: FlatFAT's and B-Int's O(log n)
        search, FlatFIT's bisection of its items). :class:`~.suffix.RangeNotSupportedError`
        for an algorithm that answers no suffix in less than a fold of the window."""
        owner = f"{type(self).__name__}.aggregate_range"
        q = check_suffix(owner, count, time_range, field)
        if not self.aggregator.answers_ranges:
            msg = (
                f"{self.algorithm} answers no query-time range (it keeps no aggregate of a "
                "suffix it is not about to evict); AMTA, LMTA, FLATFAT, BINT and FLATFIT do"
            )
            raise RangeNotSupportedError(self.algorithm, msg)
        self._check_usable()
        core = self._core
        n = len(core)
        if q.count is not None:
            r = min(n, q.count)
        else:
            keep = q.keep(self.monoid)
            if not n:
                return self.monoid.identity, 0
            total = self.aggregate()
            r = n - core.leaving_items(lambda sub: keep(total, sub))
        if r == n:
            return self.aggregate(), n
        return core.query_suffix(r), r

    # ------------------------------------------------------------------ the algorithm
    def _plan(self, extra: Sequence[Any]) -> tuple[Any, int]:
        """(the total with ``extra`` appended, how many of the oldest leave): changes nothing."""
        combine = self._combine
        total = self._total if self._total is not UNSET else self._core.query()
        for u in extra:
            total = combine(total, u)
        if not len(self._core) and not extra:
            return total, 0
        policy = self._policy
        k = self._core.search(lambda sub: policy(total, sub), extra)
        return total, k

    def _apply(self, lifted: Sequence[Any]) -> int:
        """Insert ``lifted``, enforce once (search, then commit). Returns the items evicted."""
        total, k = self._plan(lifted)  # a raise here changes nothing
        core = self._core
        try:
            for u in lifted:
                core.insert(u)
            if k:
                core.evict_many(k)
        except BaseException as ex:
            self._corrupted(ex, "inserting and evicting")
        self._inserted += len(lifted)
        self._evicted += k
        if k > 1:
            self.bulk_evictions += 1
            self._bulk_evicted += k
        self._total = total if not k else UNSET
        return k

    def _apply_one(self, u: Any) -> int:
        """:meth:`_apply` of one item, inlined (a push, a row of per-row results)."""
        core = self._core
        total = self._total
        if total is UNSET:
            total = core.query()
        total = self._combine(total, u)  # a raise here changes nothing
        policy = self._policy
        if len(core):
            k = core.search(lambda sub: policy(total, sub), (u,))
        else:
            k = 1 if policy(total, u) else 0
        try:
            core.insert(u)
            if k == 1:
                core.evict()
            elif k:
                core.evict_many(k)
        except BaseException as ex:
            self._corrupted(ex, "inserting and evicting")
        self._inserted += 1
        if k:
            self._evicted += k
            if k > 1:
                self.bulk_evictions += 1
                self._bulk_evicted += k
            self._total = UNSET
        else:
            self._total = total
        return k

    def _corrupted(self, ex: BaseException, doing: str) -> None:
        self._broken = ex
        msg = f"{type(self).__name__}: the monoid raised while {doing}"
        raise WindowCorruptedError(msg) from ex

    # ------------------------------------------------------------------ operations
    def push(self, x: Any, producer_id: str | None = None, sequence: int | None = None) -> Any:
        """Insert ``x``, enforce the policy and return the result."""
        if producer_id is None and sequence is None and self._broken is None:
            u = self._lift(x)  # the common case, without the checks' calls
            self._apply_one(u)
            if self._hook is not None:
                self._record("x", (u,))
            if self.debug:
                self.check_invariants()
            total = self._total
            if total is UNSET:
                total = self._total = self._core.query()
            return self._lower(total)
        if self._admit(producer_id, sequence):
            return self.query()
        u = self._lift(x)
        self._apply_one(u)
        self._applied("x", (u,), producer_id, sequence)
        if self.debug:
            self.check_invariants()
        return self.query()

    def extend(
        self, xs: Iterable[Any], producer_id: str | None = None, sequence: int | None = None
    ) -> int:
        """Insert every item, then enforce once; all or nothing. Returns the items evicted."""
        if self._admit(producer_id, sequence):
            return 0
        lift = self._lift
        lifted = [lift(x) for x in xs]
        k = self._apply(lifted)
        self._applied("x", lifted, producer_id, sequence)
        if self.debug:
            self.check_invariants()
        return k

    def insert(self, x: Any) -> None:
        """Lift ``x`` and append it; no eviction."""
        self._check_usable()
        u = self._lift(x)
        self._insert_lifted(u)
        self._record("i", (u,))
        if self.debug:
            self.check_invariants()

    def _insert_lifted(self, u: Any) -> None:
        total = self._total if self._total is not UNSET else self._core.query()
        total = self._combine(total, u)  # refuse what the monoid cannot combine
        try:
            self._core.insert(u)
        except BaseException as ex:
            self._corrupted(ex, "inserting")
        self._inserted += 1
        self._total = total

    def enforce(self) -> int:
        """Apply the slide policy: evict the longest prefix it allows."""
        self._check_usable()
        k = self._apply(())
        if k:
            self._record("e", ())
        if self.debug:
            self.check_invariants()
        return k

    def clear(self) -> None:
        """Evict everything."""
        self._check_usable()
        self._clear()
        self._record("c", ())

    def _clear(self) -> None:
        n = len(self._core)
        self._evicted += n
        self._bulk_evicted += n
        self._core = self.aggregator(self.monoid)
        self._total = UNSET

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
        """As :meth:`~.mta_window.MTAWindow.apply_lifted`: items already lifted, as
        ``extend`` (default) or item by item (``per_item``, or ``totals`` and ``sizes``
        receiving the aggregate and size after each). Never waits for a store on the way
        (the items are local; only a checkpoint writes), so ``nonblocking`` changes nothing."""
        if self._admit(producer_id, sequence):
            return 0
        if totals is None and not per_item:
            k = self._apply(lifted)
            self._applied("x", lifted, producer_id, sequence)
        else:
            if (totals is None) != (sizes is None):
                msg = "apply_lifted: totals and sizes go together"
                raise TypeError(msg)
            k = 0
            one = self._apply_one
            for u in lifted:
                k += one(u)
                if totals is not None:
                    total = self._total
                    if total is UNSET:
                        total = self._total = self._core.query()
                    totals.append(total)
                    sizes.append(len(self._core))  # type: ignore[union-attr]
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
        """What :meth:`apply_lifted` would make of ``lifted`` without applying it: the
        aggregate after the batch (and with ``totals``/``sizes``, after every item). Runs the
        batch on a copy of the items (O(n + m)): the service asks only for plugin monoids."""
        self._check_usable()
        scratch = type(self)(self.monoid, self.policy)
        for u in self._core.items():
            scratch._core.insert(u)
        scratch.apply_lifted(list(lifted), per_item=per_item, totals=totals, sizes=sizes)
        return scratch.aggregate()

    def load_lifted(self, lifted: list[Any]) -> None:
        """Append items already lifted and enforced (a keyed compact window growing): no
        policy runs. All or nothing."""
        self._check_usable()
        combine = self._combine
        total = self._total if self._total is not UNSET else self._core.query()
        for u in lifted:
            total = combine(total, u)
        core = self._core
        try:
            for u in lifted:
                core.insert(u)
        except BaseException as ex:
            self._corrupted(ex, "loading items")
        self._inserted += len(lifted)
        self._total = total
        if self.debug:
            self.check_invariants()

    # ------------------------------------------------------------------ idempotency, failures
    def _record(
        self,
        op: str,
        items: Sequence[Any],
        producer_id: str | None = None,
        sequence: int | None = None,
    ) -> None:
        if self._hook is None:
            return
        self._changes += 1
        try:
            self._hook.record(self, op, items, producer_id, sequence)
        except StoreError as ex:
            self._store_failed(ex)
            raise

    # ------------------------------------------------------------------ the store
    def flush(self, *, wait: bool = True, meta: dict[str, Any] | None = None) -> Any:
        """A checkpoint of every item (no-op in memory); returns its future. A window that
        did not change since its last checkpoint (with the same ``meta``) writes nothing: a
        checkpoint of these algorithms holds every item, and an idle window must cost no
        Redis work."""
        self._check_usable()
        if self._hook is None:
            return None
        if self._changes == self._clean[0] and meta == self._clean[1]:
            done: Future[None] = Future()
            done.set_result(None)
            return done
        try:
            queued = self._hook.checkpoint(self, wait=wait, meta=meta)
        except StoreError as ex:
            self._store_failed(ex)
            raise
        self._clean = (self._changes, meta)
        return queued

    def flush_full_blocks(self) -> None:
        """Nothing: these algorithms write no blocks."""

    # -- the durability seam (storage.protocol.CheckpointedWindow)
    @property
    def level_queues(self) -> tuple[Any, ...]:
        return ()

    def snapshot(self) -> tuple[dict[str, Any], list[Any]]:
        """The window as plain data + its items, oldest first (for a checkpoint)."""
        state = {
            "algorithm": self.algorithm,
            "inserted": self._inserted,
            "evicted": self._evicted,
            "bulk_evicted": self._bulk_evicted,
            "bulk_evictions": self.bulk_evictions,
            "producers": self._ledger.snapshot(),
        }
        return state, list(self._core.items())

    def restore(self, state: dict[str, Any] | None, values: list[Any]) -> None:
        """Inverse of :meth:`snapshot` (``None``: a new window): the structure is rebuilt
        by inserting the items again, O(n)."""
        self._core = self.aggregator(self.monoid)
        self._total = UNSET
        self._ledger = Ledger()
        self._inserted = self._evicted = self._bulk_evicted = self.bulk_evictions = 0
        if state is None:
            return
        if state["algorithm"] != self.algorithm:
            msg = f"checkpoint of a {state['algorithm']} window, opened as {self.algorithm}"
            raise ValueError(msg)
        for u in values:
            self._core.insert(u)
        self._inserted = int(state["inserted"])
        self._evicted = int(state["evicted"])
        self._bulk_evicted = int(state["bulk_evicted"])
        self.bulk_evictions = int(state["bulk_evictions"])
        self._ledger = Ledger(state["producers"])
        if self._inserted - self._evicted != len(values):
            msg = f"checkpoint says {self._inserted - self._evicted} items, holds {len(values)}"
            raise ValueError(msg)

    def replay(
        self, op: str, items: Sequence[Any], producer_id: str | None, sequence: int | None
    ) -> None:
        """Apply one logged operation (lifted items) again."""
        self._changes += 1
        if op == "x":
            self._apply(list(items))
        elif op == "p":
            for u in items:
                self._apply_one(u)
        elif op == "i":
            for u in items:
                self._insert_lifted(u)
        elif op == "e":
            self._apply(())
        elif op == "c":
            self._clear()
        else:
            msg = f"unknown logged operation {op!r}"
            raise ValueError(msg)
        if producer_id is not None and sequence is not None:
            self._ledger.record(producer_id, sequence)
