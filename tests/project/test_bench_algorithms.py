"""The algorithms benchmark (benchmarks/bench_algorithms.py) in its ``--quick`` mode: it runs
every experiment and writes a CSV with a finite, positive figure for every engine of every
experiment, plus its tables and plots. No timing is asserted."""

from __future__ import annotations

import csv
import math
import subprocess
import sys
from pathlib import Path

import pytest

from mtawindows.server.engine import ALGORITHMS

pytestmark = [pytest.mark.slow]

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_algorithms.py"


def test_the_quick_algorithms_benchmark_measures_every_engine(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    csvs = sorted(tmp_path.glob("algorithms*.csv"))
    assert csvs, sorted(p.name for p in tmp_path.iterdir())
    with next(p for p in csvs if "samples" not in p.name).open() as f:
        rows = list(csv.DictReader(f))
    experiments = {r["experiment"] for r in rows}
    want = {"single-query", "000-ratio", "000-memory", "001-per-tuple", "001-break-even"}
    want |= {"003-ratio", "004-latency", "engines-push", "engines-bulk"}
    assert want <= experiments, want - experiments
    for experiment in ("engines-push", "engines-bulk"):
        engines = {r["engine"] for r in rows if r["experiment"] == experiment}
        assert set(ALGORITHMS) <= engines, (experiment, engines)
    for r in rows:
        v = float(r["value"])
        assert math.isfinite(v) and v >= 0, r
    assert list(tmp_path.glob("algorithms*.md")) and list(tmp_path.glob("algorithms*.png"))
