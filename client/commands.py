"""The client commands of ``mtawindows``: streams, windows, keys, append, query, watch (``serve``
is the server's: :mod:`mtawindows.server.serve_command`; :mod:`mtawindows.cli` joins both).

Every client subcommand takes ``--target`` ($MTAWINDOWS_TARGET, default localhost:50051: a
server, or several comma-separated, the seeds of a cluster: each call goes to the server that
owns its stream, as :class:`~mtawindows.client.WindowClient` routes it), ``--token``
($MTAWINDOWS_TOKEN) and ``--tls-ca`` ($MTAWINDOWS_TLS_CA). Errors print as
``error: [CODE/REASON] message`` with the field violations, exit status 1.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import timedelta
from typing import Any, NoReturn, TextIO

from mtawindows.v1.types import ALGORITHMS, show

from .errors import MtaWindowsError
from .present import Presenter, plain

EPILOG_STREAMS = """examples:
  mtawindows streams list
  mtawindows streams create cpu --field load:DOUBLE --field host:STRING --timestamp ts
  mtawindows streams create sensors --field temp:DOUBLE --late drop --lateness 5s
  mtawindows streams create ticks --field px:DOUBLE --ts-unit ms   # numbers are milliseconds
  mtawindows streams create hosts --field load:DOUBLE --field host:STRING --key host \\
      --key-groups 64 --key-ttl 1h          # keyed: each window holds one per host
  mtawindows streams get cpu
  mtawindows streams delete cpu
"""
EPILOG_WINDOWS = """examples:
  mtawindows windows create cpu last_hour --agg n=count --agg peak=max:load \\
      --agg when=argmax:load:key=ts --policy time:1h
  mtawindows windows create cpu last_1k --agg m=mean:load --agg sd=stddev:load:ddof=1 --policy count:1000
  mtawindows windows create cpu every_10s --agg peak=max:load --policy time:1m --slide 10s
  mtawindows windows create cpu custom --agg ts_max=max:ts --agg n=count \\
      --policy 'cel:total.ts_max - old.ts_max >= duration("10m") || total.n - old.n > 5000'
  mtawindows windows list cpu
  mtawindows windows get cpu last_hour
policies: count:N | time:DURATION | sum:FIELD:BOUND | maxsub:FIELD[:MAXROWS] | cel:EXPR
"""
EPILOG_APPEND = """examples:
  mtawindows append cpu rows.csv                        # header: ts,load,host
  cat rows.jsonl | mtawindows append cpu - --format jsonl --batch-rows 5000
  mtawindows append cpu rows.csv --producer-id loader-1 --start-sequence 1
timestamps: RFC 3339 text ("2024-05-01T12:00:00Z"), or numbers in the stream's unit
(streams create --ts-unit; default nanoseconds)
"""
EPILOG_QUERY = """examples:
  mtawindows query cpu last_hour
  mtawindows watch cpu last_hour          # a line per applied batch, until Ctrl-C
  mtawindows query cpu last_hour --json --raw   # JSON, timestamps as int nanoseconds
  mtawindows query hosts last_hour --key web-1                  # a keyed stream: one key's
  mtawindows watch hosts last_hour --key web-1 --key web-2      # those keys' (default: all)
  mtawindows query cpu last_hour --range 5m     # the last 5 minutes of the window only
  mtawindows query cpu last_hour --count 100    # its newest 100 rows only
"""
EPILOG_CLUSTER = """examples:
  mtawindows cluster                                # members, and the owner of every stream
  mtawindows cluster orders --target localhost:50051,localhost:50052,localhost:50053
"""
EPILOG_KEYS = """examples:
  mtawindows keys list hosts                        # every key: key, rows, newest_timestamp
  mtawindows keys list hosts --prefix web- --limit 10
  mtawindows keys get hosts web-1                   # its counters and each window's result
  mtawindows keys delete hosts web-1                # drops it and its state in every window
"""

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ns|us|ms|s|m|h|d)$")
_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> timedelta:
    m = _DURATION.match(text.strip())
    if m is None:
        msg = f"expected a duration like 500ms, 30s, 10m, 1h, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return timedelta(seconds=float(m.group(1)) * _UNITS[m.group(2)])


def _row_count(text: str) -> int:
    """``--count``: a row count >= 1."""
    t = text.strip()
    if not t.isdigit() or int(t) < 1:
        msg = f"expected a row count >= 1, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return int(t)


def _env(name: str, default: Any = None) -> Any:
    return os.environ.get(f"MTAWINDOWS_{name}", default)


# --------------------------------------------------------------------------- parsing specs


def parse_agg(text: str) -> Any:
    """``name=monoid[:field][:param=value...]``."""
    from mtawindows.v1.types import Aggregation

    name, eq, rest = text.partition("=")
    if not eq or not name or not rest:
        msg = f"expected name=monoid[:field][:param=value], got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    parts = rest.split(":")
    monoid, fld, params = parts[0], "", {}
    for p in parts[1:]:
        if "=" in p:
            k, _, v = p.partition("=")
            params[k] = v
        elif not fld:
            fld = p
        else:
            msg = f"{text!r}: a second field {p!r}; params are key=value"
            raise argparse.ArgumentTypeError(msg)
    return Aggregation(name, monoid, fld, params)


def parse_policy(text: str) -> Any:
    from mtawindows.v1.types import Policy

    kind, _, rest = text.partition(":")
    try:
        if kind == "count":
            return Policy.count(int(rest))
        if kind == "time":
            return Policy.time_range(parse_duration(rest))
        if kind == "sum":
            fld, _, bound = rest.partition(":")
            return Policy.bounded_sum(fld, float(bound))
        if kind == "maxsub":
            fld, _, size = rest.partition(":")
            return Policy.max_sub_window(fld, int(size or 0))
        if kind == "cel":
            return Policy.expression(rest)
    except ValueError as ex:
        msg = f"bad policy {text!r}: {ex}"
        raise argparse.ArgumentTypeError(msg) from None
    msg = f"expected count:N, time:DURATION, sum:FIELD:BOUND, maxsub:FIELD[:N] or cel:EXPR, got {text!r}"
    raise argparse.ArgumentTypeError(msg)


def parse_field(text: str) -> Any:
    from mtawindows.v1.types import Field

    name, _, rest = text.partition(":")
    type_name, _, flag = (rest or "DOUBLE").partition(":")
    try:
        return Field(name, type_name.upper(), allow_nan=flag.lower() == "nan")
    except ValueError as ex:  # (SpecError): what was wrong, what is expected
        msg = (
            f"expected name:TYPE[:nan] with TYPE one of DOUBLE INT64 STRING BOOL TIMESTAMP, "
            f"got {text!r} ({ex})"
        )
        raise argparse.ArgumentTypeError(msg) from None


# --------------------------------------------------------------------------- the parser


class CliParser(argparse.ArgumentParser):
    """argparse's parser, whose usage errors are one JSON object on stderr when the command
    line asks for ``--json`` (:attr:`json_errors`, set by :func:`main`); exit status 2."""

    json_errors = False

    def error(self, message: str) -> NoReturn:
        if CliParser.json_errors:
            _json_error(message, code="INVALID_ARGUMENT", reason="USAGE", violations=[])
            raise SystemExit(2)
        super().error(message)


# client flags that take a value: given before the command, they go after it
_CLIENT_VALUED = ("--target", "--token", "--tls-ca", "--timeout")


def hoist(argv: list[str]) -> list[str]:
    """``argv`` with the client flags given before the command moved after it, where the
    command's parser reads them (``mtawindows --target h:p query s w``); ``--json`` and
    ``--raw`` stay (the top-level parser takes them too)."""
    moved: list[str] = []
    i = 0
    while i < len(argv) and argv[i].startswith("--"):
        name = argv[i].split("=", 1)[0]
        if name in _CLIENT_VALUED:
            step = 1 if "=" in argv[i] else 2
            moved += argv[i : i + step]
            i += step
        elif name in ("--json", "--raw"):
            i += 1
        else:
            break
    if not moved:
        return argv
    kept = [a for a in argv[:i] if a.split("=", 1)[0] in ("--json", "--raw")]
    return kept + argv[i:] + moved


def build_parser() -> argparse.ArgumentParser:
    p = CliParser(
        prog="mtawindows",
        description="Exact sliding-window aggregates over streams (Monoid Tree Aggregator).",
    )
    add_output_flags(p)
    add_commands(p.add_subparsers(dest="command", required=True))
    return p


def add_output_flags(p: argparse.ArgumentParser) -> None:
    """``--json`` and ``--raw`` before the command too (``mtawindows --json query ...``)."""
    p.add_argument(
        "--json",
        dest="json_all",
        action="store_true",
        help="print JSON (for scripts) instead of a summary, errors too (also after the command)",
    )
    p.add_argument(
        "--raw",
        dest="raw_all",
        action="store_true",
        help="print timestamps as int nanoseconds (also after the command)",
    )


_FMT = argparse.RawDescriptionHelpFormatter
DEFAULT_TARGET = "localhost:50051"


def add_commands(sub: Any) -> None:
    """The client subcommands, added to ``sub`` (an argparse subparsers action)."""
    _add_streams(sub)
    _add_windows(sub)
    _add_keys(sub)
    _add_append(sub)
    c = sub.add_parser(
        "cluster",
        help="print the cluster's members and which one owns each stream",
        epilog=EPILOG_CLUSTER,
        formatter_class=_FMT,
    )
    _client_flags(c)
    c.add_argument(
        "streams",
        nargs="*",
        metavar="STREAM",
        help="streams whose owner to print (default: every stream)",
    )
    for name, helptext in (
        ("query", "print a window's result"),
        ("watch", "follow a window's results"),
    ):
        q = sub.add_parser(name, help=helptext, epilog=EPILOG_QUERY, formatter_class=_FMT)
        _client_flags(q)
        q.add_argument("stream")
        q.add_argument("window")
        if name == "query":
            q.add_argument("--key", default=None, help="a keyed stream: the key whose result")
            suffix = q.add_mutually_exclusive_group()
            suffix.add_argument(
                "--range",
                type=parse_duration,
                default=None,
                help="only the rows newer than the newest minus this (500ms, 30s, 5m, 1h), as "
                "a time-range policy counts them (AMTA, LMTA, FLATFAT, BINT, FLATFIT windows)",
            )
            suffix.add_argument(
                "--count",
                type=_row_count,
                default=None,
                help="only the newest COUNT rows (AMTA, LMTA, FLATFAT, BINT, FLATFIT windows)",
            )
        else:
            q.add_argument(
                "--key",
                dest="keys",
                action="append",
                default=[],
                metavar="KEY",
                help="a keyed stream: a key to follow (repeat for more; default: every key)",
            )


def _client_flags(sp: argparse.ArgumentParser) -> None:
    sp.add_argument(
        "--target",
        default=_env("TARGET", DEFAULT_TARGET),
        help="host:port, or several comma-separated: seeds of a cluster ($MTAWINDOWS_TARGET)",
    )
    sp.add_argument("--token", default=_env("TOKEN"), help="bearer token ($MTAWINDOWS_TOKEN)")
    sp.add_argument(
        "--tls-ca", default=_env("TLS_CA"), help="CA bundle: use TLS ($MTAWINDOWS_TLS_CA)"
    )
    sp.add_argument("--timeout", type=float, default=30.0, help="deadline per call, seconds")
    sp.add_argument(
        "--json", action="store_true", help="print JSON (for scripts) instead of a summary"
    )
    sp.add_argument(
        "--raw",
        action="store_true",
        help="print timestamps as int nanoseconds since the epoch, not RFC 3339 text",
    )


def _resource(sub: Any, noun: str, epilog: str, *parents: str) -> argparse.ArgumentParser:
    """``<noun>s list|create|get|delete``; returns the ``create`` parser."""
    r = sub.add_parser(
        f"{noun}s", help=f"list, create, get, delete {noun}s", epilog=epilog, formatter_class=_FMT
    )
    actions = r.add_subparsers(dest="action", required=True)
    create: argparse.ArgumentParser | None = None
    for action in ("list", "create", "get", "delete"):
        a: argparse.ArgumentParser = actions.add_parser(action, epilog=epilog, formatter_class=_FMT)
        _client_flags(a)
        for parent in parents:
            a.add_argument(parent)
        if action != "list":
            a.add_argument("name")
        if action == "create":
            create = a
    assert create is not None
    return create


def _add_streams(sub: Any) -> None:
    a = _resource(sub, "stream", EPILOG_STREAMS)
    a.add_argument(
        "--field",
        action="append",
        type=parse_field,
        default=[],
        help="name:TYPE[:nan] (DOUBLE INT64 STRING BOOL TIMESTAMP)",
    )
    a.add_argument("--timestamp", default="ts", help="the timestamp column")
    a.add_argument(
        "--ts-unit",
        choices=("s", "ms", "us", "ns"),
        default="ns",
        help="the unit of timestamps given as plain numbers (default ns; RFC 3339 text carries "
        "its own)",
    )
    a.add_argument(
        "--not-wall-clock",
        action="store_true",
        help="the timestamps are not dates (sequence numbers): take numbers before 1990 too",
    )
    a.add_argument(
        "--late",
        choices=("reject", "drop"),
        default="reject",
        help="a row older than the newest: reject its batch (default), or drop the row",
    )
    a.add_argument(
        "--lateness",
        type=parse_duration,
        default=timedelta(0),
        help="reorder buffer (with --late drop)",
    )
    a.add_argument(
        "--key",
        default="",
        metavar="FIELD",
        help="a STRING or INT64 field: a keyed stream (each window holds one per key)",
    )
    a.add_argument(
        "--key-groups",
        type=int,
        default=0,
        metavar="N",
        help="groups the keys hash into, 1..4096, fixed (default 0: the server's, 256)",
    )
    a.add_argument(
        "--key-ttl",
        type=parse_duration,
        default=timedelta(0),
        metavar="DURATION",
        help="drop a key without rows for this long (default 0: never)",
    )


def _add_windows(sub: Any) -> None:
    a = _resource(sub, "window", EPILOG_WINDOWS, "stream")
    a.add_argument(
        "--agg",
        action="append",
        type=parse_agg,
        required=True,
        help="name=monoid[:field][:param=value]",
    )
    a.add_argument(
        "--policy",
        type=parse_policy,
        required=True,
        help="which rows stay: count:N | time:DURATION | sum:FIELD:BOUND | "
        "maxsub:FIELD[:MAXROWS] | cel:EXPR",
    )
    a.add_argument(
        "--algorithm",
        type=str.upper,
        choices=ALGORITHMS,
        default="AMTA",
        help="the aggregation algorithm: AMTA (default: Amortized MTA, amortized O(1), middle "
        "levels in Redis), LMTA (Log MTA), or one of the reference papers' (all in the "
        "server: TWO_STACKS, TWO_STACKS_LITE, DABA, DABA_LITE, FLATFAT, BINT, FLATFIT, "
        "SLICKDEQUE); see the docs' algorithms page",
    )
    a.add_argument(
        "--storage",
        choices=("redis", "memory"),
        default="redis",
        help="where the window's state lives (default redis: restored on restart; an MTA "
        "keeps its middle levels there, the other algorithms checkpoints of every item)",
    )
    a.add_argument("--durable", action="store_true", help="journal every batch")
    a.add_argument(
        "--slide",
        type=parse_slide,
        default=None,
        metavar="DURATION|ROWS",
        help="a hopping window: a result at each multiple of DURATION (event time; 10s, 1m) "
        "or after every ROWS rows, over the policy's range before it (count:N or time:D)",
    )


def parse_slide(text: str) -> Any:
    """``--slide``: a row count (digits) or a duration."""
    t = text.strip()
    if t.isdigit():
        n = int(t)
        if n < 1:
            msg = f"expected a row count >= 1 or a duration like 10s, got {text!r}"
            raise argparse.ArgumentTypeError(msg)
        return n
    return parse_duration(t)


def _add_keys(sub: Any) -> None:
    """``keys list STREAM [--prefix P] [--limit N] | get STREAM KEY | delete STREAM KEY``."""
    r = sub.add_parser(
        "keys",
        help="list, get, delete the keys of a keyed stream",
        epilog=EPILOG_KEYS,
        formatter_class=_FMT,
    )
    actions = r.add_subparsers(dest="action", required=True)
    for action in ("list", "get", "delete"):
        a: argparse.ArgumentParser = actions.add_parser(
            action, epilog=EPILOG_KEYS, formatter_class=_FMT
        )
        _client_flags(a)
        a.add_argument("stream")
        if action == "list":
            a.add_argument("--prefix", default="", help="only the keys starting with this")
            a.add_argument(
                "--limit",
                type=int,
                default=0,
                metavar="N",
                help="at most N keys (default 0: every key, page after page)",
            )
            a.add_argument(
                "--page-size", type=int, default=1000, metavar="N", help="keys per ListKeys call"
            )
        else:
            a.add_argument("key", help="the key's text (an INT64 key in decimal)")


def _add_append(sub: Any) -> None:
    ap = sub.add_parser(
        "append", help="append CSV or JSON lines", epilog=EPILOG_APPEND, formatter_class=_FMT
    )
    _client_flags(ap)
    ap.add_argument("stream")
    ap.add_argument("file", help="a path, or - for stdin")
    ap.add_argument(
        "--format", choices=("csv", "jsonl"), default=None, help="default: by extension, else csv"
    )
    ap.add_argument(
        "--batch-rows", type=int, default=10_000, help="rows per Append call (default 10000)"
    )
    ap.add_argument(
        "--producer-id",
        default=None,
        help="the producer's name for idempotent retries (default: a new one per run)",
    )
    ap.add_argument(
        "--start-sequence",
        type=int,
        default=1,
        help="the first batch's sequence (resume a producer after its last acknowledged one)",
    )
    ap.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


# --------------------------------------------------------------------------- commands


def _client(args: argparse.Namespace) -> Any:
    from .blocking import WindowClient

    return WindowClient(args.target, token=args.token, tls=args.tls_ca, timeout=args.timeout)


def _print_each(items: Iterable[Any]) -> None:
    """A JSON list written as its items come (the line :func:`_print` prints for a list):
    nothing before the first item, so that a failure of the first call prints only the error;
    a list cut short by a failure later is left open (no closing bracket)."""
    started = False
    try:
        for item in items:
            print(", " if started else "[", end="")
            print(json.dumps(item), end="", flush=True)
            started = True
    except BaseException:
        if started:
            print(flush=True)  # end the line; the error follows on stderr
        raise
    print("]" if started else "[]")


def _keys(c: Any, args: argparse.Namespace, out: Presenter) -> None:
    """``keys list|get|delete``."""
    if args.action == "get":
        k = c.get_key(args.stream, args.key)
        text = [
            f"key {k.key} of {args.stream} (group {k.group}): rows {k.rows_appended:,} (late "
            f"{k.rows_late:,}), newest row {out.when(k.newest_timestamp) or 'none'}"
        ]
        for r in k.results.values():
            text.append(f"window {r.window}: {r.size:,} rows")
            text += ["  " + line for line in out.values(r.values)]
        out.emit(k, "\n".join(text))
    elif args.action == "delete":
        c.delete_key(args.stream, args.key)
        name = f"{args.stream}/{args.key}"
        out.emit({"deleted": name}, f"deleted key {name}")
    else:
        if args.limit < 0 or args.page_size < 1:
            msg = "--limit: expected N >= 0; --page-size: expected N >= 1"
            raise ValueError(msg)
        size = min(args.page_size, args.limit) if args.limit else args.page_size
        found = c.iter_keys(args.stream, prefix=args.prefix, page_size=size)
        if args.limit:
            found = itertools.islice(found, args.limit)
        items = (
            {
                "key": k.key,
                "rows": k.rows_appended,
                "newest_timestamp": out.when(k.newest_timestamp),
            }
            for k in found
        )
        if out.json:
            _print_each(items)
        else:
            _print_rows(items)


def _print_rows(items: Iterable[dict[str, Any]]) -> None:
    """Keys as lines of text, each as it comes (a listing cut short by a failure keeps what
    it printed)."""
    n = 0
    for item in items:
        if n == 0:
            print(f"{'key':<24}  {'rows':>10}  newest row")
        print(
            f"{item['key']:<24}  {item['rows']:>10,}  {item['newest_timestamp'] or '-'}", flush=True
        )
        n += 1
    if n == 0:
        print("no keys")


def _rows(
    stream: Iterable[str], fmt: str, schema: dict[str, str]
) -> Iterator[tuple[int, dict[str, Any]]]:
    """The rows of a CSV or JSON-lines file with their line numbers, each value cast to its
    field's type; a row missing a field (a short CSV line, a JSON line without the key) is a
    ValueError naming line and field. A DOUBLE
    field takes an integer (a JSON int, or CSV text of digits) only where a double holds it
    exactly: any other is a ValueError naming line and column, never rounded."""
    from mtawindows.v1.convert import inexact_int_text, is_exact_double, to_nanos

    def double(name: str, v: Any, line: int) -> Any:
        if isinstance(v, str):
            if not re.fullmatch(r"[+-]?\d+", v.strip()):
                try:
                    return float(v)
                except ValueError:
                    msg = f"line {line}: column {name!r}: expected a DOUBLE, got {v!r}"
                    raise ValueError(msg) from None
            v = int(v)
        if isinstance(v, int) and not isinstance(v, bool):
            if not is_exact_double(v):
                msg = (
                    f"line {line}: column {name!r}: expected DOUBLE values, got "
                    f"{inexact_int_text(v)}; write it as a decimal, or make the field INT64"
                )
                raise ValueError(msg)
            return float(v)
        return v

    def cast(name: str, v: Any, line: int) -> Any:
        t = schema.get(name)
        if t == "TIMESTAMP":
            if isinstance(v, str):
                if re.fullmatch(r"-?\d+", v.strip()):
                    return int(v)  # a plain number: read in the stream's ts_unit
                if re.fullmatch(r"-?\d+\.\d*", v.strip()):
                    return float(v)  # (refused unless the unit is coarser than ns)
                try:
                    to_nanos(v)  # checked here, for the line number
                except TypeError as ex:
                    msg = f"line {line}: column {name!r}: {ex}"
                    raise ValueError(msg) from None
                return v  # text: read by the SDK (its own unit, not the stream's)
            return v
        if t == "DOUBLE":
            return double(name, v, line)
        if t == "INT64":
            return integer(name, v, line)
        if t == "BOOL" and isinstance(v, str):
            word = v.strip().lower()
            if word in ("1", "true", "yes"):
                return True
            if word in ("0", "false", "no", ""):
                return False
            msg = f"line {line}: column {name!r}: expected a BOOL (true or false), got {show(v)}"
            raise ValueError(msg)
        return v

    def integer(name: str, v: Any, line: int) -> Any:
        if isinstance(v, str) and re.fullmatch(r"\s*[+-]?\d+\s*", v):
            v = int(v)
        if not isinstance(v, int) or isinstance(v, bool):
            msg = f"line {line}: column {name!r}: expected an INT64 (an integer), got {show(v)}"
            raise ValueError(msg)
        if not -(2**63) <= v < 2**63:
            msg = f"line {line}: column {name!r}: {v} is out of the INT64 range (+-2**63)"
            raise ValueError(msg)
        return v

    fields = list(schema)

    def missing(rec: Mapping[str, Any], line: int) -> None:
        gone = [f for f in fields if rec.get(f) is None]
        if gone:
            msg = (
                f"line {line}: no value for {', '.join(map(repr, gone))} (the stream's fields "
                f"are {', '.join(fields)})"
            )
            raise ValueError(msg)

    if fmt == "jsonl":
        for n, line in enumerate(stream, 1):
            if line.strip():
                rec = json.loads(line)
                missing(rec, n)
                yield n, {k: cast(k, v, n) for k, v in rec.items()}
    else:
        reader = csv.DictReader(stream)
        first = (reader.fieldnames or [""])[0]
        if first.lstrip().startswith(("{", "[")):
            msg = (
                "line 1 looks like JSON, not a CSV header: pass --format jsonl (a file named "
                "*.jsonl, *.json or *.ndjson is read as JSON lines)"
            )
            raise ValueError(msg)
        for rec in reader:
            missing(rec, reader.line_num)
            yield reader.line_num, {k: cast(k, v, reader.line_num) for k, v in rec.items()}


class _Counted:
    """The lines of a text file, counting the bytes read (the progress bar's position)."""

    def __init__(self, src: TextIO) -> None:
        self.src = src
        self.bytes = 0

    def __iter__(self) -> Iterator[str]:
        for line in self.src:
            self.bytes += len(line.encode())
            yield line


def _progress(args: argparse.Namespace) -> tuple[Any, Any, int]:
    """A progress bar on a terminal (rows, rows/s, and for a file, its share read and the
    time left), else None; its task; the file's size (0: unknown, stdin)."""
    if args.no_progress or not sys.stderr.isatty():
        return None, None, 0
    from rich.progress import (
        BarColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    size = 0 if args.file == "-" else os.path.getsize(args.file)
    columns: list[Any] = [TextColumn(f"append {args.stream}")]
    if size:
        columns += [BarColumn(), TextColumn("{task.percentage:>3.0f}%")]
    columns += [
        TextColumn("{task.fields[rows]:,} rows"),
        TextColumn("{task.fields[rate]:,.0f} rows/s"),
        TimeElapsedColumn(),
    ]
    if size:
        columns.append(TimeRemainingColumn())
    from rich.console import Console

    progress = Progress(*columns, transient=True, console=Console(stderr=True))
    progress.start()
    task = progress.add_task("append", total=size or None, rows=0, rate=0.0)
    return progress, task, size


def _refused_batch(
    ex: MtaWindowsError, wr: Any, batch_lines: dict[int, list[int]], args: argparse.Namespace
) -> None:
    """A batch of the file refused: say which lines it held (and the refused row's line),
    how many rows the batches before it applied, and how to send the rest
    (``ex.context``, printed by :func:`guarded`)."""
    if getattr(ex, "context", None):
        return
    b = wr.batches  # the sender stops at the first refusal: the batches before it applied
    held = batch_lines.get(b) or []
    ctx: dict[str, Any] = {
        "applied_rows": wr.sent_rows,
        "applied_batches": b,
        "producer_id": wr.producer_id,
        "start_sequence": args.start_sequence,
    }
    said = []
    if held:
        ctx["batch_lines"] = [held[0], held[-1]]
        said.append(f"the refused batch held lines {held[0]}-{held[-1]} of the file")
        row = ex.metadata.get("row", "")
        if row.isdigit() and int(row) < len(held):
            ctx["line"] = held[int(row)]
            said[-1] += f" (its row {row} is line {held[int(row)]})"
    said.append(
        f"the {b} batch{'es' if b != 1 else ''} before it ({wr.sent_rows:,} rows) are applied"
    )
    ex.context = ctx  # type: ignore[attr-defined]
    ex.context_text = (  # type: ignore[attr-defined]
        "; ".join(said) + f". Fix the file and run the same command again with --producer-id "
        f"{wr.producer_id} --start-sequence {args.start_sequence} (and the same --batch-rows): "
        "the batches already applied are skipped as duplicates"
    )


def cmd_append(args: argparse.Namespace) -> int:
    import time

    fmt = args.format or ("jsonl" if args.file.endswith((".jsonl", ".json", ".ndjson")) else "csv")
    out = Presenter(json_out=args.json, raw=args.raw)
    with _client(args) as c:
        schema = c.schema(args.stream)
        src: TextIO = sys.stdin if args.file == "-" else open(args.file, newline="")  # noqa: SIM115
        lines = _Counted(src)
        t0 = time.monotonic()
        # the file's lines of the batches not yet acknowledged: a refusal names them
        batch_lines: dict[int, list[int]] = {}
        wr: Any = None
        try:
            with c.writer(
                args.stream,
                batch_rows=args.batch_rows,
                producer_id=args.producer_id,
                start_sequence=args.start_sequence,
            ) as wr:
                progress, task, _size = _progress(args)
                n = 0
                per = args.batch_rows
                try:
                    for line, row in _rows(lines, fmt, schema):
                        b = n // per
                        if n % per == 0:
                            batch_lines[b] = []
                            batch_lines.pop(b - 8, None)  # acknowledged long ago (4 pending)
                        batch_lines[b].append(line)
                        wr.write(row)
                        n += 1
                        if progress is not None and n % 1000 == 0:
                            rate = n / max(time.monotonic() - t0, 1e-9)
                            progress.update(task, completed=lines.bytes, rows=n, rate=rate)
                except MtaWindowsError as ex:
                    _refused_batch(ex, wr, batch_lines, args)
                    raise
                finally:
                    if progress is not None:
                        progress.stop()
        except MtaWindowsError as ex:
            if wr is not None:
                _refused_batch(ex, wr, batch_lines, args)
            raise
        finally:
            if src is not sys.stdin:
                src.close()
        took = time.monotonic() - t0
        info = c.get_stream(args.stream)
        summary = {
            "stream": args.stream,
            "rows_sent": n,
            "batches": wr.batches,
            "producer_id": wr.producer_id,
            "next_sequence": wr.sequence,
            "rows_late_total": info.rows_late,
        }
        batches = f"{wr.batches} batch" + ("es" if wr.batches != 1 else "")
        text = (
            f"appended {n:,} row{'s' if n != 1 else ''} to {args.stream} in {batches}, {took:.1f} s (producer "
            f"{wr.producer_id}, next sequence {wr.sequence}); the stream has {info.rows_late:,} "
            "late rows in all"
        )
        out.emit(summary, text)
    return 0


def run(args: argparse.Namespace) -> int:
    if args.command == "append":
        return cmd_append(args)
    out = Presenter(json_out=args.json, raw=args.raw)
    with _client(args) as c:
        if args.command == "streams":
            _streams(c, args, out)
        elif args.command == "windows":
            _windows(c, args, out)
        elif args.command == "keys":
            _keys(c, args, out)
        elif args.command == "cluster":
            got = _cluster(c, args.streams)
            members = out.table(
                ["member", "streams", "heartbeat"],
                [
                    [m["address"], m["streams"], f"{m['heartbeat_age_ms']} ms ago"]
                    for m in got["members"]
                ],
            )
            owners = out.table(
                ["stream", "owner"], [[n, o or "(moving)"] for n, o in got["owners"].items()]
            )
            out.emit(got, f"{members}\n\n{owners}" if got["owners"] else members)
        elif args.command == "query":
            times = [] if out.raw else _time_outputs(c, args.stream, args.window, out)
            r = c.query(args.stream, args.window, key=args.key, range=args.range, count=args.count)
            out.emit(r, out.result(args.stream, r, times), times)
        elif args.command == "watch":
            times = [] if out.raw else _time_outputs(c, args.stream, args.window, out)
            try:
                for batch, result in c.subscribe(args.stream, args.window, keys=args.keys):
                    if out.json:  # the result as `query --json` prints it
                        line = out.timed(plain(result), times)
                        if result.key:  # a key's batch count is its own; the stream's too
                            line["stream_batch"] = batch
                        print(json.dumps(line), flush=True)
                    else:
                        print(out.result_line(batch, result, times), flush=True)
            except KeyboardInterrupt:
                return 0
    return 0


def _time_outputs(c: Any, stream: str, window: str, out: Presenter | None = None) -> list[str]:
    """The outputs of a window that are timestamps (printed as RFC 3339 text), a struct's
    timestamp parts as ``output.part``; tells ``out``
    whether a hopping window's boundaries are row counts."""
    info = c.get_window(stream, window)
    if out is not None:
        out.boundary_rows = isinstance(info.spec.slide, int)
    return [o.name for o in info.outputs if o.type == "TIMESTAMP"] + [
        f"{o.name}.{p.name}" for o in info.outputs for p in o.parts if p.type == "TIMESTAMP"
    ]


def _streams(c: Any, args: argparse.Namespace, out: Presenter) -> None:
    if args.action == "list":
        infos = c.list_streams()
        out.emit(
            infos,
            out.table(
                ["stream", "rows", "windows", "newest row"],
                [
                    [
                        i.spec.name,
                        f"{i.rows_appended:,}",
                        len(i.windows),
                        out.when(i.newest_timestamp) or "-",
                    ]
                    for i in infos
                ],
            )
            if infos
            else "no streams",
        )
    elif args.action == "get":
        info = c.get_stream(args.name)
        out.emit(info, out.stream(info))
    elif args.action == "delete":
        c.delete_stream(args.name)
        out.emit({"deleted": args.name}, f"deleted stream {args.name}")
    else:
        from mtawindows.v1.types import StreamSpec

        spec = StreamSpec(
            args.name,
            tuple(args.field),
            args.timestamp,
            args.late.upper(),
            args.lateness,
            key=args.key,
            key_groups=args.key_groups,
            key_ttl=args.key_ttl,
            ts_unit=args.ts_unit,
            wall_clock=not args.not_wall_clock,
        )
        info = c.create_stream(spec)
        out.emit(info, out.stream(info, "created stream"))


def _windows(c: Any, args: argparse.Namespace, out: Presenter) -> None:
    if args.action == "list":
        infos = c.list_windows(args.stream)
        out.emit(
            infos,
            "\n".join(
                f"{out.window(i).splitlines()[0].split(' ', 1)[1]}  [{i.spec.algorithm}]"
                for i in infos
            )
            if infos
            else f"no windows on {args.stream}",
        )
    elif args.action == "get":
        info = c.get_window(args.stream, args.name)
        out.emit(info, out.window(info, key=c.get_stream(args.stream).spec.key))
    elif args.action == "delete":
        c.delete_window(args.stream, args.name)
        name = f"{args.stream}/{args.name}"
        out.emit({"deleted": name}, f"deleted window {name}")
    else:
        from mtawindows.v1.types import Storage, WindowSpec

        wspec = WindowSpec(
            args.stream,
            args.name,
            tuple(args.agg),
            args.policy,
            args.algorithm,
            Storage(args.storage, args.durable),
            slide=args.slide,
        )
        info = c.create_window(wspec)
        key = c.get_stream(args.stream).spec.key
        out.emit(info, out.window(info, "created window", key=key))


def _cluster(c: Any, streams: list[str]) -> dict[str, Any]:
    """The members (address, streams owned, heartbeat age) and each stream's owner ("" while
    it moves: its old owner died and the lease has not run out yet)."""
    m = c.cluster_map()
    names = streams or [info.spec.name for info in c.list_streams()]
    owners: dict[str, str] = {}
    for name in names:
        try:
            owners[name] = c.owner(name)
        except MtaWindowsError as ex:
            if ex.reason != "STREAM_NOT_FOUND":
                raise
            owners[name] = "(no such stream)"
    return {
        "members": [
            {"address": x.address, "streams": x.streams, "heartbeat_age_ms": x.heartbeat_age_ms}
            for x in m.members
        ],
        "lease_ms": m.lease_ms,
        "owners": owners,
    }


def guarded(command: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """Run a command; a server's error (with its field violations), a bad file or a bad value
    prints ``error: ...`` to stderr (with ``--json``: one JSON object, ``{"error": {...}}``) and
    exits 1."""
    if getattr(args, "json_all", False):
        args.json = True
    if getattr(args, "raw_all", False):
        args.raw = True
    as_json = bool(getattr(args, "json", False))
    try:
        return command(args)
    except MtaWindowsError as ex:
        hint = ""
        target = getattr(args, "target", None)
        if ex.code == "UNAVAILABLE" and not ex.reason and target:
            told = "" if target != DEFAULT_TARGET else " (the default)"
            hint = (
                f"nothing answers at {target}{told}: start a server there (mtawindows serve), "
                "or point --target (or $MTAWINDOWS_TARGET) at one: host:port, or a cluster's "
                "servers comma-separated"
            )
        if as_json:
            said = [{"field": v.field, "description": v.description} for v in ex.violations]
            extra: dict[str, Any] = {"hint": hint} if hint else {}
            if getattr(ex, "context", None):
                extra["append"] = ex.context  # type: ignore[attr-defined]
            _json_error(ex.message, code=ex.code, reason=ex.reason, violations=said, **extra)
            return 1
        print(f"error: {ex}", file=sys.stderr)
        for v in ex.violations:
            if v.description not in ex.message:  # not said again
                print(f"  {v.field}: {v.description}", file=sys.stderr)
        if getattr(ex, "context_text", None):
            print(f"  {ex.context_text}", file=sys.stderr)  # type: ignore[attr-defined]
        if hint:
            print(f"hint: {hint}", file=sys.stderr)
        return 1
    except (OSError, ValueError, TypeError) as ex:  # a bad file, value or type: said once
        if as_json:
            _json_error(str(ex), code="INVALID_ARGUMENT", reason="BAD_INPUT", violations=[])
        else:
            print(f"error: {ex}", file=sys.stderr)
        return 1


def _json_error(message: str, **fields: Any) -> None:
    """An error as one JSON line on stderr: ``{"error": {"message", "code", "reason",
    "violations"[, "hint"][, "append"]}}``. Refused before any call: reason ``USAGE`` (a bad
    flag, exit 2) or ``BAD_INPUT`` (a file or value the CLI or SDK refused, exit 1); no server
    answered: code ``UNAVAILABLE``, no reason, a ``hint``."""
    print(json.dumps({"error": {"message": message, **fields}}), file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """The client commands (``mtawindows`` joins ``serve`` to them: :mod:`mtawindows.cli`).
    ``serve`` given here, as the flat layout's ``python -m mtawindows.client.commands serve`` did,
    hands this process over to ``python -m mtawindows.server`` (same pid, same flags): the
    client never imports the server."""
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["serve"]:
        os.execv(sys.executable, [sys.executable, "-m", "mtawindows.server", *args[1:]])
    return guarded(run, parse(build_parser(), args))


def parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """``argv`` parsed (client flags before the command too: :func:`hoist`); a usage error is
    JSON when ``--json`` is among them (:class:`CliParser`)."""
    CliParser.json_errors = "--json" in argv
    try:
        return parser.parse_args(hoist(argv))
    finally:
        CliParser.json_errors = False


if __name__ == "__main__":
    sys.exit(main())
