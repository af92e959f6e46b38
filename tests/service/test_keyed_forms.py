"""A keyed stream's windows against a naive oracle, while keys grow from the compact form into
full MTAs (``Limits.key_compact_items`` of 1..8), are evicted from the key cache and reloaded,
and the stream is reopened from Redis (a new Registry's ``adopt``: a restart).

Random batches over a handful of keys (several keys per batch, ties in timestamps, rows late
for their key: the whole batch refused under REJECT, those rows dropped under DROP), windows of
four kinds: a count window with first/last (non-commutative), a time-range window with a record
of sum + count + max (its boundary hit exactly: a row ``range`` older than the newest leaves), a
bounded-sum window (not batch-safe: enforced row by row) and, in the durable variant, journaled
windows. After **every** append: each key's ``query()`` (values, size, the key's newest
timestamp and batch count) equals the oracle's (each key's plain list of rows with the policy
applied naively), the PER_ROW results equal the oracle's after each applied row (input order),
FINAL results one per (window, key) touched with their evictions; a window once full stays
full; a resent ``(producer_id, sequence)`` changes nothing; a deleted key is gone until a
later row starts it afresh. Reopens happen after a flush, after
a release (final flush), and for durable streams after neither (the groups' journals replay);
the reopened stream answers the same for every key, each key's windows in the same form.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mtawindows.server.service import Registry
from mtawindows.server.service.limits import Limits
from mtawindows.server.service.refusals import ServiceError
from mtawindows.testing import shared_redis_url
from mtawindows.v1.reasons import Reason
from mtawindows.v1.types import Aggregation, Field, Policy, Storage, StreamSpec, WindowSpec
from tests.support.keyed_oracle import KeyOracle, OWin, close_values, drop_prefix, expected

pytestmark = [pytest.mark.redis]

STREAM = "kf"
PRODUCER = "forms"
UNIT = 1000  # ns: a timedelta's resolution, so a range is a whole number of units
T0 = 1_000_000 * UNIT


# -- choices: the same scenario driven by Hypothesis or by a seeded random.Random


class Chooser:
    def integer(self, lo: int, hi: int) -> int:
        raise NotImplementedError

    def pick(self, seq: Sequence[Any]) -> Any:
        return seq[self.integer(0, len(seq) - 1)]

    def chance(self, one_in: int) -> bool:
        return self.integer(1, one_in) == 1


class HypChooser(Chooser):
    def __init__(self, data: Any) -> None:
        self.data = data

    def integer(self, lo: int, hi: int) -> int:
        return int(self.data.draw(st.integers(lo, hi)))


class RandChooser(Chooser):
    def __init__(self, seed: int) -> None:
        self.rnd = random.Random(seed)

    def integer(self, lo: int, hi: int) -> int:
        return self.rnd.randint(lo, hi)


# -- the scenario


@dataclass
class Config:
    threshold: int  # Limits.key_compact_items
    key_groups: int
    late: str
    int_keys: bool
    n_keys: int
    count: int
    range_units: int
    bound: float
    algorithms: tuple[str, str, str]
    block: int  # the full forms' Storage block and cache size (0: defaults)
    durable: tuple[bool, bool, bool]
    tiny_cache: bool
    # without the bounded-sum window every window allows the slab (slab.py): the keys of
    # NONE appends live in columns, the others (and those outgrowing it) become objects
    slab: bool = False

    @classmethod
    def draw(cls, c: Chooser) -> Config:
        durable = c.pick(((False,) * 3, (False,) * 3, (True, False, False), (True, True, True)))
        return cls(
            threshold=c.integer(1, 8),
            key_groups=c.pick((1, 2, 3, 7, 0)),
            late=c.pick(("REJECT", "DROP")),
            int_keys=c.chance(3),
            n_keys=c.integer(1, 6),
            count=c.integer(1, 12),
            range_units=c.integer(1, 25),
            bound=c.pick((0.0, 1.5, 4.0, 10.0, 30.0)),
            algorithms=(
                c.pick(("AMTA", "LMTA")),
                c.pick(("AMTA", "LMTA")),
                c.pick(("AMTA", "LMTA")),
            ),
            block=c.pick((0, 1, 2, 4)),
            durable=durable,
            tiny_cache=c.chance(3),
            slab=c.chance(2),
        )

    @property
    def limits(self) -> Limits:
        return Limits(
            key_compact_items=self.threshold,
            key_cache_bytes=1500 if self.tiny_cache else 64 * 1024 * 1024,
        )

    def windows(self) -> list[tuple[WindowSpec, OWin]]:
        def storage(i: int) -> Storage:
            return Storage(durable=self.durable[i], block_size=self.block, cache_size=self.block)

        ns = self.range_units * UNIT
        out = [
            (
                WindowSpec(
                    STREAM,
                    "cnt",
                    (
                        Aggregation("f", "first", "v"),
                        Aggregation("l", "last", "v"),
                        Aggregation("s", "sum", "v"),
                    ),
                    Policy.count(self.count),
                    self.algorithms[0],
                    storage(0),
                ),
                OWin("cnt", "count", self.count, {"f": "first", "l": "last", "s": "sum"}),
            ),
            (
                WindowSpec(
                    STREAM,
                    "rng",
                    (
                        Aggregation("s", "sum", "v"),
                        Aggregation("n", "count"),
                        Aggregation("mx", "max", "v"),
                    ),
                    Policy.time_range(timedelta(microseconds=self.range_units)),
                    self.algorithms[1],
                    storage(1),
                ),
                OWin("rng", "time", ns, {"s": "sum", "n": "count", "mx": "max"}),
            ),
            (
                WindowSpec(
                    STREAM,
                    "bsum",
                    (
                        Aggregation("s", "sum", "v"),
                        Aggregation("n", "count"),
                        Aggregation("f", "first", "v"),
                    ),
                    Policy.bounded_sum("v", self.bound),
                    self.algorithms[2],
                    storage(2),
                ),
                OWin("bsum", "bsum", self.bound, {"s": "sum", "n": "count", "f": "first"}),
            ),
        ]
        return out[:2] if self.slab else out


@dataclass
class Stats:
    appends: int = 0
    refused: int = 0
    late: int = 0
    resent: int = 0
    reopens: int = 0
    replays: int = 0  # reopens without a flush (durable)
    full_forms: int = 0  # (key, window) pairs seen in the full form
    evictions: int = 0
    deletes: int = 0
    slab_keys: int = 0  # keys checked while in the slab


class Scenario:
    def __init__(self, url: str, cfg: Config) -> None:
        self.url = url
        self.cfg = cfg
        self.prefix = f"kf{uuid.uuid4().hex[:16]}"
        self.oracle = KeyOracle()
        self.wins = cfg.windows()
        self.owins = {o.name: o for _, o in self.wins}
        self.registry = Registry(url, limits=cfg.limits, prefix=self.prefix)
        self.registry.create_stream(
            StreamSpec(
                STREAM,
                (Field("host", "INT64" if cfg.int_keys else "STRING"), Field("v", "DOUBLE")),
                late_policy=cfg.late,
                key="host",
                key_groups=cfg.key_groups,
                wall_clock=False,
            )
        )
        for spec, _ in self.wins:
            self.registry.create_window(spec)
        self.stream = self.registry.stream(STREAM)
        assert (self.stream.slab is not None) == cfg.slab, self.stream.slab_why
        self.keys: list[Any] = (
            [7, -3, 100, 0, 42, 9_000_000_000][: cfg.n_keys]
            if cfg.int_keys
            else ["web-1", "db", "web-10", "a", "é", "web-2"][: cfg.n_keys]
        )
        self.sequence = 0
        self.rows = 0  # rows applied
        # (sequence, columns, rows applied, rows late)
        self.acked: list[tuple[int, dict[str, Any], int, int]] = []
        self.full: set[tuple[str, str]] = set()  # (key, window) seen full: never compact again
        self.clock = T0
        self.stats = Stats()

    def close(self) -> None:
        self.stats.evictions += self.registry.key_cache.evictions
        self.registry.drop(STREAM)
        self.registry.redis.close()
        drop_prefix(self.url, self.prefix)

    # -- steps
    def step(self, c: Chooser) -> None:
        op = c.integer(0, 12)
        if op == 0 and self.acked:
            self.resend(c)
        elif op == 1:
            self.reopen(c)
        elif op == 2:
            self.registry.flush(self.stream, final=c.chance(2))
        elif op == 3 and self.oracle.rows:
            self.delete(c)
        else:
            self.append(c)

    def make_batch(self, c: Chooser) -> tuple[list[Any], list[int], list[float]]:
        r = self.cfg.range_units
        newest: dict[str, int] = {}
        keys, ts, vs = [], [], []
        for _ in range(c.integer(1, 14)):
            key = c.pick(self.keys)
            text = str(key)
            base = newest.get(text) or self.oracle.newest(text) or self.clock
            if c.chance(14) and base > T0:
                t = base - c.pick((1, r)) * UNIT  # late for its key
            else:
                t = base + c.pick((0, 0, 1, 1, 2, 3, r - 1, r, r + 1, 2 * r)) * UNIT
            newest[text] = max(t, newest.get(text, t))
            keys.append(key)
            ts.append(t)
            vs.append(c.integer(0, 32) / 4)  # quarters: every sum exact, in any order
        return keys, ts, vs

    def columns(self, keys: list[Any], ts: list[int], vs: list[float]) -> dict[str, Any]:
        return {
            "ts": ("TIMESTAMP", ts),
            "host": ("INT64" if self.cfg.int_keys else "STRING", keys),
            "v": ("DOUBLE", vs),
        }

    def append(self, c: Chooser) -> None:
        keys, ts, vs = self.make_batch(c)
        texts = [str(k) for k in keys]
        mode = c.pick(("NONE", "NONE", "FINAL", "PER_ROW"))
        names = [o.name for _, o in self.wins]
        which = tuple(n for n in names if c.chance(2)) if mode != "NONE" and c.chance(2) else ()
        # the oracle: which rows apply (the late policy, per key, input order)
        newest = {k: self.oracle.newest(k) for k in set(texts)}
        applied: list[int] = []
        late = 0
        for i, (k, t) in enumerate(zip(texts, ts, strict=True)):
            n = newest[k]
            if n is not None and t < n:
                late += 1
                continue
            newest[k] = t
            applied.append(i)
        self.sequence += 1
        seq = self.sequence
        cols = self.columns(keys, ts, vs)
        before = self.oracle.copy()
        if late and self.cfg.late == "REJECT":
            with pytest.raises(ServiceError) as err:
                self.stream.append(cols, producer_id=PRODUCER, sequence=seq, mode=mode, which=which)
            assert err.value.reason == Reason.OUT_OF_ORDER, err.value
            self.stats.refused += 1
            self.check_all("after a refused batch")
            return
        res = self.stream.append(cols, producer_id=PRODUCER, sequence=seq, mode=mode, which=which)
        self.stats.appends += 1
        self.stats.late += late
        self.rows += len(applied)
        self.acked.append((seq, cols, len(applied), late))
        assert (res.rows_applied, res.rows_late, res.duplicate) == (len(applied), late, False)
        # per-row: each applied row's window after it, in input order
        per_row: dict[str, list[tuple[dict[str, Any], int]]] = {n: [] for n in names}
        for i in applied:
            k = texts[i]
            self.oracle.rows.setdefault(k, []).append((ts[i], vs[i]))
            for n in names:
                per_row[n].append(expected(self.owins[n], self.oracle.rows[k]))
        touched = {texts[i] for i in applied}
        for k in touched:
            self.oracle.batches[k] = self.oracle.batches.get(k, 0) + 1
        if touched:
            self.clock = max(self.clock, max(ts))
        if mode == "PER_ROW":
            assert set(res.row_results) == set(which or names)
            for n in which or names:
                got = res.row_results[n]
                want = per_row[n]
                assert got["__size"][1] == [sz for _, sz in want], (n, got, want)
                for j, (values, _) in enumerate(want):
                    row = {o: got[o][1][j] for o in values}
                    assert close_values(row, values), (n, j, texts[applied[j]], row, values)
        else:
            assert res.row_results == {}
        if mode == "FINAL":
            finals = {(r.window, r.key): r for r in res.key_results}
            assert len(finals) == len(res.key_results)
            assert set(finals) == {(n, k) for n in which or names for k in touched}
            for (n, k), r in finals.items():
                values, size = expected(self.owins[n], self.oracle.rows[k])
                _, size0 = expected(self.owins[n], before.rows.get(k, []))
                added = sum(1 for i in applied if texts[i] == k)
                assert close_values(r.values, values), (n, k, r, values)
                assert (r.size, r.evicted) == (size, size0 + added - size), (n, k, r)
                assert (r.timestamp, r.sequence) == (
                    self.oracle.newest(k),
                    self.oracle.batches[k],
                ), (n, k, r)
        else:
            assert res.key_results == []
        self.check_all(f"after append {seq} ({mode}, which={which})")

    def resend(self, c: Chooser) -> None:
        seq, cols, applied, _ = self.acked[
            c.integer(max(0, len(self.acked) - 4), len(self.acked) - 1)
        ]
        mode = c.pick(("NONE", "FINAL", "PER_ROW"))
        res = self.stream.append(cols, producer_id=PRODUCER, sequence=seq, mode=mode)
        assert res.rows_applied == 0 and res.key_results == [], (seq, res)
        # idempotency is per key group: one that applied none of the batch's rows (all late,
        # DROP) did not record its sequence, and finds them late again
        assert res.duplicate or applied == 0, (seq, res)
        self.stats.resent += 1
        self.check_all(f"after resending {seq}")

    def delete(self, c: Chooser) -> None:
        """DeleteKey: the key is gone (its next row starts it afresh)."""
        key = c.pick(sorted(self.oracle.rows))
        self.stream.delete_key(int(key) if self.cfg.int_keys else key)
        self.oracle.drop(key)
        self.full -= {(key, n) for n in self.owins}
        # a batch with a row dropped as late is not resent after a delete: the key's group may
        # not have recorded its sequence, and the row is no longer late (see
        # test_keyed_service.py::test_a_resent_batch_applies_nothing_after_a_delete)
        self.acked = [a for a in self.acked if a[3] == 0]
        if any(self.cfg.durable):
            # a delete is durable at the next flush only (tests/service/test_keyed_service.py
            # ::test_delete_key_survives_a_crash_of_a_durable_stream): before a "crash" reopen
            self.registry.flush(self.stream)
        self.stats.deletes += 1
        self.check_all(f"after deleting {key!r}")

    def reopen(self, c: Chooser) -> None:
        durable = any(self.cfg.durable)
        how = c.pick(("flush", "release", "crash", "crash") if durable else ("flush", "release"))
        before = self.forms()
        if how == "flush":
            self.registry.flush(self.stream)
            self.registry.drop(STREAM)  # nothing more written: as a process killed after it
        elif how == "release":
            self.registry.release(STREAM)
        else:  # no flush since the last one: every group's journal replays
            self.registry.drop(STREAM)
            self.stats.replays += 1
        self.stats.evictions += self.registry.key_cache.evictions
        self.registry.redis.close()
        self.registry = Registry(self.url, limits=self.cfg.limits, prefix=self.prefix)
        adopted = self.registry.adopt(STREAM)
        assert adopted is not None
        self.stream = adopted
        self.stats.reopens += 1
        self.check_all(f"after a reopen ({how})")
        after = self.forms()
        assert after == before, f"forms changed across a reopen ({how}): {before} -> {after}"

    # -- checks
    def forms(self) -> dict[tuple[str, str], bool]:
        """(key, window) -> full, for every key (a cold key loads)."""
        out = {}
        for k in self.oracle.rows:
            self.stream.query("cnt", k)  # loads it (a key in the slab stays there: compact)
            st_ = self.stream.where[k].hot.get(k)
            for n in self.owins:
                kw = st_.windows.get(n) if st_ is not None else None
                out[(k, n)] = kw is not None and kw.full
        return out

    def check_all(self, when: str) -> None:
        s = self.stream
        for key in self.keys:
            k = str(key)
            rows = self.oracle.rows.get(k)
            if rows is None:
                with pytest.raises(ServiceError) as err:
                    s.query("cnt", key)
                assert err.value.reason == Reason.KEY_NOT_FOUND, (when, k)
                continue
            for n, ow in self.owins.items():
                r = s.query(n, key)
                values, size = expected(ow, rows)
                what = (when, k, n, r, values, size, rows)
                assert close_values(r.values, values) and r.size == size, what
                assert (r.key, r.timestamp) == (k, rows[-1][0]), what
                assert r.sequence == self.oracle.batches[k], what
                st_ = s.where[k].hot.get(k)
                if st_ is None:  # in the slab: at most its rows, compact
                    assert s.slab is not None and k in s.slab, (when, k)
                    assert int(s.slab.n[s.slab.slot[k]]) <= s.slab.capacity, (when, k)
                    self.stats.slab_keys += 1
                kw = st_.windows.get(n) if st_ is not None else None  # empty compact: none
                if kw is not None and kw.full:
                    self.full.add((k, n))
                else:
                    assert (k, n) not in self.full, f"{when}: {k}/{n} went back to compact"
                    assert kw is None or len(kw.items) <= self.cfg.threshold, (when, k, n)
        info = s.info()
        # rows_appended counts every row applied, also those of keys deleted since
        assert (info.keys, info.rows_appended) == (len(self.oracle.rows), self.rows), (when, info)
        self.stats.full_forms = len(self.full)


def run(url: str, c: Chooser, steps: int) -> Stats:
    cfg = Config.draw(c)
    sc = Scenario(url, cfg)
    try:
        for _ in range(steps):
            sc.step(c)
        # the end: one more reopen, then every key once more
        sc.reopen(c)
    finally:
        sc.close()
    return sc.stats


_SETTINGS = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@_SETTINGS
@given(data=st.data())
def test_keyed_windows_equal_the_oracle_across_forms_and_reopens(data: Any) -> None:
    c = HypChooser(data)
    run(shared_redis_url(), c, c.integer(1, 40))


@pytest.mark.parametrize("seeds", [range(0, 9), range(9, 18)])
def test_keyed_forms_seeded(seeds: range) -> None:
    """Longer seeded runs that must reach every path (the Hypothesis runs are short): keys in
    the full form, replays of the journal, key cache evictions, refused batches, late rows
    dropped, resends, deletes."""
    total = Stats()
    for seed in seeds:
        got = run(shared_redis_url(), RandChooser(seed), 40)
        for f in total.__dataclass_fields__:
            setattr(total, f, getattr(total, f) + getattr(got, f))
    assert all(getattr(total, f) > 0 for f in total.__dataclass_fields__), total
