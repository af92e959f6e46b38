"""The server's command line: ``python -m mtawindows.server`` (and ``mtawindows serve``).

Every flag falls back to a ``$MTAWINDOWS_`` variable (named in its help), then to a default.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .service.registry import Limits
from .storage.embedded import EmbeddedRedisError
from .transport.grpc_server import TOKEN, ServeConfig, check_tokens, serve
from .transport.metrics import setup_logging

__all__ = ["EPILOG_SERVE", "add_serve_flags", "build_parser", "cmd_serve", "load_tokens", "main"]

EPILOG_SERVE = """examples:
  mtawindows serve                                  # loopback :50051, embedded Redis in ~/.local/share/mtawindows
  mtawindows serve --port 0 --port-file port.txt    # a free port, written to port.txt
  mtawindows serve --redis-url redis://redis:6379/0 --host 0.0.0.0 --metrics-port 9102
  mtawindows serve --data-dir /var/lib/mtawindows   # one server per data dir (a lock file in it)
  MTAWINDOWS_TOKENS=s3cret mtawindows serve --tls-cert server.crt --tls-key server.key
"""


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


def add_serve_flags(s: argparse.ArgumentParser) -> None:
    """The flags of ``serve``, added to ``s``."""
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


def build_parser(prog: str = "python -m mtawindows.server") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="Run the mtawindows gRPC server.",
        epilog=EPILOG_SERVE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_serve_flags(p)
    return p


def load_tokens(tokens_file: str | None, env: Mapping[str, str]) -> set[str] | None:
    """The bearer tokens from ``--tokens-file`` (one per line; blank lines and lines starting
    with ``#`` skipped) and ``$MTAWINDOWS_TOKENS`` (comma-separated); None when neither is
    given (no authentication). Fails closed: a source that is given (the file named, even as
    an empty string; the variable set, even empty) but holds no token, or a line that is not
    a bearer token (printable ASCII without spaces), is a ValueError naming the source and the
    line, never the token."""
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
    args = build_parser().parse_args(argv)
    try:
        return cmd_serve(args)
    except (OSError, ValueError) as ex:  # a taken port, a bad tokens file, ...
        print(f"error: {ex}", file=sys.stderr)
        return 1
