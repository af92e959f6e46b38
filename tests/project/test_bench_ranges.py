"""The query-time range benchmark (benchmarks/bench_ranges.py) in its ``--quick`` mode: every
engine that answers a suffix measured at every size, in the process and AMTA on Redis with its
round trips counted; finite, positive figures; the table and the plot written. No timing is
asserted beyond the store's round trips (one per count query: its cover's pairs together)."""

from __future__ import annotations

import csv
import math
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.redis]

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_ranges.py"


def test_the_quick_ranges_benchmark_measures_every_engine(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with (tmp_path / "ranges-quick.csv").open() as f:
        rows = list(csv.DictReader(f))
    sizes = {int(r["n"]) for r in rows}
    assert sizes == {2**10, 2**12, 2**14}
    for engine in ("AMTA", "LMTA", "FLATFAT", "BINT", "FLATFIT"):
        for form in ("count", "range"):
            got = {
                int(r["n"])
                for r in rows
                if (r["engine"], r["storage"], r["form"]) == (engine, "memory", form)
            }
            assert got == sizes, (engine, form)
    trips = [
        float(r["value"])
        for r in rows
        if r["storage"] == "redis" and r["form"] == "count" and r["metric"].startswith("round")
    ]
    assert len(trips) == 3 and all(t <= 1.0 for t in trips), trips
    for r in rows:
        v = float(r["value"])
        assert math.isfinite(v) and v >= 0, r
    assert (tmp_path / "ranges-quick.md").read_text().startswith("# Query-time ranges")
    assert (tmp_path / "ranges-quick.png").stat().st_size > 1000
