"""Shared by the examples: a SparkSession on this interpreter, and a server to talk to.

Every example takes ``--endpoint host:port`` (a running ``mtawindows serve``); without it, it
starts one on a free loopback port with the embedded Redis and stops it at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def args(description: str) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--endpoint", help="host:port of mtawindows serve (default: start one)")
    return p.parse_args()


@contextlib.contextmanager
def server(endpoint: str | None) -> Iterator[str]:
    if endpoint:
        yield endpoint
        return
    from mtawindows.client.launch import start_server

    work = Path(tempfile.mkdtemp(prefix="mtawindows-example-"))
    proc, port = start_server(work, "--log-level", "warning")
    try:
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(30)


def spark() -> Any:
    """A local[2] session whose Python workers run this interpreter, format registered."""
    from mtawindows.spark_connector import local_session

    return local_session(app="mtawindows-example")
