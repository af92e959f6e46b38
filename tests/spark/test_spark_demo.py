"""The README's main job (``make demo``), small: it starts its own server, runs Spark, checks
its per-row results against pandas itself and writes the plot."""

from __future__ import annotations

from pathlib import Path

import pytest

from mtawindows.spark_connector import demo

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.server, pytest.mark.redis]


def test_demo_runs_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert demo.main(["--hosts", "3", "--hours", "2", "--every", "5", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "micro-batch 1" in text
    assert "equal pandas' rolling" in text
    png = out / "telemetry_host-00.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
