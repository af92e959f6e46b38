"""Hopping windows (issue 25) through the Spark connector, on a real local Spark and a real
server, against Spark's own ``groupBy(window(ts, "60 seconds", slide))`` on the same rows:

* the batch reader of a hopping window: one row per closed boundary (``window_start``,
  ``window_end``, the outputs, ``size``), the same numbers as Spark's windows ending at or
  before the last row (a boundary closes when a row at or after it arrives); the stream
  reader gives the same rows;
* ``sliding_aggregate(..., slide=...)``: one row per (key, boundary), every window Spark
  gives (the end of the input closes the last ones), exactly, over keys with gaps longer
  than the range, more than a thousand boundaries a key (Appends cut where more could
  close) and several keys sharing a task's scratch stream; a slide in rows (a scratch
  stream per key) against the server's own boundaries of each key's rows.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from mtawindows.client import Aggregation, Field, Policy, StreamSpec, WindowClient, WindowSpec
from mtawindows.spark_connector import ConnectorError
from mtawindows.spark_connector.transform import sliding_aggregate
from mtawindows.testing import LocalServer
from tests.support.spark import spark_session

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.server, pytest.mark.redis]

T0 = 1_700_000_003  # not a multiple of the slide: the first boundary is mid-slide
AGGS = (
    Aggregation("hi", "max", "v"),
    Aggregation("total", "sum", "v"),
    Aggregation("n", "count"),
)
RANGE = timedelta(seconds=60)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    with LocalServer(tmp_path_factory.mktemp("spark-hop")) as srv:
        yield srv


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    s = spark_session()
    yield s
    s.stop()


@pytest.fixture
def client(server: LocalServer) -> Iterator[WindowClient]:
    with WindowClient(server.target, timeout=60) as c:
        yield c


_names = iter(range(10_000))


def readings(seed: int, hosts: int, per_host: int) -> list[tuple[str, datetime, float]]:
    """Integer-valued readings (sums exact in any order) per host at irregular times: ties,
    bursts, and gaps longer than the range."""
    rng = random.Random(seed)
    rows = []
    for h in range(hosts):
        t = rng.uniform(0, 30)
        for _ in range(per_host):
            t += rng.choice((0.0, 0.3, 1.0, 2.5, 7.0, 7.0, 95.0 if rng.random() < 0.02 else 1.0))
            rows.append(
                (f"host-{h}", datetime.fromtimestamp(T0 + t, tz=UTC), float(rng.randint(-99, 99)))
            )
    rng.shuffle(rows)
    return rows


def spark_windows(df: Any, slide: str, keyed: bool) -> set[tuple[Any, ...]]:
    """Spark's own answer: (host, start, end, max, sum, count) per window."""
    from pyspark.sql import functions as F

    by = [F.col("host")] if keyed else []
    got = (
        df.groupBy(*by, F.window("ts", "60 seconds", slide))
        .agg(F.max("v").alias("hi"), F.sum("v").alias("total"), F.count("*").alias("n"))
        .select(*by, "window.start", "window.end", "hi", "total", "n")
        .collect()
    )
    return {tuple(r) for r in got}


def _utc(d: datetime) -> datetime:
    return d.replace(tzinfo=None) if d.tzinfo is None else d.astimezone(UTC).replace(tzinfo=None)


def as_rows(rows: Any, keyed: bool) -> set[tuple[Any, ...]]:
    out = set()
    for r in rows:
        key = (r["host"],) if keyed else ()
        out.add((*key, _utc(r["window_start"]), _utc(r["window_end"]), r["hi"], r["total"], r["n"]))
        assert r["size"] == r["n"]
    return out


def normal(rows: set[tuple[Any, ...]]) -> set[tuple[Any, ...]]:
    """Spark's naive timestamps (the session is UTC) as naive UTC datetimes."""
    return {tuple(_utc(x) if isinstance(x, datetime) else x for x in r) for r in rows}


# --------------------------------------------------------------------------- the reader


def test_reader_gives_one_row_per_closed_boundary_as_spark_window(
    spark: Any, client: WindowClient, server: LocalServer
) -> None:
    name = f"hopr{next(_names)}"
    client.create_stream(StreamSpec(name, (Field("v", "DOUBLE"),), timestamp_field="ts"))
    client.create_window(
        WindowSpec(name, "w", AGGS, Policy.time_range(RANGE), slide=timedelta(seconds=10))
    )
    rows = sorted((t, v) for _, t, v in readings(seed=3, hosts=1, per_host=1500))
    for i in range(0, len(rows), 400):
        part = rows[i : i + 400]
        client.append(name, {"ts": [t for t, _ in part], "v": [v for _, v in part]})
    got_df = (
        spark.read.format("mtawindows")
        .option("endpoint", server.target)
        .option("stream", name)
        .option("window", "w")
        .load()
    )
    assert got_df.columns[:7] == [
        "stream", "window", "sequence", "boundary", "window_start", "window_end", "size",
    ]  # fmt: skip
    got = got_df.collect()
    assert [r["sequence"] for r in got] == list(range(1, len(got) + 1))
    assert all(r["boundary"] == int(r["window_end"].timestamp()) * 10**9 for r in got)
    df = spark.createDataFrame(
        [("h", t, v) for t, v in rows], "host string, ts timestamp, v double"
    )
    last = _utc(rows[-1][0])
    want = {w for w in normal(spark_windows(df, "10 seconds", keyed=False)) if w[1] <= last}
    assert len(want) > 100
    assert as_rows(got, keyed=False) == want

    # spark.readStream follows the same boundaries by sequence
    seen: list[Any] = []
    q = (
        spark.readStream.format("mtawindows")
        .option("endpoint", server.target)
        .option("stream", name)
        .option("starting_offsets", "earliest")
        .load()
        .writeStream.trigger(availableNow=True)
        .foreachBatch(lambda b, _: seen.extend(b.collect()))
        .start()
    )
    q.awaitTermination(120)
    assert as_rows(seen, keyed=False) == want


# --------------------------------------------------------------------------- sliding_aggregate


def _template(client: WindowClient, keyed: bool) -> str:
    name = f"hopt{next(_names)}"
    fields = (Field("host", "STRING"), Field("v", "DOUBLE")) if keyed else (Field("v", "DOUBLE"),)
    client.create_stream(
        StreamSpec(name, fields, timestamp_field="ts", key="host" if keyed else "")
    )
    client.create_window(WindowSpec(name, "w", AGGS, Policy.time_range(RANGE)))
    return name


@pytest.mark.parametrize(
    ("slide", "hosts", "per_host"),
    [(10, 7, 400), (1, 3, 1500)],
    ids=["10s-7-keys", "1s-over-1000-boundaries-a-key"],
)
def test_sliding_aggregate_with_slide_equals_spark_window(
    spark: Any, client: WindowClient, server: LocalServer, slide: int, hosts: int, per_host: int
) -> None:
    """A keyed template stream: slide= turns its window into a hopping one; every task's keys
    share one scratch stream, each key in a stretch of time of its own."""
    name = _template(client, keyed=True)
    df = spark.createDataFrame(
        readings(seed=slide, hosts=hosts, per_host=per_host), "host string, ts timestamp, v double"
    ).repartition(2)
    out = sliding_aggregate(
        df, server.target, name, ts_col="ts", window="w", slide=timedelta(seconds=slide)
    )
    assert out.columns == ["host", "window_start", "window_end", "hi", "total", "n", "size"]
    got = out.collect()
    want = normal(spark_windows(df, f"{slide} seconds", keyed=True))
    assert len(got) == len(want)
    assert as_rows(got, keyed=True) == want
    # the scratch streams are gone, the template untouched
    assert [s.spec.name for s in client.list_streams() if s.spec.name.startswith(name)] == [name]
    assert client.get_stream(name).rows_appended == 0


def test_sliding_aggregate_hopping_window_spec_without_key(
    spark: Any, client: WindowClient, server: LocalServer
) -> None:
    """An unkeyed template, a WindowSpec with its slide, small Appends (batch_rows)."""
    name = _template(client, keyed=False)
    rows = [("h", t, v) for _, t, v in readings(seed=9, hosts=1, per_host=800)]
    df = spark.createDataFrame(rows, "host string, ts timestamp, v double")
    spec = WindowSpec(name, "hop", AGGS, Policy.time_range(RANGE), slide=timedelta(seconds=10))
    out = sliding_aggregate(df, server.target, name, ts_col="ts", window=spec, batch_rows=37)
    assert out.columns == ["window_start", "window_end", "hi", "total", "n", "size"]
    got = {(None, *r) for r in as_rows(out.collect(), keyed=False)}
    want = {(None, *r[1:]) for r in normal(spark_windows(df, "10 seconds", keyed=True))}
    assert got == want
    assert "hop" not in client.get_stream(name).windows  # not created on the template


def test_sliding_aggregate_with_a_slide_in_rows(
    spark: Any, client: WindowClient, server: LocalServer
) -> None:
    """A slide in rows over a count range: a scratch stream per key; each key's boundaries
    are those the server gives for that key's rows in a stream of their own."""
    name = _template(client, keyed=True)
    # distinct times per key (rows of one time reach a count range in no set order)
    data = list({(h, t): (h, t, v) for h, t, v in readings(seed=5, hosts=4, per_host=300)}.values())
    per_host = {h: sum(1 for k, _, _ in data if k == h) for h, _, _ in data}
    df = spark.createDataFrame(data, "host string, ts timestamp, v double")
    spec = WindowSpec(name, "w", AGGS, Policy.count(20))
    out = sliding_aggregate(df, server.target, name, ts_col="ts", window=spec, slide=7)
    assert out.columns == ["host", "boundary", "hi", "total", "n", "size"]
    got = {(r["host"], r["boundary"], r["hi"], r["total"], r["n"]) for r in out.collect()}
    want = set()
    for h in sorted({h for h, _, _ in data}):
        own = f"{name}_{h}"
        client.create_stream(StreamSpec(own, (Field("v", "DOUBLE"),), timestamp_field="ts"))
        client.create_window(WindowSpec(own, "w", AGGS, Policy.count(20), slide=7))
        mine = sorted((t, v) for k, t, v in data if k == h)
        client.append(own, {"ts": [t for t, _ in mine], "v": [v for _, v in mine]})
        got_h, _ = client.read_results(own, "w", limit=1000)
        want |= {(h, r.boundary, r["hi"], r["total"], r["n"]) for r in got_h}
    assert len(want) == sum(n // 7 for n in per_host.values())
    assert got == want


def test_sliding_aggregate_slide_refusals(
    spark: Any, client: WindowClient, server: LocalServer
) -> None:
    name = _template(client, keyed=True)
    client.create_window(WindowSpec(name, "w2", AGGS, Policy.count(3)))
    df = spark.createDataFrame(readings(1, 1, 5), "host string, ts timestamp, v double")
    with pytest.raises(ConnectorError, match="computes one window"):
        sliding_aggregate(df, server.target, name, ts_col="ts", slide=timedelta(seconds=1))
    from pyspark.sql import functions as F

    stream_df = (
        spark.readStream.format("rate")
        .load()
        .select(
            F.lit("a").alias("host"),
            F.col("timestamp").alias("ts"),
            F.col("value").cast("double").alias("v"),
        )
    )
    with pytest.raises(ConnectorError, match="streaming sliding_aggregate with a slide"):
        sliding_aggregate(
            stream_df, server.target, name, key_col="host", window="w", slide=timedelta(seconds=1)
        )
