"""The examples run as a user runs them (issue 23): ``examples/sdk_quickstart.py`` (it
starts a server of its own), ``examples/cli_quickstart.sh`` against a real server, and the
Spark examples on a real local Spark."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mtawindows.testing import LocalServer

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def env(**extra: str) -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if not k.startswith("MTAWINDOWS_")}
    out["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), out.get("PATH", "")])
    return {**out, **extra}


def run(argv: list[str], timeout: float, **extra: str) -> str:
    done = subprocess.run(
        argv,
        cwd=EXAMPLES,
        env=env(**extra),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, f"{argv}: {done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return done.stdout


@pytest.mark.server
def test_the_sdk_example(tmp_path: Path) -> None:
    out = run([sys.executable, "sdk_quickstart.py"], 180)
    assert "appended 30 rows; per-row results: 30 rows" in out
    assert "kitchen: hottest 24.0 at 12:22, over 5 rows" in out
    assert out.count("kitchen mean") == 3


@pytest.mark.server
def test_the_cli_example(tmp_path: Path) -> None:
    with LocalServer(tmp_path / "server") as srv:
        out = run(["bash", "cli_quickstart.sh"], 180, MTAWINDOWS_TARGET=srv.target)
    assert "key north: 2 rows after batch 1 (newest row 2026-01-01T13:30:00Z)" in out
    assert "  total    12.5" in out
    assert '"timestamp": 1767274200000000000' in out


@pytest.mark.server
@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("name", ["batch_pipeline.py", "pull_results.py", "streaming_pipeline.py"])
def test_the_spark_examples(name: str) -> None:
    run([sys.executable, name], 600)
