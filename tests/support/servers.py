"""Run ``mtawindows serve`` as the README says, as a subprocess on a free loopback port."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from mtawindows.client.launch import start_server

BIN = Path(sys.executable).parent / "mtawindows"


def free_port() -> int:
    """A loopback TCP port nothing listens on (free when this returns)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerProcess:
    """``mtawindows serve --port 0`` with its own data dir (embedded Redis) unless the args
    name a ``--redis-url``; ``port`` once :meth:`start` returned."""

    def __init__(
        self,
        data_dir: Path,
        *args: str,
        env: dict[str, str] | None = None,
        flush_interval: float = 0.2,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.args = list(args)
        self.flush_interval = flush_interval
        self.env = {**os.environ, **(env or {})}
        self.env.pop("MTAWINDOWS_REDIS_URL", None)
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.log = self.data_dir / "server.log"

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> ServerProcess:
        self.proc, self.port = start_server(
            self.data_dir,
            *self.args,
            program=(str(BIN),),
            flush_interval=self.flush_interval,
            env=self.env,
            timeout=timeout,
        )
        return self

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        proc, self.proc = self.proc, None
        if proc is None:
            return 0
        if proc.poll() is None:
            proc.send_signal(sig)
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait()

    def kill_all(self) -> None:
        """SIGKILL the server and its embedded Redis (a machine dying)."""
        subprocess.run(
            ["pkill", "-9", "-f", str(self.data_dir / "data")], check=False, capture_output=True
        )
        self.stop(signal.SIGKILL)

    def health(self, service: str = "", channel: grpc.Channel | None = None) -> str:
        own = channel is None
        ch = channel or grpc.insecure_channel(self.target)
        try:
            stub = health_pb2_grpc.HealthStub(ch)
            resp = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
            return health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status)
        finally:
            if own:
                ch.close()

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
