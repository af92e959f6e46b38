"""The server's command line: ``python -m mtawindows.server`` (and ``mtawindows serve``).

The flags of ``serve`` into a :class:`~.transport.app.ServeConfig`, then the server. Every
flag falls back to a ``$MTAWINDOWS_`` variable (named in its help), then to a default; the
bearer tokens are read by :func:`~.transport.tokens.load_tokens`.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from .service.limits import Limits
from .storage.embedded import EmbeddedRedisError
from .transport.app import SUPERVISED_ENV, ServeConfig, serve
from .transport.metrics import setup_logging
from .transport.tokens import load_tokens

__all__ = ["EPILOG_SERVE", "add_serve_flags", "build_parser", "cmd_serve", "load_tokens", "main"]

EPILOG_SERVE = """examples:
  mtawindows serve                                  # loopback :50051, embedded Redis in ~/.local/share/mtawindows
  mtawindows serve --port 0 --port-file port.txt    # a free port, written to port.txt
  mtawindows serve --redis-url redis://redis:6379/0 --host 0.0.0.0 --metrics-port 9102
  mtawindows serve --data-dir /var/lib/mtawindows   # one server per data dir (a lock file in it)
  MTAWINDOWS_TOKENS=s3cret mtawindows serve --tls-cert server.crt --tls-key server.key
"""


# the service's limits (Limits): flag, help, type, default
LIMIT_FLAGS: tuple[tuple[str, str, type, float], ...] = (
    ("--max-batch-rows", "", int, 500000),
    (
        "--result-history",
        "results kept per window for ReadResults (the Spark source follows them)",
        int,
        1000,
    ),
    ("--max-message-mb", "", int, 64),
    ("--max-streams", "", int, 1000),
    ("--max-windows", "per stream", int, 64),
    ("--max-subscribers", "Subscribe calls at once", int, 1000),
    (
        "--subscriber-queue-mb",
        "serialized results queued for one subscriber before it is cut as too slow",
        float,
        8.0,
    ),
    (
        "--subscribers-memory-mb",
        "serialized results held for all subscribers, each once; past it the furthest behind "
        "are cut",
        float,
        256.0,
    ),
    ("--max-cel-bytes", "size of a new CEL policy, UTF-8 bytes", int, 4096),
    ("--max-cel-depth", "nesting of a new CEL policy: brackets plus stacked operators", int, 64),
    (
        "--max-keys",
        "keys of keyed streams held by the server, all streams together",
        int,
        10_000_000,
    ),
    (
        "--key-cache-mb",
        "keyed streams' keys in memory: every key's name (about 170 bytes each, always held) "
        "and the states of the most recently touched; the least recently touched beyond it "
        "are written back to Redis and dropped, to load again on their next row",
        float,
        512.0,
    ),
    (
        "--key-compact-items",
        "items a key's window holds in its compact form (one Redis value) before it becomes "
        "a full MTA with levels in Redis",
        int,
        64,
    ),
)


def _env(name: str, default: Any = None) -> Any:
    return os.environ.get(f"MTAWINDOWS_{name}", default)


def _switch(parser: argparse.ArgumentParser, flag: str, help: str) -> None:
    """``--flag`` / ``--no-flag``, on unless ``$MTAWINDOWS_FLAG`` says 0, false, no or off;
    the help names the variable."""
    env = flag[2:].upper().replace("-", "_")
    parser.add_argument(
        flag,
        action=argparse.BooleanOptionalAction,
        default=str(_env(env, "1")).strip().lower() not in ("0", "false", "no", "off"),
        help=f"{help} ($MTAWINDOWS_{env})",
    )


def _flag(
    parser: argparse.ArgumentParser,
    flag: str,
    help: str = "",
    *,
    kind: type = str,
    default: Any = None,
    **options: Any,
) -> None:
    """``--flag``, defaulting to ``$MTAWINDOWS_FLAG`` (dashes as underscores), else
    ``default``; the help names the variable (and a number's default)."""
    env = flag[2:].upper().replace("-", "_")
    value = _env(env, default)
    told = f"$MTAWINDOWS_{env}" if kind is str else f"default {default}; $MTAWINDOWS_{env}"
    parser.add_argument(
        flag,
        type=kind,
        default=None if value is None else kind(value),
        help=f"{help} ({told})" if help else f"({told})",
        **options,
    )


def add_serve_flags(s: argparse.ArgumentParser) -> None:
    """The flags of ``serve``, added to ``s``."""
    _flag(s, "--host", "bind address", default="127.0.0.1")
    _flag(s, "--port", "port, 0 = any", kind=int, default=50051)
    _flag(s, "--port-file", "write the bound port here")
    _flag(
        s,
        "--workers",
        "server processes on this node, each a member of the cluster, on ports port..port+N-1",
        kind=int,
        default=1,
    )
    s.add_argument(
        "--reuse-port",
        action="store_true",
        default=str(_env("REUSE_PORT", "")).strip().lower() in ("1", "true", "yes", "on"),
        help="SO_REUSEPORT: let several servers share the port (off: a taken port is an "
        "error) ($MTAWINDOWS_REUSE_PORT)",
    )
    _switch(
        s,
        "--columnar-state",
        "a new window of built-in aggregations over a count or a time range keeps its "
        "rows as columns (sealed slices in Redis), no engine over lifted rows: several times "
        "faster and smaller for batches; --no-columnar-state keeps new windows on their "
        "algorithm's engine (windows keep the form they were made in)",
    )
    _switch(
        s,
        "--shared-rows",
        "a new columnar window whose aggregations are some of an earlier columnar "
        "window's on its stream (a count or a time range over the same timestamps) shares "
        "that window's rows: each batch lifted, sliced and stored once for both; "
        "--no-shared-rows gives every new window rows of its own",
    )
    _flag(s, "--redis-url", "Redis URL; none = embedded")
    _flag(s, "--data-dir", "embedded Redis data; one server per directory")
    _flag(
        s,
        "--redis-restarts",
        "restarts of a dead embedded Redis within 5 minutes before the server gives up and "
        "stays NOT_SERVING",
        kind=int,
        default=5,
    )
    _flag(
        s,
        "--redis-ping-timeout-ms",
        "the watchdog: the server PINGs its Redis (embedded or --redis-url; every primary of "
        "a Redis Cluster) every 500 ms or a quarter of this, whichever is less; no answer "
        "for this long (a frozen, hung or unreachable Redis) and it is NOT_SERVING, refusing "
        "at once every call that needs Redis (UNAVAILABLE, STORE_UNAVAILABLE), until one "
        "answers; 0 = no watchdog",
        kind=int,
        default=2000,
    )
    _flag(
        s,
        "--advertise",
        "host:port clients reach this server at, its member id in the cluster (default: the "
        "bound host and port)",
    )
    _flag(
        s,
        "--lease-ms",
        "lease of a stream's owner: a dead server's streams move after it (renewed every quarter)",
        kind=int,
        default=2000,
    )
    _flag(
        s,
        "--redis-wait-replicas",
        "replicas that must hold a durable write before it is acknowledged (Redis WAIT; 0 = "
        "do not wait)",
        kind=int,
        default=0,
    )
    _flag(s, "--redis-wait-ms", "how long WAIT waits for them", kind=int, default=1000)
    _flag(s, "--tls-cert", "PEM certificate")
    _flag(s, "--tls-key", "PEM private key")
    _flag(
        s,
        "--tokens-file",
        "bearer tokens, one per line, # comments; given but holding no token is an error "
        "(also $MTAWINDOWS_TOKENS, comma-separated)",
    )
    _flag(s, "--metrics-port", "Prometheus /metrics port, 0 = off", kind=int, default=0)
    _flag(s, "--metrics-host", default="127.0.0.1")
    _flag(s, "--flush-interval", "seconds between checkpoints", kind=float, default=1.0)
    _flag(
        s,
        "--grace",
        "seconds in-flight calls get to finish at a graceful stop; past it they are "
        "cancelled, and a batch still running leaves its stream unsaved, as a kill would "
        "(exit status 3)",
        kind=float,
        default=10.0,
    )
    for flag, help, kind, default in LIMIT_FLAGS:
        _flag(s, flag, help, kind=kind, default=default)
    _flag(s, "--log-level", default="info")
    _flag(s, "--log-format", default="json", choices=("json", "text"))


def build_parser(prog: str = "python -m mtawindows.server") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="Run the mtawindows gRPC server.",
        epilog=EPILOG_SERVE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_serve_flags(p)
    return p


# the number flags' ranges (inclusive), checked before anything starts: a server that would
# refuse every call, spin, or overflow a gRPC option is refused at start-up instead
RANGES: tuple[tuple[str, float, float], ...] = (
    ("--max-batch-rows", 1, 1 << 40),
    ("--result-history", 0, 1 << 30),
    # gRPC takes twice the limit in a C int: at most 1023 MiB
    ("--max-message-mb", 1, 1023),
    ("--max-streams", 1, 1 << 40),
    ("--max-windows", 1, 1 << 20),
    ("--max-subscribers", 0, 1 << 30),
    ("--subscriber-queue-mb", 0.001, 1 << 20),
    ("--subscribers-memory-mb", 0.001, 1 << 30),
    ("--max-cel-bytes", 1, 1 << 30),
    ("--max-cel-depth", 1, 1 << 20),
    ("--max-keys", 1, 1 << 40),
    ("--key-cache-mb", 1, 1 << 30),
    ("--key-compact-items", 1, 1 << 16),
    ("--flush-interval", 0.01, 86_400),
    ("--grace", 0, 86_400),
    ("--redis-restarts", 0, 1 << 20),
    ("--workers", 1, 1024),
)


def check_ranges(args: argparse.Namespace) -> None:
    """ValueError naming the first number flag outside its range (:data:`RANGES`)."""
    for flag, low, high in RANGES:
        value = getattr(args, flag[2:].replace("-", "_"), None)
        if value is None:
            continue
        if not low <= value <= high:  # NaN fails too
            msg = f"{flag}: expected a number from {low:g} to {high:g}, got {value!r}"
            raise ValueError(msg)


def pin_malloc_thresholds() -> bool:
    """glibc's malloc serves a block of 128 KiB or more from a mapping of its own, given
    back to the system when freed, unless a larger block was freed before: then it raises
    that threshold (up to 32 MiB) and such blocks come from the heap, where they stay after
    use (a server that took a 16 MB batch in 256 KiB pieces, AppendStream, kept a few MB
    more that way). Pinned at :data:`MMAP_THRESHOLD` (4 MiB): a batch's large columns are
    mappings of their own, its temporaries up to 4 MiB come from the heap and are reused (at
    128 KiB every 50,000-row array was a fresh mapping, its pages faulted in anew: a
    Compute of 50,000 rows took 13-16 ms instead of 9).

    Pinning one threshold stops glibc moving the other, the *trim* threshold (free memory at
    the top of the heap past it goes back to the system), which it would otherwise keep at
    twice the mmap threshold: left at its 128 KiB start, the heap gave back a batch's
    temporaries after every batch and faulted their pages in again on the next (a 10,000-row
    per-row Append's Two-Stacks pass took 475 us instead of 200, the call 2.5 ms instead of
    1.7). So it is pinned too, at :data:`TRIM_THRESHOLD`, the mmap threshold: a freed block
    the heap would serve stays for the next batch (at 1 MiB the churn came back; 8 MiB, as
    glibc's own rule, was no faster and kept a 1M-row batch's server 6-8 MB larger).
    Either is left alone when ``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_TRIM_THRESHOLD_`` says
    otherwise; nothing on other C libraries. Whether anything was pinned."""
    thresholds = [
        (M_MMAP_THRESHOLD, MMAP_THRESHOLD, "MALLOC_MMAP_THRESHOLD_"),
        (M_TRIM_THRESHOLD, TRIM_THRESHOLD, "MALLOC_TRIM_THRESHOLD_"),
    ]
    pins = [(param, value) for param, value, env in thresholds if os.environ.get(env) is None]
    if not pins:
        return False
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        return all([bool(libc.mallopt(param, value)) for param, value in pins])
    except (OSError, AttributeError):  # not glibc
        return False


MMAP_THRESHOLD = 4 << 20
TRIM_THRESHOLD = MMAP_THRESHOLD  # (see pin_malloc_thresholds)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt's parameter numbers (malloc.h)


def cmd_serve(args: argparse.Namespace) -> int:
    check_ranges(args)  # first, with the tokens: a bad flag starts nothing
    tokens = load_tokens(args.tokens_file, os.environ)
    setup_logging(args.log_level, args.log_format)
    pin_malloc_thresholds()
    # read where windows are made (and by worker processes)
    os.environ["MTAWINDOWS_COLUMNAR_STATE"] = "1" if args.columnar_state else "0"
    os.environ["MTAWINDOWS_SHARED_ROWS"] = "1" if args.shared_rows else "0"
    if args.workers != 1:  # a supervisor of N server processes (server/workers.py)
        from .workers import run_workers

        return run_workers(args, build_parser())
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
            max_keys=args.max_keys,
            key_cache_bytes=int(args.key_cache_mb * 1024 * 1024),
            key_compact_items=args.key_compact_items,
        ),
        port_file=args.port_file,
        reuse_port=args.reuse_port,
        redis_restarts=args.redis_restarts,
        redis_ping_timeout=_ping_timeout(args.redis_ping_timeout_ms),
        advertise=args.advertise,
        lease_ms=args.lease_ms,
        wait_replicas=args.redis_wait_replicas,
        wait_ms=args.redis_wait_ms,
        banner=not os.environ.get(SUPERVISED_ENV),
    )
    try:
        serve(cfg)
    except EmbeddedRedisError as ex:  # OSError (a taken port or data dir) is printed by main
        print(f"error: {ex}", file=sys.stderr)
        return 1
    return 0


def _ping_timeout(ms: int) -> float:
    """``--redis-ping-timeout-ms`` in seconds (0: no watchdog); ValueError below 0 or under
    the 100 ms a PING round trip may take on a loaded machine."""
    if ms != 0 and ms < 100:
        msg = f"--redis-ping-timeout-ms: expected 0 (off) or at least 100, got {ms}"
        raise ValueError(msg)
    return ms / 1000


def main(argv: list[str] | None = None) -> int:
    """``python -m mtawindows.server`` and the ``mtawindows-server`` script."""
    script = os.path.basename(sys.argv[0])
    prog = script if script.startswith("mtawindows") else "python -m mtawindows.server"
    args = build_parser(prog).parse_args(argv)
    try:
        return cmd_serve(args)
    except (OSError, ValueError) as ex:  # a taken port, a bad tokens file, ...
        print(f"error: {ex}", file=sys.stderr)
        return 1
