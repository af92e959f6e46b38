"""Start ``mtawindows serve`` as a child process on a free loopback port (and stop it).

The server binds port 0 and writes the port it got to ``--port-file``; this waits for that file
(or the child's exit) and returns the process and the port. Used by the Spark demo, the
examples, the benchmarks and the tests, so they all run the server as the README does.

Layout under ``data_dir``: ``data/`` (the embedded Redis), ``port``, ``server.log`` (stderr).
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path


def start_server(
    data_dir: Path,
    *args: str,
    program: Sequence[str] = (sys.executable, "-m", "mtawindows.cli"),
    flush_interval: float | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 60.0,
) -> tuple[subprocess.Popen[bytes], int]:
    """``<program> serve`` on 127.0.0.1 with its data in ``data_dir``, plus ``args``; returns
    (process, port) once it listens. Raises if it exits or does not listen within ``timeout``."""
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    port_file = data_dir / "port"
    port_file.unlink(missing_ok=True)
    log = data_dir / "server.log"
    cmd = [
        *program,
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--port-file",
        str(port_file),
        "--data-dir",
        str(data_dir / "data"),
    ]
    if flush_interval is not None:
        cmd += ["--flush-interval", str(flush_interval)]
    cmd += args
    with log.open("ab") as err:  # the child keeps its own copy of the descriptor
        proc = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=err, env=dict(env) if env is not None else None
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            msg = f"server exited with {proc.returncode}: {log.read_text()[-3000:]}"
            raise RuntimeError(msg)
        if port_file.exists() and port_file.read_text().strip():
            return proc, int(port_file.read_text())
        time.sleep(0.05)
    stop_server(proc)
    msg = f"server did not start in {timeout}s: {log.read_text()[-3000:]}"
    raise TimeoutError(msg)


def stop_server(proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    """Stop a server started by :func:`start_server`: SIGTERM (it flushes and exits), then
    SIGKILL after ``timeout`` seconds."""
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
