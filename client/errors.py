"""Typed exceptions decoded from the server's rich ``google.rpc.Status`` (never from messages).

The class comes from the ErrorInfo reason where the contract gives one its own
(:class:`~mtawindows.v1.reasons.Reason`), else from the gRPC code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from mtawindows.v1.reasons import Reason
from mtawindows.v1.relay import SERVED_BY


@dataclass
class Violation:
    field: str
    description: str


class MtaWindowsError(Exception):
    """Base of the SDK's errors: the gRPC ``code`` name, the ``reason`` (ErrorInfo: a
    :class:`~mtawindows.v1.reasons.Reason` from this server, kept as a string),
    the message, field ``violations`` (BadRequest), ErrorInfo ``metadata`` and the ``target``
    (``host:port``) of the server the call went to, when the client knows it."""

    code = "UNKNOWN"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        reason: str = "",
        violations: list[Violation] | None = None,
        metadata: dict[str, str] | None = None,
        target: str | None = None,
    ) -> None:
        super().__init__(message)
        self.target = target
        self.message = message
        if code is not None:
            self.code = code
        self.reason = reason
        self.violations = violations or []
        self.metadata = metadata or {}

    def __str__(self) -> str:
        tag = f"{self.code}/{self.reason}" if self.reason else self.code
        return f"[{tag}] {self.message}"


class InvalidArgumentError(MtaWindowsError, ValueError):
    code = "INVALID_ARGUMENT"


class NotFoundError(MtaWindowsError, LookupError):
    code = "NOT_FOUND"


class AlreadyExistsError(MtaWindowsError):
    code = "ALREADY_EXISTS"


class FailedPreconditionError(MtaWindowsError):
    code = "FAILED_PRECONDITION"


class OutOfOrderError(FailedPreconditionError):
    """A row older than the stream's newest, on a stream that rejects late rows."""


class NotOwnerError(FailedPreconditionError):
    """Another server owns the stream (reason ``NOT_OWNER``; metadata ``owner`` is where to
    call). The clients follow these redirects themselves: one surfaces only when they do not
    settle (:class:`RedirectLoopError`)."""


class RedirectLoopError(NotOwnerError):
    """The servers kept sending a call elsewhere (``NOT_OWNER``) without one taking it: the
    message names the addresses in the order the call went through them (``path``)."""

    def __init__(self, message: str, *, path: list[str], **kw: Any) -> None:
        super().__init__(message, **kw)
        self.path = path


class ResourceExhaustedError(MtaWindowsError):
    code = "RESOURCE_EXHAUSTED"


class MessageTooLargeError(ResourceExhaustedError):
    """A request or a reply over a message limit (reason ``MESSAGE_TOO_LARGE``; metadata
    ``limit_bytes`` and ``size_bytes``): the client's own (``max_message_bytes``: raised
    before anything is sent, ``target`` None) or the server's (its ``--max-message-mb``).
    Send fewer rows per call; sending it again fails the same way. A request too large
    applied nothing; an Append whose per-row results made the reply too large was applied
    all the same (metadata ``applied`` is ``"true"``): resend it only with its
    ``producer_id`` and ``sequence``, which make the retry a duplicate."""


class UnauthenticatedError(MtaWindowsError, PermissionError):
    code = "UNAUTHENTICATED"


class PermissionDeniedError(MtaWindowsError, PermissionError):
    code = "PERMISSION_DENIED"


class UnavailableError(MtaWindowsError, ConnectionError):
    code = "UNAVAILABLE"


class StreamMovingError(UnavailableError):
    """The stream has no live owner right now (reason ``STREAM_MOVING``: a failover or a
    hand-over is under way); metadata ``retry_after_ms``. The clients wait and retry by
    themselves: one surfaces only when the call's retries run out."""


class DeadlineExceededError(MtaWindowsError, TimeoutError):
    code = "DEADLINE_EXCEEDED"


class InternalError(MtaWindowsError):
    code = "INTERNAL"


_BY_CODE: dict[grpc.StatusCode, type[MtaWindowsError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExistsError,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPreconditionError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhaustedError,
    grpc.StatusCode.UNAUTHENTICATED: UnauthenticatedError,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDeniedError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceededError,
    grpc.StatusCode.INTERNAL: InternalError,
}
# a reason without its own class takes its code's: KEY_NOT_FOUND is a NotFoundError (as
# STREAM_NOT_FOUND and WINDOW_NOT_FOUND), NOT_KEYED a FailedPreconditionError (an
# InvalidArgumentError for a key given to an unkeyed stream), TOO_MANY_KEYS a
# ResourceExhaustedError (as TOO_MANY_STREAMS)
_BY_REASON: dict[str, type[MtaWindowsError]] = {
    Reason.OUT_OF_ORDER: OutOfOrderError,
    Reason.NOT_OWNER: NotOwnerError,
    Reason.STREAM_MOVING: StreamMovingError,
    Reason.MESSAGE_TOO_LARGE: MessageTooLargeError,
}


@dataclass
class _Decoded:
    reason: str = ""
    metadata: dict[str, str] = field(default_factory=dict)
    violations: list[Violation] = field(default_factory=list)


def _details(status: Any) -> _Decoded:
    out = _Decoded()
    if status is None:
        return out
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            out.reason = info.reason
            out.metadata = dict(info.metadata)
        elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            out.violations = [Violation(v.field, v.description) for v in bad.field_violations]
    return out


def from_rpc_error(err: grpc.RpcError, target: str | None = None) -> MtaWindowsError:
    """The typed exception for a failed call (sync or aio) to the server at ``target``; a
    call that server forwarded to its stream's owner names the owner, the server that
    answered (trailing metadata ``mtawindows-served-by``)."""
    target = _served_by(err) or target
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    message = (err.details() if hasattr(err, "details") else None) or str(err)
    try:
        status = rpc_status.from_call(err) if isinstance(err, grpc.Call) else None
    except ValueError:
        status = None
    if status is None and hasattr(err, "trailing_metadata"):
        status = _aio_status(err)
    d = _details(status)
    if not d.reason and code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        message = _cut_by_grpc(message, d)
    cls = _BY_REASON.get(d.reason) or _BY_CODE.get(code, MtaWindowsError)
    return cls(
        message,
        code=code.name if code is not None else "UNKNOWN",
        reason=d.reason,
        violations=d.violations,
        metadata=d.metadata,
        target=target,
    )


# the server's gRPC layer refusing a request; a reply this client's gRPC refused says
# "CLIENT: ..." (the request was sent, and may have been applied): not this
_GRPC_TOO_LARGE = re.compile(r"^SERVER: Received message larger than max \((\d+) vs\. (\d+)\)")


def _cut_by_grpc(message: str, d: _Decoded) -> str:
    """A request gRPC itself refused by its size (past twice the server's message limit the
    server's gRPC layer cuts it before the service sees it: a bare RESOURCE_EXHAUSTED):
    ``MESSAGE_TOO_LARGE`` with ``size_bytes`` and ``limit_bytes`` (the limit gRPC applied),
    as the service refuses a smaller one. Nothing of it was applied."""
    m = _GRPC_TOO_LARGE.search(message)
    if m is None:
        return message
    size, limit = m.groups()
    d.reason = Reason.MESSAGE_TOO_LARGE
    d.metadata = {"size_bytes": size, "limit_bytes": limit}
    return (
        f"the request is {size} bytes, over the server's limit of {limit} bytes for a message "
        "(its gRPC layer refused it; nothing was applied); send fewer rows per call"
    )


def _served_by(err: Any) -> str | None:
    """The member that answered a forwarded call, from the error's trailing metadata."""
    try:
        md = err.trailing_metadata() or ()
    except Exception:  # no metadata on this error
        return None
    for key, value in md:
        if key == SERVED_BY and isinstance(value, str) and value:
            return value
    return None


def _aio_status(err: Any) -> Any:
    from google.rpc import status_pb2

    try:
        md = err.trailing_metadata() or ()
    except Exception:  # pragma: no cover - no metadata on this error
        return None
    for key, value in md:
        if key == "grpc-status-details-bin":
            return status_pb2.Status.FromString(value)
    return None
