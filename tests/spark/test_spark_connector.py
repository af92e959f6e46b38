"""The Spark connector on a real local Spark (``local[2]``), a real server and its embedded Redis.

Per-row results are checked against a pandas oracle (rolling windows per key), the streaming
sink against the oracle after a task failure and a replayed micro-batch, the source against the
server's own answers, and every error case for the message Spark shows. ``key_column`` /
``key_col`` work on one keyed stream: no per-key streams (ListStreams shows the one stream),
the keys seen with ListKeys.
"""

from __future__ import annotations

import math
import random
import shutil
from collections.abc import Iterator
from dataclasses import replace
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
from mtawindows.spark_connector import ConnectorError
from mtawindows.spark_connector.options import ConnectorOptions
from mtawindows.spark_connector.readers import ResultsStreamReader, read_schema
from mtawindows.spark_connector.sliding import ResultColumn, Sliding
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


def new_stream(
    c: WindowClient, policy: Policy, *, storage: str = "redis", keyed: bool = False, **kw: Any
) -> str:
    """Stream ``tele<n>`` (field mem; with ``keyed``, keyed by field host) with window "w"."""
    name = f"tele{next(_names)}"
    fields: tuple[Field, ...] = (Field("mem", "DOUBLE"),)
    if keyed:
        fields = (Field("host", "STRING"), *fields)
        kw["key"] = "host"
    c.create_stream(StreamSpec(name, fields, timestamp_field="ts", **kw))
    c.create_window(WindowSpec(name, "w", AGGS, policy, storage=Storage(storage)))
    return name


def streams_of(c: WindowClient, name: str) -> list[str]:
    """The streams named ``name`` or starting with it (per-key or scratch streams would)."""
    return [s.spec.name for s in c.list_streams() if s.spec.name.startswith(name)]


def keys_of(c: WindowClient, name: str) -> dict[str, int]:
    """A keyed stream's keys and the rows each took (ListKeys pages)."""
    return {k.key: k.rows_appended for k in c.iter_keys(name, page_size=500)}


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
    """Each row's window over its host's rows: pandas rolling (time or count), per host."""
    rows = pdf.sort_values(["host", "ts"]).reset_index(drop=True)
    series = rows.set_index("ts")["mem"].groupby(rows["host"].to_numpy(), sort=True)
    roll = (
        series.rolling(pd.Timedelta(policy.range))
        if policy.kind == "time_range"
        else series.rolling(policy.size, min_periods=1)
    )
    return pd.DataFrame(
        {
            "host": rows["host"].to_numpy(),
            "ts": rows["ts"].to_numpy(),
            "mx": roll.max().to_numpy(),
            "total": roll.sum().to_numpy(),
            "sd": roll.std(ddof=0).to_numpy(),
            "head": roll.apply(lambda a: a[0], raw=True).to_numpy(),
            "tail": roll.apply(lambda a: a[-1], raw=True).to_numpy(),
        }
    )


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
    # and the tasks' scratch streams are gone (the template is untouched)
    again = out.toPandas()
    assert_matches(again, oracle(pdf, policy))
    assert streams_of(client, name) == [name]
    assert client.get_stream(name).rows_appended == 0


def test_sliding_aggregate_many_keys_in_large_batches(
    spark: Any, client: WindowClient, server: LocalServer
) -> None:
    """2,000 keys x 5 rows: each task sends its keys' rows in one Append to its scratch keyed
    stream (the rows of every key in one batch), equal to pandas' rolling window per key; the
    template stream is keyed, so key_col defaults to its key field."""
    policy = Policy.time_range(timedelta(seconds=8))
    name = new_stream(client, policy, keyed=True)
    pdf = telemetry(seed=17, hosts=2000, per_host=5)
    df = spark.createDataFrame(pdf, "host string, ts timestamp, mem double")
    got = sliding_aggregate(df, server.target, name, ts_col="ts", window="w").toPandas()
    assert got["mtaw_applied"].all()
    assert_matches(got, oracle(pdf, policy))
    assert streams_of(client, name) == [name]  # no per-key streams, scratch streams gone
    assert client.get_stream(name).keys == 0  # the computation left the stream alone


def test_sliding_aggregate_struct_outputs_and_no_key(
    spark: Any, client: WindowClient, server: LocalServer
) -> None:
    name = f"peak{next(_names)}"
    client.create_stream(
        StreamSpec(
            name,
            (Field("mem", "DOUBLE"), Field("job", "STRING")),
            timestamp_field="at",
            wall_clock=False,
        )
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


def batch_task(
    client: WindowClient, server: LocalServer, spec: StreamSpec, name: str, pdf: pd.DataFrame
) -> tuple[Sliding, pd.DataFrame]:
    """sliding_aggregate's task function for a batch DataFrame (called here without a Spark
    job) over ``pdf`` (sorted by host, ts) in record batches of 13 rows and chunks of 7:
    window "w" of stream ``name``, its AGGS outputs; ``spec``: the task's keyed stream spec.
    The function (its state after the task) and the rows it gave."""
    import pyarrow as pa
    from pyspark.sql.types import DoubleType, StringType, StructField, StructType, TimestampType

    schema = StructType(
        [
            StructField("host", StringType()),
            StructField("ts", TimestampType()),
            StructField("mem", DoubleType()),
        ]
    )
    results = tuple(ResultColumn("w", a.name, a.name, "DOUBLE") for a in AGGS)
    opts = ConnectorOptions(
        endpoint=server.target, stream=name, timestamp_column="ts", batch_rows=7
    )
    info = client.get_window(name, "w")
    fn = Sliding(opts, spec, schema, ("w",), results, ["host", "ts"], False, (info.spec,))
    table = pa.Table.from_pandas(pdf, preserve_index=False)
    out = pa.Table.from_batches(list(fn(iter(table.to_batches(max_chunksize=13)))))
    return fn, out.to_pandas()


@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "one-key"])
@pytest.mark.parametrize("compute_rows", [400_000, 11], ids=["compute", "then-scratch"])
def test_a_batch_task_in_small_chunks_carries_each_keys_reach(
    client: WindowClient,
    server: LocalServer,
    monkeypatch: pytest.MonkeyPatch,
    keyed: bool,
    compute_rows: int,
) -> None:
    """A batch task's function (called here without a Spark job) over a partition sorted by
    (key, time) in chunks of 7 rows: each chunk one Compute call carrying the rows of its first
    key the windows still reach, so keys cut by chunks answer as pandas' rolling does; past a
    call's row limit (11 here) the task goes on in a scratch stream, which takes the carried
    rows first. The template stream is left as it was."""

    import mtawindows.spark_connector.sliding as sliding

    monkeypatch.setattr(sliding, "MAX_COMPUTE_ROWS", compute_rows)
    for policy in (Policy.time_range(timedelta(seconds=20)), Policy.count(6)):
        name = new_stream(client, policy)
        pdf = telemetry(seed=5, hosts=3 if keyed else 1, per_host=40)
        pdf = pdf.sort_values(["host", "ts"]).reset_index(drop=True)
        template = client.get_stream(name).spec
        spec = replace(template, key="host", fields=(Field("host", "STRING"), *template.fields))
        fn, got = batch_task(client, server, spec, name, pdf)
        assert fn.computing == (compute_rows > 1000)
        assert got["mtaw_applied"].all()
        assert_matches(got, oracle(pdf, policy))
        assert streams_of(client, name) == [name]  # a scratch stream, if any, is gone
        assert client.get_stream(name).rows_appended == 0


def test_a_batch_task_falls_back_to_a_scratch_stream_for_row_by_row_windows(
    client: WindowClient, server: LocalServer
) -> None:
    """A window Compute refuses (NOT_COLUMNAR: a CEL policy) sends the task to a scratch
    stream from its first chunk on: the results are still pandas' (the CEL policy keeps the
    newest 6 rows, as count 6 does), the template stream untouched, no scratch stream left."""

    name = f"cel{next(_names)}"
    client.create_stream(
        StreamSpec(name, (Field("host", "STRING"), Field("mem", "DOUBLE")), timestamp_field="ts")
    )
    aggs = (*AGGS, Aggregation("n", "count"))
    client.create_window(WindowSpec(name, "w", aggs, Policy.expression("total.n - old.n >= 6")))
    pdf = telemetry(seed=9, hosts=3, per_host=30).sort_values(["host", "ts"]).reset_index(drop=True)
    fn, got = batch_task(
        client, server, replace(client.get_stream(name).spec, key="host"), name, pdf
    )
    assert not fn.computing
    assert got["mtaw_applied"].all()
    assert_matches(got, oracle(pdf, Policy.count(6)))
    assert streams_of(client, name) == [name]
    assert client.get_stream(name).rows_appended == 0


def test_sliding_aggregate_streaming_carries_state(
    spark: Any, client: WindowClient, server: LocalServer, tmp_path: Path
) -> None:
    policy = Policy.time_range(timedelta(seconds=30))
    name = new_stream(client, policy, keyed=True)
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
    # the keyed stream itself holds the keys: the windows carried on across the micro-batches
    assert streams_of(client, name) == [name]
    assert keys_of(client, name) == {f"host-{h}": 90 for h in range(3)}
    with pytest.raises(ConnectorError, match=r"key_col: stream 'tele\d+' is not keyed"):
        sliding_aggregate(src, server.target, new_stream(client, policy), key_col="host")


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
    name = new_stream(client, policy, keyed=True)
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
    info = client.get_stream(name)
    assert streams_of(client, name) == [name]  # one keyed stream, no per-key streams
    assert info.rows_appended == len(pdf)
    assert keys_of(client, name) == {h: 150 for h in hosts}
    assert info.batches_duplicate > 0  # the retry met its chunks
    want = _final_per_host(pdf, policy)
    for h in hosts:
        r = client.query(name, "w", key=h)
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
    dup_before = client.get_stream(name).batches_duplicate
    run()
    after = client.get_stream(name)
    assert after.rows_appended == len(pdf)  # nothing counted twice
    assert after.batches_duplicate > dup_before
    for h in hosts:
        r = client.query(name, "w", key=h)
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


def test_batch_write_with_key_column_goes_to_one_keyed_stream(
    spark: Any, client: WindowClient, server: LocalServer
) -> None:
    policy = Policy.count(1000)
    name = new_stream(client, policy, keyed=True)
    pdf = telemetry(seed=23, hosts=40, per_host=25)
    df = spark.createDataFrame(pdf, "host string, ts timestamp, mem double").repartition(2, "host")

    def write(stream: str, key_column: str) -> None:
        df.write.format("mtawindows").options(
            endpoint=server.target, stream=stream, key_column=key_column
        ).option("sort", "true").option("batch_rows", "300").mode("append").save()

    write(name, "host")  # chunks of 300 rows, each of many keys
    assert streams_of(client, name) == [name]
    assert keys_of(client, name) == {f"host-{h}": 25 for h in range(40)}
    want = _final_per_host(pdf, policy)
    for h in ("host-0", "host-17", "host-39"):
        r = client.get_key(name, h).results["w"]
        assert (r.key, r.size) == (h, 25) and math.isclose(r["total"], want[h]["total"])
    # a stream not keyed by key_column is refused, naming the stream and both fields
    unkeyed = new_stream(client, policy)
    with pytest.raises(Exception, match=rf"option 'key_column': stream '{unkeyed}' is not keyed"):
        write(unkeyed, "host")
    with pytest.raises(
        Exception, match=rf"stream '{name}' is keyed by field 'host', not by key_column 'mem'"
    ):
        write(name, "mem")
    assert client.get_stream(unkeyed).rows_appended == 0


# --------------------------------------------------------------------------- several servers
# (a cluster of servers, its seeds in ``endpoint``: tests/cluster/test_cluster_routing.py)


def test_endpoint_lists_are_checked() -> None:
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


def test_batch_read_of_a_keyed_stream_per_key_and_window_with_key_filters(
    spark: Any, client: WindowClient, server: LocalServer
) -> None:
    name = new_stream(client, Policy.count(10), keyed=True)
    client.create_window(
        WindowSpec(name, "all", (Aggregation("n", "count"),), Policy.count(10_000))
    )
    keys = [f"k{i:04d}" for i in range(1200)]  # over one read partition (1,000 keys)
    rows = [(k, T0 + i * 10 + j, float(i % 50 + j)) for i, k in enumerate(keys) for j in range(3)]
    client.append(
        name,
        {
            "ts": [t * 10**9 for _, t, _ in rows],
            "host": [k for k, _, _ in rows],
            "mem": [m for _, _, m in rows],
        },
    )

    def read(**options: str) -> Any:
        return (
            spark.read.format("mtawindows")
            .option("endpoint", server.target)
            .option("stream", name)
            .options(**options)
            .load()
        )

    everything = read().collect()
    assert len(everything) == 2 * len(keys)  # one row per (key, window)
    assert sorted({r["key"] for r in everything}) == keys
    for r in everything:
        if r["key"] in ("k0000", "k0777", "k1199"):
            want = client.query(name, r["window"], key=r["key"])
            assert (r["stream"], r["sequence"], r["size"]) == (name, want.sequence, want.size)
            assert r["mx"] == want["mx"] if r["window"] == "w" else r["n"] == 3

    def keys_read(df: Any) -> list[tuple[str, str]]:
        return sorted((r["key"], r["window"]) for r in df.collect())

    both = ["all", "w"]
    assert keys_read(read(keys="k0001, k0002,nope")) == [
        (k, w) for k in ("k0001", "k0002") for w in both
    ]
    assert keys_read(read(key_prefix="k001", window="w")) == [(f"k001{i}", "w") for i in range(10)]
    # Spark's filters on column key reach the reader: only those keys are asked for
    from pyspark.sql import functions as F

    one = read().where(F.col("key") == "k0005")
    assert keys_read(one) == [("k0005", w) for w in both]
    assert one.rdd.getNumPartitions() == 1
    assert keys_read(read().where(F.col("key").isin("k0100", "k1100", "x"))) == [
        (k, w) for k in ("k0100", "k1100") for w in both
    ]
    # a key no row could make (the server refuses to be asked it): no rows, not a failure
    assert keys_read(read().where(F.col("key").isin("", "k0007"))) == [("k0007", w) for w in both]
    assert read().where(F.col("key") == "").count() == 0
    prefix = read().where(F.col("key").startswith("k011") & (F.col("window") == "all"))
    assert keys_read(prefix) == [(f"k011{i}", "all") for i in range(10)]
    assert read(key_prefix="k02").where(F.col("key").startswith("k03")).count() == 0
    # a keyed stream cannot be followed by sequence: spark.readStream's reader refuses it
    opts = ConnectorOptions.parse({"endpoint": server.target, "stream": name})
    with pytest.raises(ConnectorError, match=rf"stream '{name}' is keyed, and spark.readStream"):
        ResultsStreamReader(opts, read_schema(opts))


def test_a_micro_batch_partition_of_a_keyed_stream_late_rows_and_replays(
    client: WindowClient, server: LocalServer
) -> None:
    """sliding_aggregate's task function on a micro-batch's partition (called here without a
    Spark job): one Append for all its keys, each row with its own key's result; the same
    partition again (a replayed micro-batch) applies nothing, on REJECT and on DROP; on DROP, a
    row older than its key's newest comes back with mtaw_applied false and null results."""
    import pyarrow as pa
    from pyspark.sql.types import DoubleType, StringType, StructField, StructType, TimestampType

    schema = StructType(
        [
            StructField("host", StringType()),
            StructField("ts", TimestampType()),
            StructField("mem", DoubleType()),
        ]
    )
    results = (ResultColumn("w", "total", "total", "DOUBLE"), ResultColumn("w", "n", "n", "INT64"))

    def batch(rows: list[tuple[str, int, float]]) -> pa.RecordBatch:
        return pa.record_batch(
            {
                "host": [h for h, _, _ in rows],
                "ts": pa.array(
                    [(T0 + t) * 10**6 for _, t, _ in rows], pa.timestamp("us", tz="UTC")
                ),
                "mem": [m for _, _, m in rows],
            }
        )

    def run(
        name: str, rows: list[tuple[str, int, float]], query: str = "q1"
    ) -> list[tuple[Any, ...]]:
        opts = ConnectorOptions(endpoint=server.target, stream=name, timestamp_column="ts")
        spec = client.get_stream(name).spec
        fn = Sliding(opts, spec, schema, ("w",), results, ["host", "ts"], streaming=True)
        fn.run_id = query  # stands in for the streaming query's id: the chunks' producer
        out = pa.Table.from_batches(list(fn(iter([batch(rows)])))).to_pylist()
        return [(r["host"], r["mem"], r["total"], r["n"], r["mtaw_applied"]) for r in out]

    rows = [("b", 2, 5.0), ("a", 5, 1.0), ("a", 13, 3.0), ("b", 1, 4.0), ("a", 12, 2.0)]
    for late_policy in ("REJECT", "DROP"):
        name = f"late{next(_names)}"
        fields = (Field("host", "STRING"), Field("mem", "DOUBLE"))
        client.create_stream(
            StreamSpec(name, fields, late_policy=late_policy, key="host", wall_clock=False)
        )
        aggs = (Aggregation("total", "sum", "mem"), Aggregation("n", "count"))
        client.create_window(WindowSpec(name, "w", aggs, Policy.count(3)))
        client.append(name, {"ts": [(T0 + 4) * 10**9], "host": ["a"], "mem": [100.0]})
        assert run(name, rows) == [  # sorted by (key, time), one Append
            ("a", 1.0, 101.0, 2, True),
            ("a", 2.0, 103.0, 3, True),
            ("a", 3.0, 6.0, 3, True),
            ("b", 4.0, 4.0, 1, True),
            ("b", 5.0, 9.0, 2, True),
        ]
        assert [r[2:] for r in run(name, rows)] == [(None, None, False)] * 5  # replayed
        assert client.get_stream(name).rows_appended == 6
    # DROP: a's row older than its newest (T0+13) is skipped; the others count
    got = run(name, [("a", 7, 50.0), ("b", 3, 6.0), ("a", 14, 4.0)], query="q2")
    assert got == [
        ("a", 50.0, None, None, False),
        ("a", 4.0, 9.0, 3, True),
        ("b", 6.0, 15.0, 3, True),
    ]
    assert client.get_key(name, "a").rows_late == 0  # told before sending: none was sent


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
    reach the live server."""
    name = new_stream(client, Policy.count(5), keyed=True)
    dead = f"127.0.0.1:{free_port()}"
    seeds = f"{dead},{server.target}"
    df = spark.createDataFrame(
        [("h1", datetime.now(tz=UTC), 1.0)], "host string, ts timestamp, mem double"
    )
    df.write.format("mtawindows").options(endpoint=seeds, stream=name).option(
        "key_column", "host"
    ).option("timeout", "3").mode("append").save()
    assert keys_of(client, name) == {"h1": 1}


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
