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

__all__ = ["DOMAIN", "REMEDY", "UNSPECIFIED", "Reason", "mismatch", "proto_reasons"]

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
        "a request's or a reply's serialized size is over the limit (RESOURCE_EXHAUSTED): "
        "metadata limit_bytes and size_bytes. A request too large: nothing was applied; from "
        "the server (over its --max-message-mb; past twice that its gRPC layer refuses it, "
        "which the SDK reports the same way, the limit then being that cap) or from the SDK "
        "before it is sent (over its max_message_bytes). A reply too large (an Append's "
        "per-row results, a Compute's): metadata applied 'true' when the Append's rows were "
        "applied all the same (do not resend them without a producer_id and sequence); a "
        "Compute changes nothing",
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
    BAD_ARROW = (
        "BAD_ARROW",
        "arrow_ipc is not one valid Arrow IPC stream (unreadable, invalid data, bytes after it)",
    )
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
    RANGE_NOT_SUPPORTED = (
        "RANGE_NOT_SUPPORTED",
        "a query-time range or count on a window whose algorithm cannot answer a suffix (or a "
        "hopping window)",
    )
    NOT_COLUMNAR = (
        "NOT_COLUMNAR",
        "a Compute names a window only the row-by-row engine computes (a plugin or sketch "
        "monoid, a CEL or bounded policy, a hopping window), or an INT64 sum over its rows may "
        "pass what int64 holds",
    )
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


# what a caller (or its operator) does about each reason: the troubleshooting column of
# docs/reference/errors.md; a test fails when a reason has none
REMEDY: dict[Reason, str] = {
    Reason.INTERNAL: "find the error_id in the server's log (it holds the traceback) and report "
    "it; the call may be retried, with a producer_id and sequence for appends",
    Reason.UNAUTHENTICATED: "pass the token (SDK token=..., CLI --token or $MTAWINDOWS_TOKEN) "
    "that the server's --tokens-file lists",
    Reason.MALFORMED_REQUEST: "send the method's own message: regenerate your stubs from "
    "proto/mtawindows/v1/windows.proto (the SDK does this for you)",
    Reason.INVALID_ARGUMENT: "fix the field the message and violations name, to the range they "
    "give",
    Reason.VALUE_TOO_LONG: "shorten the named string to the limit its metadata gives",
    Reason.TOO_MANY_ITEMS: "send fewer items in the named list, over several calls",
    Reason.MESSAGE_TOO_LARGE: "send smaller batches (split the rows, or an SDK "
    "writer(stream, batch_rows=...); CLI --batch-rows), ask per-row results of fewer windows, "
    "or raise the server's --max-message-mb; with metadata applied 'true' the batch is in: "
    "resend it only with its producer_id and sequence",
    Reason.UNKNOWN_ENUM_VALUE: "use a value of this server's proto (an older server does not "
    "know a newer value): upgrade the server or use an older name",
    Reason.STORE_UNAVAILABLE: "bring Redis back (mtawindows serve restarts its embedded one; "
    "check --redis-url's server and its replicas), then retry: appends with a producer_id and "
    "sequence apply once",
    Reason.SERVER_STOPPING: "retry on another member, or on this one after it restarts",
    Reason.NOT_OWNER: "call the owner in metadata owner; the SDK given the cluster's seeds "
    "routes there by itself",
    Reason.STREAM_MOVING: "retry after retry_after_ms (the SDK does): a member takes the stream "
    "within a lease (--lease-ms)",
    Reason.FENCED: "retry: the SDK finds the new owner; nothing of the call was applied",
    Reason.MEMBER_ISOLATED: "call another member (the SDK does); on the isolated one, check its "
    "network path to the cluster's Redis",
    Reason.OWNER_UNREACHABLE: "retry: an idempotent append (producer_id and sequence) applies "
    "once; check the owner's address (--advertise) is reachable from the other members",
    Reason.STREAM_NOT_FOUND: "create it (create_stream, mtawindows streams create) or check "
    "the name (mtawindows streams list)",
    Reason.WINDOW_NOT_FOUND: "create it or check the name (mtawindows windows list STREAM)",
    Reason.STREAM_EXISTS: "use it as it is (streams get shows its definition), or delete it first",
    Reason.WINDOW_EXISTS: "use it as it is (windows get shows its definition), or delete it first",
    Reason.TOO_MANY_STREAMS: "delete unused streams, use one keyed stream (key=...) instead "
    "of a stream per key, or raise --max-streams",
    Reason.TOO_MANY_WINDOWS: "delete unused windows, put several aggregations in one window, "
    "or raise --max-windows",
    Reason.INVALID_DEFINITION: "fix the definition as the message and violations say",
    Reason.UNKNOWN_FIELD: "name one of the stream's fields (mtawindows streams get STREAM)",
    Reason.UNKNOWN_MONOID: "use a catalog name (the message lists them) or register a plugin "
    "monoid on the server",
    Reason.INVALID_EXPRESSION: "fix the CEL expression at the position the message gives; "
    "only total, dropped and the policy's documented variables are known",
    Reason.CEL_TOO_LARGE: "shorten the expression, or raise --max-cel-bytes",
    Reason.CEL_TOO_DEEP: "flatten the expression, or raise --max-cel-depth",
    Reason.AMBIGUOUS_BATCH: "send the rows one way: columns or arrow_ipc",
    Reason.BAD_ARROW: "send an Arrow IPC stream (pyarrow.ipc.new_stream), not a file or "
    "Feather; the SDK's append(stream, table) does it",
    Reason.SCHEMA_MISMATCH: "send exactly the stream's fields, with their types (streams get "
    "shows them); the timestamp field too",
    Reason.BAD_VALUES: "fix or drop the named rows (row and column in the violations); a "
    "DOUBLE field that should take NaN says allow_nan at creation",
    Reason.BATCH_TOO_LARGE: "send smaller batches (an SDK writer(stream, batch_rows=...); CLI "
    "--batch-rows), or raise --max-batch-rows",
    Reason.LOWER_FAILED: "fix the plugin monoid's lower for that value (metadata error names "
    "it) or leave the batch out: it fails the same way again",
    Reason.KEY_NOT_FOUND: "check the key (mtawindows keys list STREAM --prefix ...): a key "
    "exists from its first row until deleted or expired (key_ttl)",
    Reason.NOT_KEYED: "call the keyed form (key=...) on a keyed stream and the plain form on "
    "an unkeyed one (streams get shows its key field)",
    Reason.TOO_MANY_KEYS: "set a key_ttl on the stream so idle keys expire, delete old keys, "
    "or raise --max-keys",
    Reason.RANGE_NOT_SUPPORTED: "query the whole window, or recreate it with an algorithm that "
    "answers suffixes (AMTA, LMTA, FLATFAT, BINT, FLATFIT); a hopping window answers its last "
    "closed boundary only",
    Reason.NOT_COLUMNAR: "append the rows to a (scratch) stream with PER_ROW results instead, "
    "or send fewer rows per call (an INT64 sum); Compute takes windows of the built-in "
    "monoids but the sketches over a count or a time range",
    Reason.BAD_RESULT_MODE: "use a mode this server knows (NONE, FINAL, PER_ROW); upgrade the "
    "server for a newer one",
    Reason.OUT_OF_ORDER: "send each stream's (each key's) rows in timestamp order, or create "
    "the stream with late_policy DROP (late rows counted, skipped) or an allowed_lateness "
    "(rows that late are reordered)",
    Reason.TOO_MANY_SUBSCRIBERS: "close unused subscriptions, share one per process, or raise "
    "--max-subscribers",
    Reason.SUBSCRIBER_TOO_SLOW: "read faster, or resubscribe and catch up with ReadResults "
    "from the last batch you saw; raise --subscriber-queue-mb for longer pauses",
    Reason.UNSUBSCRIBED: "nothing: the server's own record of a subscriber that left",
}
