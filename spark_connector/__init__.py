"""mtawindows.spark_connector: mtawindows from PySpark (>= 4.0).

- the Python Data Source ``"mtawindows"`` (:class:`MtaWindowsDataSource`): ``df.write`` /
  ``df.writeStream`` push rows into a stream (idempotent chunks), ``spark.read`` /
  ``spark.readStream`` pull window results back;
- :func:`sliding_aggregate`: each row of a DataFrame with its window's result after that row.

Call :func:`register` once per SparkSession before using the format.
"""

from __future__ import annotations

from typing import Any

from .common import ConnectorError, ConnectorOptions, keyed_stream_name


def register(spark: Any) -> None:
    """Register format ``"mtawindows"`` with ``spark``."""
    from .datasource import MtaWindowsDataSource

    spark.dataSource.register(MtaWindowsDataSource)


def local_session(
    master: str = "local[2]", app: str = "mtawindows", *, partitions: int = 2, **conf: str
) -> Any:
    """A local SparkSession set up for mtawindows, format ``"mtawindows"`` registered.

    Spark's Python workers run the ``python3`` on PATH unless told otherwise: this points
    ``PYSPARK_PYTHON`` and ``PYSPARK_DRIVER_PYTHON`` at this interpreter (the one that has
    mtawindows) before the session starts. No UI or progress bars, ``partitions`` shuffle
    partitions, UTC session time; ``conf`` adds Spark settings (dots as in Spark's names)."""
    import os
    import sys

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
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


def __getattr__(name: str) -> Any:
    # pyspark is imported only when the Spark parts are used
    if name in ("MtaWindowsDataSource", "MtaCommitMessage"):
        from . import datasource

        return getattr(datasource, name)
    if name == "sliding_aggregate":
        from .transform import sliding_aggregate

        return sliding_aggregate
    msg = f"module {__name__!r} has no attribute {name!r}"
    raise AttributeError(msg)


__all__ = [
    "ConnectorError",
    "ConnectorOptions",
    "MtaCommitMessage",
    "MtaWindowsDataSource",
    "keyed_stream_name",
    "local_session",
    "register",
    "sliding_aggregate",
]
