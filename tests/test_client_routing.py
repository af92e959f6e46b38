"""The SDK's routing over several servers (no server needed): stable owners, pinned streams,
per-key stream names, and the connector's use of it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mtawindows.client import Router, key_of_stream, keyed_stream_name
from mtawindows.client.routing import split_targets, stable_hash
from mtawindows.spark_connector import ConnectorError, ConnectorOptions
from mtawindows.spark_connector.common import owner


def test_targets_are_split_and_checked() -> None:
    assert split_targets("a:1") == ("a:1",)
    assert split_targets(" a:1 , b:2") == ("a:1", "b:2")
    assert Router(["a:1", "b:2"]).targets == Router("a:1,b:2").targets == ("a:1", "b:2")
    for bad in ("", " , ", "a:1,,b:2"):
        with pytest.raises(ValueError, match="expected host:port"):
            split_targets(bad)
    with pytest.raises(ValueError, match="listed twice"):
        Router(["a:1", "a:1"])


def test_owners_are_stable_and_spread() -> None:
    router = Router("a:1,b:2,c:3", pinned=["tele"])
    assert router.primary == "a:1"
    assert router.owner("tele") == "a:1"  # pinned: the template stays on the first
    names = [keyed_stream_name("tele", f"h{i}") for i in range(60)]
    owners = {n: router.owner(n) for n in names}
    assert set(owners.values()) == {"a:1", "b:2", "c:3"}
    assert all(router.owner_of_key("tele", f"h{i}") == owners[n] for i, n in enumerate(names))
    assert Router("solo:1").owner("anything") == "solo:1"
    # the same in another process (no salted hash)
    code = "from mtawindows.client import Router; print(Router('a:1,b:2,c:3').owner('tele:h7'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == router.owner("tele:h7")
    assert stable_hash("x") == stable_hash("x") != stable_hash("y")


def test_keyed_streams_of_a_target() -> None:
    router = Router("a:1,b:2", pinned=["t"])
    names = [keyed_stream_name("t", k) for k in ("x", "y", "z", "w", "v")]
    listed = [*names, "t", "other:x"]
    mine = router.keyed_streams("t", "a:1", listed)
    theirs = router.keyed_streams("t", "b:2", listed)
    assert sorted(mine + theirs) == sorted(names)
    assert all(router.owner(n) == "a:1" for n in mine)
    assert key_of_stream("t", "t:x") == "x" and key_of_stream("t", "other:x") is None


def test_connector_routes_through_the_router() -> None:
    opts = ConnectorOptions.parse({"endpoint": "a:1,b:2", "stream": "t", "key_column": "k"})
    router = Router(opts.endpoint, pinned=["t"])
    assert owner(opts, "t") == "a:1"
    for k in range(20):
        name = keyed_stream_name("t", k)
        assert owner(opts, name) == router.owner(name) == opts.router.owner(name)
    with pytest.raises(ConnectorError, match="option 'endpoint': a server is listed twice"):
        ConnectorOptions.parse({"endpoint": "a:1,a:1", "stream": "t"})
