"""A keyed stream's Arrow batches: the key column is found in the key slab by its bytes
(``KeyBytes``, ``KeySlab.find``: no Python string a row), and must answer as the same batches
sent as protobuf lists (the name -> slot path); half of them with the key column
dictionary-encoded. A real server, two streams with the same
windows (one fed Arrow, one fed lists), random batches of new and known keys (multi-byte
UTF-8 among them, a key several times in a batch): every key's counters and window results
the same in both; a late row refused with the same refusal, nothing applied; duplicates by
producer sequence; keys deleted and made again; a durable window's journal (Arrow batches in
it) replayed after kill -9; an INT64 key (no bytes path) alike."""

from __future__ import annotations

import contextlib
import random
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import redis

from mtawindows.client import (
    Aggregation,
    MtaWindowsError,
    Policy,
    Storage,
    WindowClient,
    WindowSpec,
)
from mtawindows.testing import LocalServer
from tests.support.keyed_oracle import host_stream

pytestmark = [pytest.mark.server, pytest.mark.redis]

KEYS = [f"h{i}" for i in range(40)] + ["ключ", "键", "a b", "é" * 30, "🙂x"]
AGGS = (Aggregation("n", "count"), Aggregation("s", "sum", "v"), Aggregation("hi", "max", "v"))


def _streams(c: WindowClient, key_type: str) -> None:
    for name in ("arrow", "lists"):
        c.create_stream(host_stream(name, key_type))
        c.create_window(WindowSpec(name, "c4", AGGS, Policy.count(4)))
        c.create_window(
            WindowSpec(name, "d", AGGS, Policy.count(6), "AMTA", Storage("redis", durable=True))
        )


def _batch(rng: random.Random, t: int, keys: list[Any]) -> dict[str, list[Any]]:
    n = rng.randint(1, 60)
    hosts = [rng.choice(keys) for _ in range(n)]
    return {
        "ts": [t + i // 3 for i in range(n)],  # ties, each key's rows in order
        "host": hosts,
        "v": [float(rng.randint(-50, 50)) for _ in range(n)],
    }


def _table(b: dict[str, list[Any]], key_type: str) -> pa.Table:
    host = pa.array(b["host"], pa.int64() if key_type == "INT64" else pa.string())
    if len(host) % 2:  # every other batch dictionary-encoded (a pandas Categorical's form)
        host = host.dictionary_encode()
    return pa.table({"ts": pa.array(b["ts"], pa.int64()), "host": host, "v": b["v"]})


def _state(c: WindowClient, stream: str, keys: list[Any]) -> dict[Any, Any]:
    out = {}
    for k in keys:
        try:
            info = c.get_key(stream, k)
        except MtaWindowsError as ex:
            out[k] = ex.reason
            continue
        out[k] = (
            info.rows_appended,
            info.rows_late,
            info.newest_timestamp,
            {w: (r.size, r.values) for w, r in sorted(info.results.items())},
        )
    return out


def _feed(
    c: WindowClient, rng: random.Random, t: int, rounds: int, keys: list[Any], kt: str
) -> int:
    for r in range(rounds):
        b = _batch(rng, t, keys)
        seq: dict[str, Any] = {"producer_id": "p", "sequence": t} if r % 3 == 0 else {}
        if r % 4 == 1:  # per-row results: the key-by-key path, given the Arrow batch's arrays
            seq["results"] = "per_row"
        a = c.append("arrow", _table(b, kt), **seq)
        lists = c.append("lists", b, **seq)
        assert (a.rows_applied, a.rows_late, a.duplicate) == (
            lists.rows_applied,
            lists.rows_late,
            lists.duplicate,
        )
        assert a.row_results == lists.row_results
        if r % 4 == 1 and not a.duplicate:
            assert len(a.row_results["c4"]["s"]) == len(b["ts"])
        seq.pop("results", None)
        if seq:  # the same batch again: a duplicate in both
            assert c.append("arrow", _table(b, kt), **seq).duplicate
            assert c.append("lists", b, **seq).duplicate
        t = max(b["ts"]) + rng.choice([0, 1, 5])
    return t


@pytest.mark.parametrize("key_type", ["STRING", "INT64"])
def test_arrow_keys_answer_as_lists_across_kill_9(tmp_path: Path, key_type: str) -> None:
    rng = random.Random(77 if key_type == "STRING" else 78)
    keys: list[Any] = KEYS if key_type == "STRING" else [rng.randint(-(2**62), 2**62) for _ in KEYS]
    with LocalServer(tmp_path / "d") as srv:
        with srv.client() as c:
            _streams(c, key_type)
            t = _feed(c, rng, 1_000, 25, keys, key_type)
            assert _state(c, "arrow", keys) == _state(c, "lists", keys)
            # a late row: the same refusal, nothing applied in either
            late = {"ts": [t + 1, 5], "host": [keys[0], keys[1]], "v": [1.0, 2.0]}
            with pytest.raises(MtaWindowsError) as from_arrow:
                c.append("arrow", _table(late, key_type))
            with pytest.raises(MtaWindowsError) as from_lists:
                c.append("lists", late)
            assert (from_arrow.value.reason, from_arrow.value.message) == (
                from_lists.value.reason,
                from_lists.value.message,
            )
            # keys deleted, then made again by the next batches
            for k in keys[:5]:
                c.delete_key("arrow", k)
                c.delete_key("lists", k)
            t = _feed(c, rng, t + 10, 15, keys, key_type)
            assert _state(c, "arrow", keys) == _state(c, "lists", keys)
        srv.kill()  # kill -9: the durable windows replay their journals
        srv.start()
        with srv.client() as c:
            after = _state(c, "arrow", keys)
            assert after == _state(c, "lists", keys)
            assert sum(1 for v in after.values() if isinstance(v, tuple)) > len(keys) // 2
            _feed(c, rng, t + 10, 10, keys, key_type)
            assert _state(c, "arrow", keys) == _state(c, "lists", keys)


def test_the_owner_does_not_ask_redis_for_the_windows_version_at_every_append(
    tmp_path: Path,
) -> None:
    """A server holding its keyed stream's own lease is where the stream's windows change:
    its appends do not read the definitions' version from Redis (a GET that waited behind
    every flush's writes, under the stream's lock; the lease renewal still reads it, twice a
    second); a window made after them still takes the next batch at once."""
    srv = LocalServer(tmp_path / "srv").start()
    sock = str(tmp_path / "srv" / "data" / "redis" / "redis.sock")
    reads: list[float] = []  # when the version was read (MONITOR)

    def watch() -> None:
        with (
            contextlib.suppress(redis.RedisError),
            redis.Redis(unix_socket_path=sock).monitor() as m,
        ):
            for cmd in m.listen():  # (as they come: not one extend at the end)
                if cmd["command"].startswith("GET ") and cmd["command"].endswith(":defv"):
                    reads.append(time.monotonic())  # noqa: PERF401

    threading.Thread(target=watch, daemon=True).start()
    try:
        with WindowClient(srv.target) as c:
            c.create_stream(host_stream("s"))
            c.create_window(WindowSpec("s", "c4", AGGS, Policy.count(4)))
            rng = random.Random(5)
            c.append("s", _batch(rng, 1, KEYS))  # (the first append asks once)
            time.sleep(0.2)
            t0 = time.monotonic()
            for t in range(100, 10_000, 100):
                c.append("s", _table(_batch(rng, t, KEYS), "STRING"))
            t1 = time.monotonic()
            during = sum(t0 <= at <= t1 for at in reads)
            assert during <= 5 + 3 * (t1 - t0), (during, t1 - t0)  # 99 appends
            c.create_window(WindowSpec("s", "late", AGGS, Policy.count(3)))
            c.append("s", {"ts": [20_000], "host": ["h1"], "v": [7.0]})
            assert c.query("s", "late", key="h1").values == {"n": 1, "s": 7.0, "hi": 7.0}
    finally:
        srv.close()
