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


# -- plain numbers: the stream's unit, and no row before 1990 by accident

S = 1_767_268_800  # 2026-01-01T12:00:00Z in seconds


def _unit_stream(c: WindowClient, name: str, **kw: Any) -> None:
    c.create_stream(StreamSpec(name, (Field("v", "DOUBLE"),), **kw))
    c.create_window(WindowSpec(name, "w", (Aggregation("last", "max", "ts"),), Policy.count(100)))


@pytest.mark.parametrize(
    ("unit", "plain", "ns"),
    [
        ("s", S, NS),
        ("s", S + 0.25, NS + 250_000_000),  # a float where the unit is coarser than a ns
        ("ms", S * 1000 + 7, NS + 7_000_000),
        ("us", S * 10**6 + 3, NS + 3_000),
        ("ns", NS + 1, NS + 1),
    ],
)
def test_plain_numbers_read_in_the_streams_unit(
    client: WindowClient, unit: str, plain: Any, ns: int
) -> None:
    name = f"u_{unit}_{type(plain).__name__}"
    _unit_stream(client, name, ts_unit=unit)
    assert client.get_stream(name).spec.ts_unit == unit  # kept by the server
    client.append(name, {"ts": [plain], "v": [1.0]})
    r = client.query(name, "w")
    assert (r.timestamp, r.values["last"]) == (ns, ns)


def test_arrow_integers_read_in_the_streams_unit(client: WindowClient) -> None:
    import pyarrow as pa

    _unit_stream(client, "u_arrow", ts_unit="ms")
    client.append("u_arrow", pa.table({"ts": pa.array([S * 1000], pa.int64()), "v": [1.0]}))
    assert client.query("u_arrow", "w").timestamp == NS
    with pytest.raises(ValueError, match="before 1990"):
        client.append("u_arrow", pa.table({"ts": pa.array([S], pa.int64()), "v": [1.0]}))


@pytest.mark.parametrize("rows", [{"ts": [S], "v": [1.0]}, [{"ts": np.int64(S), "v": 1.0}]])
def test_seconds_on_a_nanosecond_stream_are_refused_naming_unit_and_date(
    client: WindowClient, rows: Any
) -> None:
    name = f"u_default_{type(rows).__name__}"
    _unit_stream(client, name)
    with pytest.raises(ValueError) as err:
        client.append(name, rows)
    text = str(err.value)
    assert "read as nanoseconds" in text and "'ns'" in text
    assert "1970-01-01T00:00:01.7672688Z" in text and "before 1990" in text
    assert "ts_unit" in text and "wall_clock=False" in text
    assert client.get_stream(name).rows_appended == 0  # nothing was sent


def test_a_stream_of_sequence_numbers_takes_any_number(client: WindowClient) -> None:
    _unit_stream(client, "u_seq", wall_clock=False)
    assert client.get_stream("u_seq").spec.wall_clock is False
    client.append("u_seq", {"ts": [1, 2, 3], "v": [1.0, 2.0, 3.0]})
    assert client.query("u_seq", "w").values["last"] == 3


def test_datetimes_need_no_unit_and_are_not_scaled(client: WindowClient) -> None:
    _unit_stream(client, "u_dt", ts_unit="s")
    client.append("u_dt", {"ts": [datetime(2026, 1, 1, 12, tzinfo=UTC)], "v": [1.0]})
    client.append("u_dt", {"ts": ["2026-01-01T12:00:01Z"], "v": [1.0]})
    client.append("u_dt", {"ts": np.array([S + 2], "datetime64[s]"), "v": [1.0]})
    assert client.query("u_dt", "w").timestamp == NS + 2 * 10**9
