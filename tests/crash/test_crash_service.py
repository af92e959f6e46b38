"""The crash harness (tests/support/crash_harness.py) in ``make test``: a quick campaign per kill mode.

The long campaign runs behind a flag, with a seed to replay a failure::

    MTAWINDOWS_CRASH_KILLS=300 MTAWINDOWS_CRASH_SEED=12345 .venv/bin/pytest tests/crash/test_crash_service.py -k long
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest

from tests.support.crash_harness import run_campaign

pytestmark = [pytest.mark.slow, pytest.mark.server, pytest.mark.redis]


@pytest.mark.parametrize("mode", ["server", "redis", "both"])
def test_kill_9_loses_no_acknowledged_row(tmp_path: Path, mode: str) -> None:
    seed = {"server": 1301, "redis": 1302, "both": 1303}[mode]
    camp = run_campaign(tmp_path / mode, seed=seed, kills=6, modes=(mode,))
    assert camp.kills == 6 and camp.checks == 6
    assert camp.acknowledged_batches > 0


@pytest.mark.skipif(
    not os.environ.get("MTAWINDOWS_CRASH_KILLS"), reason="long campaign: set MTAWINDOWS_CRASH_KILLS"
)
@pytest.mark.timeout(0)  # bounded by MTAWINDOWS_CRASH_MINUTES instead
def test_long_crash_campaign(tmp_path: Path) -> None:
    kills = int(os.environ["MTAWINDOWS_CRASH_KILLS"])
    seed = int(os.environ.get("MTAWINDOWS_CRASH_SEED") or random.randrange(1 << 30))
    minutes = float(os.environ.get("MTAWINDOWS_CRASH_MINUTES", "60"))
    print(f"crash campaign seed {seed}, {kills} kills, at most {minutes} minutes")
    camp = run_campaign(
        tmp_path,
        seed=seed,
        kills=kills,
        deadline=time.monotonic() + 60 * minutes,
        progress=lambda c: print(
            f"kills {c.kills} {c.by_mode} rows {c.acknowledged_rows}", flush=True
        ),
    )
    print(
        f"crash campaign seed {seed}: {camp.kills} kills {camp.by_mode}, {camp.checks} checks, "
        f"{camp.acknowledged_batches} batches / {camp.acknowledged_rows} rows acknowledged, "
        f"{camp.in_flight_applied} in-flight batches found applied"
    )
    assert camp.kills == camp.checks
