"""The SDK end to end: a keyed stream, two windows, appends of readable timestamps, per-row
results as an Arrow table, a query per key, and a few Subscribe results.

    python examples/sdk_quickstart.py                      # starts a server of its own
    python examples/sdk_quickstart.py --endpoint localhost:50051
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

from _common import args, server

from mtawindows.client import Aggregation, Field, Policy, StreamSpec, WindowClient, WindowSpec


def main() -> None:
    a = args("The Python SDK: keyed windows, per-row results, queries, Subscribe.")
    with server(a.endpoint) as target, WindowClient(target) as c:
        c.create_stream(
            StreamSpec("rooms", (Field("room", "STRING"), Field("temp", "DOUBLE")), key="room")
        )
        c.create_window(
            WindowSpec(
                "rooms",
                "last_10m",
                (
                    Aggregation("hottest", "max", "temp"),
                    Aggregation("when", "argmax", "temp", {"key": "ts"}),
                    Aggregation("sd", "stddev", "temp"),
                ),
                Policy.time_range(timedelta(minutes=10)),
            )
        )
        c.create_window(
            WindowSpec("rooms", "last_3", (Aggregation("mean", "mean", "temp"),), Policy.count(3))
        )
        t0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
        rows = [
            {"ts": t0 + timedelta(minutes=m), "room": room, "temp": 20 + (m * 7 + i) % 5}
            for m in range(0, 30, 2)
            for i, room in enumerate(("kitchen", "hall"))
        ]
        r = c.append("rooms", rows, results="per_row", arrow=True)
        table = r.row_tables["last_10m"]  # one row per input row: the window right after it
        print(f"appended {r.rows_applied} rows; per-row results: {table.num_rows} rows")
        print(table.slice(0, 3).to_pandas().to_string(index=False))
        for room in ("kitchen", "hall"):
            q = c.query("rooms", "last_10m", key=room)
            when = datetime.fromtimestamp(q.values["when"]["key"] / 1e9, UTC)
            print(f"{room}: hottest {q.values['hottest']} at {when:%H:%M}, over {q.size} rows")

        seen: list[str] = []
        done = threading.Event()

        def follow() -> None:  # Subscribe: a result per batch and key, until three came
            for batch, res in c.subscribe("rooms", "last_3", keys=["kitchen"]):
                seen.append(f"batch {batch}: kitchen mean {res.values['mean']:.2f}")
                if len(seen) == 3:
                    done.set()
                    return

        follower = threading.Thread(target=follow, daemon=True)
        follower.start()
        t = t0 + timedelta(hours=1)
        for k in range(50):  # bounded: stop once the follower has three results
            if done.wait(0.1):
                break
            c.append("rooms", [{"ts": t + timedelta(seconds=k), "room": "kitchen", "temp": 21.0}])
        print("\n".join(seen))
        assert len(seen) == 3, seen


if __name__ == "__main__":
    main()
