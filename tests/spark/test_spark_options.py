"""The connector's option parsing, per-key stream names and key splitting (no Spark needed)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from mtawindows.client.routing import key_of_stream
from mtawindows.spark_connector import ConnectorError, ConnectorOptions, keyed_stream_name
from mtawindows.spark_connector.datasource import split_by_key
from mtawindows.spark_connector.streams import is_scratch


def test_options_take_spark_spellings_and_defaults() -> None:
    o = ConnectorOptions.parse(
        {
            "endpoint": "h:1",
            "stream": "s",
            "timestampColumn": "at",
            "BATCH_ROWS": "64",
            "key-col": "host",
            "sort": "TRUE",
            "tls": "/ca.pem",
            "checkpointLocation": "/ck",
        }
    )
    assert (o.endpoint, o.stream, o.timestamp_column, o.key_column) == ("h:1", "s", "at", "host")
    assert (o.batch_rows, o.sort, o.tls, o.token) == (64, True, "/ca.pem", None)
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
    ],
)
def test_bad_options_name_the_option(options: dict[str, str], message: str) -> None:
    with pytest.raises(ConnectorError, match=message):
        ConnectorOptions.parse(options)


def test_keyed_stream_names() -> None:
    assert keyed_stream_name("tele", "host-07") == "tele:host-07"
    assert keyed_stream_name("tele", 42) == "tele:42"
    odd = keyed_stream_name("tele", "a b/c")
    assert odd.startswith("tele:~") and odd == keyed_stream_name("tele", "a b/c")
    assert keyed_stream_name("tele", None) != keyed_stream_name("tele", "None")
    assert key_of_stream("tele", "tele:host-07") == "host-07"
    assert key_of_stream("tele", "other:x") is None
    assert is_scratch("tele:host-07~scratch.ab12.3.0.1") and not is_scratch("tele:~ab12")


def test_split_by_key_keeps_each_keys_order() -> None:
    t = pa.table({"k": ["b", "a", "b", "c", "a"], "v": [1, 2, 3, 4, 5]})
    got = [(k, part.column("v").to_pylist()) for k, part in split_by_key(t, "k")]
    assert got == [("a", [2, 5]), ("b", [1, 3]), ("c", [4])]
    assert list(split_by_key(t.slice(0, 0), "k")) == []
