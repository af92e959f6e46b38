"""Keyed streams through the SDK, against a real ``mtawindows serve``: a stream keyed by a field
holds one instance of each window per key; Query, GetKey, ListKeys (paged, in key order),
DeleteKey and Subscribe name keys by their text. Every result is checked against a tiny oracle
in plain Python: each key's rows, the window its last three."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest

from mtawindows.client import (
    Aggregation,
    AsyncWindowClient,
    FailedPreconditionError,
    Field,
    InvalidArgumentError,
    KeyInfo,
    KeyPage,
    NotFoundError,
    Policy,
    StreamSpec,
    WindowClient,
    WindowSpec,
)
from mtawindows.testing import LocalServer
from mtawindows.v1.keys import DEFAULT_KEY_GROUPS, key_group
from mtawindows.v1.reasons import Reason

pytestmark = [pytest.mark.server, pytest.mark.redis]

LAST = 3  # the window: the last three rows (of each key)
WINDOW = WindowSpec(
    "hosts",
    "w",
    (Aggregation("s", "sum", "v"), Aggregation("n", "count")),
    Policy.count(LAST),
)
# appended in this order; their key order (bytewise text) is another: see SORTED
HOSTS = ("web-3", "db-1", "web-10", "cache-2", "api-7")
SORTED = ["api-7", "cache-2", "db-1", "web-10", "web-3"]


class Oracle:
    """Each key's rows, as appended: the window of a key is its last :data:`LAST` rows."""

    def __init__(self) -> None:
        self.rows: dict[str, list[tuple[int, float]]] = defaultdict(list)

    def add(self, batch: dict[str, list[Any]], key: str = "host") -> None:
        for ts, k, v in zip(batch["ts"], batch[key], batch["v"], strict=True):
            self.rows[str(k)].append((ts, v))

    def values(self, key: str) -> dict[str, Any]:
        last = [v for _, v in self.rows[key][-LAST:]]
        return {"s": sum(last), "n": len(last)}

    def newest(self, key: str) -> int:
        return self.rows[key][-1][0]

    def drop(self, key: str) -> None:
        del self.rows[key]


def _batch(keys: list[str], start: int) -> dict[str, list[Any]]:
    """One row per key of ``keys`` (in order), timestamps from ``start``, values of halves (so
    that the sums are exact)."""
    n = len(keys)
    return {
        "ts": list(range(start, start + n)),
        "host": list(keys),
        "v": [((start + i) % 11) / 2 for i in range(n)],
    }


def _rows_of_many_keys() -> dict[str, list[Any]]:
    """Seven rounds over the hosts, the later rounds skipping some: keys with 7, 5 and 2 rows
    (more and fewer rows than the window holds), all in one append."""
    keys: list[str] = []
    for r in range(7):
        keys += [h for i, h in enumerate(HOSTS) if r < 2 or i % 2 == 0 or (r < 5 and i == 1)]
    return _batch(keys, 1)


@pytest.fixture
def client(mtawindows_server: LocalServer) -> Iterator[WindowClient]:
    with mtawindows_server.client(timeout=60) as c:
        yield c


def _keyed(c: WindowClient) -> Oracle:
    """The stream ``hosts`` keyed by ``host``, its window ``w``, one append of rows of every
    host (their counts differ); the oracle of it."""
    spec = StreamSpec(
        "hosts", (Field("host", "STRING"), Field("v", "DOUBLE")), key="host", wall_clock=False
    )
    info = c.create_stream(spec)
    assert info.spec.key == "host"
    c.create_window(WINDOW)
    batch = _rows_of_many_keys()
    r = c.append("hosts", batch)
    assert r.rows_applied == len(batch["ts"])
    oracle = Oracle()
    oracle.add(batch)
    assert {len(oracle.rows[h]) for h in HOSTS} == {7, 5, 2}
    return oracle


def _check_result(got: Any, key: str, oracle: Oracle) -> None:
    want = oracle.values(key)
    assert got.key == key
    assert got.values["n"] == want["n"]
    assert got.values["s"] == pytest.approx(want["s"])
    assert got.size == want["n"]


def test_query_and_get_key_answer_each_keys_own_window(client: WindowClient) -> None:
    oracle = _keyed(client)
    for host in HOSTS:
        _check_result(client.query("hosts", "w", key=host), host, oracle)
        info = client.get_key("hosts", host)
        assert isinstance(info, KeyInfo)
        assert info.key == host
        assert info.group == key_group(host, DEFAULT_KEY_GROUPS)
        assert info.rows_appended == len(oracle.rows[host])
        assert info.newest_timestamp == oracle.newest(host)
        assert set(info.results) == {"w"}
        _check_result(info.results["w"], host, oracle)
    assert client.get_stream("hosts").keys == len(HOSTS)

    more = _batch(["db-1", "api-7", "db-1"], 100)  # a second append moves those keys only
    client.append("hosts", more)
    oracle.add(more)
    for host in HOSTS:
        _check_result(client.query("hosts", "w", key=host), host, oracle)


def test_list_keys_pages_through_the_keys_in_key_order(client: WindowClient) -> None:
    oracle = _keyed(client)
    pages: list[KeyPage] = []
    token = ""
    while True:
        page = client.list_keys("hosts", limit=2, page_token=token)
        pages.append(page)
        if not page.next_page_token:
            break
        token = page.next_page_token
        assert len(pages) < 10, "the pages do not end"
    assert [[k.key for k in p.keys] for p in pages] == [SORTED[0:2], SORTED[2:4], SORTED[4:]]
    assert all(p.next_page_token for p in pages[:-1]) and pages[-1].next_page_token == ""
    for k in (k for p in pages for k in p.keys):
        assert k.rows_appended == len(oracle.rows[k.key])
        assert k.newest_timestamp == oracle.newest(k.key)
        assert k.results == {}  # ListKeys lists counters only

    assert [k.key for k in client.iter_keys("hosts", page_size=2)] == SORTED
    assert [k.key for k in client.iter_keys("hosts")] == SORTED
    assert [k.key for k in client.list_keys("hosts", prefix="web-").keys] == ["web-10", "web-3"]
    assert [k.key for k in client.iter_keys("hosts", prefix="web-", page_size=1)] == [
        "web-10",
        "web-3",
    ]
    assert client.list_keys("hosts", prefix="nope").keys == []


def test_a_deleted_key_is_gone_until_a_row_creates_it_again(client: WindowClient) -> None:
    oracle = _keyed(client)
    assert client.delete_key("hosts", "db-1") is None
    oracle.drop("db-1")
    with pytest.raises(NotFoundError) as info:
        client.get_key("hosts", "db-1")
    assert info.value.reason == Reason.KEY_NOT_FOUND
    with pytest.raises(NotFoundError) as info:
        client.query("hosts", "w", key="db-1")
    assert info.value.reason == Reason.KEY_NOT_FOUND
    with pytest.raises(NotFoundError) as info:
        client.delete_key("hosts", "db-1")  # not idempotent: the second time, no such key
    assert info.value.reason == Reason.KEY_NOT_FOUND
    assert [k.key for k in client.iter_keys("hosts")] == [h for h in SORTED if h != "db-1"]
    assert client.get_stream("hosts").keys == len(HOSTS) - 1
    for host in oracle.rows:  # the others keep their windows
        _check_result(client.query("hosts", "w", key=host), host, oracle)

    again = _batch(["db-1"], 500)  # a fresh key: its window holds this row only
    client.append("hosts", again)
    oracle.add(again)
    _check_result(client.query("hosts", "w", key="db-1"), "db-1", oracle)
    assert client.get_key("hosts", "db-1").rows_appended == 1


def test_keyed_and_unkeyed_calls_refuse_the_other_kind(client: WindowClient) -> None:
    _keyed(client)
    with pytest.raises(FailedPreconditionError) as info:
        client.query("hosts", "w")  # a keyed stream's window needs a key
    assert info.value.reason == Reason.NOT_KEYED
    # an empty key is no key a row could make: INVALID_ARGUMENT wherever a key is named
    # (Query's is refused by the SDK: on the wire an empty key means "no key")
    for call in (
        lambda: client.query("hosts", "w", key=""),
        lambda: client.get_key("hosts", ""),
        lambda: client.delete_key("hosts", ""),
    ):
        with pytest.raises(InvalidArgumentError) as bad:
            call()
        assert bad.value.reason == Reason.INVALID_ARGUMENT
        assert [v.field for v in bad.value.violations] == ["key"]

    client.create_stream(StreamSpec("plain", (Field("v", "DOUBLE"),), wall_clock=False))
    client.create_window(WindowSpec("plain", "w", WINDOW.aggregations, WINDOW.policy))
    client.append("plain", {"ts": [1, 2], "v": [1.0, 2.0]})
    assert client.query("plain", "w").values["s"] == 3.0
    with pytest.raises(FailedPreconditionError) as info:
        client.list_keys("plain")
    assert info.value.reason == Reason.NOT_KEYED
    with pytest.raises(FailedPreconditionError) as info:
        client.get_key("plain", "x")
    assert info.value.reason == Reason.NOT_KEYED
    with pytest.raises(FailedPreconditionError) as info:
        client.query("plain", "w", key="x")  # a key given to an unkeyed stream
    assert info.value.reason == Reason.NOT_KEYED


def test_an_int64_key_is_named_by_its_decimal_text(client: WindowClient) -> None:
    spec = StreamSpec(
        "ids",
        (Field("id", "INT64"), Field("v", "DOUBLE")),
        key="id",
        key_groups=8,
        wall_clock=False,
    )
    client.create_stream(spec)
    got = client.get_stream("ids").spec
    assert (got.key, got.key_groups) == ("id", 8)
    client.create_window(WindowSpec("ids", "w", WINDOW.aggregations, WINDOW.policy))
    ids = [7, 10, -2, 7, 7, 10, 7]
    batch = {"ts": list(range(1, 8)), "id": ids, "v": [float(i) for i in range(1, 8)]}
    client.append("ids", batch)
    oracle = Oracle()
    oracle.add(batch, key="id")
    for i in set(ids):
        _check_result(client.query("ids", "w", key=i), str(i), oracle)  # an int, or
        _check_result(client.query("ids", "w", key=str(i)), str(i), oracle)  # its text
        info = client.get_key("ids", i)
        assert (info.key, info.group) == (str(i), key_group(i, 8))
    assert [k.key for k in client.iter_keys("ids")] == ["-2", "10", "7"]  # bytewise
    with pytest.raises(TypeError):
        client.query("ids", "w", key=True)  # a bool is no key


def test_subscribe_follows_the_keys_asked_for(client: WindowClient) -> None:
    oracle = _keyed(client)
    followed = ("web-3", "api-7")
    events = client.subscribe("hosts", "w", keys=list(followed), timeout=60)
    batch = _batch(["db-1", "web-3", "cache-2", "api-7", "web-3"], 200)
    client.append("hosts", batch)
    oracle.add(batch)
    got: dict[str, Any] = {}
    first = -1
    for number, result in events:
        assert result.key in followed, result.key
        got[result.key], first = result, number
        if len(got) == len(followed):
            break
    for key in followed:  # each key's result after the batch
        _check_result(got[key], key, oracle)

    after = _batch(["db-1", "api-7"], 300)  # db-1 is not followed: api-7's result is next
    client.append("hosts", after)
    oracle.add(after)
    for number, result in events:
        assert result.key in followed, result.key
        if number != first:  # (a result of the first batch again, if any, passed over)
            _check_result(result, "api-7", oracle)
            break
    events.close()


def test_the_async_client_has_the_same_calls(mtawindows_server: LocalServer) -> None:
    async def go() -> None:
        with mtawindows_server.client(timeout=60) as c:
            oracle = _keyed(c)
        async with AsyncWindowClient(mtawindows_server.target, timeout=60) as a:
            for host in HOSTS:
                _check_result(await a.query("hosts", "w", key=host), host, oracle)
                info = await a.get_key("hosts", host)
                assert info.rows_appended == len(oracle.rows[host])
            page = await a.list_keys("hosts", limit=2)
            assert [k.key for k in page.keys] == SORTED[:2] and page.next_page_token
            assert [k.key async for k in a.iter_keys("hosts", page_size=2)] == SORTED
            await a.delete_key("hosts", "web-3")
            with pytest.raises(NotFoundError) as info:
                await a.get_key("hosts", "web-3")
            assert info.value.reason == Reason.KEY_NOT_FOUND
            with pytest.raises(FailedPreconditionError) as refused:
                await a.query("hosts", "w")
            assert refused.value.reason == Reason.NOT_KEYED

    asyncio.run(go())
