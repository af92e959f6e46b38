"""Commands whose arguments are already in Redis's wire form (RESP), for bulk writes.

redis-py packs every argument of a command in Python and hiredis (about 1 us a field-value
pair of an ``HSET``: a third of a keyed stream's flush at a million keys). A writer that
holds its arguments as one buffer (the key slab packs its dirty keys' names and values in one
compiled loop, ``server/service/keyed/slab.py``) hands them over as :class:`Packed`: ``n``
arguments, their RESP bulk strings end to end. A :class:`PackedPipeline` (every pipeline of
:func:`~mtawindows.server.storage.connect.pipeline_on_key_node`) sends a command holding
Packed arguments as written, its other arguments encoded as redis-py encodes them; a command
without any goes through redis-py unchanged. Packed arguments go in non-transactional
pipelines only (a ``MULTI`` is written out as commands, as the key groups' flush does)::

    p = pipeline_on_key_node(client, key)
    p.execute_command("HSET", key, Packed(4, b"$1\\r\\na\\r\\n$1\\r\\n1\\r\\n$1\\r\\nb\\r\\n$1\\r\\n2\\r\\n"))
    p.execute()                                          # [2]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from redis.client import Pipeline
from redis.exceptions import ResponseError

__all__ = [
    "Packed",
    "PackedPipeline",
    "arg_count",
    "bulk",
    "bulk_view",
    "encode_command",
    "encode_parts",
    "packed_chunks",
]


class Packed:
    """``n`` arguments of a command as RESP bulk strings (``$<len>\\r\\n<bytes>\\r\\n`` each),
    end to end in ``data`` (bytes, or a view of a buffer: sent without a copy; or a tuple of
    such pieces, sent one after the other: :func:`bulk_view`)."""

    __slots__ = ("data", "n")

    def __init__(self, n: int, data: bytes | memoryview | tuple[bytes | memoryview, ...]) -> None:
        self.n = n
        self.data = data

    def __len__(self) -> int:
        """Its bytes on the wire."""
        if isinstance(self.data, tuple):
            return sum(len(p) for p in self.data)
        return len(self.data)

    def __repr__(self) -> str:
        return f"Packed({self.n} arguments, {len(self)} bytes)"


def bulk_view(buf: Any) -> Packed:
    """One argument (any object with the buffer protocol: a pyarrow Buffer) as a
    :class:`Packed` bulk string that refers to it: sent without copying it (redis-py would
    copy it into the command's bytes first, on the caller's thread under the GIL)."""
    view = memoryview(buf).cast("B")
    return Packed(1, (b"$%d\r\n" % len(view), view, b"\r\n"))


def arg_count(args: Sequence[Any]) -> int:
    """How many arguments ``args`` are on the wire (a :class:`Packed` counts its own)."""
    return sum(a.n if isinstance(a, Packed) else 1 for a in args)


def bulk(value: Any) -> bytes:
    """One argument as a RESP bulk string, encoded as redis-py's default encoder does (text
    as UTF-8, an int as its digits, a float as its ``repr``)."""
    if isinstance(value, bytes):
        b = value
    elif isinstance(value, str):
        b = value.encode()
    elif isinstance(value, bool):
        msg = "a bool is not a Redis argument: give an int or text"
        raise TypeError(msg)
    elif isinstance(value, int):
        b = str(value).encode()
    elif isinstance(value, float):
        b = repr(value).encode()
    elif isinstance(value, (bytearray, memoryview)):
        b = bytes(value)
    else:
        msg = f"a Redis argument is text, bytes or a number, got {type(value).__name__}"
        raise TypeError(msg)
    return b"$%d\r\n%s\r\n" % (len(b), b)


def encode_command(args: Sequence[Any]) -> bytes:
    """A whole command in RESP: its arguments as :func:`bulk`, :class:`Packed` ones as they
    are (a command name with spaces, ``"SCRIPT LOAD"``, split as redis-py splits it)."""
    return b"".join(encode_parts(args))


def encode_parts(args: Sequence[Any]) -> list[bytes | memoryview]:
    """:func:`encode_command` as pieces to send one after the other: the small ones joined,
    a large :class:`Packed` argument's data as it is (not copied)."""
    head = args[0]
    name = head.split() if isinstance(head, (str, bytes)) else [head]
    out: list[bytes | memoryview] = []
    small: list[bytes] = []
    count = 0
    for a in (*name, *args[1:]):
        if isinstance(a, Packed):
            count += a.n
            for piece in a.data if isinstance(a.data, tuple) else (a.data,):
                if len(piece) < _BIG:
                    small.append(bytes(piece))
                    continue
                if small:
                    out.append(b"".join(small))
                    small = []
                out.append(piece)
        else:
            small.append(bulk(a))
            count += 1
    if small:
        out.append(b"".join(small))
    return [b"*%d\r\n" % count, *out]


_BIG = 16_384  # a Packed argument sent apart from the pieces around it from this size


def packed_chunks(data: bytes | memoryview, ends: np.ndarray, per: int) -> list[Packed]:
    """``data``: field-value pairs in RESP (pair ``i`` ends at ``ends[i]``) as Packed arguments
    of at most ``per`` pairs each."""
    out: list[Packed] = []
    k = len(ends)
    lo = 0
    for i in range(0, k, per):
        j = min(i + per, k)
        hi = int(ends[j - 1])
        out.append(Packed(2 * (j - i), data[lo:hi]))
        lo = hi
    return out


def _wire(connection: Any, commands: Sequence[Sequence[Any]]) -> list[Any]:
    """``commands`` as the pieces to send on ``connection``: one holding :class:`Packed`
    arguments as written (:func:`encode_parts`), any other as redis-py packs it."""
    chunks: list[Any] = []
    for args in commands:
        if any(isinstance(a, Packed) for a in args):
            chunks.extend(encode_parts(args))
        else:
            chunks.extend(connection.pack_commands([args]))
    return chunks


class PackedPipeline(Pipeline):
    """A non-transactional redis-py pipeline that sends :class:`Packed` arguments as written
    (see the module docstring); commands without them are packed by redis-py. The replies are
    read as :class:`redis.client.Pipeline` reads them."""

    def _execute_pipeline(self, connection: Any, commands: Any, raise_on_error: bool) -> Any:
        if not any(isinstance(a, Packed) for args, _ in commands for a in args):
            return super()._execute_pipeline(  # type: ignore[no-untyped-call]
                connection, commands, raise_on_error
            )
        connection.send_packed_command(_wire(connection, [args for args, _ in commands]))
        responses: list[Any] = []
        for args, options in commands:
            try:
                responses.append(
                    self.parse_response(connection, args[0], **options)  # type: ignore[no-untyped-call]
                )
            except ResponseError as ex:
                responses.append(ex)
        if raise_on_error:
            self.raise_first_error(commands, responses)  # type: ignore[no-untyped-call]
        return responses

    def watched(
        self,
        keys: Sequence[str],
        commands: Callable[[list[Any]], Sequence[Sequence[Any]] | None],
    ) -> list[Any] | None:
        """An optimistic transaction on one connection: ``WATCH keys`` and ``MGET keys`` (one
        round trip); ``commands(values)`` then gives the commands to run (arguments may be
        :class:`Packed`), sent as ``MULTI`` ... ``EXEC`` (a second round trip). The replies
        of the commands (an error among them as a :class:`ResponseError`), or None when
        nothing was written: ``commands`` gave None (after ``UNWATCH``) or a key of ``keys``
        changed after the ``WATCH`` (``EXEC`` aborted). An error queuing a command aborts
        the ``EXEC`` (raised). Any failure is raised with the connection disconnected (its
        ``WATCH`` and any reply unread gone with it)."""
        conn: Any = self.connection_pool.get_connection()
        try:
            conn.send_packed_command(conn.pack_commands([("WATCH", *keys), ("MGET", *keys)]))
            conn.read_response()
            values = conn.read_response()
            todo = commands(values)
            if todo is None:
                conn.send_command("UNWATCH")
                conn.read_response()
                return None
            conn.send_packed_command(_wire(conn, [("MULTI",), *todo, ("EXEC",)]))
            conn.read_response()  # +OK
            queued: ResponseError | None = None
            for _ in todo:
                try:
                    conn.read_response()  # +QUEUED
                except ResponseError as ex:
                    queued = queued or ex
            replies = conn.read_response()  # raises EXECABORT after a queuing error
            if queued is not None:  # pragma: no cover - EXEC raised it already
                raise queued
            return None if replies is None else list(replies)
        except BaseException:
            conn.disconnect()  # its WATCH, replies unread, whatever was half sent go with it
            raise
        finally:
            self.connection_pool.release(conn)

    def _execute_transaction(self, connection: Any, commands: Any, raise_on_error: bool) -> Any:
        if any(isinstance(a, Packed) for args, _ in commands for a in args):
            msg = "Packed arguments go in a non-transactional pipeline (MULTI/EXEC as commands)"
            raise TypeError(msg)
        return super()._execute_transaction(connection, commands, raise_on_error)
