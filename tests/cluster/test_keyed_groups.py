"""Keyed streams on a cluster: each key group is owned on its own (issue: ownership by key
group, not by key), spread over the members by placement, refused with its holder by the
others, moved with its keys when a member dies, and following the stream's windows.

Raw gRPC stubs on purpose: each call goes to the member named, so the test sees which member
answered what (the SDK's splitting is tested in tests/client). A model holds every
acknowledged row per key; every check compares the servers' answers with it.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from mtawindows.client.errors import MtaWindowsError
from mtawindows.testing import LocalCluster
from mtawindows.v1 import convert
from mtawindows.v1 import windows_pb2 as pb
from mtawindows.v1 import windows_pb2_grpc as pb_grpc
from mtawindows.v1.keys import group_unit, key_group
from mtawindows.v1.placement import place
from mtawindows.v1.types import Aggregation, Field, Policy, Storage, StreamSpec, WindowSpec
from tests.support.waiting import error_info

pytestmark = [pytest.mark.server, pytest.mark.redis]

GROUPS = 16
NAME = "hosts"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with LocalCluster(3, "--lease-ms", "1000", data_dir=tmp_path) as c:
        yield c


def _stubs(cluster: LocalCluster) -> dict[str, Any]:
    return {
        t: pb_grpc.WindowServiceStub(grpc.insecure_channel(t))
        for t in cluster.targets  # channels reconnect after a restart
    }


def _window(name: str = "w", durable: bool = True) -> WindowSpec:
    return WindowSpec(
        NAME,
        name,
        (Aggregation("n", "count"), Aggregation("s", "sum", "x"), Aggregation("m", "max", "x")),
        Policy.count(100_000),
        storage=Storage("redis", durable=durable),
    )


def _create(cluster: LocalCluster) -> None:
    """The stream and its window, created through the SDK (at the stream's owner)."""
    spec = StreamSpec(
        NAME,
        (Field("host", "STRING"), Field("x", "DOUBLE")),
        key="host",
        key_groups=GROUPS,
        wall_clock=False,
    )
    with cluster.client() as c:
        c.create_stream(spec)
        c.create_window(_window())


def _append(
    keys: list[str], ts: list[int], xs: list[float], seq: int = 0, per_row: bool = False
) -> pb.AppendRequest:
    return pb.AppendRequest(
        stream=NAME,
        columns=[
            convert.column_to_proto("ts", "INT64", ts),
            convert.column_to_proto("host", "STRING", keys),
            convert.column_to_proto("x", "DOUBLE", xs),
        ],
        producer_id="p" if seq else "",
        sequence=seq,
        results=pb.PER_ROW if per_row else pb.NONE,
    )


def _holders(stub: Any, members: list[str] | None = None, timeout: float = 30.0) -> list[str]:
    """The holder of every group (as the map says) once every group has one and, with
    ``members``, each is held where rendezvous placement over those members puts it (16
    groups over three members may leave one member none: placement, not a spread, is the
    promise)."""
    want = None if members is None else [place(group_unit(NAME, g), members) for g in range(GROUPS)]
    deadline = time.monotonic() + timeout
    while True:
        try:
            m = stub.GetClusterMap(pb.GetClusterMapRequest(streams=[NAME]), timeout=10)
            got = list(m.owners[0].group_members)
            if len(got) == GROUPS and all(got) and want in (None, got):
                return got
        except grpc.RpcError:
            got = []
        if time.monotonic() > deadline:
            raise AssertionError(f"the groups were not held as placed in {timeout}s: {got}, {want}")
        time.sleep(0.1)


def _reason(err: grpc.RpcError) -> tuple[str, dict[str, str]]:
    info = error_info(err)
    return info.reason, dict(info.metadata)


def _query(
    stub: Any, key: str, window: str = "w", stubs: dict[str, Any] | None = None
) -> tuple[int, float, float]:
    """The key's (count, sum, max), asked of ``stub``'s server; STREAM_MOVING (its group is
    being opened or let go there at this moment) is waited out as the SDK does, and with
    ``stubs`` a NOT_OWNER (the group moved since the caller looked) followed to the member it
    names, as the SDK does."""
    deadline = time.monotonic() + 10
    while True:
        try:
            r = stub.Query(pb.QueryRequest(stream=NAME, window=window, key=key), timeout=10)
            return r.values["n"].int_value, r.values["s"].double_value, r.values["m"].double_value
        except grpc.RpcError as ex:
            reason, meta = _reason(ex)
            if time.monotonic() > deadline:
                raise
            if reason == "NOT_OWNER" and stubs is not None and meta.get("owner") in stubs:
                stub = stubs[meta["owner"]]
                continue
            if reason != "STREAM_MOVING":
                raise
            time.sleep(0.05)


def _keys_of_group(g: int, n: int = 3) -> list[str]:
    out = []
    i = 0
    while len(out) < n:
        k = f"h{i}"
        if key_group(k, GROUPS) == g:
            out.append(k)
        i += 1
    return out


def test_groups_spread_and_a_foreign_group_is_refused_naming_its_holder(
    cluster: LocalCluster,
) -> None:
    stubs = _stubs(cluster)
    first = stubs[cluster.targets[0]]
    _create(cluster)
    holders = _holders(first, cluster.targets)
    # one group held by b, asked of a: NOT_OWNER naming b and the group, nothing applied
    g = next(i for i, h in enumerate(holders) if h != holders[0])
    b = holders[g]
    a = next(t for t in cluster.targets if t != b)
    key = _keys_of_group(g, 1)[0]
    with pytest.raises(grpc.RpcError) as info:
        stubs[a].Append(_append([key], [1], [5.0]), timeout=10)
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    reason, meta = _reason(info.value)
    assert reason == "NOT_OWNER", (reason, meta)
    assert meta["owner"] == b and meta["group"] == str(g) and meta["stream"] == NAME, meta
    with pytest.raises(grpc.RpcError) as info:
        stubs[a].Query(pb.QueryRequest(stream=NAME, window="w", key=key), timeout=10)
    reason, meta = _reason(info.value)
    assert reason == "NOT_OWNER" and meta["owner"] == b and meta["group"] == str(g), meta
    # at its holder: applied, once
    stubs[b].Append(_append([key], [1], [5.0]), timeout=10)
    assert _query(stubs[b], key) == (1, 5.0, 5.0)
    # the holder lists its groups' keys and says which groups it answered for
    page = stubs[b].ListKeys(pb.ListKeysRequest(stream=NAME), timeout=10)
    assert [k.key for k in page.keys] == [key]
    assert sorted(page.groups) == sorted(i for i, h in enumerate(holders) if h == b)
    # GetKey at the holder
    info_b = stubs[b].GetKey(pb.GetKeyRequest(stream=NAME, key=key), timeout=10)
    assert info_b.rows_appended == 1 and info_b.group == g


def test_split_appends_equal_the_model_and_a_killed_member_loses_no_row(
    cluster: LocalCluster,
) -> None:
    rnd = random.Random(7)
    stubs = _stubs(cluster)
    first = stubs[cluster.targets[0]]
    _create(cluster)
    holders = _holders(first, cluster.targets)
    keys = [f"k{i}" for i in range(300)]
    model: dict[str, list[float]] = {k: [] for k in keys}
    clock = dict.fromkeys(keys, 0)
    seq = 0

    def send(batch_keys: list[str], holders: list[str]) -> None:
        nonlocal seq
        seq += 1
        parts: dict[str, list[int]] = {}
        xs = [float(rnd.randint(-100, 100)) for _ in batch_keys]
        ts = []
        for k in batch_keys:
            clock[k] += 1
            ts.append(clock[k])
        for i, k in enumerate(batch_keys):
            parts.setdefault(holders[key_group(k, GROUPS)], []).append(i)
        for target, rows in parts.items():
            req = _append(
                [batch_keys[i] for i in rows],
                [ts[i] for i in rows],
                [xs[i] for i in rows],
                seq,
                per_row=True,
            )
            resp = stubs[target].Append(req, timeout=10)
            assert resp.rows_applied == len(rows)
            (rr,) = resp.row_results
            counts = next(c for c in rr.columns if c.name == "n").ints.values
            for j, i in enumerate(rows):  # per-row results: the key's count after its row
                k = batch_keys[i]
                model[k].append(xs[i])
                assert counts[j] == len(model[k]), (k, counts[j], len(model[k]))
            again = stubs[target].Append(req, timeout=10)  # a resend: applied once only
            assert again.duplicate and again.rows_applied == 0, again

    for _ in range(20):
        send([rnd.choice(keys) for _ in range(200)], holders)
    # the stream's owner counts every group: its own, and the others' as last flushed
    with cluster.client() as c:
        deadline = time.monotonic() + 10
        while True:
            info = c.get_stream(NAME)
            want = (sum(map(len, model.values())), sum(1 for xs in model.values() if xs))
            if (info.rows_appended, info.keys) == want:
                break
            assert time.monotonic() < deadline, ((info.rows_appended, info.keys), want)
            time.sleep(0.2)
    victim_target = holders[key_group(keys[0], GROUPS)]
    victim = cluster.targets.index(victim_target)
    lost_groups = [g for g, h in enumerate(holders) if h == victim_target]
    cluster.kill(victim)
    t0 = time.monotonic()
    # the first append to a key of a dead member's group is served again by another member
    probe = next(k for k in keys if key_group(k, GROUPS) in lost_groups)
    served_after = None
    while served_after is None:
        live = [t for t in cluster.targets if t != victim_target]
        for t in live:
            try:
                clock[probe] += 1
                x = 1.0
                stubs[t].Append(_append([probe], [clock[probe]], [x]), timeout=5)
                model[probe].append(x)
                served_after = time.monotonic() - t0
                break
            except grpc.RpcError as ex:
                clock[probe] -= 1
                assert _reason(ex)[0] in ("NOT_OWNER", "STREAM_MOVING", "FENCED"), ex
        if time.monotonic() - t0 > 30:
            raise AssertionError("no member took the dead member's group in 30 s")
        time.sleep(0.05)
    assert served_after < 5.0, served_after
    new = _holders(stubs[live[0]], live)
    assert victim_target not in new
    for k in keys:  # every acknowledged row of every key, wherever its group is now
        if not model[k]:
            continue
        got = _query(stubs[new[key_group(k, GROUPS)]], k, stubs=stubs)
        assert got == (len(model[k]), sum(model[k]), max(model[k])), (k, got)
    # the member comes back: it takes its groups again, with their keys
    cluster.servers[victim].start()
    cluster.wait_formed()
    back = _holders(stubs[live[0]], cluster.targets)
    for k in keys[:60]:
        if model[k]:
            got = _query(stubs[back[key_group(k, GROUPS)]], k, stubs=stubs)
            assert got == (len(model[k]), sum(model[k]), max(model[k])), (k, got)


def test_a_window_created_on_the_stream_reaches_every_holder_of_its_groups(
    cluster: LocalCluster,
) -> None:
    stubs = _stubs(cluster)
    first = stubs[cluster.targets[0]]
    _create(cluster)
    holders = _holders(first, cluster.targets)
    # every member holds groups: touch one key per member so each opens its part
    per_member = {}
    for g, h in enumerate(holders):
        per_member.setdefault(h, _keys_of_group(g, 1)[0])
    for h, k in per_member.items():
        stubs[h].Append(_append([k], [1], [1.0]), timeout=10)
    with cluster.client() as c:
        c.create_window(_window("w2", durable=False))
    deadline = time.monotonic() + 10
    for h, k in per_member.items():
        while True:  # within a heartbeat or two every holder has it
            stubs[h].Append(_append([k], [2], [2.0]), timeout=10)
            try:
                got = _query(stubs[h], k, "w2")
                if got[0] >= 1:
                    break
            except grpc.RpcError as ex:
                assert _reason(ex)[0] == "WINDOW_NOT_FOUND", ex
            assert time.monotonic() < deadline, f"{h} never took window w2"
            time.sleep(0.2)


def test_a_paused_member_finds_its_groups_taken_and_serves_none_of_them(
    cluster: LocalCluster,
) -> None:
    """SIGSTOP a holder past its lease: the others take its groups (new tokens); resumed, it
    never answers from its old state of them (its renewal sees the groups' generation moved,
    checks its records and drops the groups; placement may then give them back to it, under
    new tokens, loaded from Redis), and every acknowledged row is where the groups are."""
    stubs = _stubs(cluster)
    _create(cluster)
    holders = _holders(stubs[cluster.targets[0]], cluster.targets)
    victim_target = holders[0]
    victim = cluster.by_target(victim_target)
    groups = [g for g, h in enumerate(holders) if h == victim_target]
    keys = {g: _keys_of_group(g, 1)[0] for g in groups}
    for k in keys.values():
        stubs[victim_target].Append(_append([k], [1], [3.0]), timeout=10)
    others = [t for t in cluster.targets if t != victim_target]
    assert victim.proc is not None
    os.kill(victim.proc.pid, signal.SIGSTOP)
    try:
        deadline = time.monotonic() + 30
        while True:  # the others take every group of the paused member
            try:
                now = list(
                    stubs[others[0]]
                    .GetClusterMap(pb.GetClusterMapRequest(streams=[NAME]), timeout=5)
                    .owners[0]
                    .group_members
                )
            except grpc.RpcError:
                now = []
            if now and all(now[g] and now[g] != victim_target for g in groups):
                break
            assert time.monotonic() < deadline, now
            time.sleep(0.1)
        for g, k in keys.items():  # the new holder has the row, and takes another
            stubs[now[g]].Append(_append([k], [2], [4.0]), timeout=10)
            assert _query(stubs[now[g]], k) == (2, 7.0, 4.0)
    finally:
        os.kill(victim.proc.pid, signal.SIGCONT)
    # resumed: it never answers from what it held before the pause (one row): it refuses
    # (its renewal found the groups taken), or, once placement gave a group back to it, it
    # answers from the group as its other holder left it (two rows)
    for g, k in keys.items():
        try:
            got = _query(stubs[victim_target], k)
        except grpc.RpcError as ex:
            reason, meta = _reason(ex)
            assert reason in ("NOT_OWNER", "MEMBER_ISOLATED", "STREAM_MOVING"), (reason, meta)
            if reason == "NOT_OWNER":
                assert meta["owner"] != victim_target and meta["group"] == str(g), meta
            continue
        assert got == (2, 7.0, 4.0), (g, k, got)
    deadline = time.monotonic() + 20
    for g, k in keys.items():  # and wherever each group is now, it holds both rows
        while True:
            holders = _holders(stubs[others[0]])
            try:
                assert _query(stubs[holders[g]], k) == (2, 7.0, 4.0)
                break
            except grpc.RpcError:
                assert time.monotonic() < deadline
                time.sleep(0.1)


def test_a_window_deleted_and_created_again_under_its_name_starts_afresh_everywhere(
    cluster: LocalCluster,
) -> None:
    stubs = _stubs(cluster)
    _create(cluster)
    holders = _holders(stubs[cluster.targets[0]], cluster.targets)
    per_member = {}
    for g, h in enumerate(holders):
        per_member.setdefault(h, _keys_of_group(g, 1)[0])
    for h, k in per_member.items():
        stubs[h].Append(_append([k], [1], [1.0]), timeout=10)
    with cluster.client() as c:
        c.delete_window(NAME, "w")
        c.create_window(
            WindowSpec(NAME, "w", (Aggregation("total", "sum", "x"),), Policy.count(10))
        )
    deadline = time.monotonic() + 10
    for h, k in per_member.items():
        t = 2
        while True:  # within a heartbeat or two every holder has the new definition, empty
            stubs[h].Append(_append([k], [t], [2.0]), timeout=10)
            r = stubs[h].Query(pb.QueryRequest(stream=NAME, window="w", key=k), timeout=10)
            if "total" in r.values:
                # the rows since the holder took the new window: never the old window's row
                assert r.values["total"].double_value % 2.0 == 0, (h, r.values)
                break
            assert time.monotonic() < deadline, f"{h} still answers the old window: {r.values}"
            t += 1
            time.sleep(0.2)


def test_an_empty_key_is_refused_and_nothing_is_applied(cluster: LocalCluster) -> None:
    _create(cluster)
    with cluster.client() as c:
        with pytest.raises(MtaWindowsError) as info:
            c.append(NAME, {"ts": [1, 1], "host": ["a", ""], "x": [1.0, 2.0]})
        assert info.value.reason == "BAD_VALUES" and "empty" in str(info.value), info.value
        # the empty key's part applied nothing (another member's part of the batch may have:
        # a split append is not atomic across holders)
        assert "" not in [k.key for k in c.iter_keys(NAME)]
