"""The sketches benchmark (benchmarks/bench_sketches.py) in its ``--quick`` mode: it measures
each sketch's cost per row and its worst error, within the sketch's own bound, and writes its
CSV, table and plot. No timing is asserted."""

from __future__ import annotations

import csv
import math
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow]

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_sketches.py"


def test_the_quick_sketches_benchmark_measures_each_sketch(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with (tmp_path / "sketches-quick.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert {r["sketch"] for r in rows} == {"distinct", "quantiles", "top_k"}
    for r in rows:
        assert math.isfinite(float(r["us_per_row"])) and float(r["us_per_row"]) > 0, r
        assert 0 <= float(r["error"]) <= float(r["bound"]), r
    assert (tmp_path / "sketches-quick.md").read_text().count("| yes |") == len(rows)
    assert (tmp_path / "sketches-quick.png").stat().st_size > 0
