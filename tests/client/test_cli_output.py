"""What the CLI prints (issue 23): summaries for people by default, JSON with ``--json``,
timestamps as RFC 3339 text unless ``--raw``, ``batch`` for the stream's batch counter
everywhere, a hint naming ``--target`` when nothing answers, help text on every flag. Against
a real server (``mtawindows serve`` from :mod:`mtawindows.testing`), the CLI as a subprocess."""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from mtawindows.cli import build_parser
from mtawindows.client.present import rfc3339
from mtawindows.testing import LocalServer, mtawindows_command

pytestmark = [pytest.mark.server]

T = "2026-01-01T12:00:00Z"


def cli(target: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MTAWINDOWS_")}
    return subprocess.run(
        [*mtawindows_command(), *args, "--target", target],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
        cwd=cwd,
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with LocalServer(tmp_path_factory.mktemp("cli-output")) as srv:
        yield srv


def test_rfc3339_text_to_the_nanosecond() -> None:
    assert rfc3339(0) == "1970-01-01T00:00:00Z"
    assert rfc3339(1_767_268_800_000_000_000) == T
    assert rfc3339(1_767_268_800_000_000_001) == "2026-01-01T12:00:00.000000001Z"
    assert rfc3339(1_767_268_800_250_000_000) == "2026-01-01T12:00:00.25Z"
    assert rfc3339(-1) == "1969-12-31T23:59:59.999999999Z"


def test_summaries_json_and_raw(server: LocalServer, tmp_path: Path) -> None:
    t = server.target
    r = cli(t, "streams", "create", "rooms", "--field", "temp:DOUBLE", "--field", "room:STRING")
    assert r.returncode == 0, r.stderr
    assert (
        r.stdout.splitlines()[0] == "created stream rooms: ts TIMESTAMP, temp DOUBLE, room STRING"
    )
    r = cli(
        t, "windows", "create", "rooms", "w", "--agg", "n=count", "--agg", "hot=max:temp",
        "--agg", "last=max:ts", "--policy", "time:5m",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[:2] == [
        "created window rooms/w: n=count, hot=max(temp), last=max(ts)",
        "  over a time range of 5m; AMTA, redis",
    ]
    rows = tmp_path / "rows.csv"
    rows.write_text(
        f"ts,temp,room\n{T},20.5,a\n2026-01-01T12:03:00Z,22.0,b\n2026-01-01T12:06:00.5Z,21.0,a\n"
    )
    r = cli(t, "append", "rooms", str(rows))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("appended 3 rows to rooms in 1 batch"), r.stdout
    r = cli(t, "query", "rooms", "w")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "rooms/w: 2 rows after batch 1 (newest row 2026-01-01T12:06:00.5Z)",
        "  hot   22.0",
        "  last  2026-01-01T12:06:00.5Z",
        "  n     2",
    ]
    got = json.loads(cli(t, "query", "rooms", "w", "--json").stdout)
    assert got["batch"] == 1 and "sequence" not in got
    # the rows the batch evicted (12:00 left the 5-minute range), named so beside the
    # window's running total ("rows out" in `windows get`)
    assert got["batch_evicted"] == 1 and "evicted" not in got
    assert got["timestamp"] == "2026-01-01T12:06:00.5Z"
    assert got["values"] == {"n": 2, "hot": 22.0, "last": "2026-01-01T12:06:00.5Z"}
    raw = json.loads(cli(t, "query", "rooms", "w", "--json", "--raw").stdout)
    assert raw["timestamp"] == 1_767_269_160_500_000_000 == raw["values"]["last"]
    r = cli(t, "streams", "get", "rooms")
    assert "newest row 2026-01-01T12:06:00.5Z" in r.stdout, r.stdout
    info = json.loads(cli(t, "streams", "get", "rooms", "--json").stdout)
    assert info["newest_timestamp"] == "2026-01-01T12:06:00.5Z"
    assert info["rows_appended"] == 3


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_hint_names_target_when_nothing_answers() -> None:
    nobody = f"127.0.0.1:{free_port()}"
    r = cli(nobody, "streams", "list", "--timeout", "5")
    assert r.returncode == 1
    assert f"hint: nothing answers at {nobody}" in r.stderr and "--target" in r.stderr


def test_json_before_the_command_and_errors_as_json(server: LocalServer) -> None:
    """``--json`` (and ``--raw``) before the command as after it; with it, an error is one
    JSON object on stderr naming code, reason, message and violations; exit 1 still."""
    t = server.target
    r = subprocess.run(
        [*mtawindows_command(), "--json", "--raw", "streams", "list", "--target", t],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert isinstance(json.loads(r.stdout), list)
    # the client flags before the command too, and a usage error as JSON (exit 2)
    r = subprocess.run(
        [*mtawindows_command(), "--target", t, "--timeout=20", "--json", "streams", "list"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert r.returncode == 0 and isinstance(json.loads(r.stdout), list), r.stderr
    r = subprocess.run(
        [*mtawindows_command(), "--json", "windows", "create", "s", "w", "--agg", "x=max:v",
         "--policy", "time:5", "--target", t],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    err = json.loads(r.stderr)["error"]
    assert r.returncode == 2 and err["reason"] == "USAGE" and "--policy" in err["message"], err
    r = cli(t, "query", "no_such_stream", "w", "--json")
    assert r.returncode == 1 and r.stdout == ""
    err = json.loads(r.stderr)["error"]
    assert err["code"] == "NOT_FOUND" and err["reason"] == "STREAM_NOT_FOUND", err
    assert "no_such_stream" in err["message"] and isinstance(err["violations"], list)
    nobody = f"127.0.0.1:{free_port()}"
    r = cli(nobody, "--json", "streams", "list", "--timeout", "5")
    err = json.loads(r.stderr)["error"]
    assert r.returncode == 1 and err["code"] == "UNAVAILABLE" and "--target" in err["hint"]
    assert cli(t, "streams", "create", "jsonerr", "--field", "v:DOUBLE").returncode == 0
    r = subprocess.run(
        [*mtawindows_command(), "--json", "append", "jsonerr", "/no/such/file.csv", "--target", t],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    err = json.loads(r.stderr)["error"]
    assert r.returncode == 1 and "/no/such/file.csv" in err["message"], err


def _flags(parser: argparse.ArgumentParser, path: str) -> list[tuple[str, str]]:
    out = []
    for action in parser._actions:  # argparse keeps no public list of them
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out += _flags(sub, f"{path} {name}")
        elif action.option_strings and not isinstance(action, argparse._HelpAction):
            out.append((path, "/".join(action.option_strings)) if not action.help else ("", ""))
    return [f for f in out if f[0]]


def test_every_flag_has_help_text() -> None:
    missing = _flags(build_parser(), "mtawindows")
    assert not missing, f"flags without help text: {missing}"


def test_plain_number_timestamps_in_the_streams_unit(server: LocalServer, tmp_path: Path) -> None:
    t = server.target
    r = cli(t, "streams", "create", "secs", "--field", "v:DOUBLE", "--ts-unit", "s")
    assert r.returncode == 0, r.stderr
    assert "plain-number timestamps in s" in r.stdout
    assert (
        cli(
            t, "windows", "create", "secs", "w", "--agg", "n=count", "--policy", "count:9"
        ).returncode
        == 0
    )
    rows = tmp_path / "secs.csv"
    rows.write_text("ts,v\n1767268800,1.0\n1767268801.5,2.0\n")
    r = cli(t, "append", "secs", str(rows))
    assert r.returncode == 0, r.stderr
    assert "(newest row 2026-01-01T12:00:01.5Z)" in cli(t, "query", "secs", "w").stdout
    r = cli(t, "streams", "create", "nanos", "--field", "v:DOUBLE")
    assert r.returncode == 0, r.stderr
    (tmp_path / "ints.csv").write_text("ts,v\n1767268800,1.0\n")
    r = cli(t, "append", "nanos", str(tmp_path / "ints.csv"))  # seconds read as nanoseconds
    assert r.returncode == 1
    assert "before 1990" in r.stderr and "1970-01-01T00:00:01.7672688Z" in r.stderr, r.stderr
    assert json.loads(cli(t, "streams", "get", "nanos", "--json").stdout)["rows_appended"] == 0
    r = cli(t, "append", "nanos", str(rows))  # a float on a stream of nanoseconds: a guess
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.count("error:") == 1 and "float" in r.stderr, r.stderr
    r = cli(t, "streams", "create", "seq", "--field", "v:DOUBLE", "--not-wall-clock")
    assert r.returncode == 0 and "timestamps are not dates" in r.stdout, r.stdout
    (tmp_path / "seq.csv").write_text("ts,v\n1,1.0\n2,2.0\n")
    assert cli(t, "append", "seq", str(tmp_path / "seq.csv")).returncode == 0


def test_a_bad_timestamp_in_a_file_is_one_error_line(server: LocalServer, tmp_path: Path) -> None:
    t = server.target
    assert cli(t, "streams", "create", "floats", "--field", "v:DOUBLE").returncode == 0
    (tmp_path / "f.jsonl").write_text('{"ts": 1.5, "v": 1.0}\n')
    r = cli(t, "append", "floats", str(tmp_path / "f.jsonl"))
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.count("error:") == 1 and "float" in r.stderr, r.stderr


def test_one_word_for_the_batch_counter(server: LocalServer) -> None:
    """The SDK's result says ``batch`` as the CLI and ``subscribe`` do."""
    from mtawindows.client import Aggregation, Field, Policy, StreamSpec, WindowClient, WindowSpec

    with WindowClient(server.target) as c:
        c.create_stream(StreamSpec("batches", (Field("v", "DOUBLE"),), wall_clock=False))
        c.create_window(WindowSpec("batches", "w", (Aggregation("n", "count"),), Policy.count(9)))
        for i in range(3):
            c.append("batches", {"ts": [i + 1], "v": [1.0]})
        r = c.query("batches", "w")
    assert r.batch == r.sequence == 3
    got = json.loads(cli(server.target, "query", "batches", "w", "--json").stdout)
    assert got["batch"] == 3


def test_what_an_outsider_hit(server: LocalServer, tmp_path: Path) -> None:
    """RFC 3339 text on a stream of seconds, a refusal said once, JSON lines given as CSV, a
    bad field type and a bad number named with line and column."""
    t = server.target
    assert (
        cli(t, "streams", "create", "sec3339", "--field", "v:DOUBLE", "--ts-unit", "s").returncode
        == 0
    )
    assert (
        cli(
            t, "windows", "create", "sec3339", "w", "--agg", "n=count", "--policy", "count:5"
        ).returncode
        == 0
    )
    (tmp_path / "iso.csv").write_text("ts,v\n2026-01-01T13:00:00+01:00,1.0\n")
    r = cli(t, "append", "sec3339", str(tmp_path / "iso.csv"))
    assert r.returncode == 0, r.stderr
    assert "(newest row 2026-01-01T12:00:00Z)" in cli(t, "query", "sec3339", "w").stdout
    r = cli(t, "windows", "create", "sec3339", "w2", "--agg", "n=cnt", "--policy", "count:2")
    assert r.returncode == 1 and r.stderr.count("unknown monoid 'cnt'") == 1, r.stderr
    r = subprocess.run(
        [*mtawindows_command(), "append", "sec3339", "-", "--target", t],
        input='{"ts": "2026-01-01T12:00:01Z", "v": 1.0}\n',
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 1 and "--format jsonl" in r.stderr, r.stderr
    r = cli(t, "streams", "create", "badtype", "--field", "temp:FLOAT")
    assert r.returncode == 2 and "DOUBLE INT64 STRING BOOL TIMESTAMP" in r.stderr, r.stderr
    (tmp_path / "abc.csv").write_text("ts,v\n2026-01-01T12:00:02Z,abc\n")
    r = cli(t, "append", "sec3339", str(tmp_path / "abc.csv"))
    assert r.returncode == 1 and "line 2: column 'v': expected a DOUBLE, got 'abc'" in r.stderr, (
        r.stderr
    )


def test_a_bad_int_or_bool_in_a_file_names_its_line_and_column(
    server: LocalServer, tmp_path: Path
) -> None:
    """An INT64 or BOOL value that is not one (text, a JSON float, past int64, a word that
    is neither true nor false): one error line naming the line and the column; nothing sent."""
    t = server.target
    args = ("--field", "dev:INT64", "--field", "v:DOUBLE", "--field", "ok:BOOL")
    assert cli(t, "streams", "create", "ints", *args).returncode == 0
    head = "ts,dev,v,ok\n2026-01-01T12:00:00Z,1,1.0,true\n"
    cases = {
        "x.csv": (head + "2026-01-01T12:00:01Z,x,1.0,true\n", "line 3: column 'dev'"),
        "big.csv": (
            head + "2026-01-01T12:00:01Z,99999999999999999999,1.0,no\n",
            "line 3: column 'dev': 99999999999999999999 is out of the INT64 range",
        ),
        "maybe.csv": (head + "2026-01-01T12:00:01Z,2,1.0,maybe\n", "line 3: column 'ok'"),
        "f.jsonl": (
            '{"ts": "2026-01-01T12:00:01Z", "dev": 1.5, "v": 1.0, "ok": true}\n',
            "line 1: column 'dev': expected an INT64 (an integer), got 1.5",
        ),
    }
    for name, (text, said) in cases.items():
        (tmp_path / name).write_text(text)
        r = cli(t, "append", "ints", str(tmp_path / name))
        assert r.returncode == 1 and said in r.stderr, (name, r.stderr)
        assert r.stderr.count("error:") == 1, r.stderr
    r = cli(t, "--json", "streams", "get", "ints")
    assert json.loads(r.stdout)["rows_appended"] == 0, r.stdout


def test_a_timestamp_inside_a_struct_prints_as_text_unless_raw(
    server: LocalServer, tmp_path: Path
) -> None:
    """An arg-max keyed by the timestamp: its key part printed as RFC 3339 text in the
    summary and in JSON, as int nanoseconds with --raw."""
    t = server.target
    assert cli(t, "streams", "create", "am", "--field", "v:DOUBLE").returncode == 0
    agg = ("--agg", "peak=argmax:v:key=ts", "--policy", "count:5")
    assert cli(t, "windows", "create", "am", "w", *agg).returncode == 0
    (tmp_path / "am.csv").write_text(
        "ts,v\n2026-01-01T12:00:00Z,1.0\n2026-01-01T12:00:07Z,9.0\n2026-01-01T12:00:09Z,2.0\n"
    )
    assert cli(t, "append", "am", str(tmp_path / "am.csv")).returncode == 0
    r = cli(t, "query", "am", "w")
    assert '"key": "2026-01-01T12:00:07Z"' in r.stdout and '"value": 9.0' in r.stdout, r.stdout
    r = cli(t, "--json", "query", "am", "w")
    assert json.loads(r.stdout)["values"]["peak"] == {"value": 9.0, "key": "2026-01-01T12:00:07Z"}
    r = cli(t, "--json", "--raw", "query", "am", "w")
    assert json.loads(r.stdout)["values"]["peak"]["key"] == 1_767_268_807_000_000_000


def test_out_of_order_refusals_name_timestamps_as_the_stream_reads_them(
    server: LocalServer,
) -> None:
    """A REJECT stream's OUT_OF_ORDER refusal: RFC 3339 text on a wall-clock stream (keyed or
    not), the plain number in the stream's unit on one whose timestamps are not dates."""
    from datetime import UTC, datetime

    from mtawindows.client import Field, MtaWindowsError, StreamSpec, WindowClient

    early, late = (
        datetime(2026, 1, 1, 12, 0, 3, tzinfo=UTC),
        datetime(2026, 1, 1, 12, 0, 5, tzinfo=UTC),
    )
    with WindowClient(server.target) as c:
        for name, key in (("ooo", ""), ("ooo_keyed", "host")):
            fields = (Field("v", "DOUBLE"), *((Field("host", "STRING"),) if key else ()))
            c.create_stream(StreamSpec(name, fields, key=key, late_policy="REJECT"))
            cols: dict[str, list[object]] = {"ts": [late, early], "v": [1.0, 2.0]}
            if key:
                cols["host"] = ["a", "a"]
            with pytest.raises(MtaWindowsError) as err:
                c.append(name, cols)
            assert err.value.reason == "OUT_OF_ORDER"
            assert "2026-01-01T12:00:03Z" in err.value.message, err.value.message
            assert "2026-01-01T12:00:05Z" in err.value.message, err.value.message
        c.create_stream(
            StreamSpec("ooo_seq", (Field("v", "DOUBLE"),), ts_unit="s", wall_clock=False,
                       late_policy="REJECT")
        )  # fmt: skip
        with pytest.raises(MtaWindowsError) as err:
            c.append("ooo_seq", {"ts": [5, 3], "v": [1.0, 2.0]})
        assert "timestamp 3, older than the previous row's (5)" in err.value.message


def _on_a_terminal(args: list[str]) -> tuple[str, str]:
    """Run the CLI with stderr on a pseudo-terminal: (what the terminal showed, stdout)."""
    import pty
    import re
    import select

    main, sub = pty.openpty()
    env = {**os.environ, "COLUMNS": "120", "TERM": "xterm"}
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=sub, env=env)
    os.close(sub)
    shown = b""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        ready, _, _ = select.select([main], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            shown += chunk
        elif proc.poll() is not None:
            break
    os.close(main)
    out = proc.communicate(timeout=60)[0].decode()
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", shown.decode(errors="replace"))
    return text, out


def test_the_progress_bar_counts_rows_rate_and_time_left(
    server: LocalServer, tmp_path: Path
) -> None:
    """On a terminal, ``append FILE`` shows its share read, rows, rows/s, the time taken and
    left (on stderr: stdout keeps the summary); not with ``--no-progress``, nor when stderr
    is not a terminal."""
    import re

    t = server.target
    assert cli(t, "streams", "create", "bar", "--field", "v:DOUBLE").returncode == 0
    rows = tmp_path / "bar.csv"
    n = 60_000
    t0 = 1_767_268_800_000_000_000
    rows.write_text("ts,v\n" + "".join(f"{t0 + i * 1000},{i}.5\n" for i in range(n)))
    cmd = [*mtawindows_command(), "append", "bar", str(rows), "--target", t]
    shown, out = _on_a_terminal(cmd)
    assert out.startswith(f"appended {n:,} rows to bar"), out
    bars = re.findall(r"append bar .*?(\d+)% ([\d,]+) rows ([\d,]+) rows/s (\d+:\d\d:\d\d)", shown)
    assert bars, shown[-2000:]
    seen = [int(r.replace(",", "")) for _, r, _, _ in bars]
    assert seen == sorted(seen) and 0 < seen[-1] <= n, seen
    assert all(int(rate.replace(",", "")) > 0 for _, r, rate, _ in bars if r != "0"), bars
    assert re.search(r"rows/s \d+:\d\d:\d\d \d+:\d\d:\d\d", shown), "no time left shown"
    for name in ("bar2", "bar3"):
        assert cli(t, "streams", "create", name, "--field", "v:DOUBLE").returncode == 0
    shown, out = _on_a_terminal(
        [*mtawindows_command(), "append", "bar2", str(rows), "--no-progress", "--target", t]
    )
    assert out.startswith(f"appended {n:,} rows to bar2") and "rows/s" not in shown, shown
    r = cli(t, "append", "bar3", str(rows))  # stderr not a terminal: no bar, nothing said
    assert r.returncode == 0 and r.stderr == "", r.stderr


def test_a_refused_batch_of_a_file_says_what_was_applied_and_how_to_resume(
    server: LocalServer, tmp_path: Path
) -> None:
    """A 3-batch file whose third batch holds a late row: the error names the batch's lines
    and the row's line, the rows the batches before it applied, and the producer and start
    sequence that resend the file with those batches skipped as duplicates; doing so
    applies the rest once. ``--json`` carries the same facts."""
    t = server.target
    assert cli(t, "streams", "create", "resume", "--field", "v:DOUBLE").returncode == 0
    t0 = 1_767_268_800_000_000_000
    ts = [t0 + i * 1000 for i in range(2_500)]
    ts[2_200] = t0  # line 2,202 of the file (header on line 1): older than the row before
    rows = tmp_path / "late.csv"
    rows.write_text("ts,v\n" + "".join(f"{x},{i}.5\n" for i, x in enumerate(ts)))
    args = ["append", "resume", str(rows), "--batch-rows", "1000", "--producer-id", "load-1"]
    r = cli(t, *args)
    assert r.returncode == 1, r.stderr
    assert "OUT_OF_ORDER" in r.stderr and "lines 2002-2501" in r.stderr, r.stderr
    assert "its row 200 is line 2202" in r.stderr, r.stderr
    assert "2 batches before it (2,000 rows) are applied" in r.stderr, r.stderr
    assert "--producer-id load-1 --start-sequence 1" in r.stderr, r.stderr
    err = json.loads(cli(t, *args, "--json").stderr)["error"]
    assert err["append"]["line"] == 2202 and err["append"]["producer_id"] == "load-1", err
    # sent again: the first two batches are duplicates now, in the stream all the same
    assert (err["append"]["applied_rows"], err["append"]["applied_batches"]) == (2_000, 2), err
    info = json.loads(cli(t, "streams", "get", "resume", "--json").stdout)
    assert info["rows_appended"] == 2_000
    ts[2_200] = ts[2_199] + 1  # fixed: the same command again
    rows.write_text("ts,v\n" + "".join(f"{x},{i}.5\n" for i, x in enumerate(ts)))
    r = cli(t, *args)
    assert r.returncode == 0, r.stderr
    info = json.loads(cli(t, "streams", "get", "resume", "--json").stdout)
    # each of the two resends skipped the two batches applied first
    assert (info["rows_appended"], info["batches_duplicate"]) == (2_500, 4), info


def test_a_row_without_a_field_names_its_line(server: LocalServer, tmp_path: Path) -> None:
    t = server.target
    assert (
        cli(
            t, "streams", "create", "short", "--field", "v:DOUBLE", "--field", "room:STRING"
        ).returncode
        == 0
    )
    for name, text in (
        ("short.csv", "ts,v,room\n2026-01-01T12:00:00Z,1.0,a\n2026-01-01T12:00:01Z,2.0\n"),
        ("short.jsonl", '{"ts": "2026-01-01T12:00:00Z", "v": 1.0}\n'),
    ):
        f = tmp_path / name
        f.write_text(text)
        r = cli(t, "append", "short", str(f))
        line = 3 if name.endswith("csv") else 1
        assert r.returncode == 1 and f"line {line}: no value for 'room'" in r.stderr, r.stderr


def test_nulls_sent_by_the_sdk_name_their_first_row(server: LocalServer) -> None:
    import pyarrow as pa

    from mtawindows.client import Field, MtaWindowsError, StreamSpec, WindowClient

    with WindowClient(server.target) as c:
        c.create_stream(StreamSpec("nulls", (Field("v", "DOUBLE"),), wall_clock=False))
        table = pa.table({"ts": pa.array([1, 2, 3], pa.int64()), "v": [1.0, None, None]})
        with pytest.raises(MtaWindowsError) as err:
            c.append("nulls", table)
    assert err.value.reason == "BAD_VALUES"
    assert "2 in column 'v', the first at row 1" in err.value.message, err.value.message
    assert err.value.metadata["row"] == "1"
