"""AppendBatches across a failover: the owner of a stream dies (kill -9) or stops (SIGTERM)
in the middle of a pipelined run of idempotent batches; the SDK's ``append_batches`` sends
the unanswered batches again through the cluster's routing and carries on over a new call at
the new owner: every batch answered, in order, each applied exactly once."""

from __future__ import annotations

import queue
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mtawindows.client import WindowClient
from mtawindows.testing import LocalCluster

from .test_cluster_routing import LEASE_MS, make, new_name, rows

pytestmark = [pytest.mark.server, pytest.mark.redis, pytest.mark.slow]

BATCHES = 80


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM], ids=["killed", "stopped"])
def test_pipelined_batches_carry_on_at_the_new_owner(tmp_path: Path, how: signal.Signals) -> None:
    with (
        LocalCluster(3, "--lease-ms", str(LEASE_MS), data_dir=tmp_path) as cl,
        WindowClient(cl.seeds, timeout=30) as c,
    ):
        name = new_name("p")
        make(c, name)
        owner = cl.by_target(c.owner(name))
        stopped = threading.Event()
        answers: queue.Queue[Any] = queue.Queue()

        def batches() -> Iterator[dict[str, list[Any]]]:
            for seq in range(1, BATCHES + 1):
                if seq > 20:  # the rest once the owner is gone
                    stopped.wait(120)
                yield rows(seq)

        def run() -> None:
            try:
                with WindowClient(owner.target, timeout=30) as w:  # its one seed is to die
                    got = w.append_batches(
                        name, batches(), producer_id="piped", results="final", in_flight=4
                    )
                    for r in got:
                        answers.put(r)
                answers.put(None)
            except BaseException as ex:
                answers.put(ex)

        threading.Thread(target=run, daemon=True).start()
        seen: list[Any] = [answers.get(timeout=120) for _ in range(10)]
        owner.stop(how)
        stopped.set()
        while True:
            item = answers.get(timeout=180)
            if item is None:
                break
            if isinstance(item, BaseException):
                raise item
            seen.append(item)
        assert len(seen) == BATCHES
        assert all(r.rows_applied == 10 or r.duplicate for r in seen)
        result = c.query(name, "w")
        assert (result["n"], result["total"]) == (10 * BATCHES, 10.0 * BATCHES)  # once each
        assert c.get_stream(name).rows_appended == 10 * BATCHES
        assert c.owner(name) != owner.target
