"""A keyed stream's window deleted and made again under its name starts afresh for every key,
also for keys read back from Redis (an outsider's finding: each key's stored value named its
windows by name, so a key not in memory at the delete came back after a restart with the
old window's state under the new definition). A real server: keys in the slab (few rows)
and as objects (more rows than the slab holds), read back after a graceful restart."""

from __future__ import annotations

from pathlib import Path

import pytest

from mtawindows.client import Aggregation, Policy, WindowClient, WindowSpec
from mtawindows.testing import LocalServer
from tests.support.keyed_oracle import host_stream

pytestmark = [pytest.mark.server, pytest.mark.redis]

KEYS = ["k0", "k1", "k2", "k3"]


@pytest.mark.parametrize("rows", [6, 50])  # in the slab (<= 12 rows), as objects
def test_a_window_made_again_under_its_name_reads_nothing_of_the_old_one(
    tmp_path: Path, rows: int
) -> None:
    srv = LocalServer(tmp_path / "srv").start()
    try:
        with WindowClient(srv.target) as c:
            c.create_stream(host_stream("s"))
            old = (Aggregation("n", "count"), Aggregation("mx", "max", "v"))
            c.create_window(WindowSpec("s", "w", old, Policy.count(100)))
            c.create_window(WindowSpec("s", "keep", old, Policy.count(100)))
            for i in range(rows):
                c.append("s", {"ts": [i] * 4, "host": KEYS, "v": [float(i)] * 4})
        srv.stop()  # every key written to Redis, none in memory after the start
        srv.start()
        with WindowClient(srv.target) as c:
            c.delete_window("s", "w")
            new = (Aggregation("total", "sum", "v"),)
            c.create_window(WindowSpec("s", "w", new, Policy.count(5)))
        srv.stop()
        srv.start()
        with WindowClient(srv.target) as c:
            for k in KEYS:
                got = c.query("s", "w", key=k)
                assert got.size == 0, (k, got)
                assert c.query("s", "keep", key=k).values == {"n": rows, "mx": rows - 1.0}
            c.append("s", {"ts": [1000], "host": ["k1"], "v": [7.0]})
            got = c.query("s", "w", key="k1")
            assert (got.size, got.values) == (1, {"total": 7.0})
            assert c.query("s", "keep", key="k1").values == {
                "n": rows + 1,
                "mx": max(rows - 1.0, 7.0),
            }
    finally:
        srv.close()
