"""Chaos on a keyed stream: three servers on one Redis, one keyed stream of 10,000 keys whose
key groups are spread over the members, producers appending batches that span hundreds of
keys (the SDK splits each by the holder of every row's group) while servers are killed (-9)
and restarted at random. At the end every key's count and sum equal a model of the
acknowledged rows: no acknowledged row lost, none applied twice.

Each producer owns half of the keys and resends a batch with its (producer id, sequence)
until it is acknowledged: groups that applied its part already answer duplicate, the others
apply it, so a batch is applied exactly once in every group. Bounded:
``MTAWINDOWS_CHAOS_SECONDS`` (default 20) of chaos, then the producers drain.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mtawindows.client import WindowClient
from mtawindows.client.errors import MtaWindowsError
from mtawindows.testing import LocalCluster
from mtawindows.v1.types import Aggregation, Field, Policy, Storage, StreamSpec, WindowSpec

pytestmark = [pytest.mark.server, pytest.mark.slow, pytest.mark.redis]

KEYS = 10_000
PRODUCERS = 2
CHAOS_SECONDS = float(os.environ.get("MTAWINDOWS_CHAOS_SECONDS", "20"))
NAME = "fleet"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with LocalCluster(3, "--lease-ms", "1000", data_dir=tmp_path) as c:
        yield c


def test_kill_and_restart_servers_under_a_keyed_stream_of_10k_keys_and_lose_nothing(
    cluster: LocalCluster,
) -> None:
    seed = int(os.environ.get("MTAWINDOWS_CHAOS_SEED", str(random.randrange(1 << 30))))
    rnd = random.Random(seed)
    seeds = ",".join(cluster.targets)
    keys = [f"dev-{i:05d}" for i in range(KEYS)]
    with WindowClient(seeds, retry_time=30) as c:
        c.create_stream(
            StreamSpec(
                NAME, (Field("dev", "STRING"), Field("x", "DOUBLE")), key="dev", wall_clock=False
            )
        )
        c.create_window(
            WindowSpec(
                NAME,
                "w",
                (Aggregation("n", "count"), Aggregation("s", "sum", "x")),
                Policy.count(1_000_000),
                storage=Storage("redis", durable=True),
            )
        )
        # every key takes a first row before the chaos: 10,000 keys exist
        for i in range(0, KEYS, 2_000):
            part = keys[i : i + 2_000]
            c.append(NAME, {"ts": [1] * len(part), "dev": part, "x": [1.0] * len(part)})
    model: dict[str, list[float]] = {k: [1.0] for k in keys}
    clock = dict.fromkeys(keys, 1)
    stop = threading.Event()
    errors: list[str] = []
    sent = [0] * PRODUCERS

    def produce(p: int) -> None:
        mine = keys[p::PRODUCERS]
        prnd = random.Random(seed + p)
        seq = 0
        with WindowClient(seeds, retry_time=30, timeout=10) as pc:
            while not stop.is_set():
                batch_keys = prnd.sample(mine, prnd.randint(50, 400))
                xs = [float(prnd.randint(-100, 100)) for _ in batch_keys]
                ts = []
                for k in batch_keys:
                    clock[k] += 1
                    ts.append(clock[k])
                seq += 1
                batch = {"ts": ts, "dev": batch_keys, "x": xs}
                deadline = time.monotonic() + 60
                while True:  # the same (producer, sequence) until acknowledged
                    try:
                        pc.append(NAME, batch, producer_id=f"p{p}", sequence=seq)
                        break
                    except MtaWindowsError as ex:
                        if time.monotonic() > deadline:
                            errors.append(f"p{p} seq {seq}: {ex!r}")
                            return
                        time.sleep(0.05)
                for k, x in zip(batch_keys, xs, strict=True):
                    model[k].append(x)
                sent[p] += 1

    threads = [threading.Thread(target=produce, args=(p,), daemon=True) for p in range(PRODUCERS)]
    for t in threads:
        t.start()
    kills = 0
    try:
        end = time.monotonic() + CHAOS_SECONDS
        while time.monotonic() < end and not errors:
            time.sleep(rnd.uniform(1.0, 3.0))
            victim = rnd.choice(cluster.servers)
            victim.kill()
            kills += 1
            time.sleep(rnd.uniform(0.2, 2.0))
            victim.start()  # on its port: the same member
        stop.set()
        for t in threads:
            t.join(timeout=120)
        assert not any(t.is_alive() for t in threads), "a producer hung"
        assert not errors, errors[:3]
        assert kills >= 3 and sum(sent) > 20, (kills, sent)
        cluster.wait_formed()
        with WindowClient(seeds, retry_time=30) as c:
            counts = {k.key: k.rows_appended for k in c.iter_keys(NAME)}
            assert len(counts) == KEYS, f"{KEYS - len(counts)} keys missing (seed {seed})"
            wrong = {k: (counts[k], len(xs)) for k, xs in model.items() if counts[k] != len(xs)}
            assert not wrong, f"seed {seed}: rows per key differ: {list(wrong.items())[:5]}"
            for k in rnd.sample(keys, 300):  # the sums, on a sample
                r = c.query(NAME, "w", key=k)
                want = (len(model[k]), sum(model[k]))
                assert (r.values["n"], r.values["s"]) == want, (k, r.values, want, seed)
    finally:
        stop.set()
