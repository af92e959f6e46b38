"""Windows of a stream sharing one columnar window's rows (issue 22, item 3): a new columnar
window whose aggregations are some of an earlier one's (under a count, or a time range over
the same timestamps) becomes a member of it, each batch lifted, sliced and stored once.

Through real servers and Redis: shared windows answer every per-row result, final result and
query-time range as the same windows made with ``--no-shared-rows`` (rows of their own), on
random batches of 1 to 9,000 rows (several 4,096-row slices a batch); against the naive oracle
across deleting the window they share (it stays hidden until its last member goes), making it
again, a restart and kill -9 (durable members replay the stream's journal into the shared
window once); and the data of a deleted shared window leaves Redis with its last member."""

from __future__ import annotations

import math
import random
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis

from mtawindows.client import Aggregation, Policy, Storage, WindowClient, WindowSpec
from mtawindows.testing import LocalServer
from tests.support.waiting import wait_until

from .test_columnar_state import COLUMNAR_AGGS, COUNT_AGGS, _check_final, _run
from .test_service_e2e import Oracle, S, _newest, make_stream, random_batch

pytestmark = [pytest.mark.server, pytest.mark.redis]

SHARES = "the rows of window"


def _shares(c: WindowClient, stream: str, name: str) -> str | None:
    """The window whose rows ``name`` shares (as GetWindow says), or None."""
    text = c.get_window(stream, name).storage
    if SHARES not in text:
        return None
    return text.split(SHARES, 1)[1].split("'")[1]


def _windows() -> list[WindowSpec]:
    """Four windows of one stream, the first the others' host: a time range, a longer one
    of fewer aggregations, a count (its Count the rows: the host has none), a short count."""
    few = tuple(a for a in COLUMNAR_AGGS if a.name in ("mx", "sx", "tsmax", "first"))
    return [
        WindowSpec("s", "t10", COLUMNAR_AGGS, Policy.time_range(timedelta(seconds=10))),
        WindowSpec("s", "t60", few, Policy.time_range(timedelta(seconds=60))),
        WindowSpec("s", "c1000", COUNT_AGGS, Policy.count(1000)),
        WindowSpec("s", "c3", tuple(a for a in COUNT_AGGS if a.name in ("n", "mn")), Policy.count(3)),
    ]  # fmt: skip


def _same(got: Any, want: Any, where: str) -> None:
    """Equal results: sums and moments to 1e-12 (a shared window's tree holds more slices,
    its members' too, so moments combine in another order), every other output exactly."""
    if isinstance(want, float) and isinstance(got, float):
        assert math.isclose(got, want, rel_tol=1e-12, abs_tol=1e-12) or got == want, where
    elif isinstance(want, dict):
        assert isinstance(got, dict) and set(got) == set(want), where
        for k, v in want.items():
            _same(got[k], v, f"{where}.{k}")
    elif isinstance(want, list | tuple):
        assert isinstance(got, list | tuple) and len(got) == len(want), where
        for i, (g, v) in enumerate(zip(got, want, strict=True)):
            _same(g, v, f"{where}[{i}]")
    else:
        assert got == want, (where, got, want)


def test_shared_windows_answer_as_windows_of_their_own(tmp_path: Path) -> None:
    rng = random.Random(22)
    with (
        LocalServer(tmp_path / "shared") as shared,
        LocalServer(tmp_path / "own", "--no-shared-rows") as own,
        shared.client() as cs,
        own.client() as co,
    ):
        for c in (cs, co):
            make_stream(c, "s")
        for spec in _windows():
            for c in (cs, co):
                c.create_window(spec)
        assert [_shares(cs, "s", w.name) for w in _windows()] == [None, "t10", "t10", "t10"]
        assert [_shares(co, "s", w.name) for w in _windows()] == [None] * 4
        t = 0
        for b in range(24):
            n = rng.choice((1, 7, 300, 4095, 4097, 9000))
            batch, t = random_batch(rng, t, n)
            mode = ("per_row", "final", "none")[b % 3]
            a = cs.append("s", batch, results=mode)
            e = co.append("s", batch, results=mode)
            _same(a.row_results, e.row_results, f"batch {b} per-row")
            _same(
                {n: (r.values, r.size, r.evicted) for n, r in a.results.items()},
                {n: (r.values, r.size, r.evicted) for n, r in e.results.items()},
                f"batch {b} final",
            )
            for w in _windows():
                got, want = cs.query("s", w.name), co.query("s", w.name)
                _same((got.values, got.size), (want.values, want.size), f"{b} {w.name}")
                for count in (1, 50, 5000):
                    got, want = (
                        cs.query("s", w.name, count=count),
                        co.query("s", w.name, count=count),
                    )
                    _same((got.values, got.size), (want.values, want.size), f"{b} {w.name} {count}")
                if w.policy.kind == "time_range":
                    for secs in (1, 7):
                        ask = timedelta(seconds=secs)
                        got, want = (
                            cs.query("s", w.name, range=ask),
                            co.query("s", w.name, range=ask),
                        )
                        _same((got.values, got.size), (want.values, want.size), f"{b} {w.name}")
        # a window joins late: it shares the rows from then on, as a window made then
        late = WindowSpec("s", "late", COUNT_AGGS, Policy.count(20))
        for c in (cs, co):
            c.create_window(late)
        assert _shares(cs, "s", "late") == "t10"
        for b in range(4):
            batch, t = random_batch(rng, t, rng.choice((5, 5000)))
            a = cs.append("s", batch, results="per_row")
            e = co.append("s", batch, results="per_row")
            _same(a.row_results, e.row_results, f"late batch {b}")
        for w in [i.spec for i in cs.list_windows("s")]:
            st_shared, st_own = cs.get_window("s", w.name).stats, co.get_window("s", w.name).stats
            assert st_shared["size"] == st_own["size"], w.name
            assert st_shared["evicted"] == st_own["evicted"], w.name


def _serves(c: WindowClient) -> bool:
    """Whether the server answers a call on stream "s" (not refused for its store)."""
    from mtawindows.client.errors import MtaWindowsError

    try:
        c.get_stream("s")
    except MtaWindowsError as ex:
        assert ex.code == "UNAVAILABLE", ex
        return False
    return True


def _oracle(spec: WindowSpec) -> Oracle:
    p = spec.policy
    if p.kind == "count":
        size = int(p.size)
        return Oracle(lambda old, rows: len(rows) - len(old) >= size)
    secs = int(p.range.total_seconds())
    return Oracle(lambda old, rows: _newest(rows) - _newest(old) >= secs * S)


def _keys(r: redis.Redis, stream: str) -> set[str]:
    """The keys of ``stream``'s windows' data (``<prefix>:{<stream>}:w:<id>:*``)."""
    return {k.decode() for k in r.scan_iter(match=f"*:{{{stream}}}:w:*")}


def test_deleting_the_shared_window_across_restarts_and_kill_9(
    tmp_path: Path, redis_url: str
) -> None:
    """The host deleted: its members go on (it stays hidden, holding only their rows); made
    again it is a new window; a restart and kill -9 give every member back (the durable
    ones with every acknowledged row); the members deleted, the hidden host and its data
    leave Redis."""
    rng = random.Random(7)
    stream = f"s{uuid.uuid4().hex[:8]}"
    specs = [
        WindowSpec(stream, "h", COLUMNAR_AGGS, Policy.time_range(timedelta(seconds=5))),
        WindowSpec(
            stream, "d9", COUNT_AGGS, Policy.count(9), storage=Storage("redis", durable=True)
        ),
        WindowSpec(
            stream,
            "dt",
            COLUMNAR_AGGS,
            Policy.time_range(timedelta(seconds=4)),
            storage=Storage("redis", durable=True),
        ),
    ]
    r = redis.Redis.from_url(redis_url)
    srv = LocalServer(tmp_path / "d", redis_url=redis_url).start()
    try:
        with srv.client() as c:
            make_stream(c, stream)
            oracles = {}
            for spec in specs:
                c.create_window(spec)
                oracles[spec.name] = _oracle(spec)
            assert [_shares(c, stream, n) for n in oracles] == [None, "h", "h"]
            held = _keys(r, stream)
            assert held, "the shared window's slices and checkpoint are in Redis"
            t = _run(c, oracles, rng, 0, 12, "shared", stream=stream)
            c.delete_window(stream, "h")
            del oracles["h"]
            assert sorted(w.spec.name for w in c.list_windows(stream)) == ["d9", "dt"]
            assert _shares(c, stream, "d9") == "h (deleted)"
            t = _run(c, oracles, rng, t, 12, "host deleted", stream=stream)
            # made again: a window of its own (the members keep the one they share)
            c.create_window(specs[0])
            oracles["h"] = _oracle(specs[0])
            assert _shares(c, stream, "h") is None
            assert _shares(c, stream, "dt") == "h (deleted)"
            t = _run(c, oracles, rng, t, 8, "host made again", stream=stream)
        srv.restart()  # graceful: the hidden host comes back, its members with it
        with srv.client() as c:
            assert sorted(w.spec.name for w in c.list_windows(stream)) == ["d9", "dt", "h"]
            for name, oracle in oracles.items():
                _check_final(c, name, oracle, "after a restart", stream=stream)
            t = _run(c, oracles, rng, t, 8, "after a restart", stream=stream)
        for k in range(3):  # kill -9: the members replay the journal into the shared window
            srv.kill()
            srv.start()
            with srv.client() as c:
                oracles.pop("h", None)  # not durable: where its checkpoint left it
                for name, oracle in oracles.items():
                    _check_final(c, name, oracle, f"after kill -9 #{k}", stream=stream)
                t = _run(c, oracles, rng, t, 6, f"after kill -9 #{k}", stream=stream)
        with srv.client() as c:
            c.delete_window(stream, "h")  # a window of its own: its data goes at once
            c.delete_window(stream, "d9")
            assert _keys(r, stream), "dt still shares the hidden window's rows"
            c.delete_window(stream, "dt")  # the last member: the hidden host goes with it
            assert _keys(r, stream) == set()
            assert not [k for k in r.hkeys(f"mtaw:svc:{{{stream}}}:def") if k.startswith(b"w:")]
            c.create_window(specs[1])  # the stream goes on; a new window starts empty
            assert c.query(stream, "d9").size == 0
        srv.restart()
        with srv.client() as c:
            assert sorted(w.spec.name for w in c.list_windows(stream)) == ["d9"]
            c.delete_stream(stream)
        assert _keys(r, stream) == set()
    finally:
        srv.close()


def test_deleting_a_stream_takes_its_hidden_shared_window(tmp_path: Path, redis_url: str) -> None:
    stream = f"s{uuid.uuid4().hex[:8]}"
    r = redis.Redis.from_url(redis_url)
    with LocalServer(tmp_path / "d", redis_url=redis_url) as srv, srv.client() as c:
        make_stream(c, stream)
        for spec in _windows():
            c.create_window(WindowSpec(stream, spec.name, spec.aggregations, spec.policy))
        batch, _ = random_batch(random.Random(1), 0, 5000)
        c.append(stream, batch)
        c.delete_window(stream, "t10")
        assert _keys(r, stream)
        c.delete_stream(stream)
        assert _keys(r, stream) == set()
        assert r.exists(f"mtaw:svc:{{{stream}}}:def") == 0
        make_stream(c, stream)  # the name is free again: nothing of the old one shows
        c.create_window(WindowSpec(stream, "c3", (Aggregation("n", "count"),), Policy.count(3)))
        assert c.query(stream, "c3").size == 0


@pytest.mark.slow
def test_a_member_refused_for_a_frozen_redis_leaves_nothing_behind(tmp_path: Path) -> None:
    """Redis frozen (SIGSTOP) while a window that would share another's rows is made: the
    call fails (UNAVAILABLE) and the shared window holds no place for it; thawed, the same
    window is made and answers as the oracle from then on."""
    import os
    import signal

    from mtawindows.client.errors import MtaWindowsError

    rng = random.Random(3)
    with LocalServer(tmp_path / "d") as srv, srv.client(timeout=30, retries=1) as c:
        make_stream(c, "s")
        host, member = _windows()[0], _windows()[2]
        c.create_window(host)
        t = 0
        for _ in range(3):
            batch, t = random_batch(rng, t, 2000)
            c.append("s", batch)
        pid = srv.redis_pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        try:
            with pytest.raises(MtaWindowsError) as got:
                c.create_window(member)
            assert got.value.code == "UNAVAILABLE", got.value
        finally:
            os.kill(pid, signal.SIGCONT)
        wait_until(lambda: srv.health() == "SERVING", "SERVING once Redis answers", 60)
        wait_until(lambda: _serves(c), "the stream served again", 60)
        with pytest.raises(MtaWindowsError, match="no window"):
            c.get_window("s", member.name)
        c.create_window(member)
        assert _shares(c, "s", member.name) == host.name
        oracle = _oracle(member)
        _run(c, {member.name: oracle}, rng, t, 6, "made after the thaw")


def test_a_hidden_window_checks_only_what_its_members_read(tmp_path: Path) -> None:
    """Found by an outside tester: deleted, a shared window still refused rows for its own
    aggregations (a NaN under its ``max``, a field that allows NaN) that no window reads any
    more, naming itself ("~<id>"): its members' rows are now all it checks, and a value a
    member refuses names the member."""
    from mtawindows.client import Field, StreamSpec
    from mtawindows.client.errors import MtaWindowsError

    with LocalServer(tmp_path / "d") as srv, srv.client() as c:
        fields = (Field("x", "DOUBLE"), Field("y", "DOUBLE", allow_nan=True))
        c.create_stream(StreamSpec("s", fields, wall_clock=False))
        sx, gm = Aggregation("sx", "sum", "x"), Aggregation("gm", "geomean", "x")
        c.create_window(
            WindowSpec("s", "a", (sx, gm, Aggregation("my", "max", "y")), Policy.count(10))
        )
        c.create_window(WindowSpec("s", "b", (sx, gm), Policy.count(10)))
        assert _shares(c, "s", "b") == "a"
        c.append("s", {"ts": [1, 2], "x": [1.0, 2.0], "y": [1.0, 2.0]})
        with pytest.raises(MtaWindowsError, match="window 'a' refused a row"):
            c.append("s", {"ts": [3], "x": [3.0], "y": [float("nan")]})  # a's max: its own
        c.delete_window("s", "a")
        c.append("s", {"ts": [3], "x": [3.0], "y": [float("nan")]})
        assert c.query("s", "b").values["sx"] == 6.0
        with pytest.raises(MtaWindowsError, match="window 'b' refused a row") as got:
            c.append("s", {"ts": [4], "x": [-1.0], "y": [1.0]})  # b's geometric mean: > 0
        assert "~" not in str(got.value)
        srv.restart()  # the same after a restart: the hidden window comes back retired
        with srv.client() as c2:
            c2.append("s", {"ts": [5], "x": [5.0], "y": [float("nan")]})
            assert c2.query("s", "b").values["sx"] == 11.0


def test_a_window_made_while_its_host_must_reload_still_shares_its_rows(redis_url: str) -> None:
    """CI met it once: a store failure left the shared window stale (it reloads its last
    checkpoint before its next call) and a window made then, Redis back, took rows of its own.
    The host reloads for it now, and the new window shares its rows from the checkpoint on."""
    from mtawindows.client import Field, StreamSpec
    from mtawindows.server.service.registry import Registry
    from mtawindows.server.storage.protocol import StoreUnavailableError

    reg = Registry(redis_url, prefix=f"t{uuid.uuid4().hex[:10]}")
    try:
        fields = (Field("x", "DOUBLE"), Field("k", "INT64"), Field("tag", "STRING"))
        reg.create_stream(StreamSpec("s", fields, wall_clock=False))
        host, member = _windows()[0], _windows()[2]
        reg.create_window(host)
        s = reg.streams["s"]
        rng = random.Random(5)
        t = 0
        for seq in range(1, 4):
            batch, t = random_batch(rng, t, 2000)
            cols = {k: (kind, batch[k]) for k, kind in _KINDS.items()}
            s.append(cols, producer_id="p", sequence=seq)
        reg.flush(s)
        engine = s.windows[host.name].engine
        engine.invalidate(StoreUnavailableError("a Redis call failed"))
        assert engine.stale
        reg.create_window(member)
        assert s.windows[member.name].host == host.name
        assert not engine.stale
        batch, t = random_batch(rng, t, 300)  # it joined empty: it holds the rows from now
        s.append({k: (kind, batch[k]) for k, kind in _KINDS.items()}, producer_id="p", sequence=4)
        assert reg.result("s", member.name).size == 300
    finally:
        reg.close()


_KINDS = {"ts": "TIMESTAMP", "x": "DOUBLE", "k": "INT64", "tag": "STRING"}
