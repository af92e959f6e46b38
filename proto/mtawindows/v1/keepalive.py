"""The keepalive both sides agree on: every channel (the SDK's, and a member's channels to the
others when it relays a call) pings its server every :data:`KEEPALIVE_MS` (HTTP/2 PING, also
while no call is in flight) and gives up on a connection whose ping is not answered within as
long, so a server that went silent fails the calls in flight in about two seconds instead of
at their deadline; the servers accept pings that often and never count them as strikes
(:func:`server_options`; gRPC's default answers a GOAWAY ``too_many_pings`` to more than one
ping in five minutes without data). grpcio 1.85 times a ping out by
``grpc.http2.ping_timeout_ms`` (60 s unless set), not by ``grpc.keepalive_timeout_ms`` alone:
both are set."""

from __future__ import annotations

__all__ = ["KEEPALIVE_MS", "channel_options", "server_options"]

KEEPALIVE_MS = 1000  # a keepalive ping this often, and this long for its answer


def channel_options(interval_ms: int = KEEPALIVE_MS) -> list[tuple[str, int]]:
    """A channel's options: a keepalive ping every ``interval_ms``, with or without calls in
    flight, each answered within ``interval_ms`` or the connection is closed (its calls fail
    UNAVAILABLE); as many pings as it takes without data in between."""
    return [
        ("grpc.keepalive_time_ms", interval_ms),
        ("grpc.keepalive_timeout_ms", interval_ms),
        ("grpc.http2.ping_timeout_ms", interval_ms),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
    ]


def server_options() -> list[tuple[str, int]]:
    """A server's options: take the channels' pings every :data:`KEEPALIVE_MS`, calls in
    flight or not, never as strikes."""
    return [
        ("grpc.http2.min_ping_interval_without_data_ms", KEEPALIVE_MS),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_ping_strikes", 0),
    ]
