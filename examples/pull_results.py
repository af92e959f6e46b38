"""Pull window results into DataFrames: the current result of every window (batch read), and
every new result as it is produced (streaming read, offsets = per-window sequences).

    python examples/pull_results.py [--endpoint host:port]
"""

from __future__ import annotations

import tempfile
from datetime import timedelta

from _common import args, server, spark

from mtawindows.client import Aggregation, Field, Policy, StreamSpec, WindowClient, WindowSpec


def main() -> None:
    a = args(__doc__.split("\n")[0])
    s = spark()
    with server(a.endpoint) as target, WindowClient(target) as c:
        c.create_stream(StreamSpec("cpu", (Field("load", "DOUBLE"),)))
        c.create_window(
            WindowSpec(
                "cpu",
                "last_hour",
                (Aggregation("peak", "max", "load"), Aggregation("avg", "mean", "load")),
                Policy.time_range(timedelta(hours=1)),
            )
        )
        c.create_window(
            WindowSpec("cpu", "last_100", (Aggregation("n", "count"),), Policy.count(100))
        )
        t0 = 1_700_000_000 * 10**9
        for i in range(5):
            c.append("cpu", {"ts": [t0 + i * 60 * 10**9], "load": [0.2 * i]})

        reader = s.read.format("mtawindows").option("endpoint", target).option("stream", "cpu")
        reader.load().show(truncate=False)  # one row per window

        got = []
        q = (
            s.readStream.format("mtawindows")
            .option("endpoint", target)
            .option("stream", "cpu")
            .option("window", "last_hour")
            .option("starting_offsets", "earliest")  # the results the server still keeps
            .load()
            .writeStream.foreachBatch(lambda df, _: got.extend(df.collect()))
            .option("checkpointLocation", tempfile.mkdtemp())
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination()
        for r in sorted(got, key=lambda r: r["sequence"]):
            print(r["sequence"], r["timestamp"], r["peak"], r["avg"])
    s.stop()


if __name__ == "__main__":
    main()
