"""Fixtures of the service tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from mtawindows.server.storage import EmbeddedRedis


@pytest.fixture
def private_redis() -> Iterator[str]:
    """A Redis of this test alone: its command counter counts only what the test does (see
    :func:`tests.support.redis_stats.commands_processed`)."""
    srv = EmbeddedRedis(fsync="everysec").start()
    try:
        yield srv.url
    finally:
        srv.stop()
