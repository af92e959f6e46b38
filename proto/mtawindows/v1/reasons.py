"""The ``ErrorInfo`` reasons of the wire contract: every reason the server sends, with its meaning.

A failed call carries a ``google.rpc.Status`` whose ``ErrorInfo`` names the domain
(:data:`DOMAIN`) and one of these UPPER_SNAKE reasons; clients branch on the reason (and the
gRPC code), never on the message.

The list itself is the contract's ``enum ErrorReason`` in ``windows.proto``, where each
reason's gRPC code and metadata keys are documented for clients in any language: each value's
name is a reason. :class:`Reason` is that list for Python, each member with its meaning; it
must name exactly the enum's values (:func:`mismatch` says how they differ; a test fails on
any difference). ``tests/engine/test_errors.py`` checks that the server sends no reason that
is not a member of :class:`Reason`.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["DOMAIN", "UNSPECIFIED", "Reason", "mismatch", "proto_reasons"]

DOMAIN = "mtawindows.dev"  # ErrorInfo.domain of every error the server sends
UNSPECIFIED = "ERROR_REASON_UNSPECIFIED"  # the proto enum's 0: never sent


class Reason(StrEnum):
    """An ErrorInfo reason: each member equals its name and says what it means (``meaning``)."""

    meaning: str

    def __new__(cls, value: str, meaning: str) -> Reason:
        member = str.__new__(cls, value)
        member._value_ = value
        member.meaning = meaning
        return member

    # -- any call
    INTERNAL = (
        "INTERNAL",
        "an unexpected server failure: the client gets only its id (metadata error_id), the "
        "server log the rest",
    )
    UNAUTHENTICATED = "UNAUTHENTICATED", "no bearer token, or one the server does not accept"
    MALFORMED_REQUEST = "MALFORMED_REQUEST", "the request's bytes are not the method's message"
    INVALID_ARGUMENT = "INVALID_ARGUMENT", "a request field is out of its range (the field named)"
    VALUE_TOO_LONG = "VALUE_TOO_LONG", "a string of the request is over its length limit"
    TOO_MANY_ITEMS = "TOO_MANY_ITEMS", "a list of the request is over its size limit"
    MESSAGE_TOO_LARGE = (
        "MESSAGE_TOO_LARGE",
        "the request's serialized size is over the limit (RESOURCE_EXHAUSTED): metadata "
        "limit_bytes and size_bytes; send smaller batches (from the SDK, before it is sent)",
    )
    UNKNOWN_ENUM_VALUE = (
        "UNKNOWN_ENUM_VALUE",
        "an enum field holds a number the server has no name for",
    )
    STORE_UNAVAILABLE = (
        "STORE_UNAVAILABLE",
        "the store (Redis) failed or is down: retry (appends with a producer_id and sequence "
        "are idempotent)",
    )
    SERVER_STOPPING = "SERVER_STOPPING", "the server is stopping: call again later or elsewhere"
    # -- the cluster
    NOT_OWNER = (
        "NOT_OWNER",
        "another server owns the stream (FAILED_PRECONDITION): call it at metadata owner "
        "(host:port); its member id and lease token are owner_id and token",
    )
    STREAM_MOVING = (
        "STREAM_MOVING",
        "the stream has no live owner right now (its server died or hands it over): retry "
        "after metadata retry_after_ms, anywhere (UNAVAILABLE)",
    )
    FENCED = (
        "FENCED",
        "this server lost the stream's lease while writing (a newer owner exists): nothing was "
        "applied; call the owner (UNAVAILABLE, the server's own record)",
    )
    MEMBER_ISOLATED = (
        "MEMBER_ISOLATED",
        "this server has not reached the cluster's Redis for longer than half a lease: it may "
        "no longer own anything, so it serves no stream (UNAVAILABLE; metadata members: the "
        "addresses it last knew, comma-separated, view_age_ms): call another member",
    )
    OWNER_UNREACHABLE = (
        "OWNER_UNREACHABLE",
        "a member asked to forward the call to the stream's owner (header mtawindows-forward) "
        "could not reach it (UNAVAILABLE; metadata stream, owner): the call may have reached "
        "the owner, so only an idempotent call is resent",
    )
    # -- streams and windows
    STREAM_NOT_FOUND = "STREAM_NOT_FOUND", "no stream of that name"
    WINDOW_NOT_FOUND = (
        "WINDOW_NOT_FOUND",
        "no window of that name on the stream (or it was deleted)",
    )
    STREAM_EXISTS = "STREAM_EXISTS", "a stream of that name exists (whatever its definition)"
    WINDOW_EXISTS = (
        "WINDOW_EXISTS",
        "a window of that name exists on the stream (whatever its definition)",
    )
    TOO_MANY_STREAMS = "TOO_MANY_STREAMS", "the server holds its limit of streams"
    TOO_MANY_WINDOWS = "TOO_MANY_WINDOWS", "the stream holds its limit of windows"
    INVALID_DEFINITION = "INVALID_DEFINITION", "a stream or window definition is not valid"
    UNKNOWN_FIELD = "UNKNOWN_FIELD", "a window aggregates or tests a field the stream does not have"
    UNKNOWN_MONOID = "UNKNOWN_MONOID", "an aggregation names a monoid the server does not know"
    INVALID_EXPRESSION = "INVALID_EXPRESSION", "a CEL policy expression does not parse or check"
    CEL_TOO_LARGE = "CEL_TOO_LARGE", "a CEL policy expression is over the size limit (bytes)"
    CEL_TOO_DEEP = "CEL_TOO_DEEP", "a CEL policy expression nests deeper than the limit"
    # -- appends
    AMBIGUOUS_BATCH = "AMBIGUOUS_BATCH", "a batch gives its rows both as columns and as arrow_ipc"
    BAD_ARROW = "BAD_ARROW", "arrow_ipc is not a readable Arrow IPC stream"
    SCHEMA_MISMATCH = (
        "SCHEMA_MISMATCH",
        "a batch's columns do not match the stream's fields (missing, unknown, repeated or of "
        "another type)",
    )
    BAD_VALUES = (
        "BAD_VALUES",
        "a batch holds values its stream or windows refuse (nulls, non-finite, out of range)",
    )
    BATCH_TOO_LARGE = "BATCH_TOO_LARGE", "a batch has more rows than the server's limit per Append"
    LOWER_FAILED = (
        "LOWER_FAILED",
        "a plugin monoid's lower raised on the result the batch would give a window "
        "(FAILED_PRECONDITION; metadata window, aggregation, monoid, error): nothing was "
        "applied, and the same batch fails the same way",
    )
    KEY_NOT_FOUND = "KEY_NOT_FOUND", "a keyed stream has no such key"
    NOT_KEYED = (
        "NOT_KEYED",
        "a call for keyed streams about an unkeyed one, or an unkeyed call on a keyed one",
    )
    TOO_MANY_KEYS = "TOO_MANY_KEYS", "the server holds its limit of keys (--max-keys)"
    BAD_RESULT_MODE = "BAD_RESULT_MODE", "an Append asks for a result mode the server does not know"
    OUT_OF_ORDER = (
        "OUT_OF_ORDER",
        "a row is older than the stream's newest on a stream that rejects late rows",
    )
    # -- subscriptions
    TOO_MANY_SUBSCRIBERS = "TOO_MANY_SUBSCRIBERS", "the server holds its limit of subscriptions"
    SUBSCRIBER_TOO_SLOW = (
        "SUBSCRIBER_TOO_SLOW",
        "the subscriber fell too far behind and was cut: resubscribe and catch up with ReadResults",
    )
    UNSUBSCRIBED = "UNSUBSCRIBED", "the subscriber went away (the server's own record; never sent)"


def proto_reasons() -> tuple[str, ...]:
    """The reasons ``enum ErrorReason`` of ``windows.proto`` lists, in its order (without
    :data:`UNSPECIFIED`)."""
    from .windows_pb2 import ErrorReason

    return tuple(v.name for v in ErrorReason.DESCRIPTOR.values if v.name != UNSPECIFIED)


def mismatch() -> dict[str, list[str]]:
    """How :class:`Reason` and the proto's ``ErrorReason`` differ: the reasons only in the
    proto (``"proto only"``) and only here (``"python only"``); empty when they agree."""
    proto = set(proto_reasons())
    here = set(Reason.__members__)
    out = {"proto only": sorted(proto - here), "python only": sorted(here - proto)}
    return {k: v for k, v in out.items() if v}
