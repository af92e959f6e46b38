"""The queries benchmark (benchmarks/bench_queries.py) in its ``--quick`` mode: hopping windows
against Spark's ``window()`` (the numbers agree), and 1, 4 and 16 hopping windows on one stream
against a stream each; a CSV with a finite, positive figure for every case, its table and
plots. No timing is asserted."""

from __future__ import annotations

import csv
import math
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.server]

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_queries.py"


def test_the_quick_queries_benchmark_measures_every_case(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with (tmp_path / "queries-quick.csv").open() as f:
        rows = list(csv.DictReader(f))
    hop = {r["case"]: r for r in rows if r["experiment"] == "hopping-vs-spark"}
    assert {"mtawindows sliding_aggregate(slide)", "Spark groupBy(window())"} <= set(hop), rows
    assert all(r["agree"] == "True" for r in hop.values()), hop
    shared = {(r["queries"], r["case"]) for r in rows if r["experiment"] == "shared-plan"}
    assert {q for q, _ in shared} == {"1", "4", "16"} and len(shared) == 6, shared
    for r in rows:
        if r["experiment"] in ("hopping-vs-spark", "shared-plan"):
            v = float(r["rows_per_s"])
            assert math.isfinite(v) and v > 0, r
    names = {p.name for p in tmp_path.iterdir()}
    assert {"queries-quick.md", "queries-quick-spark.png", "queries-quick-shared.png"} <= names
