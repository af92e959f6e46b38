"""The data-directory lock: one owner per directory (:class:`DataDirLock`), an exclusive
``flock`` held as long as the owner lives; a second owner is refused with
:class:`DataDirLockedError` naming the holder's pid."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


class DataDirLockedError(OSError):
    """Another process holds the data directory."""


class DataDirLock:
    """An exclusive ``flock`` on ``<directory>/<name>`` for as long as it is held, with the
    holder's pid written in the file so that a refusal can name it. The kernel drops the lock
    when the holder dies, however it dies; the file stays (removing it would let two processes
    lock two different files of the same name)."""

    def __init__(
        self, directory: str | os.PathLike[str], *, name: str = "lock", owner: str = "process"
    ) -> None:
        self.directory = Path(directory)
        self.path = self.directory / name
        self.owner = owner
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> DataDirLock:
        """Take the lock or raise :class:`DataDirLockedError` naming the directory and holder."""
        if self._fd is not None:
            return self
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            import fcntl
        except ImportError:  # not POSIX: no lock, the rest works
            self._fd = fd
            return self
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            msg = (
                f"data directory {str(self.directory)!r} is in use by another {self.owner} "
                f"(pid {holder}, lock file {str(self.path)!r}); stop it or choose another data "
                "directory"
            )
            raise DataDirLockedError(msg) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return self

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            os.close(fd)  # closing the last descriptor drops the flock
