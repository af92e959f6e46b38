"""The child processes the kit starts, and how they end.

Every process is started by :func:`launch`: through
:func:`~mtawindows.server.storage.processes.dying_with_parent` (on Linux the kernel SIGKILLs it
when this process dies, however it dies) from the spawner thread of
:mod:`~mtawindows.server.storage.processes` (the death signal follows the thread that forked),
in a session of its own (a Ctrl-C meant for the test run does not reach it: the kit stops it
itself). Those still running when the interpreter exits normally are stopped then (SIGTERM,
SIGKILL after a few seconds), for the platforms without the death signal.
"""

from __future__ import annotations

import atexit
import contextlib
import signal
import subprocess
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

from mtawindows.server.storage.processes import dying_with_parent, spawn

_live: set[subprocess.Popen[bytes]] = set()
_lock = threading.Lock()


def launch(
    args: Sequence[str], *, stderr: Path, env: Mapping[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start ``args`` dying with this process; its stderr appended to ``stderr`` (stdin and
    stdout closed)."""
    cmd = dying_with_parent(list(args))

    def popen() -> subprocess.Popen[bytes]:
        with stderr.open("ab") as err:  # the child keeps its own descriptor
            return subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                env=dict(env) if env is not None else None,
                start_new_session=True,
            )

    proc = spawn(popen)
    with _lock:
        _live.add(proc)
    return proc


def end(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
    """Send ``sig`` (unless it exited already) and reap it; SIGKILL after ``timeout`` seconds.
    Its exit status (negative: the signal that ended it)."""
    try:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(sig)
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait()
    finally:
        with _lock:
            _live.discard(proc)


@atexit.register
def _end_all() -> None:
    with _lock:
        procs = list(_live)
    for proc in procs:
        with contextlib.suppress(OSError):
            end(proc, signal.SIGTERM, timeout=5.0)
