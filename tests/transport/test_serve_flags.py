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


def test_the_server_pins_mallocs_thresholds() -> None:
    """glibc: the mmap threshold pinned at 4 MiB (a freed large block would raise it and keep
    a batch's large buffers in the heap; lower, every mid-sized array is a mapping of its
    own) and the trim threshold at 4 MiB too; each left alone when its MALLOC_*_ variable is
    set, nothing pinned when both are. In a child process: it changes the process for good."""
    import os
    import platform

    code = "from mtawindows.server.serve_command import pin_malloc_thresholds as p; print(p())"
    names = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")
    env = {k: v for k, v in os.environ.items() if k not in names}
    got = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    glibc = platform.libc_ver()[0] == "glibc"
    assert got.stdout.strip() == str(glibc), got.stderr
    env["MALLOC_MMAP_THRESHOLD_"] = "65536"
    got = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert got.stdout.strip() == str(glibc), got.stderr  # the trim threshold still
    env["MALLOC_TRIM_THRESHOLD_"] = "131072"
    got = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert got.stdout.strip() == "False", got.stderr


_PINNED = """
import ctypes
import numpy as np
from mtawindows.server.serve_command import pin_malloc_thresholds
names = "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost"
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in names.split()]
libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = Info
assert pin_malloc_thresholds()
"""


def _after_the_pin(code: str) -> list[str]:
    """What ``code`` prints in a fresh glibc process (no MALLOC_* variables) after the pin,
    with ``libc.mallinfo2()`` at hand (skipped on other C libraries)."""
    import os
    import platform

    if platform.libc_ver()[0] != "glibc":
        pytest.skip("glibc's malloc only")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    run = [sys.executable, "-c", _PINNED + code]
    got = subprocess.run(run, env=env, capture_output=True, text=True)
    assert got.returncode == 0, got.stderr
    return got.stdout.split()


def test_the_pinned_threshold_maps_large_blocks_and_keeps_mid_sized_ones_in_the_heap() -> None:
    """After the pin, a 2 MiB block comes from the heap (a 50,000-row array is not a mapping
    of its own, its pages faulted in anew each time) and an 8 MiB one is a mapping (given
    back when freed): glibc's own count of mapped bytes (mallinfo2) says which."""
    code = """
mapped = lambda: libc.mallinfo2().hblkhd
m0 = mapped(); small = np.empty(2 << 20, np.uint8); m1 = mapped()
large = np.empty(8 << 20, np.uint8); m2 = mapped()
print(m1 - m0, m2 - m1 >= 8 << 20)
"""
    assert _after_the_pin(code) == ["0", "True"]


def test_the_heap_keeps_a_batchs_freed_temporaries() -> None:
    """After the pin, a freed 3 MiB block (a temporary of a batch: from the heap, under the
    mmap threshold) stays in the heap for the next batch instead of going back to the system
    and having its pages faulted in again (glibc's trim threshold, left at 128 KiB when the
    mmap threshold is pinned alone, gave it back: mallinfo2's arena shrank by it)."""
    code = """
arena = lambda: libc.mallinfo2().arena
a0 = arena(); block = np.ones(3 << 20, np.uint8); a1 = arena()
del block
a2 = arena()
print(a1 - a0 >= 2 << 20, a2 >= a1)
"""
    assert _after_the_pin(code) == ["True", "True"]
