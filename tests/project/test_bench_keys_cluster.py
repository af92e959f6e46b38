"""The keyed-cluster benchmark (benchmarks/bench_keys_cluster.py) in its ``--quick`` mode, end to
end: it starts its cluster, ingests, moves key groups (a member joins, one leaves, one is
killed), finishes, and writes a CSV with every figure, each a sane value. No timing is asserted
(only that the numbers exist), except the durability promise: no acknowledged row is lost when
a member is killed, and every group of the dead member is served again.
"""

from __future__ import annotations

import csv
import math
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.server]

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_keys_cluster.py"
CASE = "20,000 keys, 256 groups"


def test_the_quick_keys_cluster_benchmark_writes_every_figure(tmp_path: Path) -> None:
    # --quick takes about a minute on a 2-core machine; the bound is for a busy one
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with (tmp_path / "keys-cluster-quick.csv").open() as f:
        rows = list(csv.DictReader(f))
    got = {(r["experiment"], r["case"], r["metric"]): r for r in rows}

    def value(experiment: str, metric: str, case: str = CASE) -> float:
        v = float(got[(experiment, case, metric)]["value"])
        assert math.isfinite(v), (experiment, case, metric, v)
        return v

    # 1. ingest on two members
    assert value("ingest", "rows_per_s") > 0

    # 2. join and leave (and the kill): some groups moved, each one's unavailability measured
    for what in ("join", "leave", "kill"):
        assert 0 < value(what, "groups_moved") < 256
        p50, p99, worst = (value(what, f"unavailability_{q}") for q in ("p50", "p99", "max"))
        assert 0 < p50 <= p99 <= worst
        assert value(what, "unmoved_groups_gap_max") > 0
        assert value(what, "probe_round_median") > 0
    for what in ("join", "leave"):
        assert got[(what, CASE, "unavailability_max")]["target"] == "< 1 s per group"

    # 3. idle: commands/s with no keys, then with the keys
    for keys in ("0 keys", "20,000 keys"):
        assert value("idle", "redis_commands_per_s", f"{keys}, 256 groups, 3 members") > 0
    assert value("idle", "redis_commands_vs_no_keys", "20,000 keys, 256 groups, 3 members") > 0

    # 4. kill -9: served again, nothing acknowledged lost
    first = value("kill", "kill_to_first_append_served")
    assert 0 < first <= value("kill", "kill_to_every_dead_group_served")
    assert value("kill", "dead_groups_never_served") == 0
    assert value("kill", "durable_rows_acknowledged_before_kill") == 5000
    assert value("kill", "acknowledged_rows_lost") == 0
    for kind in ("durable", "sample", "probe"):
        assert value("kill", "rows_lost", f"{CASE}, {kind} keys") == 0
        assert value("kill", "keys_wrong", f"{CASE}, {kind} keys") == 0

    md = (tmp_path / "keys-cluster-quick.md").read_text()
    assert md.count("\n| ") == len(rows) + 1
    assert "ABORTED" not in md
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return
    assert (tmp_path / "keys-cluster-quick.png").stat().st_size > 0
