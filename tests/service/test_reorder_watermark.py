"""The reorder buffer's lateness rule is a watermark (reorder.py): a row more than
``allowed_lateness`` older than the newest row received before it is late, however the rows
are split into batches; per-row results follow the rows the buffer releases and name each
one's request row (-1: a row held from an earlier batch)."""

from __future__ import annotations

import itertools
import random
from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mtawindows.server.service import Registry
from mtawindows.v1.types import Aggregation, Field, Policy, Storage, StreamSpec, WindowSpec

LATENESS = 5  # in units of 1 us, the timestamps' too
US = 1000  # ns


def _stream(url: str) -> tuple[Registry, Any]:
    reg = Registry(url, prefix=f"wm{random.randrange(10**9)}")
    spec = StreamSpec(
        "s",
        (Field("x", "INT64"),),
        late_policy="DROP",
        allowed_lateness=timedelta(microseconds=LATENESS),
        wall_clock=False,
    )
    reg.create_stream(spec)
    aggs = (Aggregation("n", "count"), Aggregation("l", "last", "x"))
    reg.create_window(WindowSpec("s", "w", aggs, Policy.count(1000), storage=Storage("memory")))
    return reg, reg.streams["s"]


def _oracle(ts: list[int]) -> list[int]:
    """The rows that are not late, in the order they came: a row is late when it is older
    than the newest row before it less the lateness."""
    keep: list[int] = []
    seen: int | None = None
    for i, t in enumerate(ts):
        if seen is None or t >= seen - LATENESS:
            keep.append(i)
            seen = t if seen is None else max(seen, t)
    return keep


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    ts=st.lists(st.integers(0, 40), min_size=1, max_size=40),
    cuts=st.lists(st.sets(st.integers(1, 39)), min_size=2, max_size=2),
)
def test_the_same_rows_are_late_however_they_are_batched(
    redis_url: str, ts: list[int], cuts: list[set[int]]
) -> None:
    """The same rows in the same order, split into batches two ways: the oracle's rows late
    in both, the rows released in timestamp order (ties in the order they came), and every
    per-row result naming its request row, or -1 for a row an earlier batch brought."""
    kept = _oracle(ts)
    got = []
    for cut in cuts:
        reg, s = _stream(redis_url)
        edges = [0, *sorted(c for c in cut if c < len(ts)), len(ts)]
        late = 0
        released: list[int] = []  # the rows released, as their index in ts (their x)
        try:
            for a, b in itertools.pairwise(edges):
                stamps = [t * US for t in ts[a:b]]
                cols = {"ts": ("TIMESTAMP", stamps), "x": ("INT64", list(range(a, b)))}
                res = s.append(cols, mode="PER_ROW")
                late += res.rows_late
                xs = res.row_results["w"].typed()["l"][1]  # the row each result follows
                assert res.row_positions == [i - a if i >= a else -1 for i in xs]
                released += xs
            buffered = s.info().rows_buffered
        finally:
            reg.close()
        assert late == len(ts) - len(kept)
        assert set(released) <= set(kept) and len(released) + buffered == len(kept)
        assert released == sorted(released, key=lambda i: (ts[i], i))
        got.append(released)
    shorter = min(len(g) for g in got)  # (a later cut may leave more in the buffer)
    assert got[0][:shorter] == got[1][:shorter]
