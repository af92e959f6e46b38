"""The ``mtawindows`` command: the server's ``serve`` beside the client's commands.

The only module that imports both the server and the client: each of them has its own entry
point (``python -m mtawindows.server``, :func:`mtawindows.client.commands.main`) and never imports
the other. ``python -m mtawindows.cli`` is the same command.
"""

from __future__ import annotations

import argparse
import sys

from mtawindows.client import commands as client_cli
from mtawindows.server import serve_command as server_cli

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    p = client_cli.CliParser(
        prog="mtawindows",
        description="Exact sliding-window aggregates over streams (Monoid Tree Aggregator).",
    )
    client_cli.add_output_flags(p)
    sub = p.add_subparsers(dest="command", required=True)
    serve = sub.add_parser(
        "serve",
        help="run the gRPC server",
        epilog=server_cli.EPILOG_SERVE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    server_cli.add_serve_flags(serve)
    client_cli.add_commands(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = client_cli.parse(build_parser(), sys.argv[1:] if argv is None else argv)
    command = server_cli.cmd_serve if args.command == "serve" else client_cli.run
    return client_cli.guarded(command, args)
