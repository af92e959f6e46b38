"""The stream of the crash test, shared by the test and its child process."""

from __future__ import annotations

import random
from typing import Any

from mtawindows.server.engine.monoids import Concat, Count, Max, Record, Sum
from mtawindows.server.engine.policies import TimeRangePolicy

BATCH = 40
MONOID = Record(n=Count(), sum=Sum("v"), mx=Max("v"), t=Max("t"), cat=Concat("v"))
POLICY = TimeRangePolicy(300, field="t")


def batch_items(seq: int) -> list[dict[str, Any]]:
    """Batch ``seq``: deterministic, time-ordered across batches, with gaps (bulk evictions)."""
    rnd = random.Random(seq)
    t0 = seq * 100 + 500 * (seq // 7)  # a silence every 7 batches: bulk evictions
    return [{"v": rnd.randint(-50, 50), "t": t0 + i * 2} for i in range(BATCH)]
