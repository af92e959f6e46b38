"""Checks on every request as it comes off the wire, made before any other work.

:func:`check_request` walks the parsed message once and refuses (INVALID_ARGUMENT):

* a string longer than its limit (``VALUE_TOO_LONG``; metadata ``field``, ``length``,
  ``limit``): names, producer ids, monoid names, params (table below); any string field not
  in the table gets :data:`MAX_OTHER_STRING`. Data (the values of a batch's columns, Arrow IPC
  bytes) is bounded by the message size only, and CEL text by the CEL compiler's limits;
* a list with more entries than its limit (``TOO_MANY_ITEMS``): fields of a stream,
  aggregations of a window, params, a batch's columns, the windows an Append names;
* an enum number the proto does not define (``UNKNOWN_ENUM_VALUE``): proto3 enums are open,
  so a newer or a hostile client's number arrives as it was sent.

Refusals name the field (``spec.fields[3].name``) and never echo more than
:data:`~mtawindows.v1.types.ECHO_CHARS` characters of the value (see
:func:`~mtawindows.v1.types.show`): the whole error must fit gRPC's metadata limit.
"""

from __future__ import annotations

from typing import Any

from mtawindows.v1.keys import MAX_KEY_BYTES
from mtawindows.v1.reasons import Reason
from mtawindows.v1.types import show

from .refusals import ServiceError, invalid

MAX_STREAM_NAME = 255  # the stream name pattern allows up to 255
MAX_NAME = 64  # window, field, output, column and param names (the name pattern's limit)
MAX_MONOID_NAME = 128
MAX_PARAM_VALUE = 256
MAX_PRODUCER_ID = 256
MAX_OTHER_STRING = 256
MAX_FIELDS = 1024
MAX_AGGREGATIONS = 256
MAX_PARAMS = 16
MAX_COLUMNS = MAX_FIELDS + 1  # the timestamp column and every field
MAX_WINDOWS_NAMED = 256
MAX_SUBSCRIBED_KEYS = 10_000
__all__ = ["check_request", "too_long"]

_P = "mtawindows.v1."
# (message, field) -> the longest string it takes; None: not checked here (data, CEL text)
STRING_LIMITS: dict[tuple[str, str], int | None] = {
    (_P + "StreamSpec", "name"): MAX_STREAM_NAME,
    (_P + "StreamSpec", "timestamp_field"): MAX_NAME,
    (_P + "FieldSpec", "name"): MAX_NAME,
    (_P + "DeleteStreamRequest", "name"): MAX_STREAM_NAME,
    (_P + "GetStreamRequest", "name"): MAX_STREAM_NAME,
    (_P + "WindowSpec", "stream"): MAX_STREAM_NAME,
    (_P + "WindowSpec", "name"): MAX_NAME,
    (_P + "Aggregation", "name"): MAX_NAME,
    (_P + "Aggregation", "monoid"): MAX_MONOID_NAME,
    (_P + "Aggregation", "field"): MAX_NAME,
    (_P + "BoundedSumPolicy", "field"): MAX_NAME,
    (_P + "MaxSubWindowPolicy", "field"): MAX_NAME,
    (_P + "ExpressionPolicy", "cel"): None,  # the CEL compiler bounds its text
    (_P + "DeleteWindowRequest", "stream"): MAX_STREAM_NAME,
    (_P + "DeleteWindowRequest", "name"): MAX_NAME,
    (_P + "GetWindowRequest", "stream"): MAX_STREAM_NAME,
    (_P + "GetWindowRequest", "name"): MAX_NAME,
    (_P + "ListWindowsRequest", "stream"): MAX_STREAM_NAME,
    (_P + "AppendRequest", "stream"): MAX_STREAM_NAME,
    (_P + "AppendRequest", "producer_id"): MAX_PRODUCER_ID,
    (_P + "AppendRequest", "windows"): MAX_NAME,
    (_P + "Column", "name"): MAX_NAME,
    (_P + "QueryRequest", "stream"): MAX_STREAM_NAME,
    (_P + "QueryRequest", "window"): MAX_NAME,
    (_P + "SubscribeRequest", "stream"): MAX_STREAM_NAME,
    (_P + "SubscribeRequest", "window"): MAX_NAME,
    (_P + "ReadResultsRequest", "stream"): MAX_STREAM_NAME,
    (_P + "ReadResultsRequest", "window"): MAX_NAME,
    (_P + "GetClusterMapRequest", "streams"): MAX_STREAM_NAME,
    (_P + "StreamSpec", "key"): MAX_NAME,
    (_P + "QueryRequest", "key"): MAX_KEY_BYTES,
    (_P + "SubscribeRequest", "keys"): MAX_KEY_BYTES,
    (_P + "ListKeysRequest", "stream"): MAX_STREAM_NAME,
    (_P + "ListKeysRequest", "prefix"): MAX_KEY_BYTES,
    (_P + "ListKeysRequest", "page_token"): MAX_KEY_BYTES,
    (_P + "GetKeyRequest", "stream"): MAX_STREAM_NAME,
    (_P + "GetKeyRequest", "key"): MAX_KEY_BYTES,
    (_P + "DeleteKeyRequest", "stream"): MAX_STREAM_NAME,
    (_P + "DeleteKeyRequest", "key"): MAX_KEY_BYTES,
}
# the limits above counted in bytes of UTF-8, not characters: keys (MAX_KEY_BYTES)
BYTE_LIMITED = frozenset(
    (_P + message, field)
    for message, field in (
        ("QueryRequest", "key"),
        ("SubscribeRequest", "keys"),
        ("ListKeysRequest", "prefix"),
        ("ListKeysRequest", "page_token"),
        ("GetKeyRequest", "key"),
        ("DeleteKeyRequest", "key"),
    )
)
# (message, repeated field) -> most entries
COUNT_LIMITS: dict[tuple[str, str], int] = {
    (_P + "GetClusterMapRequest", "streams"): 1000,
    (_P + "StreamSpec", "fields"): MAX_FIELDS,
    (_P + "WindowSpec", "aggregations"): MAX_AGGREGATIONS,
    (_P + "Aggregation", "params"): MAX_PARAMS,
    (_P + "AppendRequest", "columns"): MAX_COLUMNS,
    (_P + "AppendRequest", "windows"): MAX_WINDOWS_NAMED,
    (_P + "ComputeRequest", "windows"): MAX_WINDOWS_NAMED,
    (_P + "SubscribeRequest", "keys"): MAX_SUBSCRIBED_KEYS,
}
# fields holding data, not definitions: never walked (a batch's values)
_DATA = {
    (_P + "Column", name)
    for name in ("doubles", "ints", "strings", "bools", "timestamps", "values", "nulls")
} | {(_P + "AppendRequest", "arrow_ipc"), (_P + "ComputeRequest", "arrow_ipc")}
_MAP_KEY = MAX_NAME  # map keys (Aggregation.params)


def too_long(path: str, value: str | bytes, limit: int, unit: str = "characters") -> ServiceError:
    """The refusal of a string over its limit (``unit``: what it counts, ``"bytes"`` for a
    limit in bytes of UTF-8): echoes at most 64 characters of it."""
    size = (
        len(value.encode()) if unit.startswith("bytes") and isinstance(value, str) else len(value)
    )
    what = f"expected at most {limit} {unit}, got {size}"
    meta = {"field": path, "limit": str(limit), "length": str(size)}
    return invalid(path, what, Reason.VALUE_TOO_LONG, meta, given=show(value))


def _too_many(path: str, n: int, limit: int) -> ServiceError:
    what = f"expected at most {limit} entries, got {n}"
    meta = {"field": path, "limit": str(limit), "length": str(n)}
    return invalid(path, what, Reason.TOO_MANY_ITEMS, meta)


def _bad_enum(path: str, enum: Any, value: int) -> ServiceError:
    allowed = [f"{v.name} ({v.number})" for v in enum.values]
    what = f"expected one of {allowed}, got {value}"
    return invalid(path, what, Reason.UNKNOWN_ENUM_VALUE, {"field": path, "value": str(value)})


def check_request(request: Any) -> None:
    """Refuse ``request`` (ServiceError) if a string is too long, a list too long or an enum
    number unknown; the first culprit in field order."""
    _walk(request, "")


def _walk(msg: Any, prefix: str) -> None:
    mname = msg.DESCRIPTOR.full_name
    for fd, value in msg.ListFields():
        key = (mname, fd.name)
        if key in _DATA:
            continue
        path = f"{prefix}{fd.name}"
        if fd.is_repeated:
            limit = COUNT_LIMITS.get(key)
            if limit is not None and len(value) > limit:
                raise _too_many(path, len(value), limit)
            if fd.type == fd.TYPE_MESSAGE and fd.message_type.GetOptions().map_entry:
                _walk_map(fd, value, path)
            elif fd.type == fd.TYPE_MESSAGE:
                for i, item in enumerate(value):
                    _walk(item, f"{path}[{i}].")
            else:
                for i, item in enumerate(value):
                    _scalar(fd, key, item, f"{path}[{i}]")
        elif fd.type == fd.TYPE_MESSAGE:
            _walk(value, f"{path}.")
        else:
            _scalar(fd, key, value, path)


def _scalar(fd: Any, key: tuple[str, str], value: Any, path: str) -> None:
    if fd.type in (fd.TYPE_STRING, fd.TYPE_BYTES):
        limit = STRING_LIMITS.get(key, MAX_OTHER_STRING)
        if limit is None or len(value) <= limit // 4:  # 4 bytes of UTF-8 at most a character
            return
        if key in BYTE_LIMITED:
            if len(value.encode()) > limit:
                raise too_long(path, value, limit, "bytes of UTF-8")
        elif len(value) > limit:
            raise too_long(path, value, limit)
    elif fd.type == fd.TYPE_ENUM and fd.enum_type.values_by_number.get(value) is None:
        raise _bad_enum(path, fd.enum_type, value)


def _walk_map(fd: Any, value: Any, path: str) -> None:
    entry = fd.message_type
    vfd = entry.fields_by_name["value"]
    for k in value:
        if isinstance(k, str) and len(k) > _MAP_KEY:
            where = f"{path} (a key)"
            raise too_long(where, k, _MAP_KEY)
        v = value[k]
        if vfd.type == vfd.TYPE_MESSAGE:
            _walk(v, f"{path}.{k}.")
        elif vfd.type == vfd.TYPE_STRING:
            limit = MAX_PARAM_VALUE if path.endswith("params") else MAX_OTHER_STRING
            if len(v) > limit:
                where = f"{path}.{k}"
                raise too_long(where, v, limit)
        else:
            _scalar(vfd, (entry.full_name, "value"), v, f"{path}.{k}")
