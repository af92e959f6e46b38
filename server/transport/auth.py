"""Bearer-token authentication of every call: the :class:`TokenAuth` interceptor."""

from __future__ import annotations

import hmac
import re
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import grpc

from .status import failure, unauthenticated_status
from .tokens import check_tokens

__all__ = ["BEARER", "TokenAuth"]

# The header, exactly: the scheme (case-insensitive, as RFC 6750 / RFC 7235 allow), one
# space, the token; nothing before or after.
BEARER = re.compile(r"(?i:bearer) ([\x21-\x7e]+)")


class TokenAuth(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Bearer-token auth: the call's one ``authorization`` header must be exactly
    ``Bearer <token>`` (scheme case-insensitive, one space, no other whitespace) with a token
    of ``tokens`` (compared in constant time against every one). The health service stays
    open (load balancers and orchestrators probe it). Fails closed: no tokens, or a token
    that could never match, is a ValueError here, so a server never starts open by mistake."""

    OPEN = ("/grpc.health.v1.Health/",)

    def __init__(self, tokens: Iterable[str]) -> None:
        self.tokens = [t.encode() for t in check_tokens(tokens, "TokenAuth")]

    def _ok(self, metadata: Any) -> bool:
        values = [v for k, v in metadata or () if k == "authorization"]
        if len(values) != 1 or not isinstance(values[0], str):
            return False  # none, or several (which one would a proxy have meant?)
        m = BEARER.fullmatch(values[0])
        if m is None:
            return False
        given = m.group(1).encode()
        ok = False
        for t in self.tokens:  # every one, so the time does not tell which matched
            ok |= hmac.compare_digest(given, t)
        return ok

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        method = details.method or ""
        try:
            allowed = method.startswith(self.OPEN) or self._ok(details.invocation_metadata)
            handler = await continuation(details)
        except Exception as ex:  # not grpcio's answer (UNKNOWN with the exception's text)
            return _deny(None, failure(method, ex).status)
        if allowed or handler is None:
            return handler
        return _deny(handler, unauthenticated_status())


def _deny(handler: grpc.RpcMethodHandler | None, status: grpc.Status) -> grpc.RpcMethodHandler:
    """A handler that ends the call with ``status``, in the shape of ``handler`` (None: a
    unary one taking the request's bytes as they are)."""

    async def deny(request: Any, context: grpc.aio.ServicerContext) -> Any:
        await context.abort_with_status(status)

    async def deny_stream(request: Any, context: grpc.aio.ServicerContext) -> Any:
        await context.abort_with_status(status)
        yield  # pragma: no cover

    if handler is None:
        return grpc.unary_unary_rpc_method_handler(deny)
    deser = handler.request_deserializer
    ser = handler.response_serializer
    if handler.unary_stream:
        return grpc.unary_stream_rpc_method_handler(deny_stream, deser, ser)
    if handler.stream_stream:
        return grpc.stream_stream_rpc_method_handler(deny_stream, deser, ser)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(deny, deser, ser)
    return grpc.unary_unary_rpc_method_handler(deny, deser, ser)
