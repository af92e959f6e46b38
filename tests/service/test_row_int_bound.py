"""The bound that spares per-row batches the engine's preview of INT64 sums
(``HostedWindow.note_ints`` / ``row_ints_fit``): never wrong, whatever the batches, result
modes, evictions and reloads; and it does spare the common batches the preview (which reads
a Redis window's levels pair by pair: 10,000 rows of small INT64 values took 2.4 s)."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mtawindows.server.service import Registry
from mtawindows.server.service.refusals import ServiceError
from mtawindows.v1.types import Aggregation, Field, Policy, Storage, StreamSpec, WindowSpec

BIG = 2**61  # four of them pass int64


def _open(url: str, prefix: str, make: bool, keep: int, kind: str = "redis") -> Registry:
    reg = Registry(url, prefix=prefix)
    if make:
        reg.create_stream(StreamSpec("s", (Field("x", "INT64"),), wall_clock=False))
        aggs = (Aggregation("n", "count"), Aggregation("s", "sum", "x"))
        storage = Storage(kind, block_size=4, cache_size=2) if kind == "redis" else Storage(kind)
        reg.create_window(WindowSpec("s", "w", aggs, Policy.count(keep), storage=storage))
    else:
        reg.restore()
    return reg


def _previews(reg: Registry, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the previews of window ``w``'s engine (its class's method, wrapped)."""
    engine = reg.streams["s"].windows["w"].engine
    calls = [0]
    preview = type(engine).preview_lifted

    def counted(self: Any, *args: Any, **kw: Any) -> Any:
        calls[0] += self is engine
        return preview(self, *args, **kw)

    monkeypatch.setattr(type(engine), "preview_lifted", counted)
    return calls


batches = st.lists(
    st.tuples(
        st.lists(
            st.one_of(
                st.integers(-1000, 1000),
                st.sampled_from([BIG, -BIG, BIG - 1, 2**62, -(2**62), 2**63 - 1, -(2**63)]),
            ),
            min_size=1,
            max_size=6,
        ),
        st.sampled_from(["per_row", "per_row", "final", "none"]),
    ),
    min_size=1,
    max_size=12,
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(batches=batches, keep=st.integers(1, 6), kind=st.sampled_from(["memory", "redis"]))
def test_per_row_int64_sums_are_answered_or_refused_exactly_as_the_oracle_says(
    redis_url: str, batches: list[tuple[list[int], str]], keep: int, kind: str
) -> None:
    """Random batches of INT64 values (small, and near the edges of int64) into a count
    window of an INT64 sum, in memory or on Redis (whose level pairs of such values pass
    int64 on their own: they could not be written, and the window's store failed), asking
    per-row, final or no results: a per-row batch is refused exactly when some row's window
    sum passes int64 (and changes nothing), else every per-row sum is exact; the oracle is
    the rows themselves, as Python integers. (The bound after a restart: the next test.)"""
    prefix = f"ribound{random.randrange(10**9)}"
    reg = _open(redis_url, prefix, True, keep, kind)
    rows: list[int] = []
    ts = 0
    try:
        for values, mode in batches:
            stamps = list(range(ts + 1, ts + 1 + len(values)))
            sums = [sum((rows + values[: i + 1])[-keep:]) for i in range(len(values))]
            past = any(not -(2**63) <= v < 2**63 for v in sums)
            cols = {"ts": ("TIMESTAMP", stamps), "x": ("INT64", values)}
            s = reg.streams["s"]
            if mode == "per_row" and past:
                with pytest.raises(ServiceError) as info:
                    s.append(cols, mode="PER_ROW")
                assert info.value.reason == "BAD_VALUES"
                assert reg.result("s", "w").values["n"] == len(rows[-keep:])
                continue
            res = s.append(cols, mode=mode.upper())
            rows += values
            ts += len(values)
            if mode == "per_row":
                got = res.row_results["w"].typed()["s"][1]
                assert got == sums
            assert reg.result("s", "w").values["n"] == len(rows[-keep:])
    finally:
        reg.close()


def test_small_sums_skip_the_preview_and_a_large_value_brings_it_back(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Small INT64 values: per-row batches answered without the preview. A value whose
    magnitude times the rows could pass int64 (noted from a batch asking no results), or a
    restart (the rows held then are of unknown magnitude until they leave), sends per-row
    batches to the preview again, which answers them."""
    prefix = f"ribound{random.randrange(10**9)}"
    reg = _open(redis_url, prefix, True, 5)
    try:
        calls = _previews(reg, monkeypatch)
        s = reg.streams["s"]
        ts = 0

        rows: list[int] = []

        def append(values: list[int], mode: str = "PER_ROW") -> Any:
            nonlocal ts
            want = [sum((rows + values[: i + 1])[-5:]) for i in range(len(values))]
            rows.extend(values)
            cols = {
                "ts": ("TIMESTAMP", list(range(ts + 1, ts + 1 + len(values)))),
                "x": ("INT64", values),
            }
            ts += len(values)
            res = s.append(cols, mode=mode)
            if mode == "PER_ROW":
                assert res.row_results["w"].typed()["s"][1] == want
            return res

        for k in range(5):
            append([k, -k, 3])
        assert calls[0] == 0
        append([BIG], mode="NONE")  # 5 rows x 2**61 could pass int64
        append([1, 2])
        assert calls[0] == 1
        append([1, 1, 1, 1, 1], mode="NONE")  # BIG left: the magnitude is still known
        append([1])
        assert calls[0] == 2  # (the largest magnitude seen is kept: conservative)
        reg.flush(s, final=True)
        reg.close()
        reg = _open(redis_url, prefix, False, 5)
        calls = _previews(reg, monkeypatch)
        s = reg.streams["s"]
        append([1])
        assert calls[0] == 1  # the restored rows' magnitudes are unknown
        append([1, 1, 1, 1, 1], mode="NONE")  # every restored row left
        append([2])
        assert calls[0] == 1
    finally:
        reg.close()


def test_level_pairs_of_an_int64_sum_past_int64_are_written(redis_url: str) -> None:
    """A Redis window's level pairs aggregate runs of rows (2, 4, 8, ... of them) whatever the
    window holds: eight epoch-ns values, or two values above 2^62, sum past int64 in one
    pair. They were stored as int64 and could not be written: the window's store failed and
    every later call with it. Now stored exactly (128 bits), reloaded as they were."""
    prefix = f"ribound{random.randrange(10**9)}"
    reg = _open(redis_url, prefix, True, 64)
    a = 2**62 + 1
    values = [a, a, -a, -a] * 32  # pairs of (a, a) pass int64; the window's sum is 0
    try:
        s = reg.streams["s"]
        for k in range(0, len(values), 8):
            cols = {
                "ts": ("TIMESTAMP", list(range(k + 1, k + 9))),
                "x": ("INT64", values[k : k + 8]),
            }
            s.append(cols, mode="FINAL")
        reg.flush(s, final=True)
        assert reg.result("s", "w").values == {"n": 64, "s": 0}
        reg.close()
        reg = _open(redis_url, prefix, False, 64)
        assert reg.result("s", "w").values == {"n": 64, "s": 0}
        cols = {"ts": ("TIMESTAMP", [129, 130]), "x": ("INT64", [7, 8])}
        got = reg.streams["s"].append(cols, mode="PER_ROW")
        want = [sum((values + [7, 8][: i + 1])[-64:]) for i in range(2)]  # -a + 7, -2a + 15
        assert got.row_results["w"].typed()["s"][1] == want
    finally:
        reg.close()


def test_a_count_window_bounds_its_rows_by_its_size(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A count window holds at most its size after each row: two epoch-ns values fit int64,
    so a count(2) window answers per-row sums of them without the preview (an outside
    tester: 5.4 s for 10,000 rows, the bound counting every row of the batch)."""
    prefix = f"ribound{random.randrange(10**9)}"
    reg = _open(redis_url, prefix, True, 2)
    try:
        calls = _previews(reg, monkeypatch)
        epoch = 1_767_225_600 * 10**9
        values = [epoch + k for k in range(1000)]
        cols = {"ts": ("TIMESTAMP", list(range(1, 1001))), "x": ("INT64", values)}
        got = reg.streams["s"].append(cols, mode="PER_ROW")
        want = [sum(values[max(0, i - 1) : i + 1]) for i in range(1000)]
        assert got.row_results["w"].typed()["s"][1] == want
        assert calls[0] == 0
    finally:
        reg.close()


def test_a_refusal_names_the_request_row_or_a_row_held_from_an_earlier_batch(
    redis_url: str,
) -> None:
    """The row a per-row INT64 refusal names is the request's: a row dropped as late before
    it shifts nothing, and a row a reorder buffer held from an earlier batch is named as
    such (an outside tester got "row 2" of a batch of two rows)."""
    from datetime import timedelta

    from mtawindows.server.service.refusals import ServiceError

    for lateness, batches, row in (
        (timedelta(0), [([5, 3, 6, 7], [1, 9, 2**62, 2**62])], "3"),  # 3 is late: dropped
        (timedelta(microseconds=5), [([1, 2, 3], [7, 2**62, 2**62]), ([20, 21], [1, 1])], "-1"),
    ):
        reg = Registry(redis_url, prefix=f"ribound{random.randrange(10**9)}")
        try:
            spec = StreamSpec(
                "s",
                (Field("x", "INT64"),),
                late_policy="DROP",
                allowed_lateness=lateness,
                wall_clock=False,
            )
            reg.create_stream(spec)
            aggs = (Aggregation("s", "sum", "x"),)
            reg.create_window(
                WindowSpec("s", "w", aggs, Policy.count(10), storage=Storage("memory"))
            )
            s = reg.streams["s"]
            *before, (ts, xs) = batches
            for bts, bxs in before:
                us = [t * 1000 for t in bts]
                s.append({"ts": ("TIMESTAMP", us), "x": ("INT64", bxs)}, mode="NONE")
            us = [t * 1000 for t in ts]
            with pytest.raises(ServiceError) as info:
                s.append({"ts": ("TIMESTAMP", us), "x": ("INT64", xs)}, mode="PER_ROW")
            assert info.value.reason == "BAD_VALUES"
            assert info.value.metadata["row"] == row
            if row == "-1":
                assert "held from an earlier batch" in info.value.message
            else:
                assert f"after row {row} of this batch" in info.value.message
        finally:
            reg.close()
