"""A keyed stream's window deleted and made again under its name starts afresh for every key,
also for keys read back from Redis (an outsider's finding: each key's stored value named its
windows by name, so a key not in memory at the delete came back after a restart with the
old window's state under the new definition). A real server: keys in the slab (few rows)
and as objects (more rows than the slab holds), read back after a graceful restart."""

from __future__ import annotations

from pathlib import Path

import pytest

from mtawindows.client import Aggregation, Policy, Storage, WindowClient, WindowSpec
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


@pytest.mark.parametrize("rows", [6, 50])  # in the slab (<= 12 rows), as objects
def test_windows_made_after_journaled_rows_see_none_of_them_after_kill_9(
    tmp_path: Path, rows: int
) -> None:
    """A durable keyed stream (an outsider's finding): rows appended, then, before any flush,
    a new window made and another deleted and made again under its name; one more row; kill
    -9. The restart replays the groups' journals since their last flush: each entry goes
    only to the windows that existed when it was written, so the two new windows hold the
    one row appended after them, and the window kept holds them all."""
    srv = LocalServer(tmp_path / "srv", "--flush-interval", "3600").start()
    try:
        durable = Storage("redis", durable=True)
        aggs = (Aggregation("n", "count"), Aggregation("f", "first", "v"))
        with WindowClient(srv.target) as c:
            c.create_stream(host_stream("s"))
            c.create_window(WindowSpec("s", "w", aggs, Policy.count(100), storage=durable))
            c.create_window(WindowSpec("s", "keep", aggs, Policy.count(100), storage=durable))
            for i in range(rows):
                c.append("s", {"ts": [i] * 4, "host": KEYS, "v": [float(i)] * 4})
            c.delete_window("s", "w")
            c.create_window(WindowSpec("s", "w", aggs, Policy.count(100), storage=durable))
            c.create_window(WindowSpec("s", "w2", aggs, Policy.count(100), storage=durable))
            c.append("s", {"ts": [1000], "host": ["k1"], "v": [7.0]})

            def check() -> None:
                for name in ("w", "w2"):
                    got = c.query("s", name, key="k1")
                    assert (got.size, got.values) == (1, {"n": 1, "f": 7.0}), (name, got)
                    assert c.query("s", name, key="k0").size == 0, name
                assert c.query("s", "keep", key="k1").values == {"n": rows + 1, "f": 0.0}
                assert c.query("s", "keep", key="k0").values == {"n": rows, "f": 0.0}

            check()
        srv.kill()
        srv.start()
        with WindowClient(srv.target) as c:
            check()
            srv.restart()  # and once more, after the replayed state was flushed
        with WindowClient(srv.target) as c:
            check()
    finally:
        srv.close()
