"""The ``mtawindows`` command's flags for keyed streams, without a server: ``streams create
--key/--key-groups/--key-ttl``, ``query --key``, ``watch --key`` (repeatable), ``keys list |
get | delete``; parsed by the full command (:mod:`mtawindows.cli`) and run against a stand-in
client that records what it is asked."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from mtawindows import cli
from mtawindows.client import KeyInfo, StreamInfo, WindowResult
from mtawindows.client import commands as client_cli
from mtawindows.client.errors import FailedPreconditionError
from mtawindows.v1.reasons import Reason


def parse(*argv: str) -> Any:
    return cli.build_parser().parse_args(list(argv))


def test_streams_create_takes_the_key_flags() -> None:
    args = parse(
        "streams", "create", "hosts", "--field", "host:STRING", "--field", "v:DOUBLE",
        "--key", "host", "--key-groups", "64", "--key-ttl", "90m",
    )  # fmt: skip
    assert (args.key, args.key_groups, args.key_ttl) == ("host", 64, timedelta(minutes=90))
    plain = parse("streams", "create", "cpu", "--field", "load:DOUBLE")
    assert (plain.key, plain.key_groups, plain.key_ttl) == ("", 0, timedelta(0))
    assert parse("streams", "create", "s", "--key-ttl", "500ms").key_ttl == timedelta(seconds=0.5)


@pytest.mark.parametrize(
    "argv",
    [
        ["streams", "create", "s", "--key-ttl", "an hour"],
        ["streams", "create", "s", "--key-groups", "many"],
        ["keys", "list", "s", "--limit", "ten"],
        ["keys", "get", "s"],  # no key
        ["keys", "create", "s", "k"],  # keys are made by rows
    ],
)
def test_bad_key_flags_are_refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        parse(*argv)
    assert info.value.code == 2
    assert "usage: mtawindows" in capsys.readouterr().err


def test_query_takes_a_key_and_watch_takes_keys() -> None:
    assert parse("query", "hosts", "w", "--key", "web-1").key == "web-1"
    assert parse("query", "hosts", "w").key is None
    assert parse("watch", "hosts", "w", "--key", "a", "--key", "7").keys == ["a", "7"]
    assert parse("watch", "hosts", "w").keys == []


def test_the_keys_subcommands_parse() -> None:
    a = parse("keys", "list", "hosts", "--prefix", "web-", "--limit", "5", "--target", "h:1")
    assert (a.command, a.action, a.stream, a.prefix, a.limit, a.target) == (
        "keys", "list", "hosts", "web-", 5, "h:1",
    )  # fmt: skip
    a = parse("keys", "list", "hosts")
    assert (a.prefix, a.limit, a.page_size) == ("", 0, 1000)
    a = parse("keys", "get", "hosts", "-12")  # an INT64 key, by its text
    assert (a.action, a.stream, a.key) == ("get", "hosts", "-12")
    a = parse("keys", "delete", "hosts", "web-1")
    assert (a.action, a.stream, a.key) == ("delete", "hosts", "web-1")


# --------------------------------------------------------------------------- running them

HOSTS = [
    KeyInfo(f"h{i}", group=i, rows_appended=10 + i, newest_timestamp=100 + i) for i in range(5)
]


class StandIn:
    """The client the commands get: records each call, answers from :data:`HOSTS`."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def __enter__(self) -> StandIn:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def _note(self, name: str, *args: Any, **kw: Any) -> None:
        self.asked.append((name, args, kw))

    def create_stream(self, spec: Any) -> StreamInfo:
        self._note("create_stream", spec)
        return StreamInfo(spec)

    def query(self, stream: str, window: str, **kw: Any) -> WindowResult:
        self._note("query", stream, window, **kw)
        return WindowResult(window, {"n": 3}, size=3, key=kw.get("key") or "")

    def subscribe(self, stream: str, window: str, **kw: Any) -> Iterator[tuple[int, WindowResult]]:
        self._note("subscribe", stream, window, **kw)
        for i, k in enumerate(kw["keys"]):
            yield i + 1, WindowResult(window, {"n": i}, size=i, key=k)

    def iter_keys(self, stream: str, **kw: Any) -> Iterator[KeyInfo]:
        self._note("iter_keys", stream, **kw)
        if stream == "plain":
            msg = "not keyed"
            raise FailedPreconditionError(msg, reason=Reason.NOT_KEYED)
        yield from (k for k in HOSTS if k.key.startswith(kw["prefix"]))

    def get_key(self, stream: str, key: str) -> KeyInfo:
        self._note("get_key", stream, key)
        return KeyInfo(key, results={"w": WindowResult("w", {"n": 1}, size=1, key=key)})

    def delete_key(self, stream: str, key: str) -> None:
        self._note("delete_key", stream, key)


@pytest.fixture
def stand_in(monkeypatch: pytest.MonkeyPatch) -> StandIn:
    client = StandIn()
    monkeypatch.setattr(client_cli, "_client", lambda args: client)
    return client


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main([*argv, "--json", "--raw"])  # what scripts read: JSON, int timestamps
    out = capsys.readouterr()
    return code, out.out, out.err


def test_the_commands_send_the_keys(stand_in: StandIn, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys, "streams", "create", "hosts", "--field", "host:STRING", "--key", "host",
        "--key-groups", "8", "--key-ttl", "1h",
    )  # fmt: skip
    assert code == 0
    spec = stand_in.asked[-1][1][0]
    assert (spec.key, spec.key_groups, spec.key_ttl) == ("host", 8, timedelta(hours=1))
    assert json.loads(out)["spec"]["key"] == "host"

    code, out, _ = run(capsys, "query", "hosts", "w", "--key", "h2")
    assert code == 0 and json.loads(out)["key"] == "h2"
    assert stand_in.asked[-1] == (
        "query",
        ("hosts", "w"),
        {"key": "h2", "range": None, "count": None},
    )

    code, out, _ = run(capsys, "watch", "hosts", "w", "--key", "h1", "--key", "h3")
    assert code == 0
    assert stand_in.asked[-1][2] == {"keys": ["h1", "h3"]}
    got = [json.loads(line) for line in out.splitlines()]
    assert [(g["key"], g["stream_batch"], g["size"], g["values"]) for g in got] == [
        ("h1", 1, 0, {"n": 0}),
        ("h3", 2, 1, {"n": 1}),
    ]
    assert {"window", "batch", "batch_evicted", "timestamp"} <= set(got[0])  # as query's


def test_keys_list_get_delete(stand_in: StandIn, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "keys", "list", "hosts")
    assert code == 0
    assert json.loads(out) == [
        {"key": k.key, "rows": k.rows_appended, "newest_timestamp": k.newest_timestamp}
        for k in HOSTS
    ]
    assert stand_in.asked[-1] == ("iter_keys", ("hosts",), {"prefix": "", "page_size": 1000})

    code, out, _ = run(capsys, "keys", "list", "hosts", "--limit", "2", "--prefix", "h")
    assert code == 0 and [k["key"] for k in json.loads(out)] == ["h0", "h1"]
    assert stand_in.asked[-1][2] == {"prefix": "h", "page_size": 2}  # no more than it prints

    code, out, _ = run(capsys, "keys", "list", "hosts", "--prefix", "x")
    assert code == 0 and json.loads(out) == []

    code, out, _ = run(capsys, "keys", "get", "hosts", "h4")
    assert code == 0
    got = json.loads(out)
    assert got["key"] == "h4" and got["results"]["w"]["values"] == {"n": 1}

    code, out, _ = run(capsys, "keys", "delete", "hosts", "h4")
    assert code == 0 and json.loads(out) == {"deleted": "hosts/h4"}
    assert stand_in.asked[-1] == ("delete_key", ("hosts", "h4"), {})


def test_keys_list_of_an_unkeyed_stream_prints_only_the_error(
    stand_in: StandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "keys", "list", "plain")
    assert (code, out) == (1, "")  # --json: the error as JSON on stderr
    said = json.loads(err)["error"]
    assert (said["code"], said["reason"]) == ("FAILED_PRECONDITION", "NOT_KEYED")
    assert said["message"].startswith("not keyed")
    code, out, err = run(capsys, "keys", "list", "hosts", "--limit", "-1")
    assert (code, out) == (1, "") and "--limit" in json.loads(err)["error"]["message"]
