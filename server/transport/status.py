"""Errors on the wire: the one place that turns what ended a call into the status the client gets.

A call ends in error for one of these, mapped here (:func:`failure`) and nowhere else:

* a refusal (:class:`ServiceError`, raised by any layer): its code, reason, message, field
  violations and metadata, as they are;
* a request whose bytes do not parse (:class:`~.decode.Malformed`): INVALID_ARGUMENT,
  ``MALFORMED_REQUEST``;
* a request over the message limit (:func:`message_too_large`, built by the parser in place
  of the message): RESOURCE_EXHAUSTED, ``MESSAGE_TOO_LARGE`` with the limit and the size;
* the store failing (``StoreError``, ``redis.RedisError``): UNAVAILABLE, ``STORE_UNAVAILABLE``
  with an error id (the store's text stays in the log);
* anything else: INTERNAL, logged with its traceback under a fresh error id, and the id is all
  the client learns (never the exception's text).

Every status is a ``google.rpc.Status`` with an ``ErrorInfo`` (domain
:data:`~mtawindows.v1.reasons.DOMAIN`, a :class:`~mtawindows.v1.reasons.Reason`) and, for bad
requests, a ``BadRequest``; bounded whatever it is given (:func:`rich_status`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

import grpc
import redis
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from mtawindows.v1.reasons import DOMAIN, Reason
from mtawindows.v1.types import clip

from ..service.fanout import Ending
from ..service.refusals import ServiceError, new_error_id, store_failed
from ..storage.protocol import StoreError
from .decode import Malformed

__all__ = [
    "DOMAIN",
    "STATUS_DESCRIPTION_CHARS",
    "STATUS_FIELD_CHARS",
    "STATUS_MESSAGE_CHARS",
    "STATUS_METADATA_BYTES",
    "STATUS_VALUE_CHARS",
    "STATUS_VIOLATION_BYTES",
    "Failure",
    "ending_status",
    "failure",
    "internal_status",
    "loggable",
    "message_too_large",
    "receive_limit",
    "refusal_of",
    "refusal_status",
    "rich_status",
    "store_unavailable_refusal",
    "unauthenticated_status",
]

log = logging.getLogger("mtawindows.server")

# The largest error a client gets: about 5 KiB with base64, under the 8 KiB metadata limit.
STATUS_MESSAGE_CHARS = 1024
STATUS_VIOLATION_BYTES = 2048  # all field violations together
STATUS_METADATA_BYTES = 1536  # all ErrorInfo metadata together
STATUS_FIELD_CHARS = 128
STATUS_DESCRIPTION_CHARS = 300
STATUS_VALUE_CHARS = 256


# --------------------------------------------------------------------------- what ends a call


@dataclass(frozen=True)
class Failure:
    """How a call ends: its gRPC code and ErrorInfo reason (for the metrics) and the status."""

    code: str
    reason: str
    status: grpc.Status


def failure(method: str, ex: BaseException) -> Failure:
    """The end of ``method`` that ``ex`` escaped from: a refusal (logged at info, bounded) or
    an internal error (logged with its traceback under a fresh id, which the client gets)."""
    refusal = refusal_of(method, ex)
    if refusal is None:
        error_id = new_error_id()
        log.error(
            "internal error, id %s, in %s",
            error_id,
            method,
            exc_info=loggable(ex),
            extra={"method": method, "error_id": error_id},
        )
        return Failure("INTERNAL", Reason.INTERNAL, internal_status(error_id))
    log.info(
        "request refused",
        extra={
            "method": method,
            "code": refusal.code,
            "reason": refusal.reason,
            "detail": clip(refusal.message, 1000),
        },
    )
    return Failure(refusal.code, refusal.reason, refusal_status(refusal))


def refusal_of(method: str, ex: BaseException) -> ServiceError | None:
    """``ex`` as the refusal the client gets; None when it is no refusal (internal)."""
    if isinstance(ex, ServiceError):
        return ex
    if isinstance(ex, Malformed):
        return ex.refusal() if ex.undecodable else None
    if isinstance(ex, StoreError | redis.RedisError):  # the store failing is never INTERNAL
        return store_failed(method, ex)
    return None


def receive_limit(max_message_bytes: int) -> int:
    """What gRPC itself lets in for a server whose limit is ``max_message_bytes``: twice that
    (at most 2 GiB - 1, gRPC's own bound). A request between the two is read and refused by
    its size before it is parsed (:func:`message_too_large`, a rich status); one past this
    hard cap is cut by gRPC as it arrives (RESOURCE_EXHAUSTED without ErrorInfo), so a call
    never holds more than twice the limit in memory."""
    return min(2 * max_message_bytes, 2**31 - 1)


def message_too_large(type_name: str, size: int, limit: int) -> ServiceError:
    """The refusal of a request of ``size`` serialized bytes over the server's ``limit``."""
    return ServiceError(
        "RESOURCE_EXHAUSTED",
        Reason.MESSAGE_TOO_LARGE,
        f"the {type_name} is {size} bytes, over the server's limit of {limit} bytes "
        "(--max-message-mb): send fewer rows per call",
        metadata={"limit_bytes": str(limit), "size_bytes": str(size)},
    )


def reply_too_large(method: str, size: int, limit: int, applied: int | None = None) -> ServiceError:
    """The refusal of a reply that would pass the server's message ``limit`` (found while it
    is built: at least ``size`` bytes). ``applied``: the rows an Append applied before its
    per-row results were found too large (metadata ``applied``)."""
    metadata = {"limit_bytes": str(limit), "size_bytes": str(size)}
    if applied is None:
        message = (
            f"the {method} reply would be at least {size} bytes, over the server's limit of "
            f"{limit} bytes (--max-message-mb): send fewer rows per call, or ask fewer windows"
        )
    else:
        metadata["applied"] = "true"
        message = (
            f"the batch was applied ({applied} rows), but its per-row results ({size} bytes) "
            f"pass the server's message limit of {limit} bytes (--max-message-mb): ask them of "
            "fewer windows or send smaller batches; do not resend it without a producer_id and "
            "sequence (it would apply twice)"
        )
    return ServiceError("RESOURCE_EXHAUSTED", Reason.MESSAGE_TOO_LARGE, message, metadata=metadata)


def store_unavailable_refusal(method: str, why: str) -> ServiceError:
    """The refusal of a call that needs the store while the server knows it is down."""
    return ServiceError(
        "UNAVAILABLE",
        Reason.STORE_UNAVAILABLE,
        f"{method}: {why}; retry later (appends with a producer_id and sequence are idempotent)",
    )


# --------------------------------------------------------------------------- statuses


def refusal_status(ex: ServiceError) -> grpc.Status:
    return rich_status(ex.code, ex.reason, ex.message, ex.violations, ex.metadata)


def ending_status(ending: Ending) -> grpc.Status:
    """The status that ends a subscription (cut, its window deleted, the server stopping)."""
    return rich_status(ending.code, ending.reason, ending.message, metadata=ending.metadata)


def internal_status(error_id: str) -> grpc.Status:
    """What a client learns of an internal error: its id (the log has the rest)."""
    return rich_status(
        "INTERNAL",
        Reason.INTERNAL,
        f"internal error, id {error_id}",
        metadata={"error_id": error_id},
    )


def unauthenticated_status() -> grpc.Status:
    return rich_status(
        "UNAUTHENTICATED",
        Reason.UNAUTHENTICATED,
        "missing or invalid bearer token: send metadata authorization: Bearer <token>",
    )


def rich_status(
    code: str,
    reason: str,
    message: str,
    violations: list[tuple[str, str]] | None = None,
    metadata: Mapping[str, str] | None = None,
) -> grpc.Status:
    """A grpc.Status carrying google.rpc.Status with ErrorInfo (+ BadRequest).

    Bounded whatever the caller passes (:func:`_bounded`): the status travels in trailing
    metadata, and a client drops trailers past gRPC's metadata limit (8 KiB soft, 16 KiB
    hard) as a bare "Stream removed"."""
    message, violations, metadata = _bounded(message, violations, metadata)
    details = []
    info = any_pb2.Any()
    info.Pack(error_details_pb2.ErrorInfo(reason=reason, domain=DOMAIN, metadata=metadata))
    details.append(info)
    if violations:
        bad = any_pb2.Any()
        bad.Pack(
            error_details_pb2.BadRequest(
                field_violations=[
                    error_details_pb2.BadRequest.FieldViolation(field=f, description=d)
                    for f, d in violations
                ]
            )
        )
        details.append(bad)
    status = status_pb2.Status(code=code_pb2.Code.Value(code), message=message, details=details)
    return rpc_status.to_status(status)


def _ascii(text: str, limit: int) -> str:
    """``text`` with non-ASCII escaped (grpc-message percent-encodes each byte), cut to
    ``limit`` characters with its length given."""
    out: str = clip(str(text).encode("ascii", "backslashreplace").decode("ascii"), limit)
    return out


def _bounded(
    message: str,
    violations: list[tuple[str, str]] | None,
    metadata: Mapping[str, str] | None,
) -> tuple[str, list[tuple[str, str]], dict[str, str]]:
    """An error's parts cut to size: the message, as many violations as fit (the rest
    counted in the last one), as many metadata entries as fit."""
    message = _ascii(message, STATUS_MESSAGE_CHARS)
    out_v: list[tuple[str, str]] = []
    used = 0
    items = list(violations or ())
    for i, (f, d) in enumerate(items):
        f, d = _ascii(f, STATUS_FIELD_CHARS), _ascii(d, STATUS_DESCRIPTION_CHARS)
        if used + len(f) + len(d) > STATUS_VIOLATION_BYTES - 64:
            out_v.append(("", f"... {len(items) - i} more violations not shown"))
            break
        out_v.append((f, d))
        used += len(f) + len(d)
    out_m: dict[str, str] = {}
    used = 0
    for k, v in (metadata or {}).items():
        k, v = _ascii(k, 64), _ascii(v, STATUS_VALUE_CHARS)
        if used + len(k) + len(v) > STATUS_METADATA_BYTES:
            break
        out_m[k] = v
        used += len(k) + len(v)
    return message, out_v, out_m


# --------------------------------------------------------------------------- the log


class _Logged(Exception):
    """Stands in for an exception in the log when its text is long: the original's type and
    clipped text, with its traceback (and its causes, likewise)."""


def loggable(ex: BaseException, depth: int = 0) -> BaseException:
    """``ex`` as it may be logged: itself when every message of its chain is short, else a
    stand-in chain whose texts are clipped to 2000 characters (tracebacks kept)."""

    def long(e: BaseException | None, d: int) -> bool:
        if e is None or d > 8:
            return False
        try:
            n = len(str(e))
        except Exception:  # a __str__ that raises: replace it
            return True
        return n > 2000 or long(e.__cause__, d + 1) or long(e.__context__, d + 1)

    if depth == 0 and not long(ex, 0):
        return ex
    try:
        text = str(ex)
    except Exception:
        text = "<unprintable>"
    sub = _Logged(f"{type(ex).__module__}.{type(ex).__qualname__}: {clip(text, 2000)}")
    sub = sub.with_traceback(ex.__traceback__)
    if depth < 8:
        if ex.__cause__ is not None:
            sub.__cause__ = loggable(ex.__cause__, depth + 1)
        elif ex.__context__ is not None:
            sub.__context__ = loggable(ex.__context__, depth + 1)
    sub.__suppress_context__ = ex.__suppress_context__
    return sub
