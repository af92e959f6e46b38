"""Shared by the examples: a SparkSession on this interpreter, and a server to talk to.

Every example takes ``--endpoint host:port`` (a running ``mtawindows serve``); without it, it
starts one on a free loopback port with the embedded Redis and stops it at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
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
    from mtawindows.spark_connector.demo import start_server

    work = Path(tempfile.mkdtemp(prefix="mtawindows-example-"))
    proc, target = start_server(work)
    try:
        yield target
    finally:
        proc.terminate()
        proc.wait(30)


def spark() -> Any:
    # Spark's Python workers must run this interpreter (the one with mtawindows installed)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from mtawindows.spark_connector import register

    s = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    s.sparkContext.setLogLevel("ERROR")
    register(s)  # format "mtawindows"
    return s
