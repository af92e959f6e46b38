"""A local Spark (``local[2]``, 4 attempts per task) for the connector's tests, and a flaky
variant of the data source whose stream writer fails in the middle of a partition once."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from mtawindows.spark_connector import local_session
from mtawindows.spark_connector.datasource import MtaWindowsDataSource, Pusher, StreamWriter

ROOT = Path(__file__).resolve().parents[2]


def _launch() -> Any:
    """The session; a second try when the JVM died before it answered (it did once in a CI
    run, on a loaded machine: JAVA_GATEWAY_EXITED), not for any other failure."""
    from pyspark.errors import PySparkRuntimeError

    for attempt in (1, 2):
        try:
            return local_session(
                "local[2,4]",  # 2 cores, a task may run 4 times
                "mtawindows-tests",
                **{
                    "spark.sql.execution.arrow.maxRecordsPerBatch": "50",
                    "spark.driver.memory": "1g",
                },
            )
        except PySparkRuntimeError as ex:
            if attempt == 2 or "JAVA_GATEWAY_EXITED" not in str(ex):
                raise
            time.sleep(2)
    raise AssertionError("unreachable")  # pragma: no cover


def spark_session() -> Any:
    # the workers must import this module too (the flaky writer): Spark's JVM, started here,
    # hands its environment to them; the test process's own PYTHONPATH is restored after
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), before) if p)
    try:
        spark = _launch()
    finally:
        if before is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = before
    spark.dataSource.register(FlakyDataSource)
    return spark


class FlakyPusher(Pusher):
    """Fails once two chunks were answered (a few more may be applied: they are pipelined),
    in partition 0 of micro-batch 1, on the task's first attempt: the retry sends those
    chunks again."""

    def _count(self, stream: str, rows: int, res: Any) -> None:
        t = self.task
        if t.attempt == 0 and t.partition == 0 and t.batch_id == 1 and self.msg.chunks == 2:
            msg = "injected failure in the middle of a partition"
            raise RuntimeError(msg)
        super()._count(stream, rows, res)


class FlakyStreamWriter(StreamWriter):
    pusher_class = FlakyPusher


class FlakyDataSource(MtaWindowsDataSource):
    @classmethod
    def name(cls) -> str:
        return "mtawindows_flaky"

    def streamWriter(self, schema: Any, overwrite: bool) -> Any:
        w = super().streamWriter(schema, overwrite)
        return FlakyStreamWriter(w.opts, w.spec, w.schema)
