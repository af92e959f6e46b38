"""The ``mtawindows`` command line: serve, streams, windows, append, query, watch.

Every client subcommand takes ``--target`` ($MTAWINDOWS_TARGET, default localhost:50051),
``--token`` ($MTAWINDOWS_TOKEN) and ``--tls-ca`` ($MTAWINDOWS_TLS_CA). Errors print as
``error: [CODE/REASON] message`` with the field violations, exit status 1.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import sys
from collections.abc import Iterator, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any, TextIO

from .errors import MtaWindowsError

EPILOG_SERVE = """examples:
  mtawindows serve                                  # loopback :50051, embedded Redis in ~/.local/share/mtawindows
  mtawindows serve --port 0 --port-file port.txt    # a free port, written to port.txt
  mtawindows serve --redis-url redis://redis:6379/0 --host 0.0.0.0 --metrics-port 9102
  mtawindows serve --data-dir /var/lib/mtawindows   # one server per data dir (a lock file in it)
  MTAWINDOWS_TOKENS=s3cret mtawindows serve --tls-cert server.crt --tls-key server.key
"""
EPILOG_STREAMS = """examples:
  mtawindows streams list
  mtawindows streams create cpu --field load:DOUBLE --field host:STRING --timestamp ts
  mtawindows streams create sensors --field temp:DOUBLE --late drop --lateness 5s
  mtawindows streams get cpu
  mtawindows streams delete cpu
"""
EPILOG_WINDOWS = """examples:
  mtawindows windows create cpu last_hour --agg n=count --agg peak=max:load \\
      --agg when=argmax:load:key=ts --policy time:1h
  mtawindows windows create cpu last_1k --agg m=mean:load --agg sd=stddev:load:ddof=1 --policy count:1000
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
timestamps: integers (nanoseconds) or RFC 3339 text ("2024-05-01T12:00:00Z")
"""
EPILOG_QUERY = """examples:
  mtawindows query cpu last_hour
  mtawindows watch cpu last_hour          # one JSON line per applied batch, until Ctrl-C
"""

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ns|us|ms|s|m|h|d)$")
_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> timedelta:
    m = _DURATION.match(text.strip())
    if m is None:
        msg = f"expected a duration like 500ms, 30s, 10m, 1h, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return timedelta(seconds=float(m.group(1)) * _UNITS[m.group(2)])


def _env(name: str, default: Any = None) -> Any:
    return os.environ.get(f"MTAWINDOWS_{name}", default)


def _number_flag(
    parser: argparse.ArgumentParser, flag: str, kind: type, default: float, help: str = ""
) -> None:
    """``--flag N``, defaulting to ``$MTAWINDOWS_FLAG`` (dashes as underscores), else
    ``default``; the help says which variable."""
    env = flag[2:].upper().replace("-", "_")
    text = f"{help} " if help else ""
    parser.add_argument(
        flag,
        type=kind,
        default=kind(_env(env, default)),
        help=f"{text}(default {default}; $MTAWINDOWS_{env})",
    )


def _env_flag(name: str) -> bool:
    return str(_env(name, "")).strip().lower() in ("1", "true", "yes", "on")


# --------------------------------------------------------------------------- parsing specs


def parse_agg(text: str) -> Any:
    """``name=monoid[:field][:param=value...]``."""
    from .types import Aggregation

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
    from .types import Policy

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
    from .types import Field

    name, _, rest = text.partition(":")
    type_name, _, flag = (rest or "DOUBLE").partition(":")
    return Field(name, type_name.upper(), allow_nan=flag.lower() == "nan")


# --------------------------------------------------------------------------- the parser


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="mtawindows",
        description="Exact sliding-window aggregates over streams (Monoid Tree Aggregator).",
    )
    sub = p.add_subparsers(dest="command", required=True)

    def client_flags(sp: argparse.ArgumentParser) -> None:
        sp.add_argument(
            "--target",
            default=_env("TARGET", "localhost:50051"),
            help="host:port ($MTAWINDOWS_TARGET)",
        )
        sp.add_argument("--token", default=_env("TOKEN"), help="bearer token ($MTAWINDOWS_TOKEN)")
        sp.add_argument(
            "--tls-ca", default=_env("TLS_CA"), help="CA bundle: use TLS ($MTAWINDOWS_TLS_CA)"
        )
        sp.add_argument("--timeout", type=float, default=30.0, help="deadline per call, seconds")

    fmt = argparse.RawDescriptionHelpFormatter
    s = sub.add_parser(
        "serve", help="run the gRPC server", epilog=EPILOG_SERVE, formatter_class=fmt
    )
    s.add_argument(
        "--host", default=_env("HOST", "127.0.0.1"), help="bind address ($MTAWINDOWS_HOST)"
    )
    _number_flag(s, "--port", int, 50051, "port, 0 = any")
    s.add_argument("--port-file", default=_env("PORT_FILE"), help="write the bound port here")
    s.add_argument(
        "--reuse-port",
        action="store_true",
        default=_env_flag("REUSE_PORT"),
        help="SO_REUSEPORT: let several servers share the port (off: a taken port is an "
        "error) ($MTAWINDOWS_REUSE_PORT)",
    )
    s.add_argument(
        "--redis-url",
        default=_env("REDIS_URL"),
        help="Redis URL; none = embedded ($MTAWINDOWS_REDIS_URL)",
    )
    s.add_argument(
        "--data-dir",
        default=_env("DATA_DIR"),
        help="embedded Redis data; one server per directory ($MTAWINDOWS_DATA_DIR)",
    )
    _number_flag(
        s,
        "--redis-restarts",
        int,
        5,
        "restarts of a dead embedded Redis within 5 minutes before the server gives up and stays NOT_SERVING",
    )
    s.add_argument(
        "--tls-cert", default=_env("TLS_CERT"), help="PEM certificate ($MTAWINDOWS_TLS_CERT)"
    )
    s.add_argument(
        "--tls-key", default=_env("TLS_KEY"), help="PEM private key ($MTAWINDOWS_TLS_KEY)"
    )
    s.add_argument(
        "--tokens-file",
        default=_env("TOKENS_FILE"),
        help="bearer tokens, one per line, # comments; given but holding no token is an "
        "error ($MTAWINDOWS_TOKENS_FILE; also $MTAWINDOWS_TOKENS, comma-separated)",
    )
    _number_flag(s, "--metrics-port", int, 0, "Prometheus /metrics port, 0 = off")
    s.add_argument("--metrics-host", default=_env("METRICS_HOST", "127.0.0.1"))
    _number_flag(s, "--flush-interval", float, 1.0, "seconds between checkpoints")
    _number_flag(
        s, "--grace", float, 10.0, "seconds in-flight calls get to finish at a graceful stop"
    )
    _number_flag(s, "--max-batch-rows", int, 500000)
    _number_flag(
        s,
        "--result-history",
        int,
        1000,
        "results kept per window for ReadResults (the Spark source follows them)",
    )
    _number_flag(s, "--max-message-mb", int, 64)
    _number_flag(s, "--max-streams", int, 1000)
    _number_flag(s, "--max-windows", int, 64, "per stream")
    _number_flag(s, "--max-subscribers", int, 1000, "Subscribe calls at once")
    _number_flag(
        s,
        "--subscriber-queue-mb",
        float,
        8.0,
        "serialized results queued for one subscriber before it is cut as too slow",
    )
    _number_flag(
        s,
        "--subscribers-memory-mb",
        float,
        256.0,
        "serialized results held for all subscribers, each once; past it the furthest behind are cut",
    )
    _number_flag(s, "--max-cel-bytes", int, 4096, "size of a new CEL policy, UTF-8 bytes")
    _number_flag(
        s,
        "--max-cel-depth",
        int,
        64,
        "nesting of a new CEL policy: brackets plus stacked operators",
    )
    s.add_argument("--log-level", default=_env("LOG_LEVEL", "info"))
    s.add_argument("--log-format", choices=("json", "text"), default=_env("LOG_FORMAT", "json"))

    st = sub.add_parser(
        "streams",
        help="list, create, get, delete streams",
        epilog=EPILOG_STREAMS,
        formatter_class=fmt,
    )
    stsub = st.add_subparsers(dest="action", required=True)
    for action in ("list", "create", "get", "delete"):
        a = stsub.add_parser(action, epilog=EPILOG_STREAMS, formatter_class=fmt)
        client_flags(a)
        if action != "list":
            a.add_argument("name")
        if action == "create":
            a.add_argument(
                "--field",
                action="append",
                type=parse_field,
                default=[],
                help="name:TYPE[:nan] (DOUBLE INT64 STRING BOOL TIMESTAMP)",
            )
            a.add_argument("--timestamp", default="ts", help="the timestamp column")
            a.add_argument("--late", choices=("reject", "drop"), default="reject")
            a.add_argument(
                "--lateness",
                type=parse_duration,
                default=timedelta(0),
                help="reorder buffer (with --late drop)",
            )

    w = sub.add_parser(
        "windows",
        help="list, create, get, delete windows",
        epilog=EPILOG_WINDOWS,
        formatter_class=fmt,
    )
    wsub = w.add_subparsers(dest="action", required=True)
    for action in ("list", "create", "get", "delete"):
        a = wsub.add_parser(action, epilog=EPILOG_WINDOWS, formatter_class=fmt)
        client_flags(a)
        a.add_argument("stream")
        if action != "list":
            a.add_argument("name")
        if action == "create":
            a.add_argument(
                "--agg",
                action="append",
                type=parse_agg,
                required=True,
                help="name=monoid[:field][:param=value]",
            )
            a.add_argument("--policy", type=parse_policy, required=True)
            a.add_argument("--algorithm", choices=("AMTA", "LMTA"), default="AMTA")
            a.add_argument("--storage", choices=("redis", "memory"), default="redis")
            a.add_argument("--durable", action="store_true", help="journal every batch")

    ap = sub.add_parser(
        "append", help="append CSV or JSON lines", epilog=EPILOG_APPEND, formatter_class=fmt
    )
    client_flags(ap)
    ap.add_argument("stream")
    ap.add_argument("file", help="a path, or - for stdin")
    ap.add_argument(
        "--format", choices=("csv", "jsonl"), default=None, help="default: by extension, else csv"
    )
    ap.add_argument("--batch-rows", type=int, default=10_000)
    ap.add_argument("--producer-id", default=None)
    ap.add_argument("--start-sequence", type=int, default=1)
    ap.add_argument("--no-progress", action="store_true")

    for name, helptext in (
        ("query", "print a window's result"),
        ("watch", "follow a window's results"),
    ):
        q = sub.add_parser(name, help=helptext, epilog=EPILOG_QUERY, formatter_class=fmt)
        client_flags(q)
        q.add_argument("stream")
        q.add_argument("window")
    return p


# --------------------------------------------------------------------------- commands


def _client(args: argparse.Namespace) -> Any:
    from .sdk import WindowClient

    return WindowClient(args.target, token=args.token, tls=args.tls_ca, timeout=args.timeout)


def _print(obj: Any) -> None:
    import dataclasses

    def default(o: Any) -> Any:
        if dataclasses.is_dataclass(o) and not isinstance(o, type):
            return dataclasses.asdict(o)
        if isinstance(o, timedelta):
            return o.total_seconds()
        return str(o)

    print(json.dumps(obj, default=default, indent=None if isinstance(obj, list) else 2))


def _rows(stream: TextIO, fmt: str, schema: dict[str, str]) -> Iterator[dict[str, Any]]:
    from .convert import to_nanos

    def cast(name: str, v: Any) -> Any:
        t = schema.get(name)
        if t == "TIMESTAMP":
            if isinstance(v, str):
                if re.fullmatch(r"-?\d+", v.strip()):
                    return int(v)
                from datetime import datetime

                return to_nanos(datetime.fromisoformat(v.replace("Z", "+00:00")))
            return v
        if isinstance(v, str):
            if t == "DOUBLE":
                return float(v)
            if t == "INT64":
                return int(v)
            if t == "BOOL":
                return v.strip().lower() in ("1", "true", "yes")
        if t == "DOUBLE" and isinstance(v, int):
            return float(v)
        return v

    if fmt == "jsonl":
        for line in stream:
            if line.strip():
                rec = json.loads(line)
                yield {k: cast(k, v) for k, v in rec.items()}
    else:
        for rec in csv.DictReader(stream):
            yield {k: cast(k, v) for k, v in rec.items()}


def cmd_append(args: argparse.Namespace) -> int:
    fmt = args.format or ("jsonl" if args.file.endswith((".jsonl", ".json", ".ndjson")) else "csv")
    with _client(args) as c:
        schema = c.schema(args.stream)
        src: TextIO = sys.stdin if args.file == "-" else open(args.file, newline="")  # noqa: SIM115
        try:
            with c.writer(
                args.stream,
                batch_rows=args.batch_rows,
                producer_id=args.producer_id,
                start_sequence=args.start_sequence,
            ) as wr:
                progress = None
                if not args.no_progress and sys.stderr.isatty():
                    from rich.progress import Progress

                    progress = Progress(transient=True)
                    progress.start()
                    task = progress.add_task(f"append {args.stream}", total=None)
                n = 0
                for row in _rows(src, fmt, schema):
                    wr.write(row)
                    n += 1
                    if progress is not None and n % 1000 == 0:
                        progress.update(task, completed=n)
                if progress is not None:
                    progress.stop()
        finally:
            if src is not sys.stdin:
                src.close()
        info = c.get_stream(args.stream)
        _print(
            {
                "stream": args.stream,
                "rows_sent": n,
                "batches": wr.batches,
                "producer_id": wr.producer_id,
                "next_sequence": wr.sequence,
                "rows_late_total": info.rows_late,
            }
        )
    return 0


def run(args: argparse.Namespace) -> int:
    if args.command == "serve":
        return cmd_serve(args)
    if args.command == "append":
        return cmd_append(args)
    with _client(args) as c:
        if args.command == "streams":
            if args.action == "list":
                _print(c.list_streams())
            elif args.action == "get":
                _print(c.get_stream(args.name))
            elif args.action == "delete":
                c.delete_stream(args.name)
                _print({"deleted": args.name})
            else:
                from .types import StreamSpec

                spec = StreamSpec(
                    args.name, tuple(args.field), args.timestamp, args.late.upper(), args.lateness
                )
                _print(c.create_stream(spec))
        elif args.command == "windows":
            if args.action == "list":
                _print(c.list_windows(args.stream))
            elif args.action == "get":
                _print(c.get_window(args.stream, args.name))
            elif args.action == "delete":
                c.delete_window(args.stream, args.name)
                _print({"deleted": f"{args.stream}/{args.name}"})
            else:
                from .types import Storage, WindowSpec

                spec = WindowSpec(
                    args.stream,
                    args.name,
                    tuple(args.agg),
                    args.policy,
                    args.algorithm,
                    Storage(args.storage, args.durable),
                )
                _print(c.create_window(spec))
        elif args.command == "query":
            _print(c.query(args.stream, args.window))
        elif args.command == "watch":
            try:
                for batch, result in c.subscribe(args.stream, args.window):
                    print(
                        json.dumps({"batch": batch, "size": result.size, "values": result.values}),
                        flush=True,
                    )
            except KeyboardInterrupt:
                return 0
    return 0


def load_tokens(tokens_file: str | None, env: Mapping[str, str]) -> set[str] | None:
    """The bearer tokens from ``--tokens-file`` (one per line; blank lines and lines starting
    with ``#`` skipped) and ``$MTAWINDOWS_TOKENS`` (comma-separated); None when neither is
    given (no authentication). Fails closed: a source that is given (the file named, even as
    an empty string; the variable set, even empty) but holds no token, or a line that is not
    a bearer token (printable ASCII without spaces), is a ValueError naming the source and the
    line, never the token."""
    from mtawindows.server.grpc_server import TOKEN, check_tokens

    if tokens_file is None and "MTAWINDOWS_TOKENS" not in env:
        return None
    tokens: set[str] = set()
    if tokens_file is not None:
        source = f"--tokens-file {tokens_file!r}"
        try:
            text = Path(tokens_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as ex:
            msg = f"{source}: expected a readable UTF-8 file of bearer tokens: {ex}"
            raise ValueError(msg) from None
        found = []
        for lineno, line in enumerate(text.splitlines(), 1):
            t = line.strip()
            if not t or t.startswith("#"):
                continue
            if not TOKEN.fullmatch(t):
                msg = (
                    f"{source}, line {lineno}: expected one bearer token (printable ASCII "
                    f"without spaces) or a # comment, got a line of {len(t)} characters"
                )
                raise ValueError(msg)
            found.append(t)
        tokens |= set(check_tokens(found, f"{source} (blank lines and # comments only)"))
    if "MTAWINDOWS_TOKENS" in env:
        listed = [t.strip() for t in env["MTAWINDOWS_TOKENS"].split(",") if t.strip()]
        tokens |= set(check_tokens(listed, "$MTAWINDOWS_TOKENS (comma-separated)"))
    return tokens


def cmd_serve(args: argparse.Namespace) -> int:
    from mtawindows.server.embedded import EmbeddedRedisError
    from mtawindows.server.grpc_server import ServeConfig, serve
    from mtawindows.server.metrics import setup_logging
    from mtawindows.server.service import Limits

    tokens = load_tokens(args.tokens_file, os.environ)  # first: a bad source starts nothing
    setup_logging(args.log_level, args.log_format)
    cfg = ServeConfig(
        host=args.host,
        port=args.port,
        redis_url=args.redis_url,
        data_dir=args.data_dir,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        tokens=tokens or set(),
        metrics_port=args.metrics_port,
        metrics_host=args.metrics_host,
        flush_interval=args.flush_interval,
        grace=args.grace,
        limits=Limits(
            max_streams=args.max_streams,
            max_windows_per_stream=args.max_windows,
            max_batch_rows=args.max_batch_rows,
            max_message_bytes=args.max_message_mb * 1024 * 1024,
            result_history=args.result_history,
            max_subscribers=args.max_subscribers,
            subscriber_queue_bytes=int(args.subscriber_queue_mb * 1024 * 1024),
            subscribers_total_bytes=int(args.subscribers_memory_mb * 1024 * 1024),
            max_cel_bytes=args.max_cel_bytes,
            max_cel_depth=args.max_cel_depth,
        ),
        port_file=args.port_file,
        reuse_port=args.reuse_port,
        redis_restarts=args.redis_restarts,
    )
    try:
        serve(cfg)
    except EmbeddedRedisError as ex:  # OSError (a taken port or data dir) is printed by main
        print(f"error: {ex}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return run(args)
    except MtaWindowsError as ex:
        print(f"error: {ex}", file=sys.stderr)
        for v in ex.violations:
            print(f"  {v.field}: {v.description}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as ex:
        print(f"error: {ex}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
