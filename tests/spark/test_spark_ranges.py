"""The connector's read options ``range`` and ``count`` (query-time ranges, issue 25): a batch
read of every window's result over its newest rows, unkeyed and per key, equal to the SDK's
``query(range=...)`` / ``query(count=...)``; refused where they cannot apply (both at once, a
bad duration, ``spark.readStream``, an algorithm without suffixes). A real server and a local
Spark.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

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
from mtawindows.spark_connector import ConnectorError, ConnectorOptions
from mtawindows.testing import LocalServer
from tests.support.spark import spark_session

pytestmark = [pytest.mark.server, pytest.mark.redis, pytest.mark.spark]

BASE = 1_800_000_000  # seconds: the streams read plain numbers as seconds
AGGS = (Aggregation("n", "count"), Aggregation("s", "sum", "x"), Aggregation("f", "first", "x"))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    with LocalServer(tmp_path_factory.mktemp("spark-ranges")) as srv:
        yield srv


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    s = spark_session()
    yield s
    s.stop()


def read(spark: Any, server: LocalServer, stream: str, **options: str) -> list[Any]:
    r = spark.read.format("mtawindows").option("endpoint", server.target).option("stream", stream)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load().orderBy("key", "window").collect()  # type: ignore[no-any-return]


def test_range_and_count_read_each_windows_newest_rows(spark: Any, server: LocalServer) -> None:
    with WindowClient(server.target) as c:
        for stream, key in (("sr_plain", ""), ("sr_keyed", "k")):
            fields = (Field("x", "INT64"), Field("k", "STRING"))
            c.create_stream(StreamSpec(stream, fields, key=key, ts_unit="s"))
            c.create_window(
                WindowSpec(stream, "hour", AGGS, Policy.time_range(timedelta(hours=1)), "AMTA")
            )
            c.create_window(
                WindowSpec(
                    stream,
                    "last50",
                    (*AGGS, Aggregation("newest", "max", "ts")),
                    Policy.count(50),
                    "FLATFAT",
                    Storage("redis"),
                )
            )
            n = 80
            c.append(
                stream,
                {
                    "ts": [BASE + 10 * i for i in range(n)],
                    "x": list(range(n)),
                    "k": ["a" if i % 3 else "b" for i in range(n)],
                },
            )
        for stream, keys in (("sr_plain", [None]), ("sr_keyed", ["a", "b"])):
            for opts, sdk in (
                ({"range": "95s"}, {"range": timedelta(seconds=95)}),
                ({"count": "7"}, {"count": 7}),
                ({}, {}),
            ):
                rows = read(spark, server, stream, **opts)
                assert [(r["key"], r["window"]) for r in rows] == [
                    (k, w) for k in keys for w in ("hour", "last50")
                ]
                for r in rows:
                    want = c.query(stream, r["window"], key=r["key"], **sdk)
                    got = (r["size"], r["n"], r["s"], r["f"])
                    assert got == (want.size, want["n"], want["s"], want["f"]), (stream, opts)
        # the suffixes are the newest rows: 95 s of rows 10 s apart are 10 rows
        plain = {r["window"]: r for r in read(spark, server, "sr_plain", range="95s")}
        assert plain["hour"]["size"] == 10 and plain["hour"]["f"] == 70
        assert plain["last50"]["size"] == 10


def test_options_are_checked_and_refusals_name_them(spark: Any, server: LocalServer) -> None:
    base = {"endpoint": server.target, "stream": "s"}
    o = ConnectorOptions.parse({**base, "range": "5m"})
    assert (o.range, o.count) == (timedelta(minutes=5), 0)
    assert ConnectorOptions.parse({**base, "COUNT": "12"}).count == 12
    for bad, words in (
        ({"range": "5m", "count": "3"}, "option 'range': expected range or count, not both"),
        ({"range": "soon"}, "option 'range': expected a duration"),
        ({"count": "0"}, "option 'count'"),
        ({"count": "-2"}, "option 'count'"),
    ):
        with pytest.raises(ConnectorError, match=words):
            ConnectorOptions.parse({**base, **bad})
    with WindowClient(server.target) as c:
        c.create_stream(StreamSpec("sr_refuse", (Field("x", "INT64"),), ts_unit="s"))
        c.create_window(WindowSpec("sr_refuse", "d", AGGS, Policy.count(5), "DABA"))
        c.append("sr_refuse", {"ts": [BASE], "x": [1]})
    with pytest.raises(Exception, match="RANGE_NOT_SUPPORTED"):
        read(spark, server, "sr_refuse", count="2")
    stream = (
        spark.readStream.format("mtawindows")
        .option("endpoint", server.target)
        .option("stream", "sr_refuse")
        .option("count", "2")
    )
    with pytest.raises(Exception, match=r"option .count.: a query-time range is for spark\.read"):
        stream.load().writeStream.format("memory").queryName("sr_q").start().awaitTermination(5)
