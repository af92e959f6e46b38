"""A naive oracle for keyed streams (tests/service/test_keyed_*.py, tests/crash/test_keyed_*):
each key's accepted rows as a plain list, each window's answer recomputed from scratch with
its policy applied naively, and the small Redis helpers those tests share.

Timestamps are nanoseconds (a ``TIMESTAMP`` column); a time window of range ``R`` keeps the
rows with ``ts > newest - R`` (the engine's ``TimeRangePolicy``: a prefix leaves while
``newest - ts(prefix's newest) >= range``), a count window of ``N`` its last ``N`` rows, a
bounded-sum window of bound ``B`` (values >= 0) the longest suffix whose sum is ``<= B``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis

from mtawindows.v1.types import Field, StreamSpec

__all__ = [
    "KeyOracle",
    "OWin",
    "close_values",
    "drop_prefix",
    "expected",
    "host_stream",
    "kept_rows",
]


@dataclass(frozen=True)
class OWin:
    """One window as the oracle sees it: ``kind`` "count" (``param`` rows), "time" (``param``
    nanoseconds) or "bsum" (``param`` the bound over ``v``); ``outputs``: name -> what it is
    ("sum", "count", "max", "min", "first", "last", over ``v``)."""

    name: str
    kind: str
    param: float
    outputs: Mapping[str, str]


def kept_rows(win: OWin, rows: Sequence[tuple[int, float]]) -> list[tuple[int, float]]:
    """The rows ``win`` holds after ``rows`` (a key's accepted rows, oldest first)."""
    if not rows:
        return []
    if win.kind == "count":
        n = int(win.param)
        return list(rows[max(0, len(rows) - n) :]) if n else []
    if win.kind == "time":
        newest = rows[-1][0]
        return [r for r in rows if r[0] > newest - win.param]
    if win.kind == "bsum":
        total = 0.0
        k = len(rows)
        while k > 0 and total + rows[k - 1][1] <= win.param:
            total += rows[k - 1][1]
            k -= 1
        return list(rows[k:])
    msg = f"unknown oracle window kind {win.kind!r}"
    raise ValueError(msg)


def expected(win: OWin, rows: Sequence[tuple[int, float]]) -> tuple[dict[str, Any], int]:
    """(values, size) of ``win`` after ``rows``."""
    kept = kept_rows(win, rows)
    vs = [v for _, v in kept]
    out: dict[str, Any] = {}
    for name, what in win.outputs.items():
        if what == "sum":
            out[name] = float(sum(vs))
        elif what == "count":
            out[name] = len(vs)
        elif not vs:
            out[name] = None
        elif what == "max":
            out[name] = max(vs)
        elif what == "min":
            out[name] = min(vs)
        elif what == "first":
            out[name] = vs[0]
        elif what == "last":
            out[name] = vs[-1]
        else:
            msg = f"unknown oracle output {what!r}"
            raise ValueError(msg)
    return out, len(kept)


def close_values(got: Mapping[str, Any], want: Mapping[str, Any]) -> bool:
    """``got`` holds ``want``'s outputs, floats equal up to a relative 1e-9."""
    for k, w in want.items():
        g = got.get(k)
        if w is None or g is None:
            if g is not w:
                return False
        elif isinstance(w, float) or isinstance(g, float):
            if not math.isclose(g, w, rel_tol=1e-9, abs_tol=1e-12):
                return False
        elif g != w:
            return False
    return True


@dataclass
class KeyOracle:
    """Every key's accepted rows (ts, v), oldest first, and its counters."""

    rows: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    batches: dict[str, int] = field(default_factory=dict)  # batches that changed each key

    def newest(self, key: str) -> int | None:
        r = self.rows.get(key)
        return r[-1][0] if r else None

    def copy(self) -> KeyOracle:
        return KeyOracle({k: list(v) for k, v in self.rows.items()}, dict(self.batches))

    def drop(self, key: str) -> None:
        self.rows.pop(key, None)
        self.batches.pop(key, None)

    def add_batch(self, keys: Iterable[str], ts: Iterable[int], vs: Iterable[float]) -> None:
        """Every row applied (no late rows): the keys' rows in input order."""
        touched = set()
        for k, t, v in zip(keys, ts, vs, strict=True):
            self.rows.setdefault(k, []).append((t, v))
            touched.add(k)
        for k in touched:
            self.batches[k] = self.batches.get(k, 0) + 1


def drop_prefix(url: str, prefix: str) -> int:
    """Delete every Redis key under ``prefix`` (a test's own), returns how many."""
    client = redis.Redis.from_url(url)
    try:
        n = 0
        batch: list[bytes] = []
        for k in client.scan_iter(match=f"{prefix}:*", count=1000):
            batch.append(k)
            if len(batch) >= 500:
                n += client.unlink(*batch)
                batch.clear()
        if batch:
            n += client.unlink(*batch)
        return n
    finally:
        client.close()


def host_stream(name: str, key_type: str = "STRING") -> StreamSpec:
    """A keyed stream of hosts (``host``, of ``key_type``) and a DOUBLE ``v``, no wall clock:
    the shape the keyed service tests feed."""
    return StreamSpec(
        name, (Field("host", key_type), Field("v", "DOUBLE")), key="host", wall_clock=False
    )
