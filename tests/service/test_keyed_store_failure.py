"""A keyed stream's full-form key windows when Redis refuses writes for a while.

A flush whose checkpoints fail leaves each failed tree holding only its last good checkpoint
(the engine reloads it before its next operation). The rows applied since are in the groups'
journal (durable windows). What must not happen is what once did: the next flush checkpointed
the reloaded tree stamped with the key's current journal position, the group's state was
committed over the journal, and the rows between were gone while every append had been
acknowledged. Here Redis really refuses the writes (``min-replicas-to-write 1`` with no
replica: a primary that lost its replicas does the same), then takes them again; the keys are
checked against the rows acknowledged after the stream's next call, after a flush, after a
hand-over (the groups released with a last flush) and after a reopen by a new registry.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from mtawindows.server.service import Registry
from mtawindows.server.service.limits import Limits
from mtawindows.server.service.refusals import ServiceError
from mtawindows.server.storage.embedded import EmbeddedRedis
from mtawindows.v1.types import Aggregation, Field, Policy, Storage, StreamSpec, WindowSpec

pytestmark = [pytest.mark.redis]

STREAM = "sf"
KEYS = [f"host-{i}" for i in range(6)]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis(tmp_path / "redis") as srv:
        yield srv


def refuse_writes(url: str, on: bool) -> None:
    r = redis.Redis.from_url(url)
    try:
        r.config_set("min-replicas-to-write", 1 if on else 0)
        r.config_set("min-replicas-max-lag", 10)
    finally:
        r.close()


def make_registry(url: str, prefix: str) -> Registry:
    # two items per key compact: every key here grows into the full form (a tree in Redis)
    return Registry(url, limits=Limits(key_compact_items=2), prefix=prefix)


def create(reg: Registry) -> None:
    reg.create_stream(
        StreamSpec(
            STREAM, (Field("host", "STRING"), Field("v", "DOUBLE")), key="host", wall_clock=False
        )
    )
    reg.create_window(
        WindowSpec(
            STREAM,
            "w",
            (Aggregation("n", "count"), Aggregation("s", "sum", "v")),
            Policy.count(1000),
            "AMTA",
            Storage(durable=True, block_size=2, cache_size=2),
        )
    )


class Model:
    def __init__(self) -> None:
        self.n = dict.fromkeys(KEYS, 0)
        self.s = dict.fromkeys(KEYS, 0.0)
        self.t = 1_000

    def batch(self, rows_per_key: int) -> dict[str, Any]:
        hosts, ts, vs = [], [], []
        for _ in range(rows_per_key):
            self.t += 1
            for i, k in enumerate(KEYS):
                hosts.append(k)
                ts.append(self.t)
                vs.append(float(i + 1))
        return {"ts": ("TIMESTAMP", ts), "host": ("STRING", hosts), "v": ("DOUBLE", vs)}

    def acked(self, cols: dict[str, Any]) -> None:
        for k, v in zip(cols["host"][1], cols["v"][1], strict=True):
            self.n[k] += 1
            self.s[k] += v

    def check(self, reg: Registry, when: str) -> None:
        s = reg.stream(STREAM)
        for k in KEYS:
            r = s.query("w", k)
            got = (r.values["n"], r.values["s"])
            assert got == (self.n[k], self.s[k]), f"{when}: key {k}: got {got}"


def append(reg: Registry, model: Model, rows_per_key: int) -> None:
    cols = model.batch(rows_per_key)
    reg.stream(STREAM).append(cols)
    model.acked(cols)


def a_failed_checkpoint(url: str) -> tuple[Registry, Model, str]:
    """A stream whose keys' trees hold rows past their checkpoints, and a flush of them that
    Redis refused: the registry, the model of what was acknowledged, the prefix."""
    prefix = f"sf{uuid.uuid4().hex[:12]}"
    reg = make_registry(url, prefix)
    create(reg)
    model = Model()
    append(reg, model, 5)
    reg.stream(STREAM).flush()  # every key's tree checkpointed
    append(reg, model, 3)  # journaled, in the trees, not checkpointed
    refuse_writes(url, True)
    try:
        with pytest.raises(Exception):  # noqa: B017 - the store's refusal, in whatever form
            reg.stream(STREAM).flush()
    finally:
        refuse_writes(url, False)
    return reg, model, prefix


def test_a_failed_checkpoint_loses_no_acknowledged_row(store: EmbeddedRedis) -> None:
    url = store.url
    reg, model, prefix = a_failed_checkpoint(url)
    # the next call sees the acknowledged rows (the stream reloads: checkpoints + journal)
    model.check(reg, "after the failed flush")
    append(reg, model, 2)
    model.check(reg, "after an append")
    reg.stream(STREAM).flush()
    model.check(reg, "after a flush")
    reg2 = make_registry(url, prefix)
    reg2.adopt(STREAM)
    model.check(reg2, "reopened after the flush")
    reg2.close()
    reg.close()


def test_a_hand_over_after_a_failed_checkpoint_loses_no_acknowledged_row(
    store: EmbeddedRedis,
) -> None:
    url = store.url
    reg, model, prefix = a_failed_checkpoint(url)
    # released with a last flush (its trees that failed are not checkpointed over the journal)
    with contextlib.suppress(ServiceError):
        reg.release(STREAM)
    reg2 = make_registry(url, prefix)
    reg2.adopt(STREAM)
    model.check(reg2, "adopted after the hand-over")
    append(reg2, model, 2)
    reg2.stream(STREAM).flush()
    model.check(reg2, "after an append and a flush")
    reg2.close()
    reg.close()
