"""Where the Redis tests find their Redis: one answer for the whole test session.

``REDIS_URL`` if set; else a Redis container (testcontainers) when a Docker engine answers;
else the embedded valkey-server (the path CI takes here: no Docker engine). Never a skip.
"""

from __future__ import annotations

import atexit
import os
import threading

_url: str | None = None
_lock = threading.Lock()


def _docker_url() -> str | None:
    try:
        import docker  # type: ignore[import-untyped]

        docker.from_env(timeout=3).ping()
    except Exception:  # no SDK, no engine, no permission: not this path
        return None
    from testcontainers.redis import RedisContainer  # type: ignore[import-untyped]

    container = RedisContainer("redis:7-alpine").start()
    atexit.register(container.stop)
    host = container.get_container_host_ip()
    port = container.get_exposed_port(6379)
    return f"redis://{host}:{port}/0"


def redis_url() -> str:
    global _url
    with _lock:
        if _url is None:
            _url = os.environ.get("REDIS_URL") or _docker_url()
            if _url is None:
                from mtawindows.server.storage.embedded import EmbeddedRedis

                srv = EmbeddedRedis().start()
                atexit.register(srv.stop)
                _url = srv.url
        return _url
