"""Structured Streaming: a rate-micro-batch source pushed into mtawindows, and the per-row
results of the same stream as a streaming DataFrame.

    python examples/streaming_pipeline.py [--endpoint host:port]

The sink (``writeStream.format("mtawindows")``) sends every micro-batch in idempotent chunks
(query id, batch id, partition, chunk): a retried task or a replayed batch counts once. Spark
cannot sort a streaming DataFrame, so option ``sort`` has each task sort its partition by
(key, timestamp) before sending.
"""

from __future__ import annotations

import tempfile
import time
from datetime import timedelta

from _common import args, server, spark

from mtawindows.client import Aggregation, Field, Policy, StreamSpec, WindowClient, WindowSpec
from mtawindows.spark_connector import sliding_aggregate


def run_for_batches(query: object, batches: int, limit_s: float = 120.0) -> None:
    """Let a query run ``batches`` micro-batches (the rate source never runs dry), then stop."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        progress = query.lastProgress  # type: ignore[attr-defined]
        if progress and progress["batchId"] >= batches - 1:
            break
        time.sleep(0.5)
    query.stop()  # type: ignore[attr-defined]


def main() -> None:
    a = args(__doc__.split("\n")[0])
    s = spark()
    from pyspark.sql import functions as F

    rate = (
        s.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", 2000)
        .option("startTimestamp", 1_700_000_000_000)
        .option("advanceMillisPerBatch", 10_000)
        .load()
        .select(
            F.format_string("sensor-%d", F.col("value") % 8).alias("sensor"),
            "timestamp",
            (F.col("value") % 97 / 10.0).alias("reading"),
        )
    )
    with server(a.endpoint) as target, WindowClient(target) as c:
        window = (
            "last_min",
            (Aggregation("peak", "max", "reading"), Aggregation("sd", "stddev", "reading")),
            Policy.time_range(timedelta(minutes=1)),
        )
        # one keyed stream for the sink, one for the per-row query: each query starts the rate
        # source from its first timestamp again, so they must not share keys
        for name in ("sensors", "sensor_rows"):
            fields = (Field("sensor", "STRING"), Field("reading", "DOUBLE"))
            c.create_stream(StreamSpec(name, fields, "timestamp", key="sensor"))
            c.create_window(WindowSpec(name, *window))
        ck = tempfile.mkdtemp()
        sink = (
            rate.repartition(2, "sensor")
            .writeStream.format("mtawindows")
            .option("endpoint", target)
            .option("stream", "sensors")
            .option("key_column", "sensor")
            .option("sort", "true")
            .option("checkpointLocation", f"{ck}/sink")
            .trigger(processingTime="1 second")
            .start()
        )
        run_for_batches(sink, 5)
        print("sensor-3 now:", c.query("sensors", "last_min", key="sensor-3").values)

        per_row = sliding_aggregate(
            rate, target, "sensor_rows", key_col="sensor", ts_col="timestamp", window="last_min"
        )
        q = (
            per_row.writeStream.format("console")
            .option("numRows", 5)
            .option("checkpointLocation", f"{ck}/per-row")
            .trigger(processingTime="1 second")
            .start()
        )
        run_for_batches(q, 3)
    s.stop()


if __name__ == "__main__":
    main()
