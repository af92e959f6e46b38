"""A keyed stream's stored key values (keyed/table.py) stay as they were written before the
flush packed them together (``KeyState.record`` + ``packb_each``): the same bytes for every
window form, so values in Redis from earlier versions load, and new ones load in them."""

from __future__ import annotations

from typing import Any

import pytest

from mtawindows.server.service.keyed.table import INLINE, GroupTable, KeyState
from mtawindows.server.service.keyed.window import KeyWindow
from mtawindows.server.storage.codecs import CodecError, packb, packb_each
from mtawindows.server.storage.journal import StreamJournal
from mtawindows.server.storage.keys import GroupKeys


def old_pack(st: KeyState, packers: dict[str, Any]) -> bytes:
    """The value as KeyState.pack wrote it before (the reference format)."""
    ws: dict[str, Any] = {}
    for name, kw in st.windows.items():
        if kw.engine is not None:
            ws[name] = ["f", kw.lsn, kw.wid]
        elif kw.items or kw.hop is not None or kw.hop_state is not None:
            packer = packers[name]
            if packer is INLINE:
                ws[name] = ["i", kw.items]
            else:
                ws[name] = ["c", packer(kw.items)]
        else:
            continue
        if kw.hop is not None or kw.hop_state is not None:
            hop = kw.hop.state() if kw.hop is not None else kw.hop_state
            ws[name] += [None] * (3 - len(ws[name])) + [hop]
    return packb([st.newest, st.rows, st.late, st.touched, st.batches, ws])


class FakeEngine:
    stale = False


def a_state() -> tuple[KeyState, dict[str, Any]]:
    st = KeyState("k")
    st.newest, st.rows, st.late, st.touched, st.batches = 10**12, 7, 1, 1_700_000_000_000, 3
    st.windows["inline"] = KeyWindow([(1, 2.5, 2.5, 10**12), (1, 3.0, 3.0, 10**12 + 1)])
    st.windows["codec"] = KeyWindow([(1, 2.0)])
    st.windows["empty"] = KeyWindow()
    hopping = KeyWindow([(2, 1.0)])
    hopping.hop_state = [5, 2, None]
    st.windows["hopping"] = hopping
    big = KeyWindow([(1, 2**70)])  # an int beyond 64 bits: msgpack's extension
    st.windows["big"] = big
    full = KeyWindow()
    full.engine, full.wid, full.lsn = FakeEngine(), "k:abc", 42
    st.windows["full"] = full
    packers: dict[str, Any] = {n: INLINE for n in st.windows}
    packers["codec"] = lambda items: repr(items).encode()
    return st, packers


def test_a_keys_value_is_the_same_bytes_as_before() -> None:
    st, packers = a_state()
    assert st.pack(packers) == old_pack(st, packers)
    assert packb_each([st.record(packers), st.record(packers)]) == [old_pack(st, packers)] * 2
    back = KeyState.unpack("k", st.pack(packers), {n: (lambda b: b) for n in packers})
    assert back.windows["inline"].items == st.windows["inline"].items
    assert back.windows["full"].wid == "k:abc" and back.windows["full"].lsn == 42
    assert back.windows["hopping"].hop_state == (5, 2, None)
    assert KeyState.tree_ids(st.pack(packers)) == ["k:abc"]


def test_packb_each_is_packb_of_each_and_recovers_from_a_failure() -> None:
    objs = [[1, 2.0, "x"], {"a": (2**65, 1)}, [], [10**12]]
    assert packb_each(objs) == [packb(o) for o in objs]
    with pytest.raises(CodecError):
        packb_each([[1], object()])
    assert packb_each(objs) == [packb(o) for o in objs]  # no half-written buffer left


def test_flush_ops_checkpoint_a_full_key_before_its_value_names_the_lsn() -> None:
    keys = GroupKeys.of("p", "s", 0)
    table = GroupTable(0, keys, StreamJournal(None, "p", "s", keys=(keys.journal, keys.state)))
    st, packers = a_state()
    plain = KeyState("plain")
    plain.windows["inline"] = KeyWindow([(1, 1.0, 1.0, 5)])
    table.hot = {"k": st, "plain": plain}
    table.packed = {"cold": b"stored"}
    table.dirty = {"k", "plain", "cold"}
    seen: list[str] = []

    def full(s: KeyState) -> None:  # the flush's checkpoint: the lsn it takes
        seen.append(s.key)
        s.windows["full"].lsn = 43

    (op,) = table.flush_ops(packers, False, full)
    assert seen == ["k"]
    assert op[0] == "HSET" and op[1] == keys.keys
    fields = dict(zip(op[2][0::2], op[2][1::2], strict=True))
    assert fields["cold"] == b"stored"
    assert fields["plain"] == old_pack(plain, packers)
    assert fields["k"] == old_pack(st, packers)
    assert KeyState.unpack("k", fields["k"], {"full": INLINE}).windows["full"].lsn == 43
