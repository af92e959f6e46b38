"""What the blocking and the asyncio client hold and do alike: the server's ``target``, the
auth header, the default deadline, the retry count, the stub, the per-stream schema cache, and
how a :class:`~mtawindows.client.calls.Call` goes to the stub (the clients only add the waiting:
blocking, or awaited)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from mtawindows.v1 import windows_pb2_grpc as pb_grpc

from . import calls
from .channel import auth_metadata


class ClientBase:
    """``target`` is ``host:port``; ``token`` a bearer token; ``timeout`` the default deadline
    per call in seconds; ``retries`` tries for idempotent calls."""

    stub: pb_grpc.WindowServiceStub

    def __init__(self, target: str, token: str | None, timeout: float, retries: int) -> None:
        self.target = target
        self.metadata = auth_metadata(token)  # first: a bad token opens no channel
        self.timeout = timeout
        self.retries = retries
        self._schemas: dict[str, dict[str, str]] = {}

    def _attempts(self, call: calls.Call[Any, Any]) -> Iterator[calls.Attempt]:
        return calls.attempts(self.target, self.retries if call.retry else 1)

    def _send(self, call: calls.Call[Any, Any], timeout: float | None) -> Any:
        """The stub's reply (blocking client) or the awaitable of it (asyncio client)."""
        send = getattr(self.stub, call.method)
        return send(call.request, timeout=timeout or self.timeout, metadata=self.metadata)

    def _subscription(self, stream: str, window: str, timeout: float | None) -> Any:
        """The Subscribe call; ``timeout`` bounds the whole subscription (None: no bound)."""
        req = calls.subscribe_request(stream, window)
        return self.stub.Subscribe(req, timeout=timeout, metadata=self.metadata)

    def _forget_schema(self, stream: str) -> None:
        self._schemas.pop(stream, None)


__all__ = ["ClientBase"]
