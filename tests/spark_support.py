"""A local Spark (``local[2]``, 4 attempts per task) for the connector's tests, and a flaky
variant of the data source whose stream writer fails in the middle of a partition once."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from mtawindows.spark_connector.datasource import MtaWindowsDataSource, Pusher, StreamWriter

ROOT = Path(__file__).resolve().parent.parent


def spark_session() -> Any:
    # workers must run this interpreter (the venv's), and import this module (flaky writer)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p
    )
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2,4]")  # 2 cores, a task may run 4 times
        .appName("mtawindows-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "50")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(MtaWindowsDataSource)
    spark.dataSource.register(FlakyDataSource)
    return spark


class FlakyPusher(Pusher):
    """Fails after sending two chunks, in partition 0 of micro-batch 1, on the task's first
    attempt: the retry sends those chunks again."""

    def _append(self, stream: str, chunk: Any) -> None:
        if (
            self.attempt == 0
            and self.partition == 0
            and self.batch_id == 1
            and self.msg.chunks == 2
        ):
            msg = "injected failure in the middle of a partition"
            raise RuntimeError(msg)
        super()._append(stream, chunk)


class FlakyStreamWriter(StreamWriter):
    pusher_class = FlakyPusher


class FlakyDataSource(MtaWindowsDataSource):
    @classmethod
    def name(cls) -> str:
        return "mtawindows_flaky"

    def streamWriter(self, schema: Any, overwrite: bool) -> Any:
        w = super().streamWriter(schema, overwrite)
        return FlakyStreamWriter(w.opts, w.spec, w.schema)
