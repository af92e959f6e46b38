"""Chaos: three servers on one Redis, producers appending to 60 streams with durable windows
while servers are killed (-9) and restarted at random; at the end every window equals a naive
model of the acknowledged rows (count, sum, max), and no acknowledged row was lost or applied
twice.

Each producer owns some streams and sends each batch with its (producer id, sequence) until it
is acknowledged, through the SDK's cluster routing (seeds, redirects, failover retries). A
batch is acknowledged exactly once, so the model holds every batch sent. Bounded:
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

STREAMS = 60
PRODUCERS = 3
CHAOS_SECONDS = float(os.environ.get("MTAWINDOWS_CHAOS_SECONDS", "20"))


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    """Three servers on one embedded Redis, a lease of 1 s."""
    with LocalCluster(3, "--lease-ms", "1000", data_dir=tmp_path) as c:
        yield c


def test_kill_and_restart_servers_at_random_and_lose_no_acknowledged_row(
    cluster: LocalCluster,
) -> None:
    seed = int(os.environ.get("MTAWINDOWS_CHAOS_SEED", str(random.randrange(1 << 30))))
    rnd = random.Random(seed)
    servers = cluster.servers
    seeds = ",".join(cluster.targets)  # every member, the dead ones too: a client's seeds
    names = [f"chaos{i}" for i in range(STREAMS)]
    with WindowClient(seeds, retry_time=30) as c:
        for n in names:
            c.create_stream(StreamSpec(n, (Field("x", "DOUBLE"),), wall_clock=False))
            c.create_window(
                WindowSpec(
                    n,
                    "w",
                    (
                        Aggregation("n", "count"),
                        Aggregation("s", "sum", "x"),
                        Aggregation("m", "max", "x"),
                    ),
                    Policy.count(1_000_000),
                    storage=Storage("redis", durable=True, block_size=16, cache_size=16),
                )
            )
    # the model: per stream, every acknowledged batch's rows
    model: dict[str, list[float]] = {n: [] for n in names}
    stop = threading.Event()
    errors: list[str] = []
    sent = [0] * PRODUCERS

    def produce(k: int) -> None:
        mine = names[k::PRODUCERS]
        prnd = random.Random(seed + k)
        seq = dict.fromkeys(mine, 0)
        ts = dict.fromkeys(mine, 0)
        with WindowClient(seeds, retry_time=30, timeout=10) as pc:
            while not stop.is_set():
                n = prnd.choice(mine)
                rows = prnd.randint(1, 20)
                xs = [float(prnd.randint(-1000, 1000)) for _ in range(rows)]
                seq[n] += 1
                t0 = ts[n]
                ts[n] += rows
                batch = {"ts": list(range(t0 + 1, t0 + rows + 1)), "x": xs}
                deadline = time.monotonic() + 60
                while True:  # the same (producer, sequence) until acknowledged
                    try:
                        pc.append(n, batch, producer_id=f"p{k}", sequence=seq[n])
                        break
                    except MtaWindowsError as ex:
                        if time.monotonic() > deadline:
                            errors.append(f"{n} seq {seq[n]}: {ex!r}")
                            return
                        time.sleep(0.05)
                model[n].extend(xs)
                sent[k] += 1

    threads = [threading.Thread(target=produce, args=(k,), daemon=True) for k in range(PRODUCERS)]
    for t in threads:
        t.start()
    kills = 0
    try:
        end = time.monotonic() + CHAOS_SECONDS
        # at least three kills however slow the machine (a restart under load takes seconds:
        # a loaded run once fit only two in the time), within three times the chaos time
        hard_end = time.monotonic() + 3 * CHAOS_SECONDS
        while (time.monotonic() < end or kills < 3) and time.monotonic() < hard_end and not errors:
            time.sleep(rnd.uniform(1.0, 3.0))
            victim = rnd.choice(servers)
            victim.kill()
            kills += 1
            time.sleep(rnd.uniform(0.2, 2.0))
            victim.start()  # on its port: the same member
        stop.set()
        for t in threads:
            t.join(timeout=120)
        assert not any(t.is_alive() for t in threads), "a producer hung"
        assert not errors, errors[:3]
        assert kills >= 3 and sum(sent) > 100, (kills, sent)
        with WindowClient(seeds, retry_time=30) as c:
            for n in names:
                r = c.query(n, "w")
                xs = model[n]
                got = (r.values["n"], r.values["s"], r.values["m"] if xs else None)
                want = (len(xs), sum(xs), max(xs) if xs else None)
                assert got == want, f"stream {n} (seed {seed}): window {got} != model {want}"
    finally:
        stop.set()
