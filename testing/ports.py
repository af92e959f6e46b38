"""Free loopback TCP ports: the one place the project asks the kernel for them.

:func:`free_port` is a port nothing listens on when it returns; :func:`free_ports` several
distinct ones (held open together while chosen); :func:`free_port_run` ``n`` consecutive
ones (``serve --workers n`` binds ``port .. port + n - 1``). Nothing keeps them free afterwards:
a process that binds one a moment later races everyone else on the machine, which is why the
servers of :mod:`mtawindows.testing` bind port 0 and report what they got whenever they can.
"""

from __future__ import annotations

import socket

__all__ = ["free_port", "free_port_run", "free_ports"]

HOST = "127.0.0.1"


def free_port() -> int:
    """A loopback TCP port nothing listens on (free when this returns)."""
    return free_ports(1)[0]


def free_ports(n: int) -> list[int]:
    """``n`` distinct loopback TCP ports nothing listens on (bound together while chosen, so
    they differ; free when this returns)."""
    if n < 0:
        msg = f"free_ports: n must be >= 0, got {n!r}"
        raise ValueError(msg)
    socks: list[socket.socket] = []
    try:
        for _ in range(n):
            s = socket.socket()
            socks.append(s)
            s.bind((HOST, 0))
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def free_port_run(n: int, *, attempts: int = 200) -> int:
    """The first of ``n`` consecutive loopback TCP ports nothing listens on (free when this
    returns); ``RuntimeError`` after ``attempts`` tries."""
    if n < 1:
        msg = f"free_port_run: n must be >= 1, got {n!r}"
        raise ValueError(msg)
    for _ in range(attempts):
        first = free_port()
        if first + n - 1 > 65535:
            continue
        socks: list[socket.socket] = []
        try:
            for port in range(first, first + n):
                s = socket.socket()
                socks.append(s)
                s.bind((HOST, port))
            return first
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    msg = f"free_port_run: no {n} consecutive free loopback ports in {attempts} tries"
    raise RuntimeError(msg)
