"""Windows sharing one columnar window's rows (members, ``ColumnarWindow.attach``): each member
against the per-row engine fed the same rows from its attach on, batch by batch (every
per-row result and size, its result after each batch, its query-time ranges by count); the
window's own results against its own per-row engine, whatever its members hold; members that
leave (``detach``); and a stored window reopened from its checkpoint giving its members back
where they were (a crash losing what followed the checkpoint)."""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mtawindows.server.engine import (
    AmortizedMTA,
    Count,
    CountPolicy,
    Max,
    Record,
    Sum,
    TimeRangePolicy,
)
from mtawindows.server.engine.columnar import ColumnarWindow
from mtawindows.server.storage.slice_store import SliceStore

from .test_columnar_window import APPROX, POLICIES, RECORDS, _plain, _row, assert_row, batches


def _record(kind: str, fields: list[str]) -> Record:
    full = RECORDS[kind]()
    parts = dict(zip(full.names, full.monoids, strict=True))
    return Record(**{name: parts[name] for name in fields})


class _Ref:
    """The per-row engine of one window (the oracle) and the rows in its window."""

    def __init__(self, monoid: Any, policy: Any) -> None:
        self.monoid = monoid
        self.engine = AmortizedMTA(monoid, policy)
        self.window: list[dict[str, Any]] = []

    def check(
        self, got: Any, cols: dict[str, np.ndarray], per_row: bool, final: Any, size: int
    ) -> None:
        n = len(cols["ts"])
        rows = [_row(cols, i) for i in range(n)]
        totals: list[Any] = []
        sizes: list[int] = []
        self.engine.apply_lifted([self.monoid.lift(r) for r in rows], totals=totals, sizes=sizes)
        if per_row:
            assert got.rows is not None and got.sizes is not None
            assert got.sizes.tolist() == sizes
            for i, (g, t) in enumerate(zip(got.rows.to_pylist(), totals, strict=True)):
                self.window = ([*self.window, rows[i]])[len(self.window) + 1 - sizes[i] :]
                assert_row(i, g, self.monoid.lower(t), self.window)
        else:
            assert got.rows is None
            self.window = ([*self.window, *rows])[len(self.window) + n - len(self.engine) :]
        assert size == len(self.engine)
        want = self.engine.query()
        for name, ref_v in want.items():
            if name not in APPROX:
                assert _plain(final[name]) == _plain(ref_v), (name, final[name], ref_v)
        assert got.evicted >= 0

    def feed(self, cols: dict[str, np.ndarray]) -> None:
        rows = [_row(cols, i) for i in range(len(cols["ts"]))]
        self.engine.apply_lifted([self.monoid.lift(r) for r in rows])
        self.window = [*self.window, *rows][
            max(0, len(self.window) + len(rows) - len(self.engine)) :
        ]


def _ranges(fast: ColumnarWindow, ref: _Ref, member: str | None) -> None:
    """Query-time ranges by count: the member's newest rows, exact fields as the engine's."""
    n = len(ref.engine)
    for c in (0, 1, n // 2, n, n + 3):
        got, k = fast.aggregate_range(count=c, member=member)
        want, j = ref.engine.aggregate_range(count=c)
        assert k == j
        low, ref_low = ref.monoid.lower(got), ref.monoid.lower(want)
        for name, v in ref_low.items():
            if name not in APPROX:
                assert _plain(low[name]) == _plain(v), (c, name, low[name], v)


@st.composite
def members(draw: Any, kind: str, window: Any) -> list[tuple[str, list[str], Any, int, int | None]]:
    """(name, its fields of the window's record, its policy, the batch it joins before, the
    batch it leaves before or None). A time-range member needs a window over timestamps."""
    names = list(RECORDS[kind]().names)
    timed = isinstance(window, TimeRangePolicy)
    out = []
    for j in range(draw(st.integers(1, 3))):
        policy = draw(POLICIES.filter(lambda p: timed or isinstance(p, CountPolicy)))
        need = "n" if isinstance(policy, CountPolicy) else "ts"
        chosen = set(draw(st.lists(st.sampled_from(names), unique=True)))
        fields = [x for x in names if x in chosen or x == need]
        at = draw(st.integers(0, 4))
        gone = draw(st.one_of(st.none(), st.integers(at + 1, 12)))
        out.append((f"m{j}", fields, policy, at, gone))
    return out


def _window_record(kind: str, policy: Any, counted: bool) -> Record:
    """The window's record: every field of ``kind``'s, or (``counted``, a time range) all but
    its Count: a member's Count is then its rows (the window has none to share)."""
    if not counted or not isinstance(policy, TimeRangePolicy):
        return RECORDS[kind]()
    return _record(kind, [x for x in RECORDS[kind]().names if x != "n"])


def _drive(
    kind: str,
    policy: Any,
    slice_rows: int,
    data: list[dict[str, np.ndarray]],
    plan: list[tuple[str, list[str], Any, int, int | None]],
    counted: bool = False,
) -> None:
    monoid = _window_record(kind, policy, counted)
    fast = ColumnarWindow(monoid, policy, slice_rows=slice_rows)
    own = _Ref(monoid, policy)
    refs: dict[str, _Ref] = {}
    for b, cols in enumerate(data):
        for name, fields, pol, at, gone in plan:
            if b == at:
                m = _record(kind, fields)
                fast.attach(name, m, pol)
                refs[name] = _Ref(m, pol)
            if gone == b and name in refs:
                fast.detach(name)
                del refs[name]
        per_row = b % 3 != 2
        got = fast.apply(cols, per_row=per_row, member_rows=set(refs) if per_row else set())
        own.check(got, cols, per_row, fast.query(), len(fast))
        assert set(got.members) == set(refs)
        for name, ref in refs.items():
            low = ref.monoid.lower(fast.member_aggregate(name))
            ref.check(got.members[name], cols, per_row, low, fast.member_size(name))
        if b % 4 == 3:
            _ranges(fast, own, None)
            for name, ref in refs.items():
                _ranges(fast, ref, name)
    # the window holds exactly the rows its longest member needs: no fewer (checked above),
    # and not more than the longest holds once every member has passed a batch
    held = fast.next - fast.head_from
    need = max([len(own.engine), *(len(r.engine) for r in refs.values())])
    assert held >= need


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(sorted(RECORDS)),
    policy=POLICIES,
    slice_rows=st.sampled_from([2, 3, 8, 64, 4096]),
    data=batches(),
    seed=st.data(),
    counted=st.booleans(),
)
def test_every_member_equals_its_own_per_row_engine(
    kind: str,
    policy: Any,
    slice_rows: int,
    data: list[dict[str, np.ndarray]],
    seed: Any,
    counted: bool,
) -> None:
    """``counted``: a time window without a Count of its own, its members' counts (a count
    policy's) their rows."""
    _drive(kind, policy, slice_rows, data, seed.draw(members(kind, policy)), counted)


def test_a_member_reads_only_fields_the_window_has() -> None:
    w = ColumnarWindow(Record(m=Max("v"), n=Count(), ts=Max("ts")), CountPolicy(5, field="n"))
    with pytest.raises(ValueError, match="no field"):
        w.attach("a", Record(s=Sum("v"), n=Count()), CountPolicy(3, field="n"))
    with pytest.raises(ValueError, match="empty or taken"):
        w.attach("", Record(m=Max("v"), n=Count()), CountPolicy(3, field="n"))
    with pytest.raises(ValueError, match="timestamps are None"):
        w.attach("t", Record(m=Max("v"), ts=Max("ts")), TimeRangePolicy(3, field="ts"))
    assert w.members == {}
    w.attach("b", Record(n=Count(), m=Max("v")), CountPolicy(2, field="n"))
    with pytest.raises(ValueError, match="empty or taken"):
        w.attach("b", Record(m=Max("v"), n=Count()), CountPolicy(3, field="n"))
    got = w.apply({"v": np.array([3.0, 1.0, 2.0]), "ts": np.array([1, 2, 3])}, per_row=True)
    assert got.members["b"].rows is None  # its per-row results were not asked
    assert w.member_aggregate("b") == (2, 2.0) and w.member_size("b") == 2
    assert w.query() == {"m": 3.0, "n": 3, "ts": 3}


def test_a_retired_window_holds_only_its_members_rows_and_checks_only_their_fields() -> None:
    """``retire``: the window's own policy holds no row from the next batch on; a value only
    its own fields refused (a NaN under a Max no member has) is taken; a member's fields
    still refuse theirs; the members' results are those of their own engines."""
    w = ColumnarWindow(Record(s=Sum("v"), mx=Max("w"), n=Count()), CountPolicy(50, field="n"))
    w.attach("a", Record(s=Sum("v"), n=Count()), CountPolicy(3, field="n"))
    seen: list[float] = []
    nan = float("nan")
    with pytest.raises(ValueError, match="Max: expected an ordered number, got nan"):
        w.prepare({"v": np.array([1.0]), "w": np.array([nan])})
    for b in range(6):
        if b == 2:
            w.retire()
            assert w.dead == frozenset({1})
        vs = np.arange(b * 5, b * 5 + 5, dtype=float)
        ws = np.full(5, nan) if b >= 2 else vs
        got = w.apply({"v": vs, "w": ws}, member_rows={"a"})
        rows = got.members["a"].rows.to_pylist()
        for i, v in enumerate(vs.tolist()):
            seen.append(v)
            assert rows[i] == {"s": sum(seen[-3:]), "n": len(seen[-3:])}, (b, i)
        assert w.member_aggregate("a") == (sum(seen[-3:]), 3)
    assert w.next - w.head_from == 3  # only the member's rows are held
    with pytest.raises((TypeError, ValueError), match="Sum"):
        w.prepare({"v": np.array(["text"], dtype=object), "w": np.array([1.0])})
    w.detach("a")
    assert w.dead == frozenset({0, 1, 2})


STEPS = st.sampled_from(["go", "go", "checkpoint", "checkpoint+crash", "crash"])


@pytest.mark.redis
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(sorted(RECORDS)),
    policy=POLICIES,
    slice_rows=st.sampled_from([2, 8, 64]),
    data=batches(),
    seed=st.data(),
    counted=st.booleans(),
)
def test_a_stored_window_gives_its_members_back_after_a_crash(
    redis_url: str,
    kind: str,
    policy: Any,
    slice_rows: int,
    data: list[dict[str, np.ndarray]],
    seed: Any,
    counted: bool,
) -> None:
    """Members attached again to a window reopened from its store start where its last
    checkpoint had them; the oracles replay what that checkpoint covered."""
    plan = seed.draw(members(kind, policy))
    steps = seed.draw(st.lists(STEPS, min_size=len(data), max_size=len(data)))
    wid = f"test-cm-{uuid.uuid4().hex}"
    monoid = _window_record(kind, policy, counted)

    def open_window() -> ColumnarWindow:
        store = SliceStore(redis_url, window_id=wid)
        return ColumnarWindow(monoid, policy, slice_rows=slice_rows, store=store, local_slices=1)

    fast = open_window()
    defs = {name: (_record(kind, fields), pol) for name, fields, pol, _, _ in plan}
    live: list[str] = []  # members attached, in order
    acked: list[tuple[list[str], dict[str, np.ndarray]]] = []  # (members then, batch)
    since: list[tuple[list[str], dict[str, np.ndarray]]] = []
    own = _Ref(monoid, policy)
    refs: dict[str, _Ref] = {}
    try:
        for b, (cols, step) in enumerate(zip(data, steps, strict=True)):
            for name, _, _, at, gone in plan:
                if b == at:
                    fast.attach(name, *defs[name])
                    refs[name] = _Ref(*defs[name])
                    live.append(name)
                if gone == b and name in refs:
                    fast.detach(name)
                    del refs[name]
                    live.remove(name)
            got = fast.apply(cols, per_row=True, member_rows=set(refs))
            own.check(got, cols, True, fast.query(), len(fast))
            for name, ref in refs.items():
                low = ref.monoid.lower(fast.member_aggregate(name))
                ref.check(got.members[name], cols, True, low, fast.member_size(name))
            since.append((list(live), cols))
            if "checkpoint" in step:
                fast.checkpoint()
                acked += since
                since = []
            if "crash" in step:
                assert fast.store is not None
                fast.store.abandon()
                fast = open_window()
                for name in live:  # the definitions live on (the service keeps them)
                    fast.attach(name, *defs[name])
                # the oracles: what the checkpoint covered, for the members then attached;
                # a member attached after it starts anew
                own = _Ref(monoid, policy)
                refs = {name: _Ref(*defs[name]) for name in live}
                first: dict[str, int] = {}
                for i, (names, old) in enumerate(acked):
                    own.feed(old)
                    for name in names:
                        first.setdefault(name, i)
                for name in live:
                    if name not in first or any(
                        name not in names for names, _ in acked[first[name] :]
                    ):
                        continue  # not in the checkpoint as it is now: anew
                    for _, old in acked[first[name] :]:
                        refs[name].feed(old)
                since = []
                assert len(fast) == len(own.engine)
                for name, ref in refs.items():
                    assert fast.member_size(name) == len(ref.engine), name
    finally:
        assert fast.store is not None
        fast.store.delete_window()
        fast.close()


def test_a_member_of_a_window_of_one_field() -> None:
    """A window whose monoid is one built-in (not a Record) shares it with a member that is
    that built-in alone or a Record of it."""
    w = ColumnarWindow(Max("ts"), TimeRangePolicy(10, field=None))
    w.attach("alone", Max("ts"), TimeRangePolicy(3, field=None))
    w.attach("record", Record(ts=Max("ts")), TimeRangePolicy(5, field="ts"))
    got = w.apply({"ts": np.array([1, 4, 6, 9])}, per_row=True, member_rows={"alone", "record"})
    assert got.members["alone"].sizes.tolist() == [1, 1, 2, 1]  # type: ignore[union-attr]
    assert got.members["record"].sizes.tolist() == [1, 2, 2, 2]  # type: ignore[union-attr]
    assert w.member_aggregate("alone") == 9 and w.member_aggregate("record") == (9,)
    assert w.member_size("record") == 2 and len(w) == 4
    w.apply({"ts": np.array([12])})  # no per-row results: the aggregates from the rows
    assert w.member_aggregate("alone") == 12 and w.member_aggregate("record") == (12,)
    assert w.aggregate_range(count=2, member="record") == ((12,), 2)
    assert w.aggregate_range(count=2, member="alone") == (12, 1)  # it holds one row


@pytest.mark.redis
def test_a_member_detached_after_a_reload_and_attached_again_starts_anew(redis_url: str) -> None:
    """Found from outside (through the service: a graceful restart, the member deleted, rows,
    the member made again under its name): the window still held the position its loaded
    checkpoint gave the name, and the new member took it (500 rows where 1, and per-row
    results failed on its stale start)."""
    wid = f"test-cm-{uuid.uuid4().hex}"
    monoid = Record(mx=Max("x"), n=Count())
    policy = CountPolicy(1000, field="n")

    def open_window() -> ColumnarWindow:
        return ColumnarWindow(
            monoid, policy, slice_rows=64, store=SliceStore(redis_url, window_id=wid)
        )

    def rows(a: int, b: int) -> dict[str, np.ndarray]:
        return {"x": np.arange(a, b, dtype=np.float64)}

    w = open_window()
    try:
        w.attach("m", Record(mx=Max("x"), n=Count()), CountPolicy(1000, field="n"))
        w.apply(rows(0, 10))
        w.checkpoint()
        w.close()
        w = open_window()  # (a restart: the checkpoint names the member at its position)
        w.attach("m", Record(mx=Max("x"), n=Count()), CountPolicy(1000, field="n"))
        assert w.member_size("m") == 10
        w.detach("m")
        w.apply(rows(10, 510))
        w.attach("m", Record(mx=Max("x"), n=Count()), CountPolicy(1000, field="n"))
        assert w.member_size("m") == 0
        got = w.apply(rows(510, 511), per_row=True, member_rows={"m"})
        assert got.members["m"].sizes.tolist() == [1]
        assert w.member_aggregate("m") == (510.0, 1)
    finally:
        assert w.store is not None
        w.store.delete_window()
        w.close()
