"""The SDK against three real ``mtawindows serve`` on one Redis holding a keyed stream's key
groups apart (a :class:`~mtawindows.testing.LocalCluster`): appends split by group holder
and merged back (per-row results in input order), queries and key calls at each key's
holder, ListKeys merged from every member, subscriptions at every holder. Every answer is
compared with an oracle in plain Python: each key's window is its last three applied rows;
a row older than its key's newest is late and dropped (``late_policy="DROP"``).

The pure split and merge are tested without servers in ``test_keyed_split.py``.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mtawindows.client import (
    Aggregation,
    AsyncWindowClient,
    Field,
    Policy,
    Storage,
    StreamSpec,
    WindowClient,
    WindowSpec,
)
from mtawindows.client.errors import OutOfOrderError
from mtawindows.testing import LocalCluster
from mtawindows.v1.keys import key_group

pytestmark = [pytest.mark.server, pytest.mark.redis]

GROUPS = 64
KEYS = 2000
LAST = 3  # each key's window: its last three rows


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    root: Path = tmp_path_factory.mktemp("keyed-split")
    with LocalCluster(3, "--lease-ms", "1000", data_dir=root) as c:
        yield c


class Oracle:
    """Each key's applied values and newest timestamp."""

    def __init__(self) -> None:
        self.values: dict[str, list[float]] = {}
        self.newest: dict[str, int] = {}
        self.late: dict[str, int] = {}

    def apply(self, batch: dict[str, list[Any]]) -> tuple[list[tuple[float, int]], int]:
        """The batch as one server applies it: (sum, count) of the key's window after each
        applied row, in input order, and the number of late rows."""
        entries: list[tuple[float, int]] = []
        late = 0
        for t, h, v in zip(batch["ts"], batch["host"], batch["v"], strict=True):
            if h in self.newest and t < self.newest[h]:
                late += 1
                self.late[h] = self.late.get(h, 0) + 1
                continue
            self.newest[h] = t
            vs = self.values.setdefault(h, [])
            vs.append(v)
            window = vs[-LAST:]
            entries.append((sum(window), len(window)))
        return entries, late

    def result(self, key: str) -> tuple[float, int]:
        window = self.values[key][-LAST:]
        return sum(window), len(window)


def new_stream(c: WindowClient) -> str:
    name = f"ks{uuid.uuid4().hex[:8]}"
    spec = StreamSpec(
        name,
        (Field("host", "STRING"), Field("v", "DOUBLE")),
        late_policy="DROP",
        key="host",
        key_groups=GROUPS,
        wall_clock=False,  # timestamps: small numbers
    )
    c.create_stream(spec)
    c.create_window(
        WindowSpec(
            name,
            "w",
            (Aggregation("s", "sum", "v"), Aggregation("n", "count")),
            Policy.count(LAST),
            storage=Storage("redis", durable=True),
        )
    )
    return name


class Batches:
    """Batches over :data:`KEYS` keys: timestamps rising, values halves (exact sums), and
    about 3% late rows (a key's row older than that key's newest, generated as such)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.ts = 1000
        self.newest: dict[str, int] = {}
        self.keys = [f"host-{i:04d}" for i in range(KEYS)]

    def next(self, n: int) -> dict[str, list[Any]]:
        out: dict[str, list[Any]] = {"ts": [], "host": [], "v": []}
        for _ in range(n):
            key = self.rng.choice(self.keys)
            newest = self.newest.get(key)
            if newest is not None and self.rng.random() < 0.03:
                t = newest - self.rng.randint(1, 5)  # late: dropped
            else:
                self.ts += 1
                t = self.ts
                self.newest[key] = t
            out["ts"].append(t)
            out["host"].append(key)
            out["v"].append(self.rng.randint(0, 20) / 2)
        return out


def spread_holders(c: WindowClient, name: str, timeout: float = 30.0) -> tuple[str, ...]:
    """The holders of the stream's groups once every group has one and the three members
    hold some (a new stream's groups are taken within a lease or so), as the client's map
    says (``owner`` asks the map about the stream)."""
    deadline = time.monotonic() + timeout
    while True:
        c.owner(name)
        holders = c.topology.holders(name) or ()
        if len(holders) == GROUPS and all(holders) and len(set(holders)) == 3:
            return holders
        assert time.monotonic() < deadline, f"the groups' holders: {holders}"
        time.sleep(0.1)


def check_per_row(got: Any, want: list[tuple[float, int]], late: int) -> None:
    assert got.rows_late == late
    assert got.rows_applied == len(want)
    if got.row_tables:  # asked as Arrow: the parts' tables merged in input order by _row
        table = got.row_tables["w"]
        assert table.column("s").to_pylist() == [s for s, _ in want]
        assert table.column("n").to_pylist() == [n for _, n in want]
        assert table.column("_size").to_pylist() == [n for _, n in want]
        rows = table.column("_row").to_pylist()
        assert rows == sorted(set(rows)) and len(rows) == len(want)
        return
    rows = got.row_results["w"]
    assert rows["s"] == [s for s, _ in want]
    assert rows["n"] == [n for _, n in want]
    assert rows["__size"] == [n for _, n in want]


def test_split_appends_match_one_server_and_every_key_is_listed_once(
    cluster: LocalCluster,
) -> None:
    """2,000 keys in batches of 500 with per-row results: each batch is split over the
    three holders and merged; every per-row result, every key's final window and the key
    list match the oracle; a replayed batch is a duplicate at every holder."""
    oracle = Oracle()
    gen = Batches(seed=7)
    with cluster.client(timeout=60) as c:
        name = new_stream(c)
        batches = [gen.next(500) for _ in range(10)]
        for seq, batch in enumerate(batches, start=1):
            if seq == 2:  # the first went while the groups were being taken: placement
                spread_holders(c, name)
            want, late = oracle.apply(batch)
            arrow = seq % 2 == 0  # every other batch's per-row results as Arrow tables
            got = c.append(
                name, batch, producer_id="split", sequence=seq, results="per_row", arrow=arrow
            )
            assert bool(got.row_tables) == arrow
            check_per_row(got, want, late)
            assert not got.duplicate

        again = c.append(name, batches[2], producer_id="split", sequence=3, results="per_row")
        assert again.duplicate and again.rows_applied == 0

        for key in sorted(oracle.values):
            s, n = oracle.result(key)
            r = c.query(name, "w", key=key)
            assert (r.key, r.values["s"], r.values["n"], r.size) == (key, s, n, n)
        for key in sorted(oracle.values)[::97]:
            info = c.get_key(name, key)
            assert info.group == key_group(key, GROUPS)
            assert info.rows_appended == len(oracle.values[key])
        for key in sorted(oracle.late)[:20]:  # dropped rows count at their key too
            assert c.get_key(name, key).rows_late == oracle.late[key]

        # every row late (each key's newest minus one), split over the holders: nothing
        # applied, per-row results present and empty, their rows named (none)
        stale = sorted(oracle.newest)[:60]
        late_batch = {
            "ts": [oracle.newest[k] - 1 for k in stale],
            "host": stale,
            "v": [1.0] * len(stale),
        }
        got = c.append(name, late_batch, producer_id="split", sequence=11, results="per_row")
        assert (got.rows_applied, got.rows_late, got.duplicate) == (0, len(stale), False)
        assert got.row_results["w"]["s"] == [] and got.row_positions == []
        for k in stale:
            oracle.late[k] = oracle.late.get(k, 0) + 1

        # the stream's counters count each batch once, however many holders it was split
        # over (flushed by every holder within a second or so)
        late_total = sum(oracle.late.values())
        deadline = time.monotonic() + 20
        while True:
            info = c.get_stream(name)
            seen = (info.batches_appended, info.batches_duplicate, info.rows_late)
            if seen == (11, 1, late_total) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert seen == (11, 1, late_total)
        assert info.spec.key_groups == GROUPS

        listed = [k.key for k in c.iter_keys(name, page_size=300)]
        assert listed == sorted(oracle.values)  # each once, in key order
        first = c.list_keys(name)
        assert [k.key for k in first.keys] == sorted(oracle.values)[:1000]
        assert first.next_page_token == first.keys[-1].key
        assert c.get_stream(name).keys == len(oracle.values)


def test_a_late_row_refused_in_a_part_is_named_by_its_input_row(cluster: LocalCluster) -> None:
    """late_policy REJECT: a batch split over the holders with one late row at input row
    ``bad`` is refused (OUT_OF_ORDER) naming row ``bad`` of the input, not of its part."""
    with cluster.client(timeout=60) as c:
        name = f"kr{uuid.uuid4().hex[:8]}"
        c.create_stream(
            StreamSpec(
                name,
                (Field("host", "STRING"), Field("v", "DOUBLE")),
                key="host",
                key_groups=GROUPS,
                wall_clock=False,
            )
        )
        c.create_window(WindowSpec(name, "w", (Aggregation("n", "count"),), Policy.count(LAST)))
        holders = spread_holders(c, name)
        keys = [f"host-{i:04d}" for i in range(200)]
        c.append(name, {"ts": [100] * len(keys), "host": keys, "v": [1.0] * len(keys)})
        # the late row's key is held apart from row 0's: it sits in a later part
        first = holders[key_group(keys[0], GROUPS)]
        bad = next(
            i for i, k in enumerate(keys) if i > 50 and holders[key_group(k, GROUPS)] != first
        )
        ts = [200] * len(keys)
        ts[bad] = 50
        with pytest.raises(OutOfOrderError) as info:
            c.append(name, {"ts": ts, "host": keys, "v": [1.0] * len(keys)})
        assert info.value.metadata["row"] == str(bad)
        assert info.value.metadata["key"] == keys[bad]
        assert f"row {bad} " in info.value.message
        assert any(v.field == f"columns[ts][{bad}]" for v in info.value.violations)
        # the other holders' parts went in (not atomic across holders): the error says so
        refused = holders[key_group(keys[bad], GROUPS)]
        others = sum(1 for k in keys if holders[key_group(k, GROUPS)] != refused)
        assert info.value.metadata["rows_applied_elsewhere"] == str(others)
        assert "not atomic" in info.value.message
        assert c.get_key(name, keys[0]).newest_timestamp == 200
        assert c.get_key(name, keys[bad]).newest_timestamp == 100


def test_subscriptions_and_the_async_client_reach_every_holder(cluster: LocalCluster) -> None:
    """Subscribing to keys of groups held by every member (and to every key) gets each
    key's result from its holder; the asyncio client splits and merges the same way."""
    oracle = Oracle()
    gen = Batches(seed=11)
    with cluster.client(timeout=60) as c:
        name = new_stream(c)
        holders = spread_holders(c, name)
        first = gen.next(300)
        oracle.apply(first)
        c.append(name, first)
        keys = sorted(oracle.values)[:30]
        assert len({holders[key_group(k, GROUPS)] for k in keys}) > 1
        some = c.subscribe(name, "w", keys=keys, timeout=60)
        every = c.subscribe(name, "w", timeout=60)
        batch = {
            "ts": [gen.ts + 1 + i for i in range(len(keys))],
            "host": list(keys),
            "v": [1.5] * len(keys),
        }
        gen.ts += len(keys)
        oracle.apply(batch)
        c.append(name, batch)
        for it in (some, every):
            seen: dict[str, Any] = {}
            while len(seen) < len(keys):
                _, r = next(it)
                seen[r.key] = r
            assert set(seen) == set(keys)
            for k, r in seen.items():
                assert (r.values["s"], r.values["n"]) == oracle.result(k)
            it.close()

    async def run() -> None:
        async with AsyncWindowClient(cluster.seeds, timeout=60) as ac:
            batch = gen.next(400)
            want, late = oracle.apply(batch)
            got = await ac.append(name, batch, producer_id="aio", sequence=1, results="per_row")
            check_per_row(got, want, late)
            listed = [k.key async for k in ac.iter_keys(name, page_size=123)]
            assert listed == sorted(oracle.values)
            for key in listed[::50]:
                r = await ac.query(name, "w", key=key)
                assert (r.values["s"], r.values["n"]) == oracle.result(key)
            it = await ac.subscribe(name, "w", keys=keys, timeout=60)
            batch = {
                "ts": [gen.ts + 1 + i for i in range(len(keys))],
                "host": list(keys),
                "v": [2.0] * len(keys),
            }
            gen.ts += len(keys)
            oracle.apply(batch)
            await ac.append(name, batch)
            seen: dict[str, Any] = {}
            while len(seen) < len(keys):
                _, r = await anext(it)
                seen[r.key] = r
            for k, r in seen.items():
                assert (r.values["s"], r.values["n"]) == oracle.result(k)
            await it.aclose()

    asyncio.run(run())


@pytest.mark.slow
def test_appends_and_subscriptions_carry_on_while_a_members_groups_move(
    tmp_path: Path,
) -> None:
    """A member that holds groups (not the stream's owner) is killed, then restarted: its
    groups move to the others and back. Idempotent appends go on throughout (a part refused
    with NOT_OWNER or STREAM_MOVING is split again by a fresh map and resent): every batch
    is applied once, every per-row result is the oracle's; a subscription to every key gets
    every key's results again after each move (the batches in between may be missed)."""
    oracle = Oracle()
    gen = Batches(seed=3)
    with LocalCluster(3, "--lease-ms", "1000", data_dir=tmp_path) as cl, cl.client(timeout=30) as c:
        name = new_stream(c)
        holders = spread_holders(c, name)
        owner = c.owner(name)
        victim = next(i for i, s in enumerate(cl.servers) if s.target != owner)
        assert cl.servers[victim].target in holders
        watched = gen.keys[:200]
        it = c.subscribe(name, "w", timeout=120)

        def seen_all() -> None:
            """Append batches of the watched keys (a thread, every 0.2 s) until each one's
            result came: events of a batch applied during a move may be missed."""
            done = threading.Event()

            def pump() -> None:
                while not done.is_set():
                    n = len(watched)
                    batch = {"ts": [gen.ts + 1 + i for i in range(n)], "host": watched}
                    batch["v"] = [0.5] * n
                    gen.ts += n
                    gen.newest.update(zip(watched, batch["ts"], strict=True))
                    oracle.apply(batch)
                    c.append(name, batch)
                    done.wait(0.2)

            seen: set[str] = set()
            sender = threading.Thread(target=pump, daemon=True)
            sender.start()
            try:
                while not set(watched) <= seen:
                    seen.add(next(it)[1].key)
            finally:
                done.set()
                sender.join()

        seen_all()
        for seq in range(1, 31):
            if seq == 10:
                cl.kill(victim)
            if seq == 20:
                seen_all()
                cl.restart(victim)
            batch = gen.next(300)
            want, late = oracle.apply(batch)
            got = c.append(name, batch, producer_id="moves", sequence=seq, results="per_row")
            check_per_row(got, want, late)
        seen_all()
        it.close()
        for key in sorted(oracle.values):
            r = c.query(name, "w", key=key)
            assert (r.values["s"], r.values["n"]) == oracle.result(key), key
        assert [k.key for k in c.iter_keys(name, page_size=500)] == sorted(oracle.values)
