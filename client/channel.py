"""Connection set-up shared by both clients: the default target, the channel options, TLS
credentials, the bearer-token header, and opening a blocking or an asyncio channel.

Every channel pings its server every second (:mod:`mtawindows.v1.keepalive`, the servers'
side of it too): a server that went silent (a cut network, a frozen host) fails the calls in
flight with UNAVAILABLE in about two seconds instead of at their deadline, and a connection
that cannot be set up fails as fast. A server that does not accept such pings answers the
first with a GOAWAY ``too_many_pings``, after which grpc pings it less often by itself."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import grpc

from mtawindows.v1 import keepalive

DEFAULT_TARGET = "localhost:50051"
DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024  # the server's default limit too


def channel_options(
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES, keepalive_ms: int = keepalive.KEEPALIVE_MS
) -> list[tuple[str, int]]:
    """gRPC channel options: messages up to ``max_message_bytes`` both ways, the keepalive of
    :func:`mtawindows.v1.keepalive.channel_options` (a ping every ``keepalive_ms``, answered
    within as long), and reconnection paced for a server
    that restarts: gRPC's own backoff (1 s, then growing to 120 s) would refuse calls
    ("failed to connect to all addresses") for seconds after the server is back, longer
    than the SDK's retries wait; here a lost connection is tried again every 0.1 s, growing
    to 1 s."""
    return [
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.initial_reconnect_backoff_ms", RECONNECT_MIN_MS),
        ("grpc.min_reconnect_backoff_ms", RECONNECT_MIN_MS),
        ("grpc.max_reconnect_backoff_ms", RECONNECT_MAX_MS),
        *keepalive.channel_options(keepalive_ms),
    ]


RECONNECT_MIN_MS = 100
RECONNECT_MAX_MS = 1000


def credentials(tls: bool | str | None) -> grpc.ChannelCredentials | None:
    """``tls``: None/False = plaintext, True = system roots, a path = that CA bundle."""
    if not tls:
        return None
    if tls is True:
        return grpc.ssl_channel_credentials()
    return grpc.ssl_channel_credentials(root_certificates=Path(str(tls)).read_bytes())


def auth_metadata(token: str | None) -> tuple[tuple[str, str], ...]:
    """The ``authorization`` header for ``token``; ValueError for a token the server could
    never accept (printable ASCII without spaces, RFC 6750), before any call."""
    if token is None or token == "":
        return ()
    if not isinstance(token, str) or not all(0x21 <= ord(c) <= 0x7E for c in token):
        msg = "token: expected a bearer token (printable ASCII without spaces), got " + (
            f"{len(token)} characters" if isinstance(token, str) else type(token).__name__
        )
        raise ValueError(msg)
    return (("authorization", f"Bearer {token}"),)


def check_keepalive_ms(value: int) -> int:
    """``value`` if it is a keepalive interval the servers take (at least
    :data:`~mtawindows.v1.keepalive.KEEPALIVE_MS`, at most a day); ValueError."""
    low = keepalive.KEEPALIVE_MS
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= 86_400_000:
        msg = f"keepalive_ms: expected milliseconds {low}..86400000, got {value!r}"
        raise ValueError(msg)
    return value


def check_max_message_bytes(value: int) -> int:
    """``value`` if it is a message limit gRPC takes (1 byte to 2 GiB - 1); ValueError."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 2**31:
        msg = f"max_message_bytes: expected a number of bytes 1..2147483647, got {value!r}"
        raise ValueError(msg)
    return value


def open_channel(
    target: str,
    creds: grpc.ChannelCredentials | None,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    keepalive_ms: int = keepalive.KEEPALIVE_MS,
) -> grpc.Channel:
    """A blocking channel to ``target``: TLS with ``creds``, plaintext without; messages up
    to ``max_message_bytes`` both ways; a keepalive ping every ``keepalive_ms``."""
    return _open(grpc, target, creds, max_message_bytes, keepalive_ms)


def open_aio_channel(
    target: str,
    creds: grpc.ChannelCredentials | None,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    keepalive_ms: int = keepalive.KEEPALIVE_MS,
) -> grpc.aio.Channel:
    """The asyncio (grpc.aio) channel to ``target``: TLS with ``creds``, plaintext without;
    messages up to ``max_message_bytes`` both ways; a keepalive ping every ``keepalive_ms``."""
    return _open(grpc.aio, target, creds, max_message_bytes, keepalive_ms)


def _open(
    kind: ModuleType,
    target: str,
    creds: grpc.ChannelCredentials | None,
    max_message_bytes: int,
    keepalive_ms: int,
) -> object:
    opts = channel_options(max_message_bytes, keepalive_ms)
    if creds is not None:
        return kind.secure_channel(target, creds, opts)
    return kind.insecure_channel(target, opts)


__all__ = [
    "DEFAULT_MAX_MESSAGE_BYTES",
    "DEFAULT_TARGET",
    "auth_metadata",
    "channel_options",
    "check_keepalive_ms",
    "check_max_message_bytes",
    "credentials",
    "open_aio_channel",
    "open_channel",
]
