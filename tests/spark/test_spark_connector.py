"""The Spark connector on a real local Spark (``local[2]``), a real server and its embedded Redis.

Per-row results are checked against a pandas oracle (rolling windows per key), the streaming
sink against the oracle after a task failure and a replayed micro-batch, the source against the
server's own answers, and every error case for the message Spark shows.
"""

from __future__ import annotations

import math
import random
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from mtawindows.client import (
    Aggregation,
    Field,
    Policy,
    Storage,
    StreamSpec,
    WindowClient,
    WindowSpec,
)
from mtawindows.spark_connector import ConnectorError, keyed_stream_name
from mtawindows.spark_connector.transform import sliding_aggregate
from mtawindows.testing import LocalServer, free_port
from tests.support.spark import spark_session

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.server, pytest.mark.redis]

T0 = 1_700_000_000
AGGS = (
    Aggregation("mx", "max", "mem"),
    Aggregation("total", "sum", "mem"),
    Aggregation("sd", "stddev", "mem"),
    Aggregation("head", "first", "mem"),  # not commutative: order matters
    Aggregation("tail", "last", "mem"),
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    srv = LocalServer(tmp_path_factory.mktemp("spark-server")).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    s = spark_session()
    yield s
    s.stop()


@pytest.fixture
def client(server: LocalServer) -> Iterator[WindowClient]:
    with WindowClient(server.target) as c:
        yield c


_names = iter(range(10_000))


def new_stream(c: WindowClient, policy: Policy, *, storage: str = "redis", **kw: Any) -> str:
    name = f"tele{next(_names)}"
    c.create_stream(StreamSpec(name, (Field("mem", "DOUBLE"),), timestamp_field="ts", **kw))
    c.create_window(WindowSpec(name, "w", AGGS, policy, storage=Storage(storage)))
    return name


def telemetry(seed: int, hosts: int, per_host: int, start: int = 0) -> pd.DataFrame:
    """Memory readings per host at irregular, distinct times (seconds after T0 + start)."""
    rng = random.Random(seed)
    rows = []
    for h in range(hosts):
        t = start + h * 0.25
        for _ in range(per_host):
            t += rng.choice((0.5, 1.0, 2.5, 7.0))
            rows.append((f"host-{h}", datetime.fromtimestamp(T0 + t, tz=UTC), rng.uniform(0, 64)))
    rng.shuffle(rows)
    return pd.DataFrame(rows, columns=["host", "ts", "mem"])


def oracle(pdf: pd.DataFrame, policy: Policy) -> pd.DataFrame:
    """Each row's window over its host's rows: pandas rolling (time or count)."""
    out = []
    for _, g in pdf.sort_values(["host", "ts"]).groupby("host", sort=True):
        s = g.set_index("ts")["mem"]
        roll = (
            s.rolling(pd.Timedelta(policy.range))
            if policy.kind == "time_range"
            else s.rolling(policy.size, min_periods=1)
        )
        got = pd.DataFrame(
            {
                "host": g["host"].to_numpy(),
                "ts": g["ts"].to_numpy(),
                "mx": roll.max().to_numpy(),
                "total": roll.sum().to_numpy(),
                "sd": roll.std(ddof=0).to_numpy(),
                "head": roll.apply(lambda a: a[0], raw=True).to_numpy(),
                "tail": roll.apply(lambda a: a[-1], raw=True).to_numpy(),
            }
        )
        out.append(got)
    return pd.concat(out, ignore_index=True)


def assert_matches(got: pd.DataFrame, want: pd.DataFrame) -> None:
    got = got.sort_values(["host", "ts"]).reset_index(drop=True)
    want = want.sort_values(["host", "ts"]).reset_index(drop=True)
    assert len(got) == len(want)
    assert list(got["host"]) == list(want["host"])
    assert (
        pd.to_datetime(got["ts"]).dt.tz_localize(None)
        == pd.to_datetime(want["ts"]).dt.tz_localize(None)
    ).all()
    for col in ("mx", "total", "sd", "head", "tail"):
        for i, (a, b) in enumerate(zip(got[col], want[col], strict=True)):
            assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9), (col, i, a, b)


# --------------------------------------------------------------------------- sliding_aggregate


@pytest.mark.parametrize(
    "policy",
    [
        Policy.time_range(timedelta(seconds=10)),
        Policy.time_range(timedelta(seconds=60)),
        Policy.count(7),
    ],
    ids=["time-10s", "time-60s", "count-7"],
)
def test_sliding_aggregate_equals_pandas(
    spark: Any, client: WindowClient, server: LocalServer, policy: Policy
) -> None:
    name = new_stream(client, policy)
    pdf = telemetry(seed=len(name), hosts=5, per_host=120)
    df = spark.createDataFrame(pdf, "host string, ts timestamp, mem double").repartition(3)
    out = sliding_aggregate(df, server.target, name, key_col="host", ts_col="ts", window="w")
    got = out.toPandas()
    assert got["mtaw_applied"].all()
    assert_matches(got, oracle(pdf, policy))
    # batch results are a pure function of the input: a second action gives the same answer,
    # and the task's scratch streams are gone
    again = out.toPandas()
    assert_matches(again, oracle(pdf, policy))
    assert [s.spec.name for s in client.list_streams() if s.spec.name.startswith(name + ":")] == []


def test_sliding_aggregate_struct_outputs_and_no_key(
    spark: Any, client: WindowClient, server: LocalServer
) -> None:
    name = f"peak{next(_names)}"
    client.create_stream(
        StreamSpec(name, (Field("mem", "DOUBLE"), Field("job", "STRING")), timestamp_field="at")
    )
    spec = WindowSpec(
        name,
        "last5",
        (Aggregation("peak", "argmax", "mem", {"key": "job"}), Aggregation("n", "count")),
        Policy.count(5),
    )
    rows = [
        (datetime.fromtimestamp(T0 + i, tz=UTC), float((i * 37) % 11), f"j{i}") for i in range(40)
    ]
    df = spark.createDataFrame(rows, "at timestamp, mem double, job string").repartition(2)
    got = sliding_aggregate(df, server.target, name, window=spec).orderBy("at").collect()
    for i, r in enumerate(got):
        window = rows[max(0, i - 4) : i + 1]
        best = max(window, key=lambda x: x[1])  # argmax keeps the first of equal maxima
        firsts = [x for x in window if x[1] == best[1]]
        assert (r["peak"]["value"], r["n"]) == (best[1], len(window))
        assert r["peak"]["key"] in {x[2] for x in firsts}


def test_sliding_aggregate_streaming_carries_state(
    spark: Any, client: WindowClient, server: LocalServer, tmp_path: Path
) -> None:
    policy = Policy.time_range(timedelta(seconds=30))
    name = new_stream(client, policy)
    pdf = telemetry(seed=3, hosts=3, per_host=90)
    src = file_stream(spark, pdf, tmp_path / "in", slices=3)
    out = sliding_aggregate(src, server.target, name, key_col="host", ts_col="ts", window="w")
    got: list[pd.DataFrame] = []
    q = (
        out.writeStream.foreachBatch(lambda b, _: got.append(b.toPandas()))
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    assert q.awaitTermination(240)
    result = pd.concat(got, ignore_index=True)
    assert len(got) >= 3 and result["mtaw_applied"].all()
    assert_matches(result, oracle(pdf, policy))
    # the per-key streams persist: the windows carried on across the micro-batches
    assert client.get_stream(keyed_stream_name(name, "host-0")).rows_appended == 90


def file_stream(spark: Any, pdf: pd.DataFrame, folder: Path, slices: int) -> Any:
    """A streaming DataFrame over ``slices`` parquet files of ``pdf``, each newer than the one
    before, read one file per micro-batch."""
    folder.mkdir(parents=True)
    pdf = pdf.sort_values("ts").reset_index(drop=True)
    edges = [len(pdf) * i // slices for i in range(slices + 1)]
    for i in range(slices):
        part = pdf.iloc[edges[i] : edges[i + 1]].sample(frac=1, random_state=i)
        part.to_parquet(folder / f"part-{i:03d}.parquet", index=False, coerce_timestamps="us")
    return (
        spark.readStream.schema("host string, ts timestamp, mem double")
        .option("maxFilesPerTrigger", 1)
        .parquet(str(folder))
    )


# --------------------------------------------------------------------------- the sink


def _final_per_host(pdf: pd.DataFrame, policy: Policy) -> dict[str, dict[str, float]]:
    want = oracle(pdf, policy).sort_values(["host", "ts"]).groupby("host").tail(1)
    return {r.host: {"mx": r.mx, "total": r.total, "head": r.head} for r in want.itertuples()}


def test_streaming_sink_exactly_once_after_failure_and_replay(
    spark: Any, client: WindowClient, server: LocalServer, tmp_path: Path
) -> None:
    policy = Policy.time_range(timedelta(seconds=45))
    name = new_stream(client, policy)
    pdf = telemetry(seed=11, hosts=4, per_host=150)
    src = file_stream(spark, pdf, tmp_path / "in", slices=3)
    ck = tmp_path / "ck"

    def run() -> None:
        q = (
            src.repartition(2, "host")  # each key in one task; option sort orders it
            .writeStream.format("mtawindows_flaky")
            .option("sort", "true")
            .option("endpoint", server.target)
            .option("stream", name)
            .option("key_column", "host")
            .option("timestamp_column", "ts")
            .option("batch_rows", "20")
            .option("checkpointLocation", str(ck))
            .trigger(availableNow=True)
            .start()
        )
        assert q.awaitTermination(240)
        assert q.exception() is None

    # batch 1's task fails after sending chunks; its retry sends them again
    run()
    hosts = sorted(pdf["host"].unique())
    streams = {h: client.get_stream(keyed_stream_name(name, h)) for h in hosts}
    assert sum(s.rows_appended for s in streams.values()) == len(pdf)
    assert sum(s.batches_duplicate for s in streams.values()) > 0  # the retry met its chunks
    want = _final_per_host(pdf, policy)
    for h in hosts:
        r = client.query(keyed_stream_name(name, h), "w")
        assert math.isclose(r["mx"], want[h]["mx"]) and math.isclose(r["total"], want[h]["total"])
        assert r["head"] == want[h]["head"]
    # replay the last micro-batch: forget that it committed, run the query again
    commits = sorted(
        (ck / "commits").iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1
    )
    last = [p for p in commits if p.name.isdigit()][-1]
    last.unlink()
    for crc in (ck / "commits").glob(f".{last.name}.crc"):
        crc.unlink()
    dup_before = sum(client.get_stream(keyed_stream_name(name, h)).batches_duplicate for h in hosts)
    run()
    after = {h: client.get_stream(keyed_stream_name(name, h)) for h in hosts}
    assert sum(s.rows_appended for s in after.values()) == len(pdf)  # nothing counted twice
    assert sum(s.batches_duplicate for s in after.values()) > dup_before
    for h in hosts:
        r = client.query(keyed_stream_name(name, h), "w")
        assert math.isclose(r["total"], want[h]["total"])


def test_batch_write_then_rerun_with_same_write_id(
    spark: Any, client: WindowClient, server: LocalServer
) -> None:
    policy = Policy.count(1000)
    name = new_stream(client, policy)
    pdf = telemetry(seed=5, hosts=1, per_host=300)
    df = (
        spark.createDataFrame(pdf, "host string, ts timestamp, mem double")
        .orderBy("ts")
        .coalesce(1)
    )
    writer = (
        df.write.format("mtawindows")
        .option("endpoint", server.target)
        .option("stream", name)
        .option("batch_rows", "64")
        .option("write_id", "load-2026-11-22")
        .mode("append")
    )
    writer.save()
    writer.save()  # the same write id: every chunk is a duplicate
    s = client.get_stream(name)
    assert s.rows_appended == 300
    assert s.batches_appended == 5 and s.batches_duplicate == 5
    assert math.isclose(client.query(name, "w")["total"], pdf["mem"].sum())


# --------------------------------------------------------------------------- several servers
# (a cluster of servers, its seeds in ``endpoint``: tests/cluster/test_cluster_routing.py)


def test_endpoint_lists_are_checked() -> None:
    from mtawindows.spark_connector.options import ConnectorOptions

    for bad in ("a:1,,b:2", "a:1,a:1", " , "):
        with pytest.raises(ConnectorError, match="option 'endpoint'"):
            ConnectorOptions.parse({"endpoint": bad, "stream": "s"})
    opts = ConnectorOptions.parse({"endpoint": "a:1, b:2", "stream": "s"})
    assert opts.endpoints == ("a:1", "b:2")


# --------------------------------------------------------------------------- the source


def test_batch_read_returns_each_windows_result(
    spark: Any, client: WindowClient, server: LocalServer
) -> None:
    name = new_stream(client, Policy.count(10), storage="memory")
    client.create_window(
        WindowSpec(
            name,
            "all",
            (Aggregation("n", "count"), Aggregation("mx", "max", "mem")),
            Policy.count(10_000),
        )
    )
    for i in range(3):
        client.append(name, {"ts": [T0 * 10**9 + i * 10**9], "mem": [float(i)]})
    rows = (
        spark.read.format("mtawindows")
        .option("endpoint", server.target)
        .option("stream", name)
        .load()
        .orderBy("window")
        .collect()
    )
    assert [r["window"] for r in rows] == ["all", "w"]
    for r in rows:
        want = client.query(name, r["window"])
        assert (r["sequence"], r["size"], r["mx"]) == (want.sequence, want.size, want["mx"])
        assert r["timestamp"].replace(tzinfo=UTC) == datetime.fromtimestamp(T0 + 2, tz=UTC)
    assert rows[0]["n"] == 3 and rows[1]["total"] == 3.0


def test_stream_read_follows_new_results(
    spark: Any, client: WindowClient, server: LocalServer, tmp_path: Path
) -> None:
    name = new_stream(client, Policy.count(4), storage="memory")
    expected = []

    def push(values: list[float], start: int) -> None:
        for i, v in enumerate(values):
            res = client.append(
                name, {"ts": [(T0 + start + i) * 10**9], "mem": [v]}, results="final"
            )
            expected.append(
                (res.results["w"].sequence, res.results["w"]["mx"], res.results["w"]["total"])
            )

    def follow() -> list[tuple[int, float, float]]:
        got: list[Any] = []
        q = (
            spark.readStream.format("mtawindows")
            .option("endpoint", server.target)
            .option("stream", name)
            .option("starting_offsets", "earliest")
            .option("max_results_per_trigger", "2")
            .load()
            .writeStream.foreachBatch(lambda b, _: got.extend(b.collect()))
            .option("checkpointLocation", str(tmp_path / "ck"))
            .trigger(availableNow=True)
            .start()
        )
        assert q.awaitTermination(120)
        return sorted((r["sequence"], r["mx"], r["total"]) for r in got)

    push([1.0, 5.0, 2.0], 0)
    assert follow() == expected
    seen = len(expected)
    push([0.5, 9.0, 3.0, 4.0, 1.0], 10)
    assert follow() == expected[seen:]  # only the new results, each once, in sequence


# --------------------------------------------------------------------------- errors


def test_unreachable_endpoint_names_the_option(spark: Any) -> None:
    df = spark.createDataFrame([(datetime.now(tz=UTC), 1.0)], "ts timestamp, mem double")
    with pytest.raises(Exception, match="option 'endpoint': cannot reach mtawindows"):
        df.write.format("mtawindows").option("endpoint", f"127.0.0.1:{free_port()}").option(
            "stream", "x"
        ).option("timeout", "3").mode("append").save()


def test_a_dead_seed_among_the_endpoints_is_skipped(
    spark: Any, client: WindowClient, server: LocalServer
) -> None:
    """endpoint "dead,live": the seeds of a cluster, any one of which is enough; the rows
    (each key's stream included) reach the live server."""
    name = new_stream(client, Policy.count(5))
    dead = f"127.0.0.1:{free_port()}"
    seeds = f"{dead},{server.target}"
    df = spark.createDataFrame(
        [("h1", datetime.now(tz=UTC), 1.0)], "host string, ts timestamp, mem double"
    )
    df.write.format("mtawindows").options(endpoint=seeds, stream=name).option(
        "key_column", "host"
    ).option("timeout", "3").mode("append").save()
    assert client.get_stream(keyed_stream_name(name, "h1")).rows_appended == 1


def test_unknown_stream_names_the_option(spark: Any, server: LocalServer) -> None:
    df = spark.createDataFrame([(datetime.now(tz=UTC), 1.0)], "ts timestamp, mem double")
    with pytest.raises(Exception, match=r"option 'stream'.*no_such_stream"):
        df.write.format("mtawindows").option("endpoint", server.target).option(
            "stream", "no_such_stream"
        ).mode("append").save()
    with pytest.raises(Exception, match=r"option 'stream'.*no_such_stream"):
        spark.read.format("mtawindows").option("endpoint", server.target).option(
            "stream", "no_such_stream"
        ).load().collect()
    with pytest.raises(ConnectorError, match=r"option 'stream'.*no_such_stream"):
        sliding_aggregate(df, server.target, "no_such_stream", ts_col="ts")


def test_wrong_schema_names_the_column(
    spark: Any, client: WindowClient, server: LocalServer
) -> None:
    name = new_stream(client, Policy.count(3))
    text = spark.createDataFrame([(datetime.now(tz=UTC), "high")], "ts timestamp, mem string")
    with pytest.raises(
        Exception, match=r"column 'mem': stream .* expects DOUBLE, the DataFrame has string"
    ):
        text.write.format("mtawindows").option("endpoint", server.target).option(
            "stream", name
        ).mode("append").save()
    missing = spark.createDataFrame([(datetime.now(tz=UTC), 1.0)], "ts timestamp, cpu double")
    with pytest.raises(Exception, match="column 'mem'"):
        missing.write.format("mtawindows").option("endpoint", server.target).option(
            "stream", name
        ).mode("append").save()
    no_time = spark.createDataFrame([(datetime.now(tz=UTC), 1.0)], "at timestamp, mem double")
    with pytest.raises(Exception, match=r"column 'ts'.*option 'timestamp_column'"):
        no_time.write.format("mtawindows").option("endpoint", server.target).option(
            "stream", name
        ).mode("append").save()
    with pytest.raises(ConnectorError, match="key_col: the DataFrame has no column 'host'"):
        sliding_aggregate(no_time, server.target, name, key_col="host", ts_col="at")
    with pytest.raises(Exception, match="option 'batch_rows': expected a whole number > 0"):
        missing.write.format("mtawindows").option("endpoint", server.target).option(
            "stream", name
        ).option("batch_rows", "lots").mode("append").save()
    assert client.get_stream(name).rows_appended == 0  # nothing was applied


def test_out_of_order_rows_fail_with_the_ordering_contract(
    spark: Any, client: WindowClient, server: LocalServer
) -> None:
    name = new_stream(client, Policy.count(3))
    rows = [(datetime.fromtimestamp(T0 + t, tz=UTC), 1.0) for t in (5, 3, 9)]
    df = spark.createDataFrame(rows, "ts timestamp, mem double").coalesce(1)
    with pytest.raises(Exception, match="timestamp order"):
        df.write.format("mtawindows").option("endpoint", server.target).option("stream", name).mode(
            "append"
        ).save()
    assert client.get_stream(name).rows_appended == 0


def teardown_module() -> None:
    shutil.rmtree(Path("spark-warehouse"), ignore_errors=True)
