"""The cluster benchmark (benchmarks/bench_cluster.py) in its ``--quick`` mode, end to end: it
starts its servers, producers and fillers, finishes, and writes a CSV with every figure, each
a sane value. No timing is asserted (only that the numbers exist and are positive), except
the durability promise: a durable window loses no acknowledged row when its owner is killed.
"""

from __future__ import annotations

import csv
import math
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.server]

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_cluster.py"


def test_the_quick_cluster_benchmark_writes_every_figure(tmp_path: Path) -> None:
    # --quick takes under a minute on an idle 2-core machine; the bound is for a busy one
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with (tmp_path / "cluster-quick.csv").open() as f:
        rows = list(csv.DictReader(f))
    got = {(r["experiment"], r["case"], r["metric"]): r for r in rows}

    def value(experiment: str, case: str, metric: str) -> float:
        v = float(got[(experiment, case, metric)]["value"])
        assert math.isfinite(v), (experiment, case, metric, v)
        return v

    # 1. scaling: one to three servers, each acknowledged rows and used CPU
    for case in ("1 server", "2 servers", "3 servers"):
        assert value("scaling", case, "rows_acknowledged") > 0
        assert value("scaling", case, "rows_per_server_cpu_s") > 0
        assert value("scaling", case, "rows_per_s_wall") > 0
        assert value("scaling", case, "efficiency_vs_1_server") > 0
    assert value("scaling", "1 server", "efficiency_vs_1_server") == 1.0

    # 2 + 3. fenced / unfenced and durable / non-durable, both batch sizes, both Redis set-ups
    for redis in ("no persistence", "AOF fsync always"):
        for batch in (100, 5000):
            for durable in ("durable", "non-durable"):
                assert value("fencing", f"{redis}, {durable}, {batch} rows", "fenced_over_unfenced") > 0  # fmt: skip
            for fenced in ("fenced", "unfenced"):
                assert value("durable", f"{redis}, {fenced}, {batch} rows", "durable_over_non_durable") > 0  # fmt: skip

    # 4. failover: three trials, a first append after each kill, no durable row lost
    assert int(got[("failover", "durable stream", "kill_to_first_append_max")]["n"]) == 3
    assert value("failover", "durable stream", "kill_to_first_append_max") > 0
    assert value("failover", "durable window", "rows_lost") == 0
    assert value("failover", "non-durable window", "rows_lost_max") >= 0

    # 5. rebalance: B took some of the streams, each move and each full read measured
    moved = value("rebalance", "20 streams x 2^12 items", "streams_moved_to_B")
    assert 0 < moved < 20
    assert value("rebalance", "20 streams x 2^12 items", "move_per_stream_median") > 0
    assert value("rebalance", "20 streams x 2^12 items", "read_whole_window_median") > 0

    assert (tmp_path / "cluster-quick.md").read_text().count("\n| ") == len(rows) + 1
    assert (tmp_path / "cluster-quick-samples.csv").exists()
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return
    assert (tmp_path / "cluster-quick.png").stat().st_size > 0
