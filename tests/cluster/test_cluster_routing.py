"""Routing for every client, end to end: three real ``mtawindows serve`` processes on one Redis
(a :class:`mtawindows.testing.LocalCluster`; each advertises ``127.0.0.1:<its port>``), the
SDK (blocking and asyncio), the CLI and the Spark connector given one seed or several.

* a call to a server that does not own its stream is refused there (``NOT_OWNER``, naming the
  owner) and the clients follow: every call lands at the owner, whatever seed they were given;
* ListStreams of a server lists the streams it owns; the clients merge every member's;
* the owner of a stream dies (SIGKILL) or stops (SIGTERM) while idempotent appends go on: they
  carry on at the new owner, every batch applied exactly once (the sums say so), and a
  subscription carries on there too;
* the Spark connector's writer, readers and ``sliding_aggregate`` spread the per-key streams
  over the members and read them all back.

The client's own mechanics (redirect loops, STREAM_MOVING waits, owner cache) are tested on
scripted servers in ``tests/client/test_client_routing.py``.
"""

from __future__ import annotations

import asyncio
import json
import math
import queue
import signal
import subprocess
import threading
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest

from mtawindows.client import (
    Aggregation,
    AsyncWindowClient,
    Field,
    Policy,
    Storage,
    StreamSpec,
    UnavailableError,
    WindowClient,
    WindowSpec,
)
from mtawindows.client.errors import from_rpc_error
from mtawindows.testing import LocalCluster, mtawindows_command
from mtawindows.v1 import windows_pb2 as pb
from mtawindows.v1 import windows_pb2_grpc as pb_grpc
from mtawindows.v1.placement import place

pytestmark = [pytest.mark.server, pytest.mark.redis]

LEASE_MS = 2000
AGGS = (Aggregation("n", "count"), Aggregation("total", "sum", "x"))
DURABLE = Storage("redis", durable=True)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """Three servers on one embedded Redis of their own (a fresh cluster per module)."""
    root = tmp_path_factory.mktemp("cluster")
    with LocalCluster(3, "--lease-ms", str(LEASE_MS), data_dir=root) as c:
        yield c


def new_name(prefix: str = "c") -> str:
    return f"{prefix}{uuid.uuid4().hex[:8]}"


def make(c: WindowClient, name: str) -> None:
    """Stream ``name`` with window ``w``, durable: every acknowledged batch is journaled in
    Redis before the answer (what a new owner reloads after a crash)."""
    c.create_stream(
        StreamSpec(name, (Field("x", "DOUBLE"),), timestamp_field="ts", wall_clock=False)
    )
    c.create_window(WindowSpec(name, "w", AGGS, Policy.count(1_000_000), storage=DURABLE))


def rows(batch: int, n: int = 10) -> dict[str, list[Any]]:
    """Batch ``batch`` of ``n`` rows: timestamps after the previous batch's, x = 1.0 each."""
    return {"ts": [batch * n + i for i in range(n)], "x": [1.0] * n}


def spread_names(cluster: LocalCluster, n: int, prefix: str) -> list[str]:
    """``n`` new stream names that placement puts on every member (random names may all
    land on one: the routing tests need streams on each)."""
    members = [s.target for s in cluster.live]
    names: list[str] = []
    while len(names) < n or {place(x, members) for x in names} != set(members):
        names = [new_name(prefix) for _ in range(n)]
    return names


def other_than(c: WindowClient, target: str, prefix: str = "c") -> str:
    """A new stream name the cluster places on another member than ``target``."""
    members = [m.id for m in c.cluster_map().members]
    for _ in range(1000):
        name = new_name(prefix)
        if place(name, members) != target:
            return name
    raise AssertionError("no name placed elsewhere in 1000 tries")


# --------------------------------------------------------------------------- the contract


def test_the_cluster_map_lists_every_member(cluster: LocalCluster) -> None:
    for seed in cluster.live:
        with WindowClient(seed.target, timeout=30) as c:
            cmap = c.cluster_map()
            assert sorted(cmap.addresses) == sorted(s.target for s in cluster.live)
            assert [m.id for m in cmap.members] == sorted(s.target for s in cluster.live)
            assert cmap.lease_ms == LEASE_MS and cmap.answered_by == seed.target


def test_a_server_refuses_a_stream_it_does_not_own_naming_the_owner(cluster: LocalCluster) -> None:
    first = cluster.live[0]
    with WindowClient(first.target, timeout=30) as c:
        name = other_than(c, first.target)
        make(c, name)
        owner = c.owner(name)
    assert owner != first.target
    with grpc.insecure_channel(first.target) as ch, pytest.raises(grpc.RpcError) as raw:
        pb_grpc.WindowServiceStub(ch).Query(pb.QueryRequest(stream=name, window="w"), timeout=30)
    ex = from_rpc_error(raw.value, first.target)
    assert (ex.code, ex.reason) == ("FAILED_PRECONDITION", "NOT_OWNER")
    assert ex.metadata["owner"] == owner and ex.metadata["stream"] == name


# --------------------------------------------------------------------------- the SDK


def test_one_seed_reaches_every_stream_and_redirects_are_followed(cluster: LocalCluster) -> None:
    """Given one seed, the client creates, appends to and reads streams placed on every
    member; an owner cache made wrong on purpose is put right by the server's redirect."""
    seed = cluster.live[0]
    names = spread_names(cluster, 9, "r")
    with WindowClient(seed.target, timeout=30) as c:
        for i, name in enumerate(names):
            make(c, name)
            c.append(name, rows(0), producer_id="p", sequence=1)
            c.append(name, rows(1), producer_id="p", sequence=2)
            assert c.query(name, "w")["n"] == 20, i
        owners = {n: c.owner(n) for n in names}
        # each name where placement puts it: on every member
        assert owners == {n: place(n, [s.target for s in cluster.live]) for n in names}
        for name in names:
            wrong = next(s.target for s in cluster.live if s.target != owners[name])
            c.topology.redirected(name, wrong)  # a stale owner
            assert c.query(name, "w")["n"] == 20
            assert c.topology.cached_owner(name) == owners[name]
        listed = {s.spec.name for s in c.list_streams()}
        assert set(names) <= listed
    for srv in cluster.live:  # each server lists only what it owns
        with grpc.insecure_channel(srv.target) as ch:
            got = pb_grpc.WindowServiceStub(ch).ListStreams(pb.ListStreamsRequest(), timeout=30)
        mine = {s.spec.name for s in got.streams} & set(names)
        assert mine == {n for n in names if owners[n] == srv.target}


def test_the_async_client_routes_the_same_way(cluster: LocalCluster) -> None:
    seed = cluster.live[-1]
    names = spread_names(cluster, 6, "a")

    async def go() -> dict[str, str]:
        async with AsyncWindowClient(seed.target, timeout=30) as c:
            for name in names:
                await c.create_stream(
                    StreamSpec(
                        name, (Field("x", "DOUBLE"),), timestamp_field="ts", wall_clock=False
                    )
                )
                await c.create_window(WindowSpec(name, "w", AGGS, Policy.count(100)))
                await c.append(name, rows(0), producer_id="p", sequence=1)
                assert (await c.query(name, "w"))["n"] == 10
            listed = {s.spec.name for s in await c.list_streams()}
            assert set(names) <= listed
            return {n: await c.owner(n) for n in names}

    owners = asyncio.run(go())
    assert owners == {n: place(n, [s.target for s in cluster.live]) for n in names}


# --------------------------------------------------------------------------- the CLI


def cli(*args: str, timeout: float = 120) -> Any:
    out = subprocess.run(
        [*mtawindows_command(), *args, "--json", "--raw"],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout) if out.stdout.strip() else None


def test_the_cli_takes_seeds_and_routes(cluster: LocalCluster, tmp_path: Path) -> None:
    seed = cluster.live[1]
    with WindowClient(seed.target, timeout=30) as c:
        name = other_than(c, seed.target, "cli")
    one = ["--target", seed.target]
    cli(
        "streams",
        "create",
        name,
        "--field",
        "x:DOUBLE",
        "--timestamp",
        "ts",
        "--not-wall-clock",
        *one,
    )
    cli("windows", "create", name, "w", "--agg", "n=count", "--agg", "total=sum:x",
        "--policy", "count:1000", *one)  # fmt: skip
    data = tmp_path / "rows.csv"
    data.write_text("ts,x\n" + "".join(f"{i},{i}.0\n" for i in range(1, 51)))
    got = cli("append", name, str(data), "--producer-id", "cli", "--batch-rows", "20", *one)
    assert got["rows_sent"] == 50 and got["batches"] == 3
    result = cli("query", name, "w", "--target", cluster.seeds)
    assert result["values"] == {"n": 50, "total": float(sum(range(1, 51)))}
    listed = cli("streams", "list", "--target", seed.target)
    assert name in {s["spec"]["name"] for s in listed}
    with WindowClient(seed.target, timeout=30) as c:
        assert c.owner(name) != seed.target  # it went elsewhere, through the redirect


# --------------------------------------------------------------------------- failover


def _writer(
    seeds: str, name: str, batches: int, done: queue.Queue[BaseException | int]
) -> threading.Thread:
    """Appends ``batches`` idempotent batches in order, in a thread; puts each sequence
    acknowledged, then the error that stopped it (if one did)."""

    def run() -> None:
        try:
            with WindowClient(seeds, timeout=30) as c:
                for seq in range(1, batches + 1):
                    c.append(name, rows(seq), producer_id="failover", sequence=seq)
                    done.put(seq)
        except BaseException as ex:
            done.put(ex)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def _drain(events: queue.Queue[Any], wait: float) -> list[Any]:
    """What ``events`` holds now (waiting up to ``wait`` for the first); raises an error the
    reader put there."""
    got = []
    try:
        item = events.get(timeout=wait)
        while True:
            if isinstance(item, BaseException):
                raise item
            got.append(item)
            item = events.get_nowait()
    except queue.Empty:
        return got


@pytest.mark.slow
@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM], ids=["killed", "stopped"])
def test_idempotent_appends_carry_on_at_the_new_owner(tmp_path: Path, how: signal.Signals) -> None:
    """The owner of a stream dies (or stops) in the middle of a run of idempotent appends
    from a client given that server alone as its seed (it learnt the others from the map):
    the appends carry on at the new owner, each applied exactly once (``n`` and ``total``
    count every row once), and a subscription opened before the failover goes on receiving
    results from the new owner."""
    with (
        LocalCluster(3, "--lease-ms", str(LEASE_MS), data_dir=tmp_path) as cl,
        WindowClient(cl.seeds, timeout=30) as c,
    ):
        name = new_name("f")
        make(c, name)
        owner = cl.by_target(c.owner(name))
        sub = c.subscribe(name, "w", timeout=300)
        events: queue.Queue[Any] = queue.Queue()

        def read() -> None:
            try:
                for e in sub:
                    events.put(e)
            except BaseException as ex:
                events.put(ex)

        threading.Thread(target=read, daemon=True).start()
        done: queue.Queue[BaseException | int] = queue.Queue()
        writer = _writer(owner.target, name, 60, done)  # its one seed is to die
        acked = [done.get(timeout=120) for _ in range(10)]  # under way
        assert acked == list(range(1, 11))
        owner.stop(how)
        while len(acked) < 60:
            item = done.get(timeout=120)
            if isinstance(item, BaseException):
                raise item
            acked.append(item)
        writer.join(60)
        assert acked == list(range(1, 61))
        result = c.query(name, "w")
        assert (result["n"], result["total"]) == (600, 600.0)  # no loss, no double
        info = c.get_stream(name)
        assert info.rows_appended == 600
        new_owner = c.owner(name)
        assert new_owner != owner.target and new_owner in cl.seeds.split(",")
        assert name in {s.spec.name for s in c.list_streams()}  # the live members
        # the subscription followed the stream: a batch applied now reaches it
        seen = 0
        for seq in range(61, 91):
            c.append(name, rows(seq), producer_id="failover", sequence=seq)
            got = _drain(events, wait=2.0)
            seen = max([seen, *(r["n"] for _, r in got)])
            if seen > 600:
                break
        assert seen > 600, "no result reached the subscription after the failover"


@pytest.mark.slow
def test_a_plain_append_surfaces_its_owner_dying_and_the_next_call_goes_on(
    tmp_path: Path,
) -> None:
    """Without an idempotency key an append is not resent once its server may have taken it;
    one gRPC could not even send goes to another member, which relays it to the owner: a
    relay that cannot connect to the dead owner either says the call was not sent
    (STREAM_MOVING), and the client sends it again once the stream moved (applied once); one
    whose call may have reached the owner surfaces its death (OWNER_UNREACHABLE, naming the
    owner). Either way the client forgets that server and the next call reaches the
    stream's new owner; no row is lost or doubled."""
    with (
        LocalCluster(3, "--lease-ms", str(LEASE_MS), data_dir=tmp_path) as cl,
        WindowClient(cl.seeds, timeout=30) as c,
    ):
        name = new_name("p")
        make(c, name)
        c.append(name, rows(0))
        owner = cl.by_target(c.owner(name))
        owner.stop(signal.SIGKILL)
        applied = 10
        try:
            c.append(name, rows(1))  # its cached owner is gone: never reached
        except UnavailableError as info:
            applied = 0
            if info.reason == "OWNER_UNREACHABLE":  # through a relay: it names the dead owner
                assert info.metadata.get("owner") == owner.target, info.metadata
            else:
                assert info.target == owner.target, info
        res = c.append(name, rows(2), producer_id="after", sequence=1)
        assert res.rows_applied == 10
        assert c.query(name, "w")["n"] == 20 + applied


# --------------------------------------------------------------------------- Spark


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from tests.support.spark import spark_session

    s = spark_session()
    yield s
    s.stop()


@pytest.mark.spark
@pytest.mark.slow
def test_spark_works_through_one_seed_of_the_cluster(spark: Any, cluster: LocalCluster) -> None:
    """``endpoint`` = one seed: ``sliding_aggregate`` (its scratch keyed stream per task goes
    where the cluster places it), the writer (one keyed stream, at its owner) and the reader
    get the same answers as with one server."""
    from mtawindows.spark_connector.transform import sliding_aggregate
    from tests.spark.test_spark_connector import _final_per_host, assert_matches, oracle, telemetry

    seed = cluster.live[0].target
    policy = Policy.time_range(timedelta(seconds=20))
    name = new_name("spark")
    with WindowClient(seed, timeout=60) as c:
        fields = (Field("host", "STRING"), Field("mem", "DOUBLE"))
        c.create_stream(
            StreamSpec(name, fields, timestamp_field="ts", key="host", wall_clock=False)
        )
        aggs = (
            Aggregation("mx", "max", "mem"),
            Aggregation("total", "sum", "mem"),
            Aggregation("sd", "stddev", "mem"),
            Aggregation("head", "first", "mem"),
            Aggregation("tail", "last", "mem"),
        )
        c.create_window(WindowSpec(name, "w", aggs, policy))
    pdf = telemetry(seed=31, hosts=8, per_host=40)
    df = spark.createDataFrame(pdf, "host string, ts timestamp, mem double").repartition(3)
    out = sliding_aggregate(df, seed, name, key_col="host", ts_col="ts", window="w")
    assert_matches(out.toPandas(), oracle(pdf, policy))

    df.repartition(2, "host").write.format("mtawindows").option("endpoint", seed).option(
        "stream", name
    ).option("key_column", "host").option("sort", "true").mode("append").save()
    hosts = sorted(pdf["host"].unique())
    want = _final_per_host(pdf, policy)
    with WindowClient(cluster.seeds, timeout=60) as c:
        assert sorted(k.key for k in c.iter_keys(name)) == hosts
        for h in hosts:
            assert c.get_key(name, h).rows_appended == 40
            assert math.isclose(c.query(name, "w", key=h)["total"], want[h]["total"])
    rows_read = (
        spark.read.format("mtawindows")
        .options(endpoint=cluster.seeds, stream=name, key_column="host")
        .load()
        .collect()
    )
    assert sorted(r["key"] for r in rows_read) == hosts
    for r in rows_read:
        assert math.isclose(r["total"], want[r["key"]]["total"])
