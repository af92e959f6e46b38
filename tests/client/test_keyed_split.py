"""The SDK's split of a keyed stream's calls by key-group holder, without servers: the pure
parts of :mod:`mtawindows.client.key_groups` (split an Append's rows, merge the answers, merge
ListKeys pages, split Subscribe keys), the topology's group holders (fake clock), and the
course of one split Append (:class:`KeyedAppend`) through refusals.

The oracle of the merge is a tiny keyed "server" in plain Python (:func:`serve`: each key's
window is its last three values; rows with a negative value are late and dropped; a group
may be a duplicate and skipped): one server given the whole batch must answer exactly what
the merge of the parts' answers says, whatever the holders (a hypothesis property).

The same against three real servers: ``test_keyed_split_cluster.py``.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from typing import Any

import hypothesis.strategies as st
import pyarrow as pa
import pytest
from hypothesis import given

from mtawindows.client import InternalError, InvalidArgumentError, NotOwnerError, calls
from mtawindows.client.calls import append_request
from mtawindows.client.cluster_map import Topology
from mtawindows.client.errors import MtaWindowsError, StreamMovingError, Violation
from mtawindows.client.key_groups import (
    KeyedAppend,
    Part,
    merge_append,
    merge_key_pages,
    missing_groups,
    renumber,
    split_append,
    split_keys,
)
from mtawindows.v1 import windows_pb2 as pb
from mtawindows.v1.keys import group_unit, key_group
from mtawindows.v1.placement import place
from mtawindows.v1.reasons import Reason

GROUPS = 16
MEMBERS = ("10.0.0.1:1", "10.0.0.2:1", "10.0.0.3:1")
SCHEMA = {"ts": "TIMESTAMP", "host": "STRING", "v": "DOUBLE"}
LAST = 3  # the oracle's window: each key's last three values


def holder_by(assign: Sequence[int]) -> Callable[[int], str]:
    """Group g held by MEMBERS[assign[g % len(assign)]]."""
    return lambda g: MEMBERS[assign[g % len(assign)]]


def columns_of(req: pb.AppendRequest) -> dict[str, list[Any]]:
    if req.arrow_ipc:
        return pa.ipc.open_stream(io.BytesIO(req.arrow_ipc)).read_all().to_pydict()
    return {c.name: list(getattr(c, c.WhichOneof("data")).values) for c in req.columns}


def batch(hosts: Sequence[str], vs: Sequence[float] | None = None) -> dict[str, list[Any]]:
    n = len(hosts)
    return {
        "ts": list(range(1, n + 1)),
        "host": list(hosts),
        "v": list(vs) if vs is not None else [float(i % 7) for i in range(n)],
    }


def request(rows: Any, **kw: Any) -> pb.AppendRequest:
    kw.setdefault("results", "per_row")
    return append_request(
        "s", rows, SCHEMA, kw.get("producer_id"), kw.get("sequence"), kw["results"], ()
    )


# --------------------------------------------------------------------------- the oracle server


def serve(
    req: pb.AppendRequest,
    state: dict[str, list[float]],
    duplicate_groups: frozenset[int] = frozenset(),
) -> pb.AppendResponse:
    """A keyed server holding every group: each row's key window (the last three values),
    negative values late (dropped), rows of ``duplicate_groups`` skipped (a replay); answers
    as the contract says (per-row entries of the applied rows in request order, ``rows`` when
    not every row was; FINAL results per key touched, in order of first row)."""
    cols = columns_of(req)
    entries: list[tuple[int, float, int]] = []
    late = 0
    skipped_groups: set[int] = set()
    applied_groups: set[int] = set()
    touched: list[str] = []
    for i, (h, v) in enumerate(zip(cols["host"], cols["v"], strict=True)):
        g = key_group(h, GROUPS)
        if g in duplicate_groups:
            skipped_groups.add(g)
            continue
        applied_groups.add(g)
        if v < 0:
            late += 1
            continue
        values = state.setdefault(h, [])
        values.append(v)
        window = values[-LAST:]
        entries.append((i, sum(window), len(window)))
        if h not in touched:
            touched.append(h)
    out = pb.AppendResponse(
        rows_applied=len(entries),
        rows_late=late,
        duplicate=bool(skipped_groups) and not applied_groups,
    )
    if req.results == pb.PER_ROW:
        rr = out.row_results.add(window="w")
        rr.columns.add(name="s").doubles.values.extend([s for _, s, _ in entries])
        rr.columns.add(name="n").ints.values.extend([n for _, _, n in entries])
        rr.sizes.values.extend([n for _, _, n in entries])
        if len(entries) != len(cols["host"]):
            rr.rows.values.extend([i for i, _, _ in entries])
    if req.results == pb.FINAL:
        for h in touched:
            window = state[h][-LAST:]
            r = out.results.add(window="w", key=h, size=len(window))
            r.values["s"].double_value = sum(window)
    return out


def split_and_serve(
    req: pb.AppendRequest,
    holder: Callable[[int], str],
    state: dict[str, list[float]],
    duplicate_groups: frozenset[int] = frozenset(),
) -> tuple[pb.AppendResponse, list[Part]]:
    split = split_append(req, "host", GROUPS, holder)
    assert split is not None
    parts, n = split
    answers = [(p.rows, serve(p.request, state, duplicate_groups)) for p in parts]
    return merge_append(n, answers, [p.address for p in parts]), parts


# --------------------------------------------------------------------------- the split


def test_a_batch_splits_by_the_holder_of_each_rows_key_group() -> None:
    hosts = [f"h{i % 40}" for i in range(200)]
    req = request(batch(hosts), producer_id="p1", sequence=7)
    holder = holder_by([0, 1, 2, 1])
    split = split_append(req, "host", GROUPS, holder)
    assert split is not None
    parts, n = split
    assert n == 200
    assert len(parts) == 3
    seen: list[int] = []
    for p in parts:
        assert p.rows is not None
        assert p.rows == sorted(p.rows)  # the input's order, within a part
        seen += p.rows
        assert p.groups == tuple(sorted({key_group(hosts[i], GROUPS) for i in p.rows}))
        assert {holder(g) for g in p.groups} == {p.address}
        # the same idempotency key, mode and windows on every part; the rows taken by index
        assert (p.request.producer_id, p.request.sequence) == ("p1", 7)
        assert p.request.results == pb.PER_ROW
        got = columns_of(p.request)
        assert got["host"] == [hosts[i] for i in p.rows]
        assert got["ts"] == [i + 1 for i in p.rows]
        assert [c.name for c in p.request.columns] == [c.name for c in req.columns]
    assert sorted(seen) == list(range(200))
    # the parts come in the order of their first row
    assert [p.rows[0] for p in parts if p.rows] == sorted(p.rows[0] for p in parts if p.rows)


def test_a_batch_of_one_holder_goes_as_it_is() -> None:
    req = request(batch(["a", "b", "c"]))
    split = split_append(req, "host", GROUPS, lambda g: MEMBERS[0])
    assert split is not None
    (part,), n = split
    assert (part.address, part.rows, n) == (MEMBERS[0], None, 3)
    assert part.request is req  # not copied, not encoded again


def test_row_dicts_and_arrow_tables_split_as_columns_do() -> None:
    hosts = [f"k{i % 13}" for i in range(60)]
    cols = batch(hosts)
    holder = holder_by([2, 0, 1])
    as_columns = split_append(request(cols), "host", GROUPS, holder)
    dict_rows = [dict(zip(cols, r, strict=True)) for r in zip(*cols.values(), strict=True)]
    as_rows = split_append(request(dict_rows), "host", GROUPS, holder)
    table = pa.table({"ts": pa.array(cols["ts"], pa.int64()), "host": hosts, "v": cols["v"]})
    as_arrow = split_append(request(table), "host", GROUPS, holder)
    assert as_columns is not None and as_rows is not None and as_arrow is not None
    assert as_columns == as_rows
    assert [(p.address, p.rows, p.groups) for p in as_arrow[0]] == [
        (p.address, p.rows, p.groups) for p in as_columns[0]
    ]
    for p in as_arrow[0]:
        assert p.request.arrow_ipc and not p.request.columns
        assert columns_of(p.request)["host"] == [hosts[i] for i in p.rows or ()]


def test_an_int64_key_hashes_its_decimal_text() -> None:
    keys = [-12, 0, 7, 123456789, 7]
    req = append_request(
        "s",
        {"ts": [1, 2, 3, 4, 5], "dev": keys, "v": [1.0] * 5},
        {"ts": "TIMESTAMP", "dev": "INT64", "v": "DOUBLE"},
        None,
        None,
        "none",
        (),
    )
    split = split_append(req, "dev", GROUPS, lambda g: MEMBERS[g % 3])
    assert split is not None
    for p in split[0]:
        for i in p.rows or range(5):
            assert MEMBERS[key_group(str(keys[i]), GROUPS) % 3] == p.address


@pytest.mark.parametrize(
    "rows",
    [
        {"ts": [], "host": [], "v": []},  # nothing to split
        {"ts": [1, 2], "v": [1.0, 2.0]},  # no key column: the server says so
        {"ts": [1, 2], "host": ["a"], "v": [1.0, 2.0]},  # columns of different lengths
        {"ts": [1, 2], "host": [1.5, 2.5], "v": [1.0, 2.0]},  # values no key has
    ],
)
def test_a_batch_that_cannot_be_split_goes_whole(rows: dict[str, list[Any]]) -> None:
    req = append_request("s", rows, None, None, None, "none", ())
    assert split_append(req, "host", GROUPS, lambda g: MEMBERS[g % 3]) is None


# --------------------------------------------------------------------------- the merge


@given(
    st.lists(st.integers(0, 30), min_size=1, max_size=80),
    st.lists(st.integers(0, 2), min_size=1, max_size=GROUPS),
    st.sets(st.integers(0, 79), max_size=10),
    st.sampled_from(["per_row", "final", "none"]),
)
def test_the_merge_of_the_parts_is_what_one_server_answers(
    keys: list[int], assign: list[int], late: set[int], results: str
) -> None:
    """::

    input rows   0  1  2  3  4  5 ...     one server: entries of the applied rows
    holder       A  B  A  C  B  A           in input order, rows = the applied ones
    parts        A:[0,2,5] B:[1,4] C:[3] -> merge -> the same answer
    """
    hosts = [f"host-{k}" for k in keys]
    vs = [-1.0 if i in late else float(i % 5) for i in range(len(hosts))]
    req = request(batch(hosts, vs), results=results)
    want = serve(req, {})
    got, _ = split_and_serve(req, holder_by(assign), {})
    assert got.rows_applied == want.rows_applied
    assert got.rows_late == want.rows_late
    assert got.duplicate == want.duplicate
    assert list(got.row_results) == list(want.row_results)
    assert sorted((r.key, r.values["s"].double_value) for r in got.results) == sorted(
        (r.key, r.values["s"].double_value) for r in want.results
    )


def test_a_resend_after_a_partial_failure_merges_as_one_server_replaying() -> None:
    """The parts of groups applied before answer as duplicates (no entries, counted
    nowhere); the merge says which rows have entries (``rows``), as one server would, and
    ``duplicate`` only when every part was one."""
    hosts = [f"h{i}" for i in range(30)]
    req = request(batch(hosts))
    holder = holder_by([0, 1, 2])
    applied = frozenset(g for g in range(GROUPS) if holder(g) == MEMBERS[1])
    assert applied
    want = serve(req, {}, applied)
    got, _ = split_and_serve(req, holder, {}, applied)
    assert list(got.row_results) == list(want.row_results)
    assert got.row_results[0].rows.values  # not every row has an entry
    assert got.rows_applied == want.rows_applied < len(hosts)
    assert not got.duplicate
    everything = frozenset(range(GROUPS))
    again, _ = split_and_serve(req, holder, {}, everything)
    assert again.duplicate and again.rows_applied == 0
    assert [len(rr.sizes.values) for rr in again.row_results] == [0]


def test_nulls_of_some_parts_are_merged_in_row_order() -> None:
    a = pb.AppendResponse(rows_applied=2)
    ra = a.row_results.add(window="w")
    col = ra.columns.add(name="mx")
    col.doubles.values.extend([0.0, 5.0])
    col.nulls.extend([True, False])
    ra.sizes.values.extend([0, 1])
    b = pb.AppendResponse(rows_applied=1)
    rb = b.row_results.add(window="w")
    rb.columns.add(name="mx").doubles.values.extend([3.0])
    rb.sizes.values.extend([1])
    got = merge_append(3, [([0, 2], a), ([1], b)])
    (rr,) = got.row_results
    assert list(rr.columns[0].doubles.values) == [0.0, 3.0, 5.0]
    assert list(rr.columns[0].nulls) == [True, False, False]
    assert list(rr.sizes.values) == [0, 1, 1]
    assert not rr.rows.values  # every row has its entry


def test_per_row_results_without_their_rows_are_refused() -> None:
    """A part answering fewer entries than rows without ``rows`` breaks the contract: the
    entries cannot be put back in order (never guessed)."""
    a = pb.AppendResponse(rows_applied=1)
    ra = a.row_results.add(window="w")
    ra.columns.add(name="n").ints.values.extend([1])
    ra.sizes.values.extend([1])
    b = pb.AppendResponse()
    with pytest.raises(InternalError):
        merge_append(3, [([0, 1], a), ([2], b)], ["x:1", "y:1"])


def test_a_single_answer_for_every_row_is_kept_as_it_is() -> None:
    answer = pb.AppendResponse(rows_applied=3)
    assert merge_append(3, [(None, answer)]) is answer


def test_a_parts_violations_name_the_inputs_rows() -> None:
    ex = InvalidArgumentError(
        "bad",
        reason=Reason.BAD_VALUES,
        violations=[Violation("columns[v][1]", "NaN"), Violation("spec.name", "x")],
    )
    got = renumber(ex, [3, 8, 11])
    assert [v.field for v in got.violations] == ["columns[v][8]", "spec.name"]


# --------------------------------------------------------------------------- ListKeys, Subscribe


def page(keys: Sequence[str], token: str = "", groups: Sequence[int] = ()) -> pb.ListKeysResponse:
    return pb.ListKeysResponse(
        keys=[pb.KeyInfo(key=k) for k in keys], next_page_token=token, groups=list(groups)
    )


def test_key_pages_merge_in_key_order_up_to_the_limit() -> None:
    a = page(["a", "d", "g"], "g", [0])
    b = page(["b", "c"], "", [1])
    c = page(["e", "f", "h"], "h", [2])
    keys, token = merge_key_pages([a, b, c], 4)
    assert [k.key for k in keys] == ["a", "b", "c", "d"]
    assert token == "d"
    keys, token = merge_key_pages([page(["a", "c"]), page(["b"])], 10)
    assert ([k.key for k in keys], token) == (["a", "b", "c"], "")
    # a member with more to say keeps the pages going, even when this page is not full
    keys, token = merge_key_pages([page(["a"], "a"), page([])], 10)
    assert ([k.key for k in keys], token) == (["a"], "a")
    # a key two members answered (a hand-over) comes once
    keys, _ = merge_key_pages([page(["a", "b"]), page(["b", "c"])], 10)
    assert [k.key for k in keys] == ["a", "b", "c"]
    # exactly full, nothing more anywhere: the last page
    keys, token = merge_key_pages([page(["a"]), page(["b"])], 2)
    assert token == ""


def test_paging_through_merged_pages_lists_every_key_once() -> None:
    members = [sorted(f"k{i:03d}" for i in range(200) if i % 3 == m) for m in range(3)]

    def ask(keys: list[str], token: str, limit: int) -> pb.ListKeysResponse:
        after = [k for k in keys if k > token][:limit]
        more = len([k for k in keys if k > token]) > limit
        return page(after, after[-1] if more else "")

    for limit in (1, 7, 50, 200, 500):
        token, got = "", []
        while True:
            keys, token = merge_key_pages([ask(m, token, limit) for m in members], limit)
            got += [k.key for k in keys]
            if not token:
                break
        assert got == sorted(k for m in members for k in m)


def test_groups_no_member_answered_for_are_missing() -> None:
    assert missing_groups([page([], groups=[0, 2]), page([], groups=[1])], 4) == {3}
    assert missing_groups([page([], groups=[0])], 1) == set()
    # a member of the cluster holding no group of the stream answers for none
    assert missing_groups([page([], groups=[])], 4) == {0, 1, 2, 3}
    assert missing_groups([page([], groups=[]), page([], groups=[0, 1, 2, 3])], 4) == set()


def test_subscribe_keys_go_to_the_holders_of_their_groups() -> None:
    keys = [f"k{i}" for i in range(30)] + ["k3"]
    holder = holder_by([0, 1, 2])
    slots = split_keys(keys, GROUPS, holder)
    assert sorted(k for ks in slots.values() for k in ks) == sorted(set(keys))
    for address, ks in slots.items():
        assert all(holder(key_group(k, GROUPS)) == address for k in ks)


# --------------------------------------------------------------------------- the topology


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def cluster_map(holders: Sequence[str], members: Sequence[str] = MEMBERS) -> pb.ClusterMap:
    return pb.ClusterMap(
        members=[pb.ClusterMember(id=m, address=m) for m in members],
        owners=[pb.StreamOwner(stream="s", member=members[0], group_members=list(holders))],
        lease_ms=2000,
        **{"self": members[0]},
    )


def test_the_topology_learns_and_forgets_group_holders() -> None:
    clock = Clock()
    t = Topology(list(MEMBERS), clock=clock)
    assert t.holders("s") is None
    held = [MEMBERS[g % 3] for g in range(GROUPS)]
    held[5] = ""  # moving
    t.learn(cluster_map(held), MEMBERS[0])
    assert t.holders("s") == tuple(held)
    assert t.cached_owner("s") == MEMBERS[0]
    assert t.group_way("s", 4) == MEMBERS[1]
    # no holder: where placement puts the unit "s#5"
    assert t.group_way("s", 5) == place(group_unit("s", 5), MEMBERS)
    t.group_redirected("s", 5, MEMBERS[2])
    assert t.group_way("s", 5) == MEMBERS[2]
    t.forget_group("s", 5)
    assert t.holder("s", 5) == ""
    # a holder that is a suspect: placement among the others
    t.failed(MEMBERS[1])
    assert t.group_way("s", 4) == place(group_unit("s", 4), [MEMBERS[0], MEMBERS[2]])
    # a member gone from the map holds nothing
    t.learn(
        pb.ClusterMap(members=[pb.ClusterMember(id=m, address=m) for m in MEMBERS[::2]]), MEMBERS[0]
    )
    assert t.holder("s", 4) == ""
    assert t.holder("s", 3) == MEMBERS[0]
    # too old: asked again
    clock.now += 31
    assert t.holders("s") is None
    t.forget_groups("s")
    assert t.holder("s", 3) == ""


def test_an_unkeyed_stream_has_no_group_holders() -> None:
    t = Topology(list(MEMBERS), clock=Clock())
    t.learn(cluster_map([]), MEMBERS[0])
    assert t.holders("s") == ()


# --------------------------------------------------------------------------- one split Append


def not_owner(group: int, owner: str, target: str) -> NotOwnerError:
    return NotOwnerError(
        "not mine",
        code="FAILED_PRECONDITION",
        reason=Reason.NOT_OWNER,
        metadata={"stream": "s", "owner": owner, "owner_id": owner, "group": str(group)},
        target=target,
    )


def test_a_refused_part_is_split_again_and_only_it_is_resent() -> None:
    """Three parts go; B refuses (one of its groups moved to C): B's rows are split again by
    the holders now, A's and C's answers stand, and the merge is one server's answer."""
    clock = Clock()
    t = Topology(list(MEMBERS), clock=clock)
    held = [MEMBERS[g % 3] for g in range(GROUPS)]
    t.learn(cluster_map(held), MEMBERS[0])
    hosts = [f"h{i}" for i in range(90)]
    req = request(batch(hosts), producer_id="p", sequence=3)
    plan = KeyedAppend(req, "host", t, retries=None, retry_time=10.0)
    assert plan.start()
    assert len(plan.pending) == 3
    state: dict[str, list[float]] = {}
    refused = next(p for p in plan.pending if p.part.address == MEMBERS[1])
    moved = refused.part.groups[0]
    outcomes: list[pb.AppendResponse | MtaWindowsError] = [
        not_owner(moved, MEMBERS[2], MEMBERS[1]) if p is refused else serve(p.part.request, state)
        for p in plan.pending
    ]
    assert plan.settle(outcomes) == 0.0  # a redirect: at once
    assert [p.part for p in plan.pending] == [refused.part]
    assert t.holder("s", moved) == MEMBERS[2]
    plan.resplit()
    assert sorted(p.part.address for p in plan.pending) == sorted([MEMBERS[1], MEMBERS[2]])
    for p in plan.pending:
        assert (p.part.request.producer_id, p.part.request.sequence) == ("p", 3)
        assert set(p.part.rows or ()) <= set(refused.part.rows or ())
    plan.settle([serve(p.part.request, state) for p in plan.pending])
    assert not plan.pending
    assert list(plan.result().row_results) == list(serve(req, {}).row_results)


def test_a_part_refused_for_its_rows_ends_the_append() -> None:
    t = Topology(list(MEMBERS), clock=Clock())
    t.learn(cluster_map([MEMBERS[g % 3] for g in range(GROUPS)]), MEMBERS[0])
    plan = KeyedAppend(
        request(batch([f"h{i}" for i in range(30)])), "host", t, retries=None, retry_time=10.0
    )
    assert plan.start()
    bad = InvalidArgumentError(
        "NaN", reason=Reason.BAD_VALUES, violations=[Violation("columns[v][1]", "NaN")]
    )
    outcomes: list[Any] = [pb.AppendResponse() for _ in plan.pending]
    outcomes[1] = bad
    rows = plan.pending[1].part.rows
    assert rows is not None
    with pytest.raises(InvalidArgumentError) as info:
        plan.settle(outcomes)
    assert info.value.violations[0].field == f"columns[v][{rows[1]}]"
    assert not plan.pending


def test_a_moving_group_waits_as_the_routing_says_within_the_budget() -> None:
    clock = Clock()
    t = Topology(list(MEMBERS), clock=clock)
    t.learn(cluster_map([MEMBERS[g % 3] for g in range(GROUPS)]), MEMBERS[0])
    plan = KeyedAppend(
        request(batch(["a", "b", "c", "d"])), "host", t, retries=None, retry_time=1.0
    )
    assert plan.start()
    moving = StreamMovingError(
        "moving",
        code="UNAVAILABLE",
        reason=Reason.STREAM_MOVING,
        metadata={
            "stream": "s",
            "group": str(plan.pending[0].part.groups[0]),
            "retry_after_ms": "200",
        },
    )
    outcomes: list[Any] = [moving] + [pb.AppendResponse() for _ in plan.pending[1:]]
    assert plan.settle(outcomes) == pytest.approx(0.2)
    assert t.holder("s", plan.pending[0].part.groups[0]) == ""
    clock.now += 2  # past the budget: the next refusal ends the call
    with pytest.raises(StreamMovingError):
        plan.settle([moving])


# --------------------------------------------------------------------------- one key's course


def test_a_key_call_follows_a_group_redirect_to_the_groups_holder() -> None:
    """A Query about one key goes to its group's holder (placement when none is known); a
    NOT_OWNER naming the group notes that group's holder, never the stream's owner."""
    t = Topology(list(MEMBERS), clock=Clock())
    held = [""] * GROUPS
    t.learn(cluster_map(held), MEMBERS[0])
    g = key_group("web-1", GROUPS)
    call = calls.query("s", "w", "web-1")
    course = calls.GroupCourse(call, t, groups=(g,), retries=None, retry_time=10.0)
    first = course.address()
    assert first == place(group_unit("s", g), MEMBERS)
    other = next(m for m in MEMBERS if m != first)
    step = course.failed(not_owner(g, other, first))
    assert step.pause == 0.0
    assert course.address() == other
    assert t.holder("s", g) == other
    assert t.cached_owner("s") == MEMBERS[0]  # the stream's owner is untouched
    assert course.gone() is False
    t.group_redirected("s", g, first)
    assert course.gone() is True  # the group left the server the try is at


def test_a_whole_keyed_append_stops_at_a_group_redirect() -> None:
    """An Append sent whole (the client did not know the groups were held apart) is not
    bounced from holder to holder: the redirect ends it, the client splits it."""
    t = Topology(list(MEMBERS), clock=Clock())
    t.learn(cluster_map([]), MEMBERS[0])
    course = calls.Course(calls.append(request(batch(["a"]))), t, retries=None, retry_time=10.0)
    course.follow_groups = False
    with pytest.raises(NotOwnerError):
        course.failed(not_owner(3, MEMBERS[1], MEMBERS[0]))
    assert t.cached_owner("s") == MEMBERS[0]
