"""Start ``mtawindows serve`` as a child process on a free loopback port (and stop it).

The server binds port 0 and writes the port it got to ``--port-file``; this waits for that file
(or the child's exit) and returns the process and the port. Used by the Spark demo and the
examples, so they run the server as the README does; the testing kit
(``mtawindows.testing``) builds its ``LocalServer`` on :func:`server_argv` and
:func:`wait_for_port`.

Layout under ``data_dir``: ``data/`` (the embedded Redis), ``port``, ``server.log`` (stderr).
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path


def server_argv(
    data_dir: Path,
    *args: str,
    program: Sequence[str] = (sys.executable, "-m", "mtawindows.cli"),
    port: int = 0,
    flush_interval: float | None = None,
) -> list[str]:
    """The command line of ``<program> serve`` on 127.0.0.1:``port`` (0: a free one) with its
    data in ``data_dir/data``, writing its port to ``data_dir/port``, plus ``args`` (last, so
    they win over these)."""
    data_dir = Path(data_dir)
    cmd = [
        *program,
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--port-file",
        str(data_dir / "port"),
        "--data-dir",
        str(data_dir / "data"),
    ]
    if flush_interval is not None:
        cmd += ["--flush-interval", str(flush_interval)]
    return cmd + list(args)


def wait_for_port(proc: subprocess.Popen[bytes], data_dir: Path, timeout: float = 60.0) -> int:
    """The port the server of :func:`server_argv` on ``data_dir`` listens on, once it wrote it
    (every service registered). Raises ``RuntimeError`` if the process exits first and
    ``TimeoutError`` (the process stopped) after ``timeout`` seconds; both quote the end of
    ``data_dir/server.log``."""
    port_file = Path(data_dir) / "port"
    log = Path(data_dir) / "server.log"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            msg = f"server exited with {proc.returncode}: {_tail(log)}"
            raise RuntimeError(msg)
        if port_file.exists() and port_file.read_text().strip():
            return int(port_file.read_text())
        time.sleep(0.05)
    stop_server(proc)
    msg = f"server did not start in {timeout}s: {_tail(log)}"
    raise TimeoutError(msg)


def _tail(log: Path) -> str:
    try:
        return log.read_text(errors="replace")[-3000:]
    except OSError:
        return "(no log)"


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
    (data_dir / "port").unlink(missing_ok=True)
    cmd = server_argv(data_dir, *args, program=program, flush_interval=flush_interval)
    with (data_dir / "server.log").open("ab") as err:  # the child keeps its own descriptor
        proc = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=err, env=dict(env) if env is not None else None
        )
    return proc, wait_for_port(proc, data_dir, timeout)


def stop_server(proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    """Stop a server started by :func:`start_server`: SIGTERM (it flushes and exits), then
    SIGKILL after ``timeout`` seconds."""
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
