"""A server stopped (SIGTERM) while a keyed stream's periodic flushes run back to back: the
flush loop is cancelled at any point of a flush, including between a flush's preparation
(under the stream's lock) and its writes (outside it). Prepared writes nobody ran would hold
the stream's last flush, and so the server's exit, forever (seen once: 120 s, then SIGKILL).
Each stop must end in a graceful exit, and the next start must hold every acknowledged row.
"""

from __future__ import annotations

import random
import signal
import threading
import time
from pathlib import Path

import pytest

from mtawindows.client import Aggregation, Field, Policy, StreamSpec, WindowSpec
from mtawindows.testing import LocalServer

pytestmark = [pytest.mark.server, pytest.mark.redis]

KEYS = 4000
STOPS = 4


def test_a_server_stopped_amid_keyed_flushes_exits_gracefully_with_every_row(
    tmp_path: Path,
) -> None:
    rnd = random.Random(5)
    srv = LocalServer(tmp_path / "d", flush_interval=0.01, stop_timeout=60)
    srv.start()
    with srv.client() as c:
        c.create_stream(
            StreamSpec(
                "h", (Field("host", "STRING"), Field("v", "DOUBLE")), key="host", wall_clock=False
            )
        )
        c.create_window(WindowSpec("h", "w", (Aggregation("n", "count"),), Policy.count(1000)))
    names = [f"k{i:05d}" for i in range(KEYS)]
    counts = dict.fromkeys(names, 0)
    clock = [1_700_000_000_000_000_000]
    try:
        for _ in range(STOPS):
            uncertain: set[str] = set()
            stop = threading.Event()

            def appender(stop: threading.Event = stop, uncertain: set[str] = uncertain) -> None:
                # appends until the server goes: every flush tick finds thousands of dirty keys
                with srv.client(timeout=5) as c:
                    while not stop.is_set():
                        keys = rnd.sample(names, 1500)
                        clock[0] += 1_000_000_000
                        try:
                            c.append(
                                "h",
                                {
                                    "ts": [clock[0]] * len(keys),
                                    "host": keys,
                                    "v": [1.0] * len(keys),
                                },
                            )
                        except Exception:
                            uncertain.update(keys)  # applied or not: the server was going
                            return
                        for k in keys:
                            counts[k] += 1

            t = threading.Thread(target=appender)
            t.start()
            time.sleep(0.6)
            status = srv.stop(signal.SIGTERM, timeout=60)
            stop.set()
            t.join()
            assert status == 0, f"not a graceful exit ({status}):\n{srv._log_tail()}"
            srv.start()
            with srv.client() as c:
                rows = c.get_stream("h").rows_appended
                acked = sum(counts.values())
                assert acked <= rows <= acked + len(uncertain), (rows, acked)
                if rows > acked:  # the last batch was applied after all: count it
                    for k in uncertain:
                        counts[k] += 1
                for k in rnd.sample(names, 60):
                    if counts[k]:
                        assert c.query("h", "w", key=k).values["n"] == counts[k], k
    finally:
        srv.close()
