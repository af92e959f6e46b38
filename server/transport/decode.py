"""Request decoding: wire messages into what the service takes, refusing what does not fit.

The parser of every request (:func:`safe_parser`) never raises: bytes that do not parse
become a :class:`Malformed` stand-in that the handler raises before any work. A batch's rows
come as protobuf columns or as an Arrow IPC stream (:func:`columns_of`); definitions through
``mtawindows.v1.convert`` (:func:`stream_spec`, :func:`window_spec`). Every refusal here is a
``ServiceError`` with its :class:`~mtawindows.v1.reasons.Reason`; ``status.py`` turns it into
the status the client gets.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

from google.protobuf.message import DecodeError

from mtawindows.v1 import convert
from mtawindows.v1 import windows_pb2 as pb
from mtawindows.v1.reasons import Reason
from mtawindows.v1.types import SpecError, StreamSpec, WindowSpec, clip, show

from ..service.batch import FINAL, NONE, PER_ROW
from ..service.columns import KeyBytes
from ..service.inputs import MAX_COLUMNS, MAX_NAME, too_long
from ..service.refusals import ServiceError, batch_too_large, invalid
from .wire import length_delimited, split_field

__all__ = [
    "ARROW",
    "Carried",
    "Malformed",
    "arrow_columns",
    "arrow_payload",
    "carrying_parser",
    "columns_of",
    "decode_spec",
    "result_mode",
    "rows_hint",
    "safe_parser",
    "stream_spec",
    "window_spec",
    "with_payload",
]

T = TypeVar("T")
# column name -> (type name, values: a list, or a numpy array of numbers from Arrow)
Columns = dict[str, tuple[str, Any]]
_MODES = {pb.RESULT_MODE_UNSPECIFIED: NONE, pb.NONE: NONE, pb.FINAL: FINAL, pb.PER_ROW: PER_ROW}


def _refused(reason: Reason, where: str, what: str, message: str = "") -> ServiceError:
    """INVALID_ARGUMENT for the field ``where``: the violation says ``what``, the message
    ``where: message`` (``message`` defaults to ``what``)."""
    return ServiceError("INVALID_ARGUMENT", reason, f"{where}: {message or what}", [(where, what)])


def _duplicate(where: str, name: str) -> ServiceError:
    return _refused(
        Reason.SCHEMA_MISMATCH,
        where,
        f"duplicate column {show(name)}",
        f"column {show(name)} given twice",
    )


def _nulls(name: str, count: int, first: int) -> ServiceError:
    """Nulls in column ``name``: ``count`` of them, the first at row ``first``."""
    err = _refused(
        Reason.BAD_VALUES,
        f"columns[{name}][{first}]",
        f"{count} null{'s' if count != 1 else ''}, the first at row {first}",
        f"null values are not allowed in a batch: {count} in column {show(name)}, the first "
        f"at row {first}",
    )
    err.metadata.update({"row": str(first), "column": name})
    return err


# --------------------------------------------------------------------------- the parser


class Malformed(Exception):
    """What a request whose bytes could not be parsed becomes: the parser returns it instead
    of raising (grpcio would answer UNKNOWN with the exception's text) and the handler raises
    it before any work. Bytes that are not the message (``undecodable``) are refused as
    INVALID_ARGUMENT (:meth:`refusal`); the parser failing any other way is an internal error."""

    def __init__(self, type_name: str, error: Exception) -> None:
        super().__init__(f"could not parse a {type_name} request: {type(error).__name__}")
        self.type_name = type_name
        self.error = error
        self.__cause__ = error

    @property
    def undecodable(self) -> bool:
        return isinstance(self.error, DecodeError | ValueError)

    def refusal(self) -> ServiceError:
        return ServiceError(
            "INVALID_ARGUMENT",
            Reason.MALFORMED_REQUEST,
            f"the request is not a valid {self.type_name} message: {clip(str(self.error))}",
        )


# The Arrow IPC bytes of the request being served (a view of the request's own buffer: see
# :func:`carrying_parser`), set by the handler's guard for the handler's task
ARROW: ContextVar[memoryview | None] = ContextVar("mtawindows_arrow_payload", default=None)


@dataclass(frozen=True)
class Carried:
    """A request parsed without its ``arrow_ipc`` bytes (``message``), and those bytes as a
    view of the buffer gRPC handed over (``payload``): the guard unwraps it (:data:`ARROW`)."""

    message: Any
    payload: memoryview


def carrying_parser(message: Any) -> Callable[[bytes], Any]:
    """``message``'s parser (:func:`safe_parser`) for a request with an ``arrow_ipc`` field:
    a request that has one becomes a :class:`Carried` (the rest parsed, the Arrow bytes a
    view of the request's buffer). protobuf would copy the bytes into the message, and again
    on every read of the field: a batch of 16 MB cost 64 MB before any work."""
    number = message.DESCRIPTOR.fields_by_name["arrow_ipc"].number
    parse = safe_parser(message)

    def parse_carrying(data: bytes) -> Any:
        split = split_field(data, number)
        if split is None:
            return parse(data)
        rest, payload = split
        got = parse(rest)
        return got if isinstance(got, Malformed) else Carried(got, payload)

    return parse_carrying


def arrow_payload(request: Any) -> Any:
    """The request's Arrow IPC bytes: the carried view (:data:`ARROW`) while serving it,
    else the message's own field (b"": none)."""
    carried = ARROW.get()
    return carried if carried is not None else request.arrow_ipc


def with_payload(request: Any) -> bytes:
    """``request`` serialized with the Arrow bytes it was carrying (a forwarded call): the
    message's bytes and the field after them, as protobuf reads them."""
    data = request.SerializeToString()
    carried = ARROW.get()
    if carried is None:
        return data  # type: ignore[no-any-return]
    number = request.DESCRIPTOR.fields_by_name["arrow_ipc"].number
    return b"".join([data, *length_delimited(number, carried)])


def safe_parser(message: Any) -> Callable[[bytes], Any]:
    """``message``'s parser, returning a :class:`Malformed` where it would raise."""

    def parse(data: bytes) -> Any:
        try:
            return message.FromString(data)
        except Exception as ex:
            return Malformed(message.DESCRIPTOR.full_name, ex)

    return parse


# --------------------------------------------------------------------------- definitions


def decode_spec(decode: Callable[[Any], T], message: Any, reason: Reason) -> T:
    """A definition from the wire; what the conversion refuses (an unknown enum number, an
    invalid duration, a wrong type: SpecError) becomes INVALID_ARGUMENT naming the field
    (``spec.<path>``), with the refusal's own reason or ``reason``."""
    try:
        return decode(message)
    except SpecError as ex:
        raise invalid(f"spec.{ex.field}", ex.description, ex.reason or reason) from None


def stream_spec(request: pb.CreateStreamRequest) -> StreamSpec:
    return decode_spec(convert.stream_spec_from_proto, request.spec, Reason.INVALID_ARGUMENT)


def window_spec(request: pb.CreateWindowRequest) -> WindowSpec:
    if request.spec.policy.WhichOneof("kind") is None:
        raise _refused(
            Reason.INVALID_DEFINITION,
            "spec.policy",
            "not set",
            "expected one of count, time_range, bounded_sum, max_sub_window, expression; got none",
        )
    return decode_spec(convert.window_spec_from_proto, request.spec, Reason.INVALID_DEFINITION)


def result_mode(request: pb.AppendRequest) -> str:
    """The results an Append asks for (NONE, FINAL or PER_ROW)."""
    mode = _MODES.get(request.results)
    if mode is None:
        raise _refused(
            Reason.BAD_RESULT_MODE,
            "results",
            f"unknown value {request.results}",
            f"expected NONE, FINAL or PER_ROW, got {request.results}",
        )
    return mode


# --------------------------------------------------------------------------- batches


def rows_hint(request: pb.AppendRequest) -> int:
    """Rows in a columnar request, from its first column (the decode checks them all)."""
    if not request.columns:
        return 0
    col = request.columns[0]
    kind = col.WhichOneof("data")
    return len(getattr(col, kind).values) if kind else 0


def columns_of(
    request: pb.AppendRequest,
    max_rows: int,
    *,
    arrays: bool = False,
    key_bytes: str | None = None,
    payload: Any = None,
) -> Columns:
    """The request's columns as (type name, values), from protobuf columns or Arrow IPC;
    with ``arrays`` an Arrow request's numbers come as numpy arrays (no Python object per
    value: for a stream that takes them, :attr:`Stream.takes_arrays`), else as lists.
    ``payload``: the Arrow bytes the request carried (:func:`arrow_payload`, read by the
    caller on the handler's task: a worker thread does not see :data:`ARROW`)."""
    if payload is None:
        payload = arrow_payload(request)  # read once: the field's every read is a copy
    # Arrow when given: bytes (none: b""), or a table already read (of 0 rows, too)
    arrow = hasattr(payload, "num_rows") or bool(payload)
    if arrow and request.columns:
        raise ServiceError(
            "INVALID_ARGUMENT",
            Reason.AMBIGUOUS_BATCH,
            "give the rows either as columns or as arrow_ipc, not both",
            [("arrow_ipc", "set together with columns")],
        )
    if arrow:
        return arrow_columns(payload, max_rows, arrays=arrays, key_bytes=key_bytes)
    out: Columns = {}
    for i, col in enumerate(request.columns):
        if col.name in out:
            raise _duplicate(f"columns[{i}]", col.name)
        if any(col.nulls):
            raise _nulls(col.name, sum(col.nulls), list(col.nulls).index(True))
        kind = col.WhichOneof("data")
        if kind is None or kind == "values":
            raise _refused(
                Reason.SCHEMA_MISMATCH,
                f"columns[{col.name}]",
                "no typed values",
                "expected typed values (doubles, ints, strings, bools or timestamps), got "
                f"{kind or 'none'}",
            )
        data = getattr(col, kind).values
        if len(data) > max_rows:
            raise batch_too_large(len(data), max_rows)
        out[col.name] = (convert.COLUMN_KINDS[kind].value, list(data))
    return out


def arrow_columns(
    payload: bytes, max_rows: int, *, arrays: bool = False, key_bytes: str | None = None
) -> Columns:
    """The columns of an Arrow IPC stream: names checked before the rows are read; with
    ``arrays`` the numbers as numpy arrays (text and bools as lists either way); the string
    column ``key_bytes`` (a keyed stream's key) as :class:`KeyBytes`."""
    table = arrow_table(payload, max_rows)
    return {
        name: _arrow_column(name, col, arrays, name == key_bytes)
        for name, col in zip(table.column_names, table.columns, strict=True)
    }


def arrow_table(payload: Any, max_rows: int) -> Any:
    """An Arrow IPC stream as a ``pyarrow.Table``: names checked before the rows are read
    (a ``pyarrow.Table`` already read, as it is)."""
    import pyarrow as pa

    def bad_arrow(ex: Exception) -> ServiceError:
        return _refused(
            Reason.BAD_ARROW,
            "arrow_ipc",
            "not an Arrow IPC stream",
            f"expected an Arrow IPC stream, could not read it: {clip(str(ex))}",
        )

    if isinstance(payload, pa.Table):  # an AppendStream's pieces, put together (pieces.py)
        if payload.num_rows > max_rows:
            raise batch_too_large(payload.num_rows, max_rows)
        return payload
    try:
        buffer = pa.py_buffer(payload)
        source = pa.BufferReader(buffer)
        reader = pa.ipc.open_stream(source)
        _check_arrow_names(reader.schema.names)
        table = reader.read_all()
        # the data itself, before anything reads it: offsets within their buffers, text
        # UTF-8, dictionary indices in range (reading past a buffer crashed the server)
        table.validate(full=True)
    except (pa.ArrowInvalid, pa.ArrowException, OSError) as ex:
        raise bad_arrow(ex) from None
    extra = buffer.size - source.tell()
    if extra:  # a second stream, or junk, after the end: not one Arrow IPC stream
        raise bad_arrow(ValueError(f"{extra} bytes after the end of the stream"))
    if table.num_rows > max_rows:
        raise batch_too_large(table.num_rows, max_rows)
    return table


def _check_arrow_names(names: list[str]) -> None:
    """The column names, checked as the protobuf columns' are (before the rows are read)."""
    if len(names) > MAX_COLUMNS:
        what = f"expected at most {MAX_COLUMNS} columns, got {len(names)}"
        raise _refused(Reason.TOO_MANY_ITEMS, "arrow_ipc", what)
    seen: set[str] = set()
    for i, name in enumerate(names):
        if len(name) > MAX_NAME:
            raise too_long(f"arrow_ipc.columns[{i}].name", name, MAX_NAME)
        if name in seen:
            raise _duplicate(f"arrow_ipc.columns[{i}]", name)
        seen.add(name)


def _arrow_column(
    name: str, col: Any, arrays: bool = False, key_bytes: bool = False
) -> tuple[str, Any]:
    """One Arrow column as (type name, values): no nulls, a supported type, 64-bit values;
    numbers as a numpy array with ``arrays``, else as a list; strings as :class:`KeyBytes`
    with ``key_bytes``. A dictionary-encoded column (a pandas Categorical) is read as its
    values."""
    import pyarrow as pa

    if col.null_count:
        import pyarrow.compute as pc

        first = pc.index(pc.is_null(col), True).as_py()
        raise _nulls(name, col.null_count, first)
    t = col.type
    if pa.types.is_dictionary(t):
        col = col.cast(t.value_type)
        t = col.type
    try:
        number = None
        if pa.types.is_timestamp(t):
            number = "TIMESTAMP", col.cast(pa.timestamp("ns")).cast(pa.int64())
        elif pa.types.is_floating(t):
            number = "DOUBLE", col.cast(pa.float64())
        elif pa.types.is_integer(t):
            number = "INT64", col.cast(pa.int64())
        if number is not None:
            kind, values = number
            return kind, values.to_numpy() if arrays else values.to_pylist()
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            return "STRING", KeyBytes(col) if key_bytes else col.to_pylist()
        if pa.types.is_boolean(t):
            return "BOOL", col.to_pylist()
    except pa.ArrowInvalid as ex:  # a uint64 or a timestamp past int64 nanoseconds
        what = f"values out of the 64-bit range ({clip(str(ex), 100)})"
        raise _refused(Reason.BAD_VALUES, f"columns[{name}]", what) from None
    what = clip(str(t), 100)
    raise _refused(
        Reason.SCHEMA_MISMATCH,
        f"columns[{name}]",
        f"arrow type {what}",
        f"Arrow type {what} is not supported; use float64, int64, string, bool or timestamp",
    )
