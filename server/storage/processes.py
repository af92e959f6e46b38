"""Child processes that die with their owner, and a look at other processes.

On Linux a child is started through a few lines of Python (:data:`_DIE_WITH_PARENT`, see
:func:`dying_with_parent`) that set ``PR_SET_PDEATHSIG`` to SIGKILL and then ``exec`` the real
program, so the kernel kills it when the process that started it dies, however it dies (kill -9
included). The signal follows the *thread* that forked the child, so every child is started
(:func:`spawn`) from one daemon thread that lives as long as the process; a forked process
starts a thread of its own. :func:`_process` reads what a pid runs (``/proc``, else ``ps``),
:func:`servers_naming` finds the Redis-compatible servers on a socket, :func:`describe_exit`
says how a child ended.
"""

from __future__ import annotations

import collections
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from queue import SimpleQueue
from typing import Any, TypeVar

_LINUX = sys.platform.startswith("linux")
_T = TypeVar("_T")

# Run by ``python -I -S -c`` between fork and the server's exec: ask for SIGKILL when the
# parent dies, then make sure the parent did not die before that (argv[1] is its pid).
_DIE_WITH_PARENT = """\
import ctypes, os, sys
try:
    ctypes.CDLL(None).prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG, SIGKILL
except Exception:
    pass
if os.getppid() != int(sys.argv[1]):
    sys.exit("mtawindows: the owner of this embedded Redis died before it started")
os.execv(sys.argv[2], sys.argv[2:])
"""


def dying_with_parent(args: list[str]) -> list[str]:
    """The command line that runs ``args`` killed with this process (on Linux, through
    :data:`_DIE_WITH_PARENT`; elsewhere ``args`` as they are)."""
    if _LINUX and sys.executable:
        owner = str(os.getpid())
        return [sys.executable, "-I", "-S", "-c", _DIE_WITH_PARENT, owner, *args]
    return args


class _Spawner:
    """Starts child processes from one daemon thread that lives as long as the process: Linux
    sends ``PR_SET_PDEATHSIG`` when the *thread* that forked the child exits, so a child
    started from ``asyncio.to_thread`` or a pool thread could be killed while its owner lives."""

    def __init__(self) -> None:
        self._jobs: SimpleQueue[tuple[Callable[[], Any], Future[Any]]] = SimpleQueue()
        self._thread: threading.Thread | None = None
        self._guard = threading.Lock()

    def call(self, fn: Callable[[], _T]) -> _T:
        with self._guard:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="mtaw-spawner", daemon=True)
                self._thread.start()
        fut: Future[_T] = Future()
        self._jobs.put((fn, fut))
        return fut.result()

    def _loop(self) -> None:
        while True:
            fn, fut = self._jobs.get()
            try:
                fut.set_result(fn())
            except BaseException as ex:
                fut.set_exception(ex)


_spawner = _Spawner()


def _reset_spawner() -> None:  # a forked child starts with no thread of its own
    global _spawner
    _spawner = _Spawner()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_spawner)


def spawn(fn: Callable[[], _T]) -> _T:
    """``fn()`` (which starts a child process) run on the spawner thread of this process."""
    return _spawner.call(fn)


def spawn_daemon(args: list[str], stderr: Path) -> subprocess.Popen[bytes]:
    """Start ``args`` (made with :func:`dying_with_parent`) on the spawner thread: in its own
    session (a Ctrl-C meant for its owner does not reach it), no stdin or stdout, its stderr
    appended to ``stderr``."""

    def popen() -> subprocess.Popen[bytes]:
        with stderr.open("ab") as err:
            return subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                start_new_session=True,
            )

    return spawn(popen)


def _process(pid: int) -> tuple[str, str] | None:
    """(executable name, command line) of process ``pid``; None if there is none or it is a
    zombie."""
    if _LINUX:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            if stat.rpartition(")")[2].split()[:1] == ["Z"]:
                return None
            raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return None
        cmd = raw.replace(b"\0", b" ").decode(errors="replace")
        try:
            exe = os.readlink(f"/proc/{pid}/exe")
        except OSError:  # another user's process: its title's first word
            exe = cmd.split(" ", 1)[0]
        return Path(exe).name, cmd
    try:
        out = subprocess.run(
            ["ps", "-o", "stat=,command=", "-p", str(pid)],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    state, _, cmd = out.partition(" ")
    if not out or state.startswith("Z"):
        return None
    cmd = cmd.strip()
    return Path(cmd.split(" ", 1)[0]).name, cmd


def _alive(pid: int) -> bool:
    return _process(pid) is not None


def servers_naming(socket: str, pids: list[int] | None = None) -> list[int]:
    """The live Redis-compatible servers (valkey-server, redis-server and their fork children,
    by executable) among ``pids`` (default: every process, Linux only) whose command line
    names ``socket`` (valkey shows its unix socket in its process title)."""
    if pids is None:
        if not _LINUX:
            return []
        pids = [int(e.name) for e in Path("/proc").iterdir() if e.name.isdigit()]
    found = []
    for pid in pids:
        proc = _process(pid) if pid != os.getpid() else None
        if proc is not None and proc[0].startswith(("valkey", "redis-")) and socket in proc[1]:
            found.append(pid)
    return found


def describe_exit(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
        return f"killed by signal {-code}"
    return f"exited with status {code}"


class RestartBudget:
    """How often a supervised process may be restarted: at most ``limit`` restarts within a
    sliding ``window`` of seconds, each after a backoff that doubles from ``first_backoff`` up
    to ``max_backoff`` with the restarts still in the window. One policy for every supervisor
    (the server's embedded Redis, the workers' supervisor: its Redis and each child)."""

    LIMIT = 5
    WINDOW = 300.0
    FIRST_BACKOFF = 0.5
    MAX_BACKOFF = 10.0

    def __init__(self, limit: int = LIMIT, window: float = WINDOW) -> None:
        if limit < 0 or window <= 0:
            msg = f"RestartBudget: expected limit >= 0 and window > 0, got {limit}, {window}"
            raise ValueError(msg)
        self.limit = limit
        self.window = window
        self._times: collections.deque[float] = collections.deque()

    def __len__(self) -> int:
        return len(self._times)

    def take(self, now: float | None = None) -> bool:
        """Count one restart now, if the budget allows it (False: give up)."""
        now = time.monotonic() if now is None else now
        while self._times and now - self._times[0] > self.window:
            self._times.popleft()
        if len(self._times) >= self.limit:
            return False
        self._times.append(now)
        return True

    def backoff(self) -> float:
        """Seconds to wait before the restart just taken (0.5, 1, 2, ... up to 10)."""
        n = max(1, len(self._times))
        return float(min(self.FIRST_BACKOFF * 2 ** (n - 1), self.MAX_BACKOFF))

    def spent(self, last: str) -> str:
        """Why the supervisor gives up: the restarts in the window and the last failure."""
        return f"{len(self._times)} restarts within {self.window:g}s; last: {last}"
