"""The connector's option parsing, key checks and key filters (no Spark session needed)."""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa
import pytest
from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

from mtawindows.client import Field, StreamSpec
from mtawindows.spark_connector import ConnectorError, ConnectorOptions
from mtawindows.spark_connector.arrow import nanos
from mtawindows.spark_connector.readers import KeyFilter
from mtawindows.spark_connector.streams import check_key, keyed_spec


def test_options_take_spark_spellings_and_defaults() -> None:
    o = ConnectorOptions.parse(
        {
            "endpoint": "h:1",
            "stream": "s",
            "timestampColumn": "at",
            "BATCH_ROWS": "64",
            "key-col": "host",
            "keyPrefix": "web-",
            "sort": "TRUE",
            "tls": "/ca.pem",
            "checkpointLocation": "/ck",
        }
    )
    assert (o.endpoint, o.stream, o.timestamp_column, o.key_column) == ("h:1", "s", "at", "host")
    assert (o.batch_rows, o.sort, o.tls, o.token) == (64, True, "/ca.pem", None)
    assert (o.keys, o.key_prefix) == (None, "web-")
    k = ConnectorOptions.parse({"endpoint": "h:1", "stream": "s", "keys": " a, b,,a "})
    assert k.keys == ("a", "b")
    d = ConnectorOptions.parse({"endpoint": "h:1", "path": "s2", "tls": "true"})
    assert (d.stream, d.tls, d.batch_rows, d.starting_offsets, d.timeout) == (
        "s2",
        True,
        10_000,
        "latest",
        60.0,
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"stream": "s"}, "option 'endpoint': required"),
        ({"endpoint": "h:1"}, "option 'stream': required"),
        ({"endpoint": "h:1", "stream": "s", "batch_row": "5"}, "option 'batch_row': unknown"),
        ({"endpoint": "h:1", "stream": "s", "batch_rows": "0"}, "option 'batch_rows'.*> 0"),
        ({"endpoint": "h:1", "stream": "s", "batch_rows": "x"}, "option 'batch_rows'"),
        ({"endpoint": "h:1", "stream": "s", "sort": "maybe"}, "option 'sort': expected true"),
        (
            {"endpoint": "h:1", "stream": "s", "starting_offsets": "now"},
            "option 'starting_offsets'",
        ),
        (
            {"endpoint": "h:1", "stream": "s", "max_results_per_trigger": "-1"},
            "option 'max_results_per_trigger'",
        ),
        ({"endpoint": "h:1", "stream": "s", "keys": " , "}, "option 'keys': expected"),
    ],
)
def test_bad_options_name_the_option(options: dict[str, str], message: str) -> None:
    with pytest.raises(ConnectorError, match=message):
        ConnectorOptions.parse(options)


def test_key_column_must_be_the_streams_key() -> None:
    fields = (Field("host", "STRING"), Field("mem", "DOUBLE"))
    check_key(StreamSpec("t", fields, key="host", wall_clock=False), "host")
    check_key(
        StreamSpec("t", fields, key="host", wall_clock=False), ""
    )  # no key_column: the stream's own
    with pytest.raises(ConnectorError, match=r"option 'key_column': stream 't' is not keyed"):
        check_key(StreamSpec("t", fields, wall_clock=False), "host")
    with pytest.raises(
        ConnectorError, match=r"stream 't' is keyed by field 'host', not by key_col 'mem'"
    ):
        check_key(StreamSpec("t", fields, key="host", wall_clock=False), "mem", option="key_col")


def test_scratch_spec_is_keyed_by_the_key_column() -> None:
    template = StreamSpec("t", (Field("mem", "DOUBLE"),), timestamp_field="ts", wall_clock=False)
    df = StructType(
        [
            StructField("host", StringType()),
            StructField("rack", LongType()),
            StructField("mem", DoubleType()),
        ]
    )
    by_host = keyed_spec(template, "host", df)
    assert (by_host.key, by_host.fields[-1]) == ("host", Field("host", "STRING"))
    assert keyed_spec(template, "rack", df).fields[-1] == Field("rack", "INT64")
    assert keyed_spec(by_host, "host", df) is by_host
    with pytest.raises(ConnectorError, match="key_col: column 'mem' is double"):
        keyed_spec(template, "mem", df)


def test_key_filters_narrow() -> None:
    opts = ConnectorOptions.parse({"endpoint": "h:1", "stream": "s", "keys": "a1,a2,b1"})
    f = KeyFilter.of(opts)
    assert f.narrowed and f.listed() == ["a1", "a2", "b1"]
    assert f.starting("a").listed() == ["a1", "a2"]
    assert f.only(["a2", "c"]).listed() == ["a2"]
    p = KeyFilter().starting("ab")
    assert (p.starting("abc").prefix, p.starting("a").prefix) == ("abc", "ab")
    assert p.starting("x").nothing and not KeyFilter().narrowed


def test_nanos_reads_any_timestamp_unit() -> None:
    t = datetime(2024, 5, 1, tzinfo=UTC)
    ns = int(t.timestamp()) * 10**9
    assert nanos(pa.array([t], pa.timestamp("us", tz="UTC"))) == [ns]
    assert nanos(pa.array([ns + 1], pa.timestamp("ns"))) == [ns + 1]
    assert nanos(pa.chunked_array([pa.array([ns], pa.int64())])) == [ns]


def test_results_of_rows_an_earlier_batch_brought_are_not_given_to_this_chunks_rows() -> None:
    """A reorder buffer's per-row results name their request row, -1 for a row an earlier
    batch brought: such a result belongs to none of this chunk's rows (index -1 would have
    been the chunk's last row), and a row with no result of its own gets null."""
    from mtawindows.spark_connector.sliding import ResultColumn, _result_array

    r = ResultColumn("w", "l", "l", "DOUBLE")
    table = pa.table({"l": [12.0, 16.0, 25.0], "_size": [1, 2, 3], "_row": [-1, -1, 1]})
    assert _result_array(r, table, None, 2).to_pylist() == [None, 25.0]
    sent_only = [False, True, True]  # the chunk's row 0 was not sent (applied False)
    assert _result_array(r, table, sent_only, 3).to_pylist() == [None, None, 25.0]
