"""Batch: per-row sliding aggregates of a DataFrame, and a bulk load into a stream.

    python examples/batch_pipeline.py [--endpoint host:port]

1. ``sliding_aggregate``: each trade with the highest price and the traded volume of its symbol
   over the last 5 minutes (exact, per row; Spark sorts each symbol's rows by time);
2. ``df.write.format("mtawindows")``: the same trades into the keyed stream, one window per
   symbol kept after the job (``key_column``), idempotent under a fixed ``write_id``.
"""

from __future__ import annotations

from datetime import timedelta

from _common import args, server, spark

from mtawindows.client import Aggregation, Field, Policy, StreamSpec, WindowClient, WindowSpec
from mtawindows.spark_connector import sliding_aggregate


def main() -> None:
    a = args(__doc__.split("\n")[0])
    s = spark()
    from pyspark.sql import functions as F

    trades = s.range(200_000).select(
        F.format_string("SYM%d", F.col("id") % 20).alias("symbol"),
        F.timestamp_seconds(F.lit(1_700_000_000) + F.col("id") / 20 * 0.5).alias("ts"),
        (100 + F.randn(1) * 2).alias("price"),
        F.floor(F.rand(2) * 500 + 1).cast("long").alias("qty"),
    )
    with server(a.endpoint) as target, WindowClient(target) as c:
        c.create_stream(
            StreamSpec(
                "trades",
                (Field("symbol", "STRING"), Field("price", "DOUBLE"), Field("qty", "INT64")),
                "ts",
                key="symbol",  # a window per symbol
            )
        )
        c.create_window(
            WindowSpec(
                "trades",
                "last_5m",
                (Aggregation("high", "max", "price"), Aggregation("volume", "sum", "qty")),
                Policy.time_range(timedelta(minutes=5)),
            )
        )
        out = sliding_aggregate(trades, target, "trades", key_col="symbol", ts_col="ts")
        out.filter("symbol = 'SYM3'").orderBy("ts").show(5)

        (
            trades.repartition("symbol")  # each symbol's rows in one task, in time order
            .sortWithinPartitions("symbol", "ts")
            .write.format("mtawindows")
            .option("endpoint", target)
            .option("stream", "trades")
            .option("key_column", "symbol")
            .option("write_id", "trades-load-1")  # a re-run applies nothing twice
            .mode("append")
            .save()
        )
        print("SYM3 now:", c.query("trades", "last_5m", key="SYM3").values)
    s.stop()


if __name__ == "__main__":
    main()
