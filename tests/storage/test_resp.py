"""Pre-packed command arguments (server/storage/resp.py) against redis-py and a real Redis:
our encoding of a command is byte for byte redis-py's (hiredis's) for random arguments; a
pipeline holding :class:`Packed` arguments among plain commands gets every reply as redis-py
reads it (errors as ``ResponseError`` objects, in place); the values written read back;
a fenced write (``fenced``) with Packed arguments is refused whole by a newer token, and
applied whole otherwise, through a pipeline and on its own; a Redis Cluster node's pipeline
takes them too; a transaction pipeline refuses them (nothing sent). Fenced writes together
(``fenced_together``: WATCH the fences, MULTI/EXEC, no script) are applied when every fence
holds its token, and nothing is written when one does not, or when one changes between the
WATCH and the EXEC; an error of one write's command leaves the others applied; a connection
killed midway leaves the pool sound (no WATCH left behind)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st
from redis.connection import HiredisRespSerializer, PythonRespSerializer

from mtawindows.server.storage.connect import connect, pipeline_on_key_node
from mtawindows.server.storage.fencing import Fence, FencedError, fenced, fenced_together
from mtawindows.server.storage.resp import (
    Packed,
    PackedPipeline,
    arg_count,
    bulk,
    bulk_view,
    encode_command,
    encode_parts,
    packed_chunks,
)
from mtawindows.testing import shared_redis_url

pytestmark = [pytest.mark.redis]

ARG = st.one_of(
    st.binary(max_size=300),
    st.text(max_size=60),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
)


def _redis_py(args: list[Any]) -> bytes:
    """A command as redis-py packs it (its hiredis serializer, and its Python one)."""
    hi = b"".join(HiredisRespSerializer().pack(*args))
    enc = redis.Redis().get_encoder()
    py = b"".join(PythonRespSerializer(6000, enc.encode).pack(*args))
    assert hi == py
    return hi


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["HSET", "SET", "EVALSHA"]), st.lists(ARG, max_size=12))
def test_a_command_is_encoded_as_redis_py_encodes_it(name: str, args: list[Any]) -> None:
    assert encode_command([name, *args]) == _redis_py([name, *args])


@settings(max_examples=200, deadline=None)
@given(st.lists(ARG, max_size=10), st.lists(ARG, max_size=10), st.lists(ARG, max_size=10))
def test_packed_arguments_are_the_plain_ones_on_the_wire(
    a: list[Any], b: list[Any], c: list[Any]
) -> None:
    mid = Packed(len(b), b"".join(bulk(x) for x in b))
    assert arg_count([*a, mid, *c]) == len(a) + len(b) + len(c)
    assert encode_command(["HSET", *a, mid, *c]) == _redis_py(["HSET", *a, *b, *c])


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=70_000), st.lists(ARG, max_size=4))
def test_a_buffer_sent_as_it_is_is_the_plain_argument_on_the_wire(
    value: bytes, rest: list[Any]
) -> None:
    """:func:`bulk_view` of a buffer (a pyarrow Buffer, as a columnar slice's value) is the
    bytes argument redis-py would send, its data a view of the buffer (large: not copied)."""
    import pyarrow as pa

    buf = pa.py_buffer(value)
    view = bulk_view(buf)
    assert len(view) == len(bulk(value))
    assert encode_command(["SET", "k", view, *rest]) == _redis_py(["SET", "k", value, *rest])
    pieces = encode_parts(["SET", "k", view])
    if len(value) >= 16_384:  # sent from the buffer itself
        assert any(isinstance(p, memoryview) and p.obj is not None for p in pieces)


def test_a_large_buffer_written_fenced_reads_back() -> None:
    import pyarrow as pa

    r = _client()
    tag = uuid.uuid4().hex
    k, f = f"{{{tag}}}:slice", f"{{{tag}}}:fence"
    r.set(f, 3)
    value = bytes(range(256)) * 9_000  # 2.3 MB, as 32 slices of a columnar window
    with pytest.raises(FencedError):
        fenced(r, Fence(f, 2), [("SET", k, (bulk_view(pa.py_buffer(value)),))])
    assert not r.exists(k)
    fenced(
        r, Fence(f, 3), [("SET", k, (bulk_view(pa.py_buffer(value)),)), ("SET", f"{k}2", ("x",))]
    )
    assert r.get(k) == value and r.get(f"{k}2") == b"x"


def test_packed_chunks_cut_at_pair_ends() -> None:
    pairs = [bulk(f"k{i}") + bulk(b"v" * i) for i in range(7)]
    data = b"".join(pairs)
    ends = []
    at = 0
    for p in pairs:
        at += len(p)
        ends.append(at)
    import numpy as np

    chunks = packed_chunks(data, np.array(ends), 3)
    assert [c.n for c in chunks] == [6, 6, 2]
    assert b"".join(c.data for c in chunks) == data
    assert chunks[1].data == b"".join(pairs[3:6])


def _client() -> Any:
    return connect(shared_redis_url())


def _fields(n: int) -> tuple[dict[bytes, bytes], Packed]:
    fields = {f"k{i}-é".encode(): bytes([i % 256]) * (i % 17) for i in range(n)}
    return fields, Packed(2 * n, b"".join(bulk(k) + bulk(v) for k, v in fields.items()))


def test_a_pipeline_sends_packed_arguments_among_plain_commands() -> None:
    r = _client()
    h = f"resp:{uuid.uuid4().hex}"
    fields, packed = _fields(500)
    p = pipeline_on_key_node(r, h)
    assert isinstance(p, PackedPipeline)
    p.execute_command("SET", h + ":a", "x")
    p.execute_command("HSET", h, packed)
    p.execute_command("LPUSH", h, "wrong type")  # an error, in its place
    p.execute_command("HLEN", h)
    replies = p.execute(raise_on_error=False)
    assert replies[0] is True and replies[1] == 500 and replies[3] == 500
    assert isinstance(replies[2], redis.ResponseError) and "WRONGTYPE" in str(replies[2])
    assert r.hgetall(h) == fields
    p = pipeline_on_key_node(r, h)
    p.execute_command("HSET", h, packed)
    p.execute_command("LPUSH", h, "wrong type")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        p.execute()  # raise_on_error: the first error raised, as redis-py does
    # a pipeline without Packed arguments goes through redis-py unchanged
    p = pipeline_on_key_node(r, h)
    p.execute_command("HGET", h, b"k3-\xc3\xa9")
    assert p.execute() == [fields[b"k3-\xc3\xa9"]]


def test_a_transaction_pipeline_refuses_packed_arguments() -> None:
    r = _client()
    h = f"resp:{uuid.uuid4().hex}"
    _, packed = _fields(3)
    p = PackedPipeline(r.connection_pool, r.response_callbacks, True, None)
    p.execute_command("HSET", h, packed)
    with pytest.raises(TypeError, match="non-transactional"):
        p.execute()
    assert not r.exists(h)


@pytest.mark.parametrize("through", ["pipeline", "alone"])
def test_a_fenced_write_with_packed_arguments_is_all_or_nothing(through: str) -> None:
    r = _client()
    tag = uuid.uuid4().hex
    h, s, f = f"{{{tag}}}:h", f"{{{tag}}}:s", f"{{{tag}}}:fence"
    fields, packed = _fields(300)
    r.set(f, 7)
    ops = [("HSET", h, (packed,)), ("HSET", h, ("plain", "1")), ("SET", s, ("state",))]

    def write(fence: Fence) -> Any:
        if through == "alone":
            return fenced(r, fence, ops)
        p = pipeline_on_key_node(r, h)
        fenced(r, fence, ops, pipe=p)
        (reply,) = p.execute(raise_on_error=False)
        if isinstance(reply, Exception):
            raise FencedError(str(reply))
        return reply

    with pytest.raises(FencedError):
        write(Fence(f, 6))  # an older token: nothing written
    assert not r.exists(h) and not r.exists(s)
    write(Fence(f, 7))
    assert r.hgetall(h) == {**fields, b"plain": b"1"} and r.get(s) == b"state"
    # unfenced: the same writes in MULTI/EXEC, applied
    r.delete(h, s)
    assert fenced(r, None, ops) == b"OK"  # the last command's reply, as Redis gave it
    assert r.hgetall(h) == {**fields, b"plain": b"1"} and r.get(s) == b"state"


def test_a_cluster_node_pipeline_takes_packed_arguments(redis_cluster: Any) -> None:
    r = connect(redis_cluster.cluster_url)
    tag = uuid.uuid4().hex
    h, f = f"{{{tag}}}:h", f"{{{tag}}}:fence"
    fields, packed = _fields(1000)
    r.set(f, 3)
    p = pipeline_on_key_node(r, h)
    assert isinstance(p, PackedPipeline)
    fenced(r, Fence(f, 3), [("HSET", h, (packed,))], pipe=p)
    assert p.execute() == [1000]
    assert r.hgetall(h) == fields


def _groups(tag: str, n: int) -> tuple[list[tuple[Fence, list[Any]]], list[dict[bytes, bytes]]]:
    """``n`` groups' fenced writes (a Packed HSET and a SET each, fence ``g`` holding 10 + g)
    under one hash tag, and each group's fields."""
    r = _client()
    writes: list[tuple[Fence, list[Any]]] = []
    fields_of = []
    for g in range(n):
        fence = Fence(f"{{{tag}}}:g{g}:fence", 10 + g)
        r.set(fence.key, fence.token)
        fields, packed = _fields(50 + g)
        h = f"{{{tag}}}:g{g}:h"
        writes.append((fence, [("HSET", h, (packed,)), ("SET", f"{{{tag}}}:g{g}:s", (f"s{g}",))]))
        fields_of.append(fields)
    return writes, fields_of


def _written(tag: str, n: int) -> list[bool]:
    r = _client()
    return [
        bool(r.exists(f"{{{tag}}}:g{g}:h")) or bool(r.exists(f"{{{tag}}}:g{g}:s")) for g in range(n)
    ]


def test_fenced_writes_together_apply_when_every_fence_holds() -> None:
    r = _client()
    tag = uuid.uuid4().hex
    writes, fields_of = _groups(tag, 5)
    replies = fenced_together(pipeline_on_key_node(r, f"{{{tag}}}"), writes)
    assert replies == [b"OK"] * 5  # each write's last reply, as Redis gave it
    for g, fields in enumerate(fields_of):
        assert r.hgetall(f"{{{tag}}}:g{g}:h") == fields
        assert r.get(f"{{{tag}}}:g{g}:s") == f"s{g}".encode()
    assert not r.execute_command("EXISTS", "x")  # the pool's connections usable after


@pytest.mark.parametrize("how", ["older", "newer", "missing"])
def test_fenced_writes_together_write_nothing_when_a_fence_moved(how: str) -> None:
    r = _client()
    tag = uuid.uuid4().hex
    writes, _ = _groups(tag, 4)
    moved = writes[2][0].key
    if how == "missing":
        r.delete(moved)
    else:
        r.set(moved, 12 + (1 if how == "newer" else -1))
    assert fenced_together(pipeline_on_key_node(r, f"{{{tag}}}"), writes) is None
    assert _written(tag, 4) == [False] * 4
    # and the script path then says which: the others written, that one refused
    p = pipeline_on_key_node(r, f"{{{tag}}}")
    for fence, ops in writes:
        fenced(r, fence, ops, pipe=p)
    replies = p.execute(raise_on_error=False)
    assert [isinstance(x, Exception) for x in replies] == [False, False, True, False]
    assert _written(tag, 4) == [True, True, False, True]


def _between(r: Any, tag: str, act: Callable[[], Any]) -> Any:
    """A pipeline whose optimistic transactions run ``act`` once the fences are read and
    found holding, before the ``MULTI``."""
    pipe = pipeline_on_key_node(r, f"{{{tag}}}")
    watched = pipe.watched

    def then_act(keys: Any, commands: Any) -> Any:
        def then(values: list[Any]) -> Any:
            todo = commands(values)
            assert todo is not None  # every fence held when read
            act()
            return todo

        return watched(keys, then)

    pipe.watched = then_act
    return pipe


def test_a_fence_taken_between_the_watch_and_the_exec_aborts_every_write() -> None:
    """The newer holder's INCR lands after the fences were read and found holding: EXEC
    aborts, nothing of any group is written."""
    r = _client()
    tag = uuid.uuid4().hex
    writes, _ = _groups(tag, 3)
    other = redis.Redis.from_url(shared_redis_url())
    pipe = _between(r, tag, lambda: other.incr(writes[1][0].key))  # taken, by another client
    assert fenced_together(pipe, writes) is None
    assert _written(tag, 3) == [False] * 3
    other.close()


def test_an_error_in_one_write_leaves_the_others_applied() -> None:
    r = _client()
    tag = uuid.uuid4().hex
    writes, fields_of = _groups(tag, 3)
    r.rpush(f"{{{tag}}}:g1:h", "a list")  # group 1's HSET then fails: WRONGTYPE
    replies = fenced_together(pipeline_on_key_node(r, f"{{{tag}}}"), writes)
    assert replies is not None
    assert replies[0] == b"OK" and replies[2] == b"OK"
    assert isinstance(replies[1], redis.ResponseError) and "WRONGTYPE" in str(replies[1])
    assert r.hgetall(f"{{{tag}}}:g0:h") == fields_of[0]
    assert r.get(f"{{{tag}}}:g1:s") == b"s1"  # (its commands after the failed one: applied)


def test_a_connection_killed_midway_leaves_no_watch_behind() -> None:
    """The connection dies after the WATCH (killed by another client while the fences are
    checked): the call raises, and the pool's next transactions run (a WATCH left on a
    pooled connection would abort a later EXEC)."""
    r = _client()
    tag = uuid.uuid4().hex
    writes, fields_of = _groups(tag, 2)
    admin = redis.Redis.from_url(shared_redis_url())
    pipe = _between(r, tag, lambda: admin.client_kill_filter(_type="normal", skipme=True))
    with pytest.raises(redis.ConnectionError):
        fenced_together(pipe, writes)
    admin.close()
    for _ in range(3):  # the pool's connections: none of them aborts a transaction
        assert fenced_together(pipeline_on_key_node(r, f"{{{tag}}}"), writes) == [b"OK", b"OK"]
    assert r.hgetall(f"{{{tag}}}:g1:h") == fields_of[1]


def test_a_cluster_node_takes_fenced_writes_together(redis_cluster: Any) -> None:
    r = connect(redis_cluster.cluster_url)
    tag = uuid.uuid4().hex
    fields, packed = _fields(800)
    writes = []
    for g in range(3):
        fence = Fence(f"{{{tag}}}:g{g}:fence", 5)
        r.set(fence.key, 5)
        writes.append((fence, [("HSET", f"{{{tag}}}:g{g}:h", (packed,))]))
    assert fenced_together(pipeline_on_key_node(r, f"{{{tag}}}"), writes) == [800] * 3
    assert all(r.hgetall(f"{{{tag}}}:g{g}:h") == fields for g in range(3))
