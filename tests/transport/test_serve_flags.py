"""Number flags of ``serve`` out of their range stop it at start-up with a line naming the flag,
its range and the value: no server that refuses every call (``--max-message-mb 0``), spins
(``--flush-interval 0``) or dies in a traceback (``--max-message-mb 5000`` overflowed a gRPC
option)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mtawindows.server.serve_command import RANGES, build_parser, check_ranges


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--max-message-mb", "0"),
        ("--max-message-mb", "-1"),
        ("--max-message-mb", "5000"),
        ("--flush-interval", "0"),
        ("--flush-interval", "nan"),
        ("--max-streams", "-1"),
        ("--max-windows", "0"),
        ("--max-cel-bytes", "0"),
        ("--max-cel-depth", "-1"),
        ("--max-subscribers", "-1"),
        ("--result-history", "-1"),
        ("--redis-restarts", "-1"),
    ],
)
def test_a_number_out_of_range_stops_serve_with_a_clear_line(flag: str, value: str) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "mtawindows.server", "--port", "0", flag, value],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1, out
    assert out.stderr.startswith(f"error: {flag}: expected a number from "), out.stderr
    assert "Traceback" not in out.stderr


def test_the_defaults_are_in_range() -> None:
    check_ranges(build_parser().parse_args([]))
    assert len({flag for flag, _, _ in RANGES}) == len(RANGES)


def test_the_server_pins_mallocs_mmap_threshold() -> None:
    """glibc: pinned at 4 MiB (a freed large block would raise it and keep a batch's large
    buffers in the heap; lower, every mid-sized array is a mapping of its own); left alone
    when MALLOC_MMAP_THRESHOLD_ is set. In a child process: it changes the process for good."""
    import os
    import platform

    code = "from mtawindows.server.serve_command import pin_mmap_threshold as p; print(p())"
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_MMAP_THRESHOLD_"}
    got = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    glibc = platform.libc_ver()[0] == "glibc"
    assert got.stdout.strip() == str(glibc), got.stderr
    env["MALLOC_MMAP_THRESHOLD_"] = "65536"
    got = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert got.stdout.strip() == "False", got.stderr


def test_the_pinned_threshold_maps_large_blocks_and_keeps_mid_sized_ones_in_the_heap() -> None:
    """After the pin, a 2 MiB block comes from the heap (a 50,000-row array is not a mapping
    of its own, its pages faulted in anew each time) and an 8 MiB one is a mapping (given
    back when freed): glibc's own count of mapped bytes (mallinfo2) says which."""
    import os
    import platform

    if platform.libc_ver()[0] != "glibc":
        pytest.skip("glibc's malloc only")
    code = """
import ctypes
import numpy as np
from mtawindows.server.serve_command import pin_mmap_threshold
names = "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost"
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in names.split()]
libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = Info
assert pin_mmap_threshold()
mapped = lambda: libc.mallinfo2().hblkhd
m0 = mapped(); small = np.empty(2 << 20, np.uint8); m1 = mapped()
large = np.empty(8 << 20, np.uint8); m2 = mapped()
print(m1 - m0, m2 - m1 >= 8 << 20)
"""
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_MMAP_THRESHOLD_"}
    got = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert got.stdout.split() == ["0", "True"], got.stdout + got.stderr
