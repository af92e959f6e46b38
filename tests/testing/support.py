"""What the kit's tests share: is a process still there."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable
from pathlib import Path


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, dead but not yet reaped, does not)."""
    if sys.platform.startswith("linux"):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        return stat.rpartition(")")[2].split()[:1] != ["Z"]
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process now
        return False
    return True


def survivors(pids: Iterable[int], wait: float = 0.0) -> list[int]:
    """The ``pids`` still alive, after waiting up to ``wait`` seconds for them to go."""
    deadline = time.monotonic() + wait
    while True:
        left = [p for p in pids if alive(p)]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.05)
