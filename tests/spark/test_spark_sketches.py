"""The sliding sketches read through the Spark connector (issue 25, part 3): a batch read of a
window with distinct, quantiles and top_k gives double, array<double> and
array<struct<item, count>> columns, the values the server answers."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from mtawindows.client import (
    Aggregation,
    Field,
    Policy,
    StreamSpec,
    WindowClient,
    WindowSpec,
)
from mtawindows.testing import LocalServer
from tests.support.spark import spark_session

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.server, pytest.mark.redis]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    srv = LocalServer(tmp_path_factory.mktemp("spark-sketches")).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    s = spark_session()
    yield s
    s.stop()


def test_batch_read_types_the_three_sketches(spark: Any, server: LocalServer) -> None:
    from pyspark.sql import types as T

    with WindowClient(server.target) as c:
        fields = (Field("user", "INT64"), Field("latency", "DOUBLE"))
        c.create_stream(StreamSpec("sketched", fields, wall_clock=False))
        aggs = (
            Aggregation("users", "distinct", "user"),
            Aggregation("lat", "quantiles", "latency", {"fractions": "0.5,0.9"}),
            Aggregation("top", "top_k", "user", {"k": "2"}),
        )
        c.create_window(WindowSpec("sketched", "w", aggs, Policy.count(1000)))
        n = 3000  # 2,000 rows leave the window
        users = [i % 7 if i % 3 else i for i in range(n)]
        c.append(
            "sketched",
            {"ts": list(range(n)), "user": users, "latency": [float(i % 100) for i in range(n)]},
        )
        want = c.query("sketched", "w")
    df = (
        spark.read.format("mtawindows")
        .option("endpoint", server.target)
        .option("stream", "sketched")
        .load()
    )
    types = {f.name: f.dataType for f in df.schema.fields}
    assert types["users"] == T.DoubleType()
    assert types["lat"] == T.ArrayType(T.DoubleType())
    assert types["top"] == T.ArrayType(
        T.StructType([T.StructField("item", T.LongType()), T.StructField("count", T.LongType())])
    )
    (row,) = df.collect()
    assert row["size"] == 1000
    assert row["users"] == want["users"]
    assert row["lat"] == want["lat"]
    assert [(e["item"], e["count"]) for e in row["top"]] == [
        (e["item"], e["count"]) for e in want["top"]
    ]
    assert len(row["top"]) == 2 and all(isinstance(e["item"], int) for e in row["top"])
