"""The pytest plugin, as a user meets it: registered by the ``pytest11`` entry point of the
installed package, its fixtures used by a test file of their own in a fresh pytest process
(``pytester.runpytest_subprocess``), starting nothing unless asked."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

pytestmark = [pytest.mark.server, pytest.mark.redis]

USES_A_SERVER = """
import os
from mtawindows.client import Field, StreamSpec
from mtawindows.testing import LocalServer

seen = []

def test_a_server(mtawindows_server: LocalServer) -> None:
    assert mtawindows_server.health() == "SERVING"
    with mtawindows_server.client() as c:
        c.create_stream(StreamSpec("cpu", (Field("load", "DOUBLE"),)))
        assert [s.spec.name for s in c.list_streams()] == ["cpu"]
    seen.append(mtawindows_server.pid)

def test_a_fresh_server_per_test(mtawindows_server: LocalServer) -> None:
    assert seen and mtawindows_server.pid != seen[0]
    with mtawindows_server.client() as c:
        assert list(c.list_streams()) == []

def test_servers_with_flags(mtawindows_server_factory) -> None:
    a = mtawindows_server_factory("--max-streams", "1")
    b = mtawindows_server_factory()
    assert a.target != b.target and "--max-streams" in a.args
"""

STARTS_NOTHING = """
import sys

def test_nothing_asked_nothing_started() -> None:
    assert "mtawindows.testing.pytest_plugin" in sys.modules
    assert "mtawindows.testing.server" not in sys.modules
"""

USES_A_CLUSTER = """
from mtawindows.testing import LocalCluster

def test_a_cluster(mtawindows_cluster: LocalCluster) -> None:
    assert len(mtawindows_cluster.seeds.split(",")) == 3
    with mtawindows_cluster.client() as c:
        assert len(c.cluster_map().members) == 3
"""


def test_the_entry_point_names_the_plugin() -> None:
    from importlib.metadata import entry_points

    (ep,) = [e for e in entry_points(group="pytest11") if e.name == "mtawindows"]
    assert ep.value == "mtawindows.testing.pytest_plugin"


def test_a_user_test_file_gets_servers_from_the_plugin(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user=USES_A_SERVER)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=3)


def test_the_plugin_starts_nothing_unless_asked(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user=STARTS_NOTHING)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


def test_the_plugin_can_be_turned_off(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user=USES_A_SERVER)
    result = pytester.runpytest_subprocess("-p", "no:mtawindows")
    result.assert_outcomes(errors=3)
    result.stdout.fnmatch_lines(["*fixture 'mtawindows_server' not found*"])


@pytest.mark.slow
def test_a_user_test_file_gets_a_cluster_from_the_plugin(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user=USES_A_CLUSTER)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
