"""Timestamps as people write them (issue 23): the SDK takes ``datetime`` (naive = UTC),
pandas ``Timestamp`` (to the nanosecond), ``numpy.datetime64`` (any unit), pandas and numpy
datetime columns (tz-aware or not), RFC 3339 text (to the nanosecond, any offset) and pandas
DataFrames; a float is refused with a message saying what to send, once, nothing applied.
Each form is appended to a real server and read back as the same int nanoseconds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import numpy as np
import pandas as pd
import pytest

from mtawindows.client import Aggregation, Field, Policy, StreamSpec, WindowClient, WindowSpec
from mtawindows.testing import LocalServer
from mtawindows.v1.convert import to_nanos

pytestmark = [pytest.mark.server]

NS = 1_767_268_800_000_000_000  # 2026-01-01T12:00:00Z


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with LocalServer(tmp_path_factory.mktemp("time")) as srv, WindowClient(srv.target) as c:
        yield c


@pytest.mark.parametrize(
    ("value", "ns"),
    [
        (NS, NS),
        (datetime(2026, 1, 1, 12, tzinfo=UTC), NS),
        (datetime(2026, 1, 1, 12), NS),  # naive: UTC
        (datetime(2026, 1, 1, 13, tzinfo=timezone(timedelta(hours=1))), NS),
        (pd.Timestamp("2026-01-01T12:00:00.000000007Z"), NS + 7),
        (np.datetime64("2026-01-01T12:00:00.5"), NS + 500_000_000),
        (np.datetime64("2026-01-01T12:00:00.000000003", "ns"), NS + 3),
        (np.int64(NS), NS),
        ("2026-01-01T12:00:00Z", NS),
        ("2026-01-01T12:00:00.123456789Z", NS + 123_456_789),
        ("2026-01-01T14:00:00+02:00", NS),
        ("2026-01-01T12:00:00", NS),  # no offset: UTC
    ],
)
def test_to_nanos_reads_what_people_write(value: Any, ns: int) -> None:
    assert to_nanos(value) == ns


@pytest.mark.parametrize(
    "value", [1.767e9, "yesterday", "2026-13-01T00:00:00Z", np.datetime64("NaT")]
)
def test_to_nanos_refuses_what_is_a_guess(value: Any) -> None:
    with pytest.raises(TypeError) as err:
        to_nanos(value)
    assert "expected" in str(err.value)


def _stream(c: WindowClient, name: str) -> None:
    c.create_stream(StreamSpec(name, (Field("v", "DOUBLE"),)))
    c.create_window(
        WindowSpec(name, "w", (Aggregation("last", "max", "ts"), Aggregation("n", "count")),
                   Policy.count(100))
    )  # fmt: skip


def test_the_sdk_appends_every_form(client: WindowClient) -> None:
    forms: list[tuple[str, Any, int]] = [
        ("iso", {"ts": ["2026-01-01T12:00:00.000000001Z"], "v": [1.0]}, NS + 1),
        ("datetimes", [{"ts": datetime(2026, 1, 1, 12, 0, 1, tzinfo=UTC), "v": 1.0}], NS + 10**9),
        ("numpy", {"ts": np.array(["2026-01-01T12:00:02"], "datetime64[ms]"), "v": [1.0]},
         NS + 2 * 10**9),
        ("series", {"ts": pd.Series(pd.to_datetime(["2026-01-01T13:00:03+01:00"])), "v": [1.0]},
         NS + 3 * 10**9),
        ("frame", pd.DataFrame({"ts": pd.to_datetime(["2026-01-01T12:00:04.000000004Z"]),
                                "v": [1.0]}), NS + 4 * 10**9 + 4),
    ]  # fmt: skip
    for name, rows, ns in forms:
        _stream(client, f"t_{name}")
        client.append(f"t_{name}", rows)
        r = client.query(f"t_{name}", "w")
        assert (r.values["last"], r.timestamp, r.values["n"]) == (ns, ns, 1), name


def test_a_float_timestamp_is_refused_saying_what_to_send(client: WindowClient) -> None:
    _stream(client, "t_float")
    with pytest.raises(TypeError) as err:
        client.append("t_float", {"ts": [1.767e9], "v": [1.0]})
    text = str(err.value)
    assert "column 'ts'" in text and "float" in text and "RFC 3339" in text
    assert text.count("expected a timestamp") == 1  # said once
    assert client.get_stream("t_float").rows_appended == 0
