"""AppendStream: one batch sent as pieces (gRPC client streaming), the SDK's way for an Arrow
batch of more than ``calls.STREAM_BYTES``.

Through a real server: the same rows as one AppendStream (pieces of random sizes, through the
SDK and through the raw stub) and as unary Appends into a twin stream give the same per-row
results, the same window state and the same replies (every built-in, windows by count and
time range, in Redis and in memory, a durable one, and one the engine answers); a keyed
stream too. Every way a stream of pieces can be wrong is refused with its reason and changes
nothing (the window's state checked after each); a client that cancels midway applies
nothing; a resend with the same idempotency key is a duplicate; the server stays up.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pyarrow as pa
import pytest

from mtawindows.client import Field, Policy, StreamSpec, WindowClient, WindowSpec, calls
from mtawindows.client.errors import MtaWindowsError, from_rpc_error
from mtawindows.client.rows import _arrow_ipc
from mtawindows.testing import LocalServer
from mtawindows.v1 import windows_pb2 as pb
from mtawindows.v1 import windows_pb2_grpc as pb_grpc

from .test_arrow_results import flatten
from .test_columnar_shadow import WINDOWS
from .test_service_e2e import AGGS, make_stream, random_batch

pytestmark = [pytest.mark.server, pytest.mark.redis]


def table_of(batch: dict[str, list[Any]]) -> pa.Table:
    return pa.table(
        {
            "ts": pa.array(batch["ts"], pa.int64()).cast(pa.timestamp("ns")),
            "x": pa.array(batch["x"], pa.float64()),
            "k": pa.array(batch["k"], pa.int64()),
            "tag": pa.array(batch["tag"], pa.string()),
        }
    )


def pieces(rng: random.Random, table: pa.Table, first: pb.AppendRequest) -> list[pb.AppendRequest]:
    """``table`` as AppendStream messages cut at random rows (empty pieces among them)."""
    cuts = sorted(rng.sample(range(table.num_rows + 1), min(6, table.num_rows + 1)))
    bounds = [0, *cuts, table.num_rows]
    out = []
    for i, (a, b) in enumerate(itertools.pairwise(bounds)):
        m = pb.AppendRequest()
        if i == 0:
            m.CopyFrom(first)
            m.rows = table.num_rows
        m.arrow_ipc = _arrow_ipc(table.slice(a, b - a))
        out.append(m)
    if len(out) > 1:
        out[-1].rows = table.num_rows  # the end mark
    return out


def send(target: str, messages: Iterator[pb.AppendRequest] | list[pb.AppendRequest]) -> Any:
    with grpc.insecure_channel(target) as ch:
        return pb_grpc.WindowServiceStub(ch).AppendStream(iter(messages), timeout=60)


def refused(target: str, messages: Any) -> Any:
    with pytest.raises(grpc.RpcError) as e:
        send(target, messages)
    return from_rpc_error(e.value, target)


def state(c: WindowClient, stream: str) -> dict[str, Any]:
    return {w.spec.name: c.query(stream, w.spec.name).values for w in c.list_windows(stream)}


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[pb.AppendRequest]:
    """The AppendStream messages the SDK sends, as it sends them."""
    out: list[pb.AppendRequest] = []
    real_iter = calls.Pieces.__iter__

    def counting(self: calls.Pieces) -> Iterator[pb.AppendRequest]:
        for m in real_iter(self):
            out.append(m)
            yield m

    monkeypatch.setattr(calls.Pieces, "__iter__", counting)
    return out


def test_pieces_equal_one_append(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sent: list[pb.AppendRequest]
) -> None:
    rng = random.Random(2210)
    monkeypatch.setattr(calls, "STREAM_BYTES", 20_000)
    monkeypatch.setattr(calls, "PIECE_BYTES", 5_000)
    with LocalServer(tmp_path / "d") as srv, srv.client() as c:
        for s in ("unary", "sdk", "raw"):
            make_stream(c, s)
            for name, policy, _pred, storage in WINDOWS:
                c.create_window(WindowSpec(s, name, AGGS, policy, "AMTA", storage))
        t = 0
        for b in range(6):
            batch, t = random_batch(rng, t, rng.choice((1, 40, 900, 2500)))
            table = table_of(batch)
            want = c.append("unary", batch, results="per_row", arrow=True)
            del sent[:]
            got = c.append("sdk", table, results="per_row", arrow=True)
            assert (len(sent) > 1) == (len(_arrow_ipc(table)) > 20_000), b
            first = pb.AppendRequest(stream="raw", results=pb.PER_ROW, arrow_results=True)
            raw = send(srv.target, pieces(rng, table, first))
            assert got.rows_applied == want.rows_applied == raw.rows_applied == table.num_rows
            assert {r.window for r in raw.row_results} == set(want.row_tables)
            for r in raw.row_results:
                mine = pa.ipc.open_stream(pa.py_buffer(r.arrow_ipc)).read_all()
                assert flatten(mine) == flatten(want.row_tables[r.window]), (b, r.window)
            for name, tab in want.row_tables.items():
                assert flatten(got.row_tables[name]) == flatten(tab), (b, name)
            assert state(c, "sdk") == state(c, "unary") == state(c, "raw"), b


def test_a_keyed_stream_in_pieces(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(calls, "STREAM_BYTES", 10_000)
    monkeypatch.setattr(calls, "PIECE_BYTES", 3_000)
    rng = random.Random(7)
    with LocalServer(tmp_path / "d") as srv, srv.client() as c:
        fields = (Field("x", "DOUBLE"), Field("k", "INT64"), Field("tag", "STRING"))
        for s in ("a", "b"):
            c.create_stream(StreamSpec(s, fields, wall_clock=False, key="tag"))
            c.create_window(WindowSpec(s, "w", AGGS[:6], Policy.count(50)))
        batch, _ = random_batch(rng, 0, 3000)
        c.append("a", batch)
        got = c.append("b", table_of(batch))
        assert got.rows_applied == 3000
        keys = [k.key for k in c.list_keys("a").keys]
        assert keys == [k.key for k in c.list_keys("b").keys] and keys
        for key in keys:
            assert c.query("a", "w", key=key).values == c.query("b", "w", key=key).values


def test_wrong_pieces_are_refused_and_change_nothing(tmp_path: Path) -> None:
    rng = random.Random(3)
    with LocalServer(tmp_path / "d", "--max-batch-rows", "5000") as srv, srv.client() as c:
        make_stream(c, "s")
        for name, policy, _pred, storage in WINDOWS:
            c.create_window(WindowSpec("s", name, AGGS, policy, "AMTA", storage))
        batch, t = random_batch(rng, 0, 200)
        c.append("s", batch)
        before = state(c, "s")
        nxt, _ = random_batch(rng, t, 3000)
        good = table_of(nxt)
        head = pb.AppendRequest(stream="s")

        def check(messages: Any, reason: str, words: str) -> None:
            e = refused(srv.target, messages)
            assert e.reason == reason, (e.reason, str(e))
            assert words in str(e), str(e)
            assert state(c, "s") == before

        # a later piece of another schema
        ms = pieces(rng, good, head)
        ms[-1].arrow_ipc = _arrow_ipc(good.drop_columns(["tag"]).slice(0, 5))
        check(ms, "SCHEMA_MISMATCH", "first piece's schema")
        # a later piece that is not Arrow
        ms = pieces(rng, good, head)
        ms[-1].arrow_ipc = b"\x00junk" * 10
        check(ms, "BAD_ARROW", "Arrow IPC")
        # more rows than the first message told
        ms = pieces(rng, good, head)
        ms[0].rows = 100
        check(ms, "INVALID_ARGUMENT", "it told 100")
        # more rows than the server takes in one batch, told or not
        big = pa.concat_tables([good, good])
        check(pieces(rng, big, head), "BATCH_TOO_LARGE", "limit of 5000")
        # rows not told, or fewer rows than told: a stream cut short
        ms = pieces(rng, good, head)
        ms[0].ClearField("rows")
        check(ms, "INVALID_ARGUMENT", "it told 0")
        ms = pieces(rng, good, head)
        check(ms[:-1], "INVALID_ARGUMENT", "nothing was applied")
        e = refused(srv.target, iter([pb.AppendRequest(stream="s", rows=6000)]))
        assert e.reason == "BATCH_TOO_LARGE"
        # a later message with more than rows
        ms = pieces(rng, good, head)
        ms[-1].producer_id = "p"
        check(ms, "INVALID_ARGUMENT", "producer_id")
        # protobuf columns, no message at all
        cols = calls.append_request("s", nxt, c.schema("s"), None, None, "none", ()).columns
        check([pb.AppendRequest(stream="s", columns=cols)], "INVALID_ARGUMENT", "columns")
        check([], "INVALID_ARGUMENT", "no message")
        # a null in a number column of a later piece: Append's own refusal
        holed = good.set_column(1, "x", pa.array([None, *good["x"].to_pylist()[1:]], pa.float64()))
        ms = [*pieces(rng, holed.slice(0, 0), head), pb.AppendRequest(arrow_ipc=_arrow_ipc(holed))]
        ms[0].rows = ms[-1].rows = len(holed)
        e = refused(srv.target, ms)
        unary = calls.append_request("s", holed, None, None, None, "none", ())
        with pytest.raises(Exception) as u:
            c._run(calls.Call("Append", unary, lambda m: m, False, "s"), None)
        assert e.reason == getattr(u.value, "reason", None) and state(c, "s") == before
        # an unknown stream, before any piece is read
        e = refused(srv.target, pieces(rng, good, pb.AppendRequest(stream="nope")))
        assert e.reason == "STREAM_NOT_FOUND"

        # a client that gives up midway: nothing applied
        def stalls() -> Iterator[pb.AppendRequest]:
            ms = pieces(rng, good, head)
            yield ms[0]
            raise RuntimeError("the producer died")

        with pytest.raises(grpc.RpcError):
            send(srv.target, stalls())
        assert state(c, "s") == before
        # every row, but no end mark: half-closed so, or the producer dead before the end
        ms = pieces(rng, good, head)
        ms[-1].ClearField("rows")
        check(ms, "INVALID_ARGUMENT", "without its end mark")

        def dies_before_the_mark() -> Iterator[pb.AppendRequest]:
            yield from ms
            raise RuntimeError("killed after its last rows, before the end mark")

        with pytest.raises(grpc.RpcError):
            send(srv.target, dies_before_the_mark())
        assert state(c, "s") == before
        # an end mark of other rows, a message after the end mark
        ms = pieces(rng, good, head)
        ms[-1].rows = 17
        check(ms, "INVALID_ARGUMENT", "marks its end with rows 17")
        ms = [*pieces(rng, good, head), pb.AppendRequest()]
        check(ms, "INVALID_ARGUMENT", "after its end mark")
        # bytes after the end of a piece's Arrow stream (a second stream, junk): not one stream
        ms = pieces(rng, good, head)
        ms[1].arrow_ipc += _arrow_ipc(good.slice(0, 3))
        check(ms, "BAD_ARROW", "bytes after the end")
        # and the whole batch, once: a resend with its key is a duplicate
        keyed = pb.AppendRequest(stream="s", producer_id="p", sequence=1)
        first = send(srv.target, pieces(rng, good, keyed))
        again = send(srv.target, pieces(rng, good, keyed))
        assert first.rows_applied == 3000 and not first.duplicate and again.duplicate
        assert srv.health() == "SERVING"


def test_edges_as_append_takes_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sent: list[pb.AppendRequest]
) -> None:
    """A batch of 0 rows (one message, or pieces) is acknowledged, as an Append of it is; a
    piece whose columns differ from the first's only in being nullable is taken; bytes after
    the end of a unary Append's Arrow stream are refused; a DataFrame of more than
    STREAM_BYTES goes in pieces too."""
    rng = random.Random(11)
    with LocalServer(tmp_path / "d") as srv, srv.client() as c:
        for s in ("s", "t"):
            make_stream(c, s)
            c.create_window(WindowSpec(s, "w", AGGS, Policy.count(100)))
        batch, t = random_batch(rng, 0, 500)
        table = table_of(batch)
        empty = table.slice(0, 0)
        assert c.append("s", empty).rows_applied == 0
        one = pb.AppendRequest(stream="s", rows=0, arrow_ipc=_arrow_ipc(empty))
        assert send(srv.target, [one]).rows_applied == 0
        two = [one, pb.AppendRequest(arrow_ipc=_arrow_ipc(empty))]
        assert send(srv.target, two).rows_applied == 0
        # nullable or not, the same columns
        strict = pa.schema([f.with_nullable(False) for f in table.schema])
        ms = [
            pb.AppendRequest(stream="s", rows=500, arrow_ipc=_arrow_ipc(table.slice(0, 300))),
            pb.AppendRequest(rows=500, arrow_ipc=_arrow_ipc(table.slice(300).cast(strict))),
        ]
        assert send(srv.target, ms).rows_applied == 500
        # a unary Append of two Arrow streams back to back: refused, nothing applied
        before = state(c, "s")
        doubled = pb.AppendRequest(
            stream="s", arrow_ipc=_arrow_ipc(table_of(random_batch(rng, t, 5)[0])) * 2
        )
        with pytest.raises(MtaWindowsError) as e:
            c._run(calls.Call("Append", doubled, lambda m: m, False, "s"), None)
        assert e.value.reason == "BAD_ARROW" and "bytes after the end" in str(e.value)
        assert state(c, "s") == before
        # a DataFrame as large as an Arrow batch that goes in pieces goes in pieces
        more, _ = random_batch(rng, t, 3000)
        monkeypatch.setattr(calls, "STREAM_BYTES", 20_000)
        monkeypatch.setattr(calls, "PIECE_BYTES", 5_000)
        c.append("t", batch)
        del sent[:]
        got = c.append("t", table_of(more).to_pandas())
        assert got.rows_applied == 3000 and len(sent) > 1
        c.append("s", more)
        assert state(c, "s") == state(c, "t")


def test_the_pieces_bytes_are_bounded_too(tmp_path: Path) -> None:
    """Text columns: rows alone do not bound a batch's bytes; the pieces in all may hold four
    messages' worth (MESSAGE_TOO_LARGE past it, nothing applied)."""

    def fat(t0: int) -> pa.Table:
        n = 10
        return table_of(
            {"ts": list(range(t0, t0 + n)), "x": [1.0] * n, "k": [1] * n, "tag": ["t" * 60_000] * n}
        )

    with LocalServer(tmp_path / "d", "--max-message-mb", "1") as srv, srv.client() as c:
        make_stream(c, "s")
        c.create_window(WindowSpec("s", "w", AGGS, Policy.count(10)))
        c.append("s", {"ts": [0], "x": [1.0], "k": [1], "tag": ["a"]})
        before = state(c, "s")
        ms = [pb.AppendRequest(stream="s", rows=80, arrow_ipc=_arrow_ipc(fat(1)))]
        ms += [pb.AppendRequest(arrow_ipc=_arrow_ipc(fat(1 + 10 * i))) for i in range(1, 8)]
        e = refused(srv.target, ms)
        assert e.reason == "MESSAGE_TOO_LARGE", str(e)
        assert e.metadata["limit_bytes"] == str(4 << 20), e.metadata
        assert state(c, "s") == before
        ok = ms[:3]  # under four messages' worth: taken
        ok[0].rows = ok[-1].rows = 30
        assert send(srv.target, ok).rows_applied == 30
        assert state(c, "s") != before


def test_the_asyncio_client_sends_pieces_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    from mtawindows.client import AsyncWindowClient

    monkeypatch.setattr(calls, "STREAM_BYTES", 10_000)
    monkeypatch.setattr(calls, "PIECE_BYTES", 3_000)
    rng = random.Random(5)
    batch, _ = random_batch(rng, 0, 2000)
    with LocalServer(tmp_path / "d") as srv, srv.client() as c:
        for s in ("a", "b"):
            make_stream(c, s)
            c.create_window(WindowSpec(s, "w", AGGS, Policy.count(300)))
        c.append("a", batch)

        async def go() -> Any:
            async with AsyncWindowClient(srv.target) as ac:
                return await ac.append("b", table_of(batch), producer_id="p", sequence=1)

        got = asyncio.run(go())
        assert got.rows_applied == 2000 and not got.duplicate
        assert state(c, "a") == state(c, "b")
