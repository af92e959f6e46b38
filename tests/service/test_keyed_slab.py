"""The slab (server/service/keyed/slab.py) against a naive model, batch after batch: every
key's rows (all it ever took, in order) with each window's policy applied naively. After each
batch, for every key still in the slab: the rows it holds are exactly the newest rows its
longest-reaching window holds, each window's reach (``keep_of``) is the model's, its counters
are the model's, and ``evicted`` per window is what that batch took out of the window; a key
that would hold more than ``capacity`` rows leaves with exactly the model's rows; a stored
record reads back as the same rows. Timestamps with ties, gaps, bursts, many keys per batch,
several rows of a key per batch, and values at the int64 ends."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mtawindows.server.service import Registry
from mtawindows.server.service.keyed import stream as keyed_stream
from mtawindows.server.service.keyed.slab import KeySlab, Reach, rows_of_record
from mtawindows.server.service.limits import Limits
from mtawindows.server.service.refusals import ServiceError
from mtawindows.server.storage.codecs import packb_each, unpackb
from mtawindows.testing import shared_redis_url
from mtawindows.v1.types import Aggregation, Field, Policy, Storage, StreamSpec, WindowSpec
from tests.support.keyed_oracle import KeyOracle, OWin, close_values, drop_prefix, expected

I64 = np.iinfo(np.int64)
COLUMNS = {"ts": np.dtype("<i8"), "v": np.dtype("<f8"), "n": np.dtype("<i8")}
TYPES = {"ts": "TIMESTAMP", "v": "DOUBLE", "n": "INT64"}


def naive_keep(reach: Reach, ts: list[int]) -> int:
    """How many of the key's newest rows (``ts``: every row it took, oldest first) the window
    holds: Algorithm 2 with the policy tested on the oldest rows."""
    if not ts:
        return 0
    if reach.count is not None:
        return min(reach.count, len(ts))
    newest = ts[-1]
    assert reach.range is not None
    return sum(1 for t in ts if not newest - t >= reach.range)


@st.composite
def scenario(draw: Any) -> tuple[list[Reach], int, list[list[tuple[str, int, float, int]]]]:
    reaches = []
    for i in range(draw(st.integers(1, 3))):
        if draw(st.booleans()):
            reaches.append(Reach(f"w{i}", draw(st.integers(0, 9)), None))
        else:
            reaches.append(Reach(f"w{i}", None, draw(st.sampled_from([1, 2, 5, 10, 2**62, 2**64]))))
    capacity = draw(st.integers(1, 12))
    keys = [f"k{i}" for i in range(draw(st.integers(1, 12)))]
    low = draw(st.sampled_from([0, int(I64.min), int(I64.max) - 10_000]))
    newest: dict[str, int] = {}
    batches = []
    for _ in range(draw(st.integers(1, 12))):
        rows = []
        for _ in range(draw(st.integers(1, 30))):
            k = draw(st.sampled_from(keys))
            t = newest.get(k, low) + draw(st.sampled_from([0, 0, 1, 2, 3, 7, 20]))
            newest[k] = t
            v = draw(st.floats(allow_nan=False, allow_infinity=False, width=64))
            rows.append((k, t, v, draw(st.integers(int(I64.min), int(I64.max)))))
        batches.append(rows)
    return reaches, capacity, batches


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario())
def test_the_slab_holds_what_each_window_reaches(case: Any) -> None:
    reaches, capacity, batches = case
    slab = KeySlab(reaches, COLUMNS, capacity)
    table = object()
    model: dict[str, list[tuple[int, float, int]]] = {}  # every row a key took
    objects: set[str] = set()  # keys that left the slab (the caller's objects from then on)
    now = 0
    for rows in batches:
        now += 1
        order: dict[str, list[int]] = {}
        for i, (k, *_rest) in enumerate(rows):
            if k not in objects:
                order.setdefault(k, []).append(i)
        if not order:
            continue
        keys = list(order)
        cols = {
            "ts": np.array([r[1] for r in rows], dtype=np.int64),
            "v": np.array([r[2] for r in rows], dtype=np.float64),
            "n": np.array([r[3] for r in rows], dtype=np.int64),
        }
        before = {k: [r[0] for r in model.get(k, [])] for k in keys}
        out = slab.apply(keys, [table] * len(keys), list(order.values()), cols, now)
        for k, idx in order.items():
            model.setdefault(k, []).extend((rows[i][1], rows[i][2], rows[i][3]) for i in idx)
        left = {keys[i]: (counters, held, evicted) for i, counters, held, evicted, _ in out}
        for k in keys:
            ts = [r[0] for r in model[k]]
            want_keep = {r.name: naive_keep(r, ts) for r in reaches}
            want_evicted = {
                r.name: naive_keep(r, before[k]) + len(order[k]) - want_keep[r.name]
                for r in reaches
            }
            longest = max(want_keep.values())
            newest_rows = model[k][len(model[k]) - longest :]
            if k in left:
                counters, held, evicted = left[k]
                assert longest > capacity, (k, longest, capacity)
                assert counters is None or counters[1] == len(ts) - len(order[k])
                assert held["ts"].tolist() == [r[0] for r in newest_rows]
                assert held["v"].tolist() == [r[1] for r in newest_rows]
                assert held["n"].tolist() == [r[2] for r in newest_rows]
                assert evicted == want_evicted, (k, evicted, want_evicted)
                assert k not in slab
                objects.add(k)
                continue
            assert longest <= capacity
            counters, held, evicted = slab.peek(k)
            assert counters == (
                ts[-1],
                len(ts),
                0,
                now,
                sum(1 for b in batches[:now] if any(r[0] == k for r in b)),
            )
            assert held["ts"].tolist() == [r[0] for r in newest_rows], (k, held, newest_rows)
            assert held["v"].tolist() == [r[1] for r in newest_rows]
            assert held["n"].tolist() == [r[2] for r in newest_rows]
            assert evicted == want_evicted, (k, evicted, want_evicted)
            n = np.array([len(newest_rows)])
            got_keep = slab.keep_of(n, np.array([[r[0] for r in newest_rows] or [0]]))
            assert {w: int(a[0]) for w, a in got_keep.items()} == want_keep
        # a stored record reads back as the same rows and reaches
        held_keys = sorted(slab.slot)
        # the packed values are msgpack of the records, byte for byte
        assert slab.blobs(held_keys) == packb_each(slab.records(held_keys))
        # and as an HSET's field-value pairs on the wire: each key's name, then its value
        slots = slab.slots_of(held_keys)
        assert read_pairs(*slab.fields_at(slots)) == [
            (k.encode(), b) for k, b in zip(held_keys, slab.blobs(held_keys), strict=True)
        ]
        # every key this batch applied is marked changed
        assert all(slab.dirty[slab.slot[k]] for k in keys if k in slab)
        slab.dirty[:] = False
        for k, rec in zip(held_keys, slab.records(held_keys), strict=True):
            got = unpackb(slab.blobs([k])[0])
            assert list(got[:5]) == rec[:5]
            back = rows_of_record(got[6], "ts", TYPES)
            _c, held, _e = slab.peek(k)
            for c in COLUMNS:
                assert back[c].tolist() == held[c].tolist()
            ts = [r[0] for r in model[k]]
            assert {w: f[1] for w, f in dict(got[5]).items()} == {
                r.name: naive_keep(r, ts) for r in reaches
            }
    assert len(slab) + len(objects) == len(model)


def read_pairs(view: Any, ends: np.ndarray) -> list[tuple[bytes, bytes]]:
    """RESP bulk strings two by two (a name and a value), each pair ending at ``ends``."""
    data = bytes(view)
    out: list[tuple[bytes, bytes]] = []
    p = 0
    for end in ends.tolist():
        pair = []
        for _ in range(2):
            assert data[p : p + 1] == b"$"
            eol = data.index(b"\r\n", p)
            n = int(data[p + 1 : eol])
            pair.append(data[eol + 2 : eol + 2 + n])
            assert data[eol + 2 + n : eol + 4 + n] == b"\r\n"
            p = eol + 4 + n
        assert p == end
        out.append((pair[0], pair[1]))
    assert p == len(data)
    return out


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.text(min_size=1, max_size=40), min_size=1, max_size=60, unique=True),
    st.randoms(use_true_random=False),
)
def test_key_names_on_the_wire_survive_removals_and_the_pool_compacting(
    names: list[str], rnd: Any
) -> None:
    """Keys added and removed at random, many times over (the names' pool fills with gone
    keys' names and compacts): every key held is written under its own name, in UTF-8."""
    slab = KeySlab([Reach("w", 3, None)], COLUMNS, 4)
    slab._kpool = np.zeros(64, dtype=np.uint8)  # small: it grows and compacts often
    held: set[str] = set()
    t = 0
    for _ in range(40):
        add = [k for k in names if k not in held and rnd.random() < 0.5]
        for k in [k for k in held if rnd.random() < 0.4]:
            assert slab.remove(k)
            held.discard(k)
        if add:
            t += 1
            cols = {
                "ts": np.full(len(add), t, dtype=np.int64),
                "v": np.arange(len(add), dtype=np.float64),
                "n": np.arange(len(add), dtype=np.int64),
            }
            slab.apply(add, [None] * len(add), [[i] for i in range(len(add))], cols, t)
            held.update(add)
        keys = sorted(held)
        if keys:
            assert read_pairs(*slab.fields_at(slab.slots_of(keys))) == [
                (k.encode(), b) for k, b in zip(keys, slab.blobs(keys), strict=True)
            ]
    assert slab._kused - slab._kdead == sum(len(k.encode()) for k in held)


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.text(min_size=1, max_size=24), min_size=1, max_size=80, unique=True),
    st.randoms(use_true_random=False),
    st.booleans(),
)
def test_keys_are_found_by_their_bytes_as_by_their_names(
    names: list[str], rnd: Any, large: bool
) -> None:
    """``KeySlab.find`` over a string column's Arrow buffers (string or large_string, a slice
    of a longer array: an offset into its buffers) gives each key's slot as the name -> slot
    dict does, -1 for keys not held, while keys come and go (the table fills with gone keys,
    grows and is rebuilt)."""
    import pyarrow as pa

    from mtawindows.server.service.columns import KeyBytes

    class Small(KeySlab):
        ht_min = 8  # the table fills, is rebuilt, and holds gone keys' entries at once

    slab = Small([Reach("w", 3, None)], COLUMNS, 4)
    held: set[str] = set()
    t = 0
    for _ in range(30):
        for k in [k for k in held if rnd.random() < 0.3]:
            assert slab.remove(k)
            held.discard(k)
        add = [k for k in names if k not in held and rnd.random() < 0.4]
        if add:
            t += 1
            cols = {
                "ts": np.full(len(add), t, dtype=np.int64),
                "v": np.zeros(len(add), dtype=np.float64),
                "n": np.zeros(len(add), dtype=np.int64),
            }
            slab.apply(add, [None] * len(add), [[i] for i in range(len(add))], cols, t)
            held.update(add)
        probe = [rnd.choice(names) for _ in range(rnd.randint(1, 40))] + ["never-a-key"]
        arr = pa.array(["pad", *probe], pa.large_string() if large else pa.string())[1:]
        kb = KeyBytes(arr)
        assert kb.tolist() == probe and len(kb) == len(probe)
        assert slab.find(kb.offsets, kb.data).tolist() == [slab.slot.get(k, -1) for k in probe]
        # the table never more than 60% full of keys and gone keys' entries: rebuilt before
        assert 5 * slab._ht_used <= 3 * len(slab._ht)


def test_slots_are_reused_and_the_arrays_grow() -> None:
    """Keys past the first allocation grow the arrays (their rows kept); a removed key's slot
    goes to the next new key, which starts empty."""
    slab = KeySlab([Reach("w", 3, None)], COLUMNS, 4)
    n = 3000
    keys = [f"k{i}" for i in range(n)]
    cols = {
        "ts": np.arange(n, dtype=np.int64),
        "v": np.arange(n, dtype=np.float64),
        "n": np.arange(n, dtype=np.int64),
    }
    assert slab.apply(keys, [None] * n, [[i] for i in range(n)], cols, 1) == []
    assert slab.size >= n and len(slab) == n
    for i in (0, 1500, 2999):
        assert slab.peek(keys[i])[1]["v"].tolist() == [float(i)]
    assert slab.remove("k7")
    slab.apply(["new"], [None], [[5]], cols, 2)
    counters, held, _ = slab.peek("new")
    assert counters == (5, 1, 0, 2, 1) and held["n"].tolist() == [5]


# -- a keyed stream whose windows allow the slab, on Redis


def _stream(url: str, prefix: str, limits: Any = None) -> Any:

    return Registry(url, limits=limits or Limits(key_compact_items=8), prefix=prefix)


def _keyed(groups: int, aggs: tuple[Aggregation, ...]) -> tuple[str, str, Any, Any]:
    """A registry on the shared Redis under a prefix of its own, with a keyed stream ``s``
    (``host`` key, ``v``) of ``groups`` key groups and one window ``w`` (``aggs`` over the
    last 5 rows): (url, prefix, registry, stream)."""
    url = shared_redis_url()
    prefix = f"ks{uuid.uuid4().hex[:12]}"
    reg = _stream(url, prefix)
    reg.create_stream(
        StreamSpec("s", (Field("host", "STRING"), Field("v", "DOUBLE")), key="host", key_groups=groups, wall_clock=False)
    )  # fmt: skip
    reg.create_window(WindowSpec("s", "w", aggs, Policy.count(5)))
    return url, prefix, reg, reg.stream("s")


@pytest.mark.redis
def test_keys_come_back_into_the_slab_after_a_restart_and_an_eviction() -> None:
    """A restart (flush, new registry) and a key cache too small for every key: the keys
    stored from the slab load back into it on their next row (not as objects), and every
    key's windows answer as the oracle says throughout; a key read by Query stays in the slab;
    one that outgrows it becomes an object and stays one."""

    url = shared_redis_url()
    prefix = f"ks{uuid.uuid4().hex[:12]}"
    wins = [
        (
            WindowSpec("s", "cnt", (Aggregation("f", "first", "v"), Aggregation("s", "sum", "v")), Policy.count(4)),
            OWin("cnt", "count", 4, {"f": "first", "s": "sum"}),
        ),
        (
            WindowSpec("s", "rng", (Aggregation("mx", "max", "v"), Aggregation("n", "count")), Policy.time_range(timedelta(microseconds=5))),
            OWin("rng", "time", 5000, {"mx": "max", "n": "count"}),
        ),
    ]  # fmt: skip
    reg = _stream(url, prefix)
    reg.create_stream(
        StreamSpec(
            "s", (Field("host", "STRING"), Field("v", "DOUBLE")), key="host", wall_clock=False
        )
    )
    for spec, _ in wins:
        reg.create_window(spec)
    s = reg.stream("s")
    oracle = KeyOracle()
    keys = [f"h{i:03d}" for i in range(300)]
    t = 1_000_000

    def append(batch_keys: list[str]) -> None:
        nonlocal t
        t += 1000
        vs = [float(len(k) + i % 7) for i, k in enumerate(batch_keys)]
        ts = [t] * len(batch_keys)
        s.append({"ts": ("TIMESTAMP", ts), "host": ("STRING", batch_keys), "v": ("DOUBLE", vs)})
        oracle.add_batch(batch_keys, ts, vs)

    def check() -> None:
        for k in keys[::7]:
            for spec, ow in wins:
                r = s.query(spec.name, k)
                values, size = expected(ow, oracle.rows[k])
                assert close_values(r.values, values) and r.size == size, (k, spec.name, r, values)

    try:
        for _ in range(3):
            append(keys)
        assert s.slab is not None and len(s.slab) == len(keys)
        check()
        assert len(s.slab) == len(keys)  # reads leave them in the slab
        reg.flush(s)
        reg.drop("s")
        reg.redis.close()
        # a cache for about a third of the keys: the slab's clean keys leave memory too
        reg = _stream(url, prefix, Limits(key_compact_items=8, key_cache_bytes=80_000))
        s = reg.adopt("s")
        assert s is not None and len(s.slab) == 0
        append(keys[:50])
        assert len(s.slab) == 50 and not any(t_.hot for t_ in s.groups.values())
        for _ in range(3):
            append(keys)
            reg.flush(s)
            append(keys[:20])  # past the budget: the clean keys of the slab leave memory
            assert len(s.slab) < len(keys)
        assert reg.key_cache.evictions > 0
        assert not any(t_.hot for t_ in s.groups.values())  # none became an object
        check()
        for _ in range(9):  # one key outgrows the slab: 9 rows in 5 us for the time window
            t += 500
            s.append(
                {"ts": ("TIMESTAMP", [t]), "host": ("STRING", ["h000"]), "v": ("DOUBLE", [1.0])}
            )
            oracle.add_batch(["h000"], [t], [1.0])
        table = s.where["h000"]
        assert "h000" not in s.slab and ("h000" in table.hot or "h000" in table.packed)
        append(keys)
        assert "h000" not in s.slab  # an object (in memory or only in Redis) for good
        check()
    finally:
        reg.drop("s")
        reg.redis.close()
        drop_prefix(url, prefix)


@pytest.mark.redis
def test_a_window_deleted_and_created_again_holds_none_of_the_old_rows() -> None:
    """Keys in the slab when their window is deleted and created again under its name (and
    when a window is added): the new window holds only the rows after it, for keys still in
    memory and for keys reloaded from Redis; the other window keeps its rows."""

    url = shared_redis_url()
    prefix = f"ks{uuid.uuid4().hex[:12]}"
    reg = _stream(url, prefix)
    spec = StreamSpec(
        "s", (Field("host", "STRING"), Field("v", "DOUBLE")), key="host", wall_clock=False
    )
    reg.create_stream(spec)
    total = lambda n: WindowSpec("s", n, (Aggregation("t", "sum", "v"),), Policy.count(10))  # noqa: E731
    reg.create_window(total("a"))
    reg.create_window(total("b"))
    s = reg.stream("s")
    keys = [f"h{i}" for i in range(40)]

    def append(t: int, v: float) -> None:
        s.append(
            {"ts": ("TIMESTAMP", [t] * 40), "host": ("STRING", keys), "v": ("DOUBLE", [v] * 40)}
        )

    try:
        append(1, 1.0)
        assert len(s.slab) == 40
        reg.flush(s)
        reg.delete_window("s", "a")
        reg.create_window(total("a"))
        reg.create_window(total("c"))
        append(2, 10.0)
        for k in keys:
            assert s.query("a", k).values["t"] == 10.0
            assert s.query("b", k).values["t"] == 11.0
            assert s.query("c", k).values["t"] == 10.0
        reg.flush(s)
        reg.drop("s")
        reg.redis.close()
        reg = _stream(url, prefix)
        s = reg.adopt("s")
        append(3, 100.0)
        for k in keys[::5]:
            assert [s.query(w, k).values["t"] for w in "abc"] == [110.0, 111.0, 110.0]
    finally:
        reg.drop("s")
        reg.redis.close()
        drop_prefix(url, prefix)


@pytest.mark.redis
def test_keys_reloaded_into_the_slab_keep_their_newest_for_the_late_rule() -> None:
    """Thousands of keys reloaded into the slab by one batch after a restart (the slab grows
    its arrays meanwhile): a row older than its key's newest is refused under REJECT, dropped
    under DROP, and the others apply."""

    url = shared_redis_url()
    keys = [f"h{i:05d}" for i in range(3000)]

    def cols(ts: list[int]) -> dict[str, Any]:
        return {"ts": ("TIMESTAMP", ts), "host": ("STRING", keys), "v": ("DOUBLE", [1.0] * len(keys))}  # fmt: skip

    for late in ("REJECT", "DROP"):
        prefix = f"ks{uuid.uuid4().hex[:12]}"
        reg = _stream(url, prefix)
        reg.create_stream(
            StreamSpec("s", (Field("host", "STRING"), Field("v", "DOUBLE")), key="host", late_policy=late, wall_clock=False)
        )  # fmt: skip
        reg.create_window(WindowSpec("s", "w", (Aggregation("n", "count"),), Policy.count(5)))
        try:
            reg.stream("s").append(cols([100] * len(keys)))
            reg.flush(reg.stream("s"))
            reg.drop("s")
            reg.redis.close()
            reg = _stream(url, prefix)
            s = reg.adopt("s")
            ts = [200] * len(keys)
            ts[-1] = 50  # the last key's row is older than its newest
            if late == "REJECT":
                with pytest.raises(ServiceError) as err:
                    s.append(cols(ts))
                assert err.value.reason == "OUT_OF_ORDER", err.value
                assert s.query("w", keys[0]).values["n"] == 1  # nothing applied
            else:
                res = s.append(cols(ts))
                assert (res.rows_applied, res.rows_late) == (len(keys) - 1, 1)
                assert s.query("w", keys[-1]).values["n"] == 1
                assert s.query("w", keys[0]).values["n"] == 2
            assert len(s.slab) == len(keys)
        finally:
            reg.drop("s")
            reg.redis.close()
            drop_prefix(url, prefix)


@pytest.mark.redis
def test_a_periodic_flush_takes_whole_groups_in_turn_up_to_its_key_budget(monkeypatch: Any) -> None:
    """More dirty keys than one periodic flush takes (``FLUSH_KEYS``): each flush writes whole
    groups, about that many keys, starting where the last one stopped; a few flushes write
    every group, and a restart finds every key as it was."""

    monkeypatch.setattr(keyed_stream, "FLUSH_KEYS", 60)
    url, prefix, reg, s = _keyed(16, (Aggregation("t", "sum", "v"),))
    keys = [f"h{i:04d}" for i in range(400)]
    try:
        s.append({"ts": ("TIMESTAMP", [1] * 400), "host": ("STRING", keys), "v": ("DOUBLE", [float(i) for i in range(400)])})  # fmt: skip
        seen: list[set[int]] = []
        while True:
            writes = s.flush_begin()
            if writes is None:
                break
            groups = {job.table.group for job in writes.jobs}
            sizes = [
                len(job.dirty) + len(job.slots if job.slots is not None else ())
                for job in writes.jobs
            ]
            written, biggest = sum(sizes), max(sizes)
            assert written <= 60 + biggest, (written, biggest)  # whole groups, about the budget
            writes.run()
            seen.append(groups)
            assert len(seen) <= 16
        assert len(seen) > 1 and set().union(*seen) == set(range(16))
        assert sum(len(g) for g in seen) == 16  # each group once
        reg.drop("s")
        reg.redis.close()
        reg = _stream(url, prefix)
        s = reg.adopt("s")
        for i in range(0, 400, 37):
            assert s.query("w", keys[i]).values["t"] == float(i)
    finally:
        reg.drop("s")
        reg.redis.close()
        drop_prefix(url, prefix)


@pytest.mark.redis
def test_keys_of_a_flush_not_written_are_written_by_the_next() -> None:
    """A flush prepared and then not written (its writes abandoned, as when Redis fails them:
    the keys marked changed again, their marks in the slab taken): the next flush writes
    those keys too (found through the group's changed keys), with the rows appended
    meanwhile, and a restart finds every key as it was."""
    url, prefix, reg, s = _keyed(8, (Aggregation("t", "sum", "v"), Aggregation("n", "count")))
    keys = [f"h{i:04d}-ü" for i in range(300)]
    sums = dict.fromkeys(keys, 0.0)
    try:

        def append(part: list[str], t: int) -> None:
            vs = [float(i % 13 + t) for i in range(len(part))]
            s.append({"ts": ("TIMESTAMP", [t] * len(part)), "host": ("STRING", part), "v": ("DOUBLE", vs)})  # fmt: skip
            for k, v in zip(part, vs, strict=True):
                sums[k] += v

        append(keys, 1)
        writes = s.flush_begin()
        assert writes is not None
        assert not s.slab.dirty.any()  # the marks were taken by the flush
        writes.abandon()
        append(keys[::3], 2)  # some of them change again meanwhile
        while (writes := s.flush_begin()) is not None:
            writes.run()
        reg.drop("s")
        reg.redis.close()
        reg = _stream(url, prefix)
        s = reg.adopt("s")
        for k in keys:
            got = s.query("w", k).values
            assert got["t"] == sums[k] and got["n"] == (2 if k in keys[::3] else 1), k
    finally:
        reg.drop("s")
        reg.redis.close()
        drop_prefix(url, prefix)


@pytest.mark.redis
def test_a_key_leaving_the_slab_keeps_its_change_and_its_write() -> None:
    """The slab marks its keys changed (and being written) by slot: a key that leaves it for
    its object form while changed, or while a flush writes it, is changed as an object (a
    write that then fails leaves it to the next flush); a key being written is not evicted
    from memory; a restart finds every key as appended."""
    url, prefix, reg, s = _keyed(2, (Aggregation("t", "sum", "v"),))
    keys = [f"h{i}" for i in range(20)]
    try:
        s.append({"ts": ("TIMESTAMP", [1] * 20), "host": ("STRING", keys), "v": ("DOUBLE", [1.0] * 20)})  # fmt: skip
        with s.lock:
            changed = s.changed_keys(s.where["h0"].group)
            assert "h0" in changed and "h0" not in s.where["h0"].dirty  # marked in the slab
            s._unslab(s.where["h0"], "h0")  # changed: an object now, still changed
            assert "h0" not in s.slab and "h0" in s.where["h0"].dirty
            writes = s.flush_begin()
            assert writes is not None
            slot = s.slab.slot["h1"]
            assert s.slab.inflight[slot] and not s.slab.dirty[slot]
            assert s._evict_slab(s.slab) == 0  # every key being written stays
            s._unslab(s.where["h1"], "h1")  # being written: an object, changed
            assert "h1" in s.where["h1"].dirty
        writes.abandon()  # the write failed: all of them changed again, once settled
        # (the end of a flush runs on the flush thread: it leaves the slab's arrays, which
        # appends may grow meanwhile, to the next holder of the lock)
        assert s.slab.inflight.any()
        with s.lock:
            s._settle()
        assert not s.slab.inflight.any()
        assert all(k in s.changed_keys(s.where[k].group) for k in keys)
        s.flush()
        assert not any(s.changed_keys(g) for g in s.groups)
        reg.drop("s")
        reg.redis.close()
        reg = _stream(url, prefix)
        s = reg.adopt("s")
        for k in keys:
            assert s.query("w", k).values["t"] == 1.0, k
    finally:
        reg.drop("s")
        reg.redis.close()
        drop_prefix(url, prefix)


@pytest.mark.redis
@pytest.mark.parametrize("change", ["create", "delete"])
def test_keys_changed_when_the_windows_change_are_written(change: str) -> None:
    """A window made or deleted while slab keys are changed (unwritten) or being written:
    the slab is made again for the new windows and its keys leave it packed, still changed;
    the next flushes write them, and a restart finds every key as appended."""
    url, prefix, reg, s = _keyed(4, (Aggregation("t", "sum", "v"),))
    keys = [f"h{i}" for i in range(30)]
    try:

        def append(t: int) -> None:
            s.append({"ts": ("TIMESTAMP", [t] * 30), "host": ("STRING", keys), "v": ("DOUBLE", [1.0] * 30)})  # fmt: skip

        if change == "delete":
            reg.create_window(WindowSpec("s", "w2", (Aggregation("n", "count"),), Policy.count(3)))
        append(1)
        reg.flush(s)
        append(2)  # changed, not written
        with s.lock:
            writes = s.flush_begin()  # half of them being written ...
        assert writes is not None
        append(3)
        if change == "create":  # ... when the windows change
            reg.create_window(WindowSpec("s", "w2", (Aggregation("n", "count"),), Policy.count(3)))
        else:
            reg.delete_window("s", "w2")
        writes.abandon()  # and that write fails
        reg.flush(s)
        reg.drop("s")
        reg.redis.close()
        reg = _stream(url, prefix)
        s = reg.adopt("s")
        for k in keys:
            assert s.query("w", k).values["t"] == 3.0, k
    finally:
        reg.drop("s")
        reg.redis.close()
        drop_prefix(url, prefix)


# -- the slab's array path of an append (KeyedStream._append_slab) against the key-by-key one


def _summing(url: str, prefix: str) -> tuple[Any, Any]:
    """A registry and its keyed stream ``s`` (``host`` key), window ``w``: the sum of ``v``
    over the last 20 rows (a key of 9 rows outgrows the slab: it holds 8)."""
    reg = _stream(url, prefix, Limits(key_compact_items=8))
    reg.create_stream(
        StreamSpec(
            "s", (Field("host", "STRING"), Field("v", "DOUBLE")), key="host", wall_clock=False
        )
    )
    reg.create_window(WindowSpec("s", "w", (Aggregation("t", "sum", "v"),), Policy.count(20)))
    return reg, reg.stream("s")


@st.composite
def ingest(draw: Any) -> tuple[str, bool, bool, list[list[tuple[str, int, float]]]]:
    """Batches of rows (key, timestamp, value): keys repeated within a batch, ties, gaps,
    and (sometimes) rows older than their key's newest or than the key's previous row."""
    late_policy = draw(st.sampled_from(["REJECT", "DROP"]))
    producer = draw(st.booleans())
    durable = draw(st.booleans())
    keys = [f"k{i}" for i in range(draw(st.integers(1, 40)))]
    newest: dict[str, int] = {}
    batches = []
    for _ in range(draw(st.integers(1, 10))):
        rows = []
        for _ in range(draw(st.integers(1, 60))):
            k = draw(st.sampled_from(keys))
            step = draw(
                st.sampled_from([0, 1, 1, 2, 5, 40, 1000] + [-3] * (draw(st.integers(0, 1))))
            )
            t = max(newest.get(k, 10_000) + step, 0)
            newest[k] = max(newest.get(k, 0), t)
            rows.append((k, t, draw(st.floats(-1e6, 1e6, allow_nan=False))))
        batches.append(rows)
    return late_policy, producer, durable, batches


def _fields(info: Any) -> Any:
    return (info.key, info.group, info.rows_appended, info.rows_late, info.newest_timestamp)


@pytest.mark.redis
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ingest())
def test_the_array_path_of_an_append_is_the_key_by_key_path(case: Any) -> None:
    """Two streams alike, one taking its batches through the slab's array path and one
    through the key-by-key path: after every batch (applied, refused, partly late, a
    duplicate) each result, each key's counters and windows, each group's counters and the
    slab's content are the same; and again after a flush and a reload, or (durable windows)
    after a crash: no flush, the groups' journals replayed."""
    late_policy, producer, durable, batches = case
    url = shared_redis_url()
    prefix = f"ks{uuid.uuid4().hex[:12]}"
    reg = _stream(url, prefix, Limits(key_compact_items=8))
    windows = [
        (Policy.count(3), (Aggregation("f", "first", "v"), Aggregation("s", "sum", "v"))),
        (Policy.time_range(timedelta(microseconds=5)), (Aggregation("m", "max", "v"), Aggregation("n", "count"))),
    ]  # fmt: skip
    names = ("fast", "slow")
    try:
        for name in names:
            reg.create_stream(
                StreamSpec(
                    name,
                    (Field("host", "STRING"), Field("v", "DOUBLE")),
                    key="host",
                    wall_clock=False,
                    late_policy=late_policy,
                    key_groups=8,
                )
            )
            for i, (policy, aggs) in enumerate(windows):
                reg.create_window(
                    WindowSpec(name, f"w{i}", aggs, policy, storage=Storage(durable=durable))
                )
        fast, slow = reg.stream("fast"), reg.stream("slow")
        assert fast.slab is not None
        slow._append_slab = lambda *_a: None  # type: ignore[method-assign]

        def same() -> None:
            for s in (fast, slow):
                assert s.slab is not None
            assert sorted(fast.slab.slot) == sorted(slow.slab.slot)
            keys, _ = fast.list_keys("", 1000, "")
            keys_slow, _ = slow.list_keys("", 1000, "")
            assert [_fields(k) for k in keys] == [_fields(k) for k in keys_slow]
            for k in keys:
                a, b = fast.get_key(k.key), slow.get_key(k.key)
                assert _fields(a) == _fields(b)
                for w in a.results:
                    ra, rb = a.results[w], b.results[w]
                    assert (ra.values, ra.size, ra.evicted) == (rb.values, rb.size, rb.evicted), (
                        k.key,
                        w,
                    )
            for g in range(8):
                ga, gb = fast.groups[g].state, slow.groups[g].state
                assert (ga.lsn, ga.rows, ga.late, ga.batches, ga.duplicates, ga.newest) == (
                    gb.lsn, gb.rows, gb.late, gb.batches, gb.duplicates, gb.newest
                )  # fmt: skip
                assert fast.changed_keys(g) == slow.changed_keys(g)

        for b, rows in enumerate(batches):
            cols = {
                "ts": ("TIMESTAMP", [r[1] for r in rows]),
                "host": ("STRING", [r[0] for r in rows]),
                "v": ("DOUBLE", [r[2] for r in rows]),
            }
            for again in range(1 + producer):  # with a producer: each batch twice
                kw = {"producer_id": "p", "sequence": b + 1} if producer else {}
                got = []
                for s in (fast, slow):
                    try:
                        r = s.append(cols, **kw)
                        got.append((r.rows_applied, r.rows_late, r.duplicate))
                    except ServiceError as ex:
                        got.append((ex.code, ex.reason, str(ex)))
                assert got[0] == got[1], (b, again)
                same()
        if not durable:  # (durable: a crash, nothing flushed)
            reg.flush(fast)
            reg.flush(slow)
        for name in names:
            reg.drop(name)
        fast, slow = reg.adopt("fast"), reg.adopt("slow")
        slow._append_slab = lambda *_a: None  # type: ignore[method-assign]
        last = max(r[1] for rows in batches for r in rows) + 1
        keys = sorted({r[0] for rows in batches for r in rows})
        cols = {
            "ts": ("TIMESTAMP", [last] * len(keys)),
            "host": ("STRING", keys),
            "v": ("DOUBLE", [1.0] * len(keys)),
        }
        assert fast.append(cols).rows_applied == slow.append(cols).rows_applied
        same()
    finally:
        for name in names:
            reg.drop(name)
        reg.redis.close()
        drop_prefix(url, prefix)


@pytest.mark.redis
def test_the_array_path_takes_the_common_batches_and_leaves_the_others() -> None:
    """The array path takes batches of new keys and of keys in the slab (several rows of a
    key, in order, ties); it leaves to the key-by-key path, unchanged, a batch with a late
    row, a row out of order within its key, a key held as an object, a duplicate."""
    url = shared_redis_url()
    prefix = f"ks{uuid.uuid4().hex[:12]}"
    reg, s = _summing(url, prefix)
    try:

        def cols(keys: list[str], ts: list[int]) -> list[list[Any]]:
            return [ts, keys, [1.0] * len(keys)]

        def arrays(keys: list[str], ts: list[int], **kw: Any) -> Any:
            with s.lock:
                c = cols(keys, ts)
                columns = {
                    "ts": ("TIMESTAMP", c[0]),
                    "host": ("STRING", c[1]),
                    "v": ("DOUBLE", c[2]),
                }
                return s._append_slab(c, kw.get("p", ""), kw.get("q", 0), True, columns)

        got = arrays(["a", "b", "a", "c", "a"], [5, 5, 6, 1, 6])
        assert got is not None and got.rows_applied == 5
        assert s.slab.counters_of("a")[:2] == (6, 3)
        assert s.get_key("a").results["w"].values == {"t": 3.0}
        got = arrays(["c", "b", "b"], [1, 7, 8], p="x", q=1)
        assert got is not None and got.rows_applied == 3
        state = {g: (t.state.lsn, t.state.rows) for g, t in s.groups.items()}
        for keys, ts, kw in (
            (["a", "d"], [5, 9], {}),  # a row older than a's newest
            (["d", "d"], [9, 8], {}),  # out of order within d
            (["b"], [9], {"p": "x", "q": 1}),  # a duplicate
        ):
            assert arrays(keys, ts, **kw) is None
            assert {g: (t.state.lsn, t.state.rows) for g, t in s.groups.items()} == state
            assert "d" not in s.slab and "d" not in s.where
        s.append(
            {
                "ts": ("TIMESTAMP", [10] * 9),
                "host": ("STRING", ["e"] * 9),
                "v": ("DOUBLE", [1.0] * 9),
            }
        )
        assert "e" not in s.slab  # 9 rows at one time: more than the slab holds
        assert arrays(["e", "a"], [11, 11]) is None
        assert arrays(["a"], [11]) is not None
    finally:
        reg.drop("s")
        reg.redis.close()
        drop_prefix(url, prefix)


@pytest.mark.redis
def test_a_group_reopened_while_the_batch_is_served_loses_no_row() -> None:
    """On a cluster, serving a batch's groups may close one and open it again (its lease
    lost and taken back): the slots read before are stale then. The batch still lands whole,
    in the reopened group's keys (loaded from Redis)."""
    url = shared_redis_url()
    prefix = f"ks{uuid.uuid4().hex[:12]}"
    reg, s = _summing(url, prefix)
    try:
        keys = [f"h{i}" for i in range(50)]

        def append(t: int) -> None:
            s.append(
                {
                    "ts": ("TIMESTAMP", [t] * 50),
                    "host": ("STRING", keys),
                    "v": ("DOUBLE", [1.0] * 50),
                }
            )

        append(1)
        reg.flush(s)
        g = s.where["h0"].group
        calls = []

        def serve(groups: Any) -> None:  # the first time: group g lost and taken back
            calls.append(set(groups))
            if len(calls) == 1:
                s.close_group(g, flush=True)
                s.open_group(g, None)

        s.serve = serve
        append(2)
        assert len(calls) >= 1 and g in calls[0]
        s.serve = None
        for k in keys:
            info = s.get_key(k)
            assert info.rows_appended == 2 and info.results["w"].values == {"t": 2.0}, k
        assert all(isinstance(k, str) for t in s.groups.values() for k in t.index)
        assert all(isinstance(k, str) for t in s.groups.values() for k in t.dirty)
    finally:
        reg.drop("s")
        reg.redis.close()
        drop_prefix(url, prefix)
