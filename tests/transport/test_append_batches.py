"""AppendBatches: batches one after another over one call, pipelined (the SDK's
``append_batches``).

Through a real server: the same batches through ``append_batches`` and one ``append`` at a
time into a twin stream give the same answers, per-row results and window state (every
built-in, windows by count and time range, in Redis and in memory, a durable one and one the
engine answers; Arrow and protobuf batches; a batch too large for one message among them; a
keyed stream); a batch refused in the middle ends the call after the answers of the batches
before it, applied, and nothing after (its index named); a batch naming another stream is
refused; a server stopping ends an idle call at once instead of waiting its grace; a server
that stops answering times the call out; a token-protected server refuses it without one.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pyarrow as pa
import pytest

from mtawindows.client import (
    AsyncWindowClient,
    Field,
    Policy,
    StreamSpec,
    WindowClient,
    WindowSpec,
    calls,
)
from mtawindows.client.errors import (
    DeadlineExceededError,
    InvalidArgumentError,
    MessageTooLargeError,
    ResourceExhaustedError,
    UnauthenticatedError,
    from_rpc_error,
)
from mtawindows.client.rows import _arrow_ipc
from mtawindows.testing import LocalServer
from mtawindows.v1 import windows_pb2 as pb
from mtawindows.v1 import windows_pb2_grpc as pb_grpc

from .test_append_stream import state, table_of
from .test_arrow_results import flatten
from .test_columnar_shadow import WINDOWS
from .test_service_e2e import AGGS, make_stream, random_batch

pytestmark = [pytest.mark.server, pytest.mark.redis]


def _windows(c: WindowClient, *streams: str) -> None:
    for s in streams:
        make_stream(c, s)
        for name, policy, _pred, storage in WINDOWS:
            c.create_window(WindowSpec(s, name, AGGS, policy, "AMTA", storage))


def _same_answer(got: Any, want: Any, where: Any) -> None:
    assert (got.rows_applied, got.rows_late, got.duplicate) == (
        want.rows_applied,
        want.rows_late,
        want.duplicate,
    ), where
    assert got.results == want.results, where
    assert got.row_results == want.row_results, where
    assert set(got.row_tables) == set(want.row_tables), where
    for name, table in want.row_tables.items():
        assert flatten(got.row_tables[name]) == flatten(table), (where, name)


@pytest.mark.parametrize("results", ["per_row", "final", "none"])
def test_batches_answer_as_appends_one_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, results: str
) -> None:
    monkeypatch.setattr(calls, "STREAM_BYTES", 60_000)  # a batch over it goes alone, in pieces
    rng = random.Random(["per_row", "final", "none"].index(results))
    with LocalServer(tmp_path / "d") as srv, srv.client() as c:
        _windows(c, "one", "piped")
        t = 0
        batches = []
        for i in range(24):
            batch, t = random_batch(rng, t, 2500 if i == 12 else rng.choice((0, 1, 7, 300, 2500)))
            batches.append(table_of(batch) if rng.random() < 0.5 else batch)
        if not isinstance(batches[12], pa.Table):  # one too large for one message
            batches[12] = table_of(batches[12])
        assert any(len(_arrow_ipc(b)) > 60_000 for b in batches if isinstance(b, pa.Table))
        arrow = results == "per_row" and rng.random() < 0.5
        want = [c.append("one", b, results=results, arrow=arrow) for b in batches]
        got = list(c.append_batches("piped", batches, results=results, arrow=arrow, in_flight=3))
        assert len(got) == len(want)
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            _same_answer(g, w, i)
        assert state(c, "piped") == state(c, "one")
        assert c.get_stream("piped").rows_appended == c.get_stream("one").rows_appended


def test_a_generator_of_batches_in_any_pipeline_depth(tmp_path: Path) -> None:
    """Batches made as they are pulled (a generator), every ``in_flight`` from 1 to more
    than the batches: the same answers in the same order."""
    rng = random.Random(11)
    with LocalServer(tmp_path / "d") as srv, srv.client() as c:
        made: list[dict[str, list[Any]]] = []
        t = 0
        for _ in range(12):
            batch, t = random_batch(rng, t, rng.randint(1, 400))
            made.append(batch)
        _windows(c, "one")
        want = [c.append("one", b, results="per_row") for b in made]
        for depth in (1, 2, 5, 50):
            name = f"p{depth}"
            _windows(c, name)
            pulled = []

            def source(pulled: list[int] = pulled) -> Iterator[dict[str, list[Any]]]:
                for i, b in enumerate(made):
                    pulled.append(i)
                    yield b

            got = c.append_batches(name, source(), results="per_row", in_flight=depth)
            assert pulled == []  # nothing pulled before the first answer is asked for
            for i, (g, w) in enumerate(zip(got, want, strict=True)):
                _same_answer(g, w, (depth, i))
            assert pulled == list(range(len(made)))
            assert state(c, name) == state(c, "one")


def test_a_keyed_stream(tmp_path: Path) -> None:
    rng = random.Random(5)
    with LocalServer(tmp_path / "d") as srv, srv.client() as c:
        fields = (Field("x", "DOUBLE"), Field("k", "INT64"), Field("tag", "STRING"))
        for s in ("a", "b"):
            c.create_stream(StreamSpec(s, fields, wall_clock=False, key="tag"))
            c.create_window(WindowSpec(s, "w", AGGS[:6], Policy.count(50)))
        t = 0
        batches = []
        for _ in range(8):
            batch, t = random_batch(rng, t, rng.randint(1, 500))
            batches.append(batch)
        want = [c.append("a", b, results="final") for b in batches]
        got = list(c.append_batches("b", batches, results="final"))
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            _same_answer(g, w, i)
        keys = [k.key for k in c.list_keys("a").keys]
        assert keys == [k.key for k in c.list_keys("b").keys] and keys
        for key in keys:
            assert c.query("a", "w", key=key).values == c.query("b", "w", key=key).values


def test_a_refused_batch_ends_the_call_after_the_batches_before_it(tmp_path: Path) -> None:
    rng = random.Random(9)
    with LocalServer(tmp_path / "d") as srv, srv.client() as c:
        _windows(c, "one", "piped")
        t = 0
        batches: list[Any] = []
        for _ in range(8):
            batch, t = random_batch(rng, t, rng.randint(50, 500))
            batches.append(batch)
        batches[3] = table_of(batches[3]).drop_columns(["x"])
        for b in batches[:3]:
            c.append("one", b, results="per_row")
        got: list[Any] = []
        with pytest.raises(InvalidArgumentError) as e:
            for r in c.append_batches("piped", batches, results="per_row", in_flight=6):
                got.append(r)  # noqa: PERF402 (it raises part-way)
        assert len(got) == 3 and all(r.rows_applied > 0 for r in got)
        assert e.value.reason == "SCHEMA_MISMATCH", str(e.value)
        assert e.value.metadata["batch"] == "3"
        assert "batch 3 of the AppendBatches call" in str(e.value)
        assert state(c, "piped") == state(c, "one")  # nothing of batch 3 or after
        assert c.get_stream("piped").rows_appended == c.get_stream("one").rows_appended
        # rows the client cannot encode: raised at their turn, the batches before applied
        batches[3] = {"ts": [10**12], "x": ["not a number"], "k": [1], "tag": ["a"]}
        with pytest.raises((TypeError, ValueError)) as bad:
            list(c.append_batches("piped", [batches[4], batches[3]], results="none"))
        assert "append_batches: batch 1 of the batches given" in "".join(bad.value.__notes__)
        c.append("one", batches[4])
        assert state(c, "piped") == state(c, "one")
        # the server is up, and the call carries on from there
        assert len(list(c.append_batches("piped", batches[5:]))) == 3
        for b in batches[5:]:
            c.append("one", b)
        assert state(c, "piped") == state(c, "one")


def test_every_batch_names_the_first_ones_stream(tmp_path: Path) -> None:
    with LocalServer(tmp_path / "d") as srv, srv.client() as c:
        for s in ("s", "t"):
            make_stream(c, s)
            c.create_window(WindowSpec(s, "w", AGGS[:2], Policy.count(5)))
        schema = c.schema("s")

        def batch(stream: str, t: int) -> pb.AppendRequest:
            rows = {"ts": [t], "x": [1.0], "k": [1], "tag": ["a"]}
            return calls.append_request(stream, rows, schema, None, None, "final", ())

        with grpc.insecure_channel(srv.target) as ch:
            answers = pb_grpc.WindowServiceStub(ch).AppendBatches(
                iter([batch("s", 1), batch("s", 2), batch("t", 3), batch("s", 4)]), timeout=60
            )
            got = []
            with pytest.raises(grpc.RpcError) as e:
                for a in answers:
                    got.append(a.rows_applied)  # noqa: PERF401 (it raises part-way)
        err = from_rpc_error(e.value, srv.target)
        assert got == [1, 1]
        assert err.reason == "INVALID_ARGUMENT" and err.metadata["batch"] == "2"
        assert "names the first one's stream ('s')" in str(err) and "'t'" in str(err)
        assert c.query("s", "w")["n"] == 2 and c.query("t", "w")["n"] == 0


def test_arguments_are_refused_before_anything_is_sent(tmp_path: Path) -> None:
    with LocalServer(tmp_path / "d") as srv, srv.client() as c:
        make_stream(c, "s")
        rows = [{"ts": [1], "x": [1.0], "k": [1], "tag": ["a"]}]
        for kw, word in (
            ({"in_flight": 0}, "in_flight"),
            ({"in_flight": True}, "in_flight"),
            ({"results": "all"}, "results"),
            ({"arrow": True, "results": "final"}, "arrow"),
            ({"producer_id": "p", "start_sequence": 0}, "start_sequence"),
        ):
            with pytest.raises(ValueError, match=word):
                c.append_batches("s", rows, **kw)
        assert c.get_stream("s").rows_appended == 0


def test_a_stopping_server_ends_an_idle_call_at_once(tmp_path: Path) -> None:
    """A producer keeps its call open between batches; a SIGTERM'd server ends the call
    (SERVER_STOPPING, naming the next batch) instead of waiting its whole grace for it, and
    the batches answered before are there after a restart."""
    srv = LocalServer(tmp_path / "d", "--grace", "100").start()
    try:
        with srv.client() as c:
            make_stream(c, "s")
            c.create_window(WindowSpec("s", "w", AGGS[:2], Policy.count(100)))
            schema = c.schema("s")
        go_on = threading.Event()

        def batches() -> Iterator[pb.AppendRequest]:
            for t in (1, 2):
                rows = {"ts": [t], "x": [1.0], "k": [1], "tag": ["a"]}
                yield calls.append_request("s", rows, schema, None, None, "none", ())
            go_on.wait(120)  # the producer has nothing to send for now

        with grpc.insecure_channel(srv.target) as ch:
            answers = pb_grpc.WindowServiceStub(ch).AppendBatches(batches(), timeout=300)
            assert [next(answers).rows_applied for _ in range(2)] == [1, 1]
            t0 = time.monotonic()
            assert srv.stop(timeout=100) == 0
            assert time.monotonic() - t0 < 50  # far under the grace (not a timing claim)
            with pytest.raises(grpc.RpcError) as e:
                next(answers)
            go_on.set()
        err = from_rpc_error(e.value, srv.target)
        assert (err.reason, err.metadata.get("batch")) == ("SERVER_STOPPING", "2"), str(err)
        srv.start()
        with srv.client() as c:
            assert c.query("s", "w")["n"] == 2
    finally:
        srv.stop()


def test_a_server_that_stops_answering_times_the_call_out(tmp_path: Path) -> None:
    """A server alive but silent (SIGSTOP): the batch's answer does not come within the
    timeout, the call is cancelled (DEADLINE_EXCEEDED, naming the batch); once it answers
    again, the stream is whole: the batches answered, and at most the unanswered ones."""
    # (pings far apart: the timeout, not the keepalive, ends the call)
    with LocalServer(tmp_path / "d") as srv, srv.client(keepalive_ms=30_000) as c:
        make_stream(c, "s")
        c.create_window(WindowSpec("s", "w", AGGS[:2], Policy.count(10_000)))
        rows = [{"ts": [t], "x": [1.0], "k": [1], "tag": ["a"]} for t in range(1, 40)]
        answered = 0
        with pytest.raises(DeadlineExceededError) as e:
            for _ in c.append_batches("s", iter(rows), timeout=1.0, in_flight=2):
                answered += 1
                if answered == 5:
                    os.kill(srv.pid, signal.SIGSTOP)
        try:
            assert answered == 5
            assert e.value.metadata["batch"] == "5"
            assert "within 1 s" in str(e.value)
        finally:
            os.kill(srv.pid, signal.SIGCONT)
        n = c.query("s", "w")["n"]
        assert 5 <= n <= 7  # the two sent and unanswered may have been applied


def test_a_token_is_needed(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("s3cret-token\n")
    with LocalServer(tmp_path / "d", "--tokens-file", str(tokens)) as srv:
        with WindowClient(srv.target, token="s3cret-token") as c:
            make_stream(c, "s")
            c.create_window(WindowSpec("s", "w", AGGS[:2], Policy.count(10)))
            schema = c.schema("s")
        rows = {"ts": [1], "x": [1.0], "k": [1], "tag": ["a"]}
        req = calls.append_request("s", rows, schema, None, None, "none", ())
        with grpc.insecure_channel(srv.target) as ch, pytest.raises(grpc.RpcError) as e:
            list(pb_grpc.WindowServiceStub(ch).AppendBatches(iter([req]), timeout=30))
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with WindowClient(srv.target, token="wrong") as c, pytest.raises(UnauthenticatedError):
            list(c.append_batches("s", [rows]))
        with WindowClient(srv.target, token="s3cret-token") as c:
            assert [r.rows_applied for r in c.append_batches("s", [rows])] == [1]
            assert c.query("s", "w")["n"] == 1


def test_a_refusal_is_raised_while_the_producer_has_nothing_to_send(tmp_path: Path) -> None:
    """The producer's generator waits for its next batch (its source is idle) when the
    server refuses an earlier one: the error comes at once, not when the producer next has
    a batch."""
    with LocalServer(tmp_path / "d") as srv, srv.client() as c:
        make_stream(c, "s")
        c.create_window(WindowSpec("s", "w", AGGS[:2], Policy.count(100)))
        idle = threading.Event()
        resumed = threading.Event()

        def batches() -> Iterator[Any]:
            yield {"ts": [1], "x": [1.0], "k": [1], "tag": ["a"]}
            yield pa.table({"ts": pa.array([2], pa.int64()).cast(pa.timestamp("ns"))})
            idle.wait(120)  # nothing more to send for now
            resumed.set()
            yield {"ts": [3], "x": [1.0], "k": [1], "tag": ["a"]}

        got = []
        with pytest.raises(InvalidArgumentError) as e:
            for r in c.append_batches("s", batches()):
                got.append(r.rows_applied)  # noqa: PERF401 (it raises part-way)
        assert not resumed.is_set()  # raised while the producer still waits
        idle.set()
        assert got == [1] and e.value.metadata["batch"] == "1"
        assert c.query("s", "w")["n"] == 1


def test_the_asyncio_client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``AsyncWindowClient.append_batches``: an async generator of batches (a large one among
    them, sent alone), the same answers and state as appends one at a time; a refused batch
    raised after the answers before it; a silent server timed out; arguments refused."""
    monkeypatch.setattr(calls, "STREAM_BYTES", 60_000)
    rng = random.Random(77)
    batches: list[Any] = []
    t = 0
    for _ in range(14):
        batch, t = random_batch(rng, t, rng.choice((1, 40, 300, 2500)))
        batches.append(table_of(batch) if rng.random() < 0.5 else batch)
    with LocalServer(tmp_path / "d") as srv, srv.client() as c:
        _windows(c, "one", "piped", "bad")
        want = [c.append("one", b, results="per_row", arrow=True) for b in batches]

        async def go() -> tuple[list[Any], list[Any], BaseException | None]:
            async with AsyncWindowClient(srv.target) as ac:
                with pytest.raises(ValueError, match="in_flight"):
                    ac.append_batches("piped", batches, in_flight=0)

                async def source() -> Any:
                    for b in batches:
                        await asyncio.sleep(0)
                        yield b

                got = [
                    r
                    async for r in ac.append_batches(
                        "piped", source(), results="per_row", arrow=True, in_flight=3
                    )
                ]
                wrong = [*batches[:2], table_of(random_batch(rng, t, 5)[0]).drop_columns(["x"])]
                answered: list[Any] = []
                err: BaseException | None = None
                try:
                    async for r in ac.append_batches("bad", wrong + batches[2:4]):
                        answered.append(r)  # noqa: PERF401 (it raises part-way)
                except InvalidArgumentError as ex:
                    err = ex
                return got, answered, err

        got, answered, err = asyncio.run(go())
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            _same_answer(g, w, i)
        assert state(c, "piped") == state(c, "one")
        assert len(answered) == 2 and err is not None
        assert isinstance(err, InvalidArgumentError) and err.metadata["batch"] == "2"
        assert c.get_stream("bad").rows_appended == sum(r.rows_applied for r in answered)

        async def silent() -> tuple[int, BaseException | None]:
            rows = [{"ts": [10**15 + i], "x": [1.0], "k": [1], "tag": ["a"]} for i in range(30)]
            n = 0
            # (pings far apart: the timeout, not the keepalive, ends the call)
            async with AsyncWindowClient(srv.target, keepalive_ms=30_000) as ac:
                try:
                    async for _ in ac.append_batches("bad", rows, timeout=1.0, in_flight=2):
                        n += 1
                        if n == 3:
                            os.kill(srv.pid, signal.SIGSTOP)
                except DeadlineExceededError as ex:
                    return n, ex
                finally:
                    os.kill(srv.pid, signal.SIGCONT)
            return n, None

        n, timed = asyncio.run(silent())
        assert n == 3 and isinstance(timed, DeadlineExceededError), timed
        assert timed.metadata["batch"] == "3" and "within 1 s" in str(timed)


def test_sizes_past_the_limits(tmp_path: Path) -> None:
    """A batch over the client's message limit: MessageTooLargeError before it is sent, as
    append raises it, naming the batch; per-row results over the server's limit: the batch
    was applied (its error says so, and not that nothing of it was), none after it."""
    with LocalServer(tmp_path / "d", "--max-message-mb", "1") as srv, srv.client() as c:
        make_stream(c, "s")
        c.create_window(WindowSpec("s", "w", AGGS, Policy.count(100)))
        rng = random.Random(4)
        t = 0
        small, t = random_batch(rng, t, 10)
        large, t = random_batch(rng, t, 20_000)  # per-row results of 14 outputs: > 1 MB
        after, t = random_batch(rng, t, 10)
        got: list[Any] = []
        with pytest.raises(ResourceExhaustedError) as e:
            for r in c.append_batches("s", [small, large, after], results="per_row"):
                got.append(r)  # noqa: PERF402 (it raises part-way)
        assert len(got) == 1
        err = e.value
        assert err.reason == "MESSAGE_TOO_LARGE", str(err)
        assert (err.metadata["batch"], err.metadata.get("applied")) == ("1", "true")
        assert "it and the batches before it were applied, none after it" in str(err)
        assert c.get_stream("s").rows_appended == 20_010
    with LocalServer(tmp_path / "e") as srv, srv.client(max_message_bytes=100_000) as c:
        make_stream(c, "s")
        c.create_window(WindowSpec("s", "w", AGGS[:2], Policy.count(100)))
        small, t = random_batch(rng, 0, 10)
        large, t = random_batch(rng, t, 20_000)  # protobuf columns: ~500 kB
        with pytest.raises(MessageTooLargeError) as too:
            list(c.append_batches("s", [small, large]))
        assert too.value.metadata["batch"] == "1" and "max_message_bytes" in str(too.value)
        assert c.get_stream("s").rows_appended == 10
