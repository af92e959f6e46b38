"""Child process of the crash test: pushes batches into a durable Redis-backed window and prints
``ACK <sequence>`` after each batch returned (acknowledged). Killed with SIGKILL by the test.

argv: url window_id algorithm first_sequence batches
"""

from __future__ import annotations

import sys

from mtawindows.server.engine.amta import AmortizedMTA
from mtawindows.server.engine.lmta import LogMTA
from mtawindows.server.storage.redis_store import RedisStore
from tests.support.crash_spec import BATCH, MONOID, POLICY, batch_items


def main() -> None:
    url, window_id, algorithm, first, batches = sys.argv[1:6]
    cls = AmortizedMTA if algorithm == "AMTA" else LogMTA
    store = RedisStore(
        url,
        window_id=window_id,
        durable=True,
        block_size=16,
        cache_size=16,
        refill_at=8,
        checkpoint_every=5 * BATCH,
    )
    w = cls(MONOID, POLICY, store=store)
    print(f"READY {w.last_sequence('crash-test')}", flush=True)
    for seq in range(int(first), int(first) + int(batches)):
        w.extend(batch_items(seq), producer_id="crash-test", sequence=seq)
        print(f"ACK {seq}", flush=True)
    print("DONE", flush=True)


if __name__ == "__main__":
    main()
