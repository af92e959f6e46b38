"""Where a stream lives: rendezvous (highest random weight) hashing over the live members.

Servers and clients compute the same answer from the same member list: a stream goes to the
member whose SHA-256 of ``member + "\\0" + stream`` is highest. When a member joins, only the
streams it now wins move to it (about 1/N of them); when one leaves, only its streams move,
spread over the others. The owner of record is the stream's lease in Redis; placement is where
servers put streams and where a client tries first.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

__all__ = ["place", "weight"]


def weight(member: str, stream: str) -> int:
    """The rendezvous weight of ``stream`` on ``member`` (64 bits, the same in every process)."""
    return int.from_bytes(hashlib.sha256(f"{member}\0{stream}".encode()).digest()[:8], "big")


def place(stream: str, members: Iterable[str]) -> str | None:
    """The member ``stream`` belongs on (None when there is no member)."""
    best: str | None = None
    top = -1
    for m in members:
        w = weight(m, stream)
        if w > top or (w == top and best is not None and m < best):
            best, top = m, w
    return best
