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
    "register",
    "sliding_aggregate",
]
