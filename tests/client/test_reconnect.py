"""A client outlives its server's restart: the channel's reconnection is paced for it."""

from __future__ import annotations

from pathlib import Path

import pytest

from mtawindows.client import Field, StreamSpec, UnavailableError, WindowClient
from mtawindows.testing import LocalServer


@pytest.mark.server
@pytest.mark.redis
def test_a_client_carries_on_after_its_server_restarts(tmp_path: Path) -> None:
    """kill -9 of the server, a call while it is down (it fails), the server back: the same
    client's next calls succeed, round after round (gRPC's own reconnect backoff, a second
    and growing, would refuse them for longer than the retries wait)."""
    with LocalServer(tmp_path / "srv") as srv, WindowClient(srv.target, timeout=5) as c:
        c.create_stream(StreamSpec("rs", (Field("v", "DOUBLE"),), wall_clock=False))
        for i in range(5):
            srv.kill()
            with pytest.raises(UnavailableError):
                c.get_stream("rs")
            srv.start()
            assert c.get_stream("rs").spec.name == "rs", i
