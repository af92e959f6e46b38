"""The local cluster: docker-compose.yml and the Dockerfile are checked by parsing them (no Docker
engine here), and the same topology (Redis with AOF + the server on it, probed by the compose
health check) runs as local processes. Also: the generated protobuf code matches the .proto."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from mtawindows.cli import build_parser
from mtawindows.client import Aggregation, Field, Policy, StreamSpec, WindowClient, WindowSpec
from mtawindows.server.embedded import EmbeddedRedis

from .service_support import ServerProcess

pytestmark = [pytest.mark.server, pytest.mark.redis]

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())  # type: ignore[no-any-return]


def test_generated_proto_code_is_up_to_date() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "mtawindows.v1.generate", "--check"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_compose_services(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == {"redis", "mtawindows"}
    redis = services["redis"]
    cmd = redis["command"]
    assert cmd[cmd.index("--appendonly") + 1] == "yes"  # AOF on
    assert redis["healthcheck"]["test"][:2] == ["CMD", "redis-cli"]
    assert any(p.endswith(":6379") for p in redis["ports"])
    app = services["mtawindows"]
    assert app["depends_on"]["redis"]["condition"] == "service_healthy"
    assert app["environment"]["MTAWINDOWS_REDIS_URL"].startswith("redis://redis:")
    assert any(p.endswith(":50051") for p in app["ports"])
    context = ROOT / app["build"]["context"]
    assert (context / app["build"]["dockerfile"]).is_file()
    # the server's flags are ones `mtawindows serve` accepts
    args = build_parser().parse_args(["serve", *app["command"]])
    assert args.port == 50051
    assert "grpc_health" in " ".join(app["healthcheck"]["test"])


def test_dockerfile_copies_what_exists_and_serves(compose: dict[str, Any]) -> None:
    text = (ROOT / "Dockerfile").read_text()
    for src in re.findall(r"^COPY (.+?) \S+$", text, flags=re.M):
        for path in src.split():
            assert (ROOT / path).exists(), path
    assert re.search(r'^ENTRYPOINT \["mtawindows", "serve"\]', text, flags=re.M)
    assert "HEALTHCHECK" in text
    cmd = re.search(r"^CMD (\[.*\])$", text, flags=re.M)
    assert cmd is not None
    build_parser().parse_args(["serve", *yaml.safe_load(cmd.group(1))])


def test_compose_topology_as_local_processes(compose: dict[str, Any], tmp_path: Path) -> None:
    """Redis with AOF (the compose's redis command) + the server pointed at it by
    MTAWINDOWS_REDIS_URL, probed with the compose file's own health check command."""
    app = compose["services"]["mtawindows"]
    with EmbeddedRedis(tmp_path / "redis") as redis_srv:
        env = {"MTAWINDOWS_REDIS_URL": redis_srv.url, "MTAWINDOWS_LOG_FORMAT": "json"}
        flags = list(app["command"])
        flags[flags.index("--host") + 1] = "127.0.0.1"  # loopback only on CI machines
        flags[flags.index("--metrics-host") + 1] = "127.0.0.1"
        flags[flags.index("--metrics-port") + 1] = "0"
        port_at = flags.index("--port")
        del flags[port_at : port_at + 2]
        srv = ServerProcess(tmp_path / "app", *flags, env=env)
        srv.env.update(env)
        with srv:
            test = app["healthcheck"]["test"]
            probe = [sys.executable if t == "python" else t for t in test[1:]]
            probe = [p.replace("127.0.0.1:50051", srv.target) for p in probe]
            r = subprocess.run(probe, capture_output=True, text=True, timeout=60, check=False)
            assert r.returncode == 0, r.stderr
            with WindowClient(srv.target) as c:
                c.create_stream(StreamSpec("t", (Field("x"),)))
                c.create_window(
                    WindowSpec("t", "w", (Aggregation("n", "count"),), Policy.count(10))
                )
                c.append("t", {"ts": [1, 2], "x": [1.0, 2.0]})
        # the server's data is in the external Redis, not its data dir
        import redis as redis_py

        keys = redis_py.Redis.from_url(redis_srv.url).keys("mtaw:svc:*")
        assert b"mtaw:svc:streams" in keys
