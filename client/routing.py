"""Routing helpers: the seed lists (:func:`split_targets`), and :class:`Router`, a fixed hash
of a stream's name over a list of independent servers.

A cluster of servers (one Redis) places streams itself, and :class:`~mtawindows.client.WindowClient`
follows it (:mod:`mtawindows.client.cluster_map`): give it the seeds, it finds each stream's owner::

    with WindowClient("a:50051,b:50051") as c:  # seeds of one cluster
        c.append("telemetry", rows)             # at the server that owns it

:class:`Router` is for servers that do not form a cluster (each its own Redis), sharded by
hand: ``Router("a:50051,b:50051", pinned=["telemetry"]).owner(name)`` picks one by SHA-256 of
the name (not Python's salted ``hash``), the same in every process as long as the targets are
listed in the same order.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

_PORT = re.compile(r"^(?:\[[0-9A-Fa-f:.]+\]|[^:\[\]\s]+):(\d{1,5})$")  # host:port, [v6]:port


def split_targets(raw: str) -> tuple[str, ...]:
    """``"host:port"`` or ``"a:1,b:2"`` as a tuple of distinct, non-empty targets (spaces around
    each stripped); ValueError for an empty entry or a target listed twice."""
    parts = tuple(p.strip() for p in raw.split(","))
    if not raw.strip() or not all(parts):
        msg = f"expected host:port or a comma-separated list of them, got {raw!r}"
        raise ValueError(msg)
    if len(set(parts)) != len(parts):
        msg = f"a server is listed twice in {raw!r}"
        raise ValueError(msg)
    for p in parts:  # host:port, port 1-65535 (gRPC would wrap 99999 or -1 round, default 443)
        if "/" in p:  # a gRPC URI: unix:/path, dns:///host:port, ...
            continue
        port = _PORT.match(p)
        if port is None or not 0 < int(port.group(1)) < 65536:
            msg = f"target {p!r}: expected host:port with a port 1-65535"
            raise ValueError(msg)
    return parts


def stable_hash(name: str) -> int:
    """A 64-bit hash of ``name``, the same in every process (the first 8 bytes of SHA-256)."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big")


class Router:
    """Which of ``targets`` owns a stream.

    ``targets``: ``host:port`` strings, or one comma-separated string of them; the first is
    the primary. ``pinned``: stream names that live on the primary. Every other name goes
    where :func:`stable_hash` sends it."""

    def __init__(self, targets: str | Iterable[str], *, pinned: Iterable[str] = ()) -> None:
        self.targets = split_targets(targets if isinstance(targets, str) else ",".join(targets))
        self.pinned = frozenset(pinned)

    @property
    def primary(self) -> str:
        return self.targets[0]

    def owner(self, name: str) -> str:
        """The target that holds stream ``name``."""
        if len(self.targets) == 1 or name in self.pinned:
            return self.targets[0]
        return self.targets[stable_hash(name) % len(self.targets)]

    def __repr__(self) -> str:
        return f"Router({list(self.targets)!r}, pinned={sorted(self.pinned)!r})"


__all__ = ["Router", "split_targets", "stable_hash"]
