"""Codecs: how lifted aggregates become bytes in Redis (blocks, checkpoints, the insert log).

Each monoid owns a codec (like Beam's accumulator coder); :func:`codec_for` picks it:

* a monoid with a ``codec`` attribute brings its own (any object of the :class:`Codec` shape);
* a monoid whose lifted values are fixed numeric tuples declares a ``codec_layout`` and gets a
  :class:`StructCodec`: every pair is a fixed-size record, so one pair is a ``GETRANGE`` at a
  computed offset and a run of pairs is one ``GETRANGE``;
* everything else gets :class:`MsgpackCodec`, a safe generic codec (never pickle: nothing read
  from Redis can run code); a value of a type that serializes itself (a sketch) goes through it
  in its own bytes once its type is registered (:func:`register_value_type`).

Layouts: ``"q"`` int64, ``"d"`` float64, ``"n"`` a number that keeps its Python type (int64 or
float64, tagged), ``"w"`` the same with integers of up to 128 bits (an exact sum of int64s:
an INT64 mean's); a string of several letters is a tuple of scalars (``"qdd"`` for variance
moments); a tuple of layouts is a :class:`~mtawindows.server.engine.monoids.Record`. ``"m"``
is an INT64 mean as releases before exact INT64 means stored it (a :class:`StructCodec`'s
``legacy`` form: see there).

Every record carries a 4-byte *stamp* derived from its (window, level, position), and struct
records a magic flag byte: bytes that were not written at that place by that window (foreign,
truncated, shifted or garbage data) are refused with :class:`CorruptDataError`, never decoded
into a wrong result.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import struct
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol, runtime_checkable

import msgpack  # type: ignore[import-untyped]

from ..sentinels import EMPTY, NOTHING
from .protocol import CorruptDataError

__all__ = [
    "Codec",
    "CodecError",
    "CorruptDataError",
    "MsgpackCodec",
    "StructCodec",
    "codec_for",
    "register_value_type",
]

_M32 = 0xFFFFFFFF


class CodecError(ValueError):
    """A value cannot be encoded by the window's codec."""


@runtime_checkable
class Codec(Protocol):
    """What the Redis tier needs from a codec.

    ``record_size`` is the bytes per pair when fixed (blocks are strings read by offset), or
    ``None`` (blocks are hashes of one record per position). ``pack_values``/``unpack_values``
    encode lists of lifted values for checkpoints and the insert log.
    """

    name: str
    record_size: int | None

    def pack_values(self, values: Sequence[Any]) -> bytes: ...

    def unpack_values(self, data: bytes) -> list[Any]: ...


def stamp(salt: int, level: int, pos: int) -> int:
    """The 32-bit check value of the record at (level, pos) of the window with ``salt``."""
    return ((pos * 0x9E3779B1) ^ (level * 0x85EBCA77) ^ salt) & _M32


def stamps(salt: int, level: int, start: int, stop: int) -> list[int]:
    """``stamp`` of every position in ``range(start, stop)``, in one loop."""
    x = (level * 0x85EBCA77) ^ salt
    k = 0x9E3779B1  # p * k for consecutive p is a range with step k: no multiply per position
    return [(q ^ x) & _M32 for q in range(start * k, stop * k, k)]


# ---------------------------------------------------------------------------- msgpack
_EXT_EMPTY, _EXT_NOTHING, _EXT_DATETIME, _EXT_DATE, _EXT_DECIMAL, _EXT_BIGINT = range(1, 7)
_EXT_OWN = 7  # a value of a registered type, in its own serialization (a sketch's)

# values that bring their own bytes (register_value_type): type -> (tag, encode), tag -> decode
_OWN_ENCODERS: dict[type, tuple[bytes, Callable[[Any], bytes]]] = {}
_OWN_DECODERS: dict[bytes, Callable[[bytes], Any]] = {}


def register_value_type(
    cls: type, tag: str, encode: Callable[[Any], bytes], decode: Callable[[bytes], Any]
) -> None:
    """Let lifted values of type ``cls`` (exactly: no subclasses) through every codec in their
    own serialization (a sketch's ``serialize()`` / ``deserialize()``, never pickle), as the
    msgpack extension ``(tag, bytes)``. ``tag`` names the format in the stored bytes: keep it
    as long as the bytes it reads stay readable. Registering the same type and tag again is a
    no-op; another type under a tag taken is refused."""
    key = tag.encode()
    if not key or b"\0" in key or len(key) > 32:
        msg = f"register_value_type: tag must be 1 to 32 bytes without NUL, got {tag!r}"
        raise ValueError(msg)
    known = _OWN_ENCODERS.get(cls)
    if known is not None and known[0] != key:
        msg = f"register_value_type: {cls.__name__} is already registered as {known[0].decode()!r}"
        raise ValueError(msg)
    taken = next((c for c, (t, _) in _OWN_ENCODERS.items() if t == key and c is not cls), None)
    if taken is not None:
        msg = f"register_value_type: tag {tag!r} is already {taken.__name__}'s"
        raise ValueError(msg)
    _OWN_ENCODERS[cls] = (key, encode)
    _OWN_DECODERS[key] = decode


def _own(tag: bytes, encode: Callable[[Any], bytes], obj: Any) -> msgpack.ExtType:
    return msgpack.ExtType(_EXT_OWN, tag + b"\0" + encode(obj))


def _own_value(data: bytes) -> Any:
    tag, sep, payload = data.partition(b"\0")
    decode = _OWN_DECODERS.get(tag)
    if not sep or decode is None:
        known = sorted(t.decode() for t in _OWN_DECODERS)
        msg = f"a value of unknown type {tag[:32]!r}; expected one of {known}"
        raise CorruptDataError(msg)
    try:
        return decode(payload)
    except Exception as ex:  # the library's own check of its bytes
        msg = f"a {tag.decode()} value that does not decode ({type(ex).__name__}: {ex})"
        raise CorruptDataError(msg) from ex


def _default(obj: Any) -> Any:
    own = _OWN_ENCODERS.get(type(obj))
    if own is not None:
        return _own(*own, obj)
    if obj is EMPTY:
        return msgpack.ExtType(_EXT_EMPTY, b"")
    if obj is NOTHING:
        return msgpack.ExtType(_EXT_NOTHING, b"")
    if isinstance(obj, _dt.datetime):
        return msgpack.ExtType(_EXT_DATETIME, obj.isoformat().encode())
    if isinstance(obj, _dt.date):
        return msgpack.ExtType(_EXT_DATE, obj.isoformat().encode())
    if isinstance(obj, decimal.Decimal):
        return msgpack.ExtType(_EXT_DECIMAL, str(obj).encode())
    if isinstance(obj, int) and not isinstance(obj, bool):
        return msgpack.ExtType(_EXT_BIGINT, str(obj).encode())
    msg = (
        f"MsgpackCodec: cannot encode a {type(obj).__name__} ({obj!r}); lifted values must be "
        "None, bool, int, float, str, bytes, tuples, dicts, datetimes, dates or Decimals "
        "(give the monoid a `codec` for other types)"
    )
    raise CodecError(msg)


def _ext_hook(code: int, data: bytes) -> Any:
    if code == _EXT_EMPTY:
        return EMPTY
    if code == _EXT_NOTHING:
        return NOTHING
    if code == _EXT_DATETIME:
        return _dt.datetime.fromisoformat(data.decode())
    if code == _EXT_DATE:
        return _dt.date.fromisoformat(data.decode())
    if code == _EXT_DECIMAL:
        return decimal.Decimal(data.decode())
    if code == _EXT_BIGINT:
        return int(data.decode())
    if code == _EXT_OWN:
        return _own_value(data)
    msg = f"unknown msgpack extension type {code}"
    raise CorruptDataError(msg)


_packer_opts: dict[str, Any] = {"default": _default, "use_bin_type": True}
# one Packer per thread, reused (msgpack.packb makes a new one per call: a microsecond each,
# as much as packing a key's small state)
_packers = threading.local()


def packb(obj: Any) -> bytes:
    """msgpack with the engine's extension types (tuples stay tuples on the way back)."""
    return _pack(_packer(), obj)


def packb_each(objs: Iterable[Any]) -> list[bytes]:
    """:func:`packb` of each of ``objs`` (many small records: the thread's packer looked up
    once, not per record)."""
    packer = _packer()
    return [_pack(packer, obj) for obj in objs]


def _packer() -> Any:
    try:
        return _packers.packer
    except AttributeError:
        packer = _packers.packer = msgpack.Packer(**_packer_opts)
        return packer


def _pack(packer: Any, obj: Any) -> bytes:
    try:
        return packer.pack(obj)  # type: ignore[no-any-return]
    except OverflowError:  # an int beyond 64 bits inside a container: retry through `default`
        packer.reset()
        return packer.pack(_widen(obj))  # type: ignore[no-any-return]
    except BaseException:
        packer.reset()  # a half-written buffer must not lead the next record
        raise


def _widen(obj: Any) -> Any:
    if isinstance(obj, int) and not isinstance(obj, bool) and not -(2**63) <= obj < 2**64:
        return msgpack.ExtType(_EXT_BIGINT, str(obj).encode())
    if isinstance(obj, tuple | list):
        return (
            type(obj)(_widen(v) for v in obj) if isinstance(obj, list) else tuple(map(_widen, obj))
        )
    if isinstance(obj, dict):
        return {_widen(k): _widen(v) for k, v in obj.items()}
    return obj


def unpackb(data: bytes) -> Any:
    """Inverse of :func:`packb`; malformed bytes raise :class:`CorruptDataError`."""
    try:
        return msgpack.unpackb(
            data, use_list=False, ext_hook=_ext_hook, strict_map_key=False, raw=False
        )
    except CorruptDataError:
        raise
    except Exception as ex:
        msg = f"not a valid msgpack record ({type(ex).__name__}: {ex})"
        raise CorruptDataError(msg) from ex


class MsgpackCodec:
    """Generic codec: one msgpack record ``(stamp, e0, e1)`` per pair, variable size."""

    name = "msgpack/1"
    record_size: int | None = None

    def pack_values(self, values: Sequence[Any]) -> bytes:
        return packb(tuple(values))

    def unpack_values(self, data: bytes) -> list[Any]:
        out = unpackb(data)
        if not isinstance(out, tuple):
            msg = f"expected a list of values, got {type(out).__name__}"
            raise CorruptDataError(msg)
        return list(out)

    def encode_record(self, pair: Sequence[Any], check: int) -> bytes:
        return packb((check, pair[0], pair[1]))

    def decode_record(self, data: bytes, check: int) -> tuple[Any, Any]:
        rec = unpackb(data)
        if not (isinstance(rec, tuple) and len(rec) == 3 and rec[0] == check):
            msg = "record does not belong at this position of this window"
            raise CorruptDataError(msg)
        if rec[1] is EMPTY and rec[2] is EMPTY:
            msg = "record holds an empty pair"
            raise CorruptDataError(msg)
        return (rec[1], rec[2])

    def __repr__(self) -> str:
        return "MsgpackCodec()"


# ---------------------------------------------------------------------------- struct
Layout = str | tuple["Layout", ...]
_SCALARS = {"q": "q", "d": "d", "n": "Bqd", "w": "BqQd", "m": "qd"}
_ZERO = {"q": (0,), "d": (0.0,), "n": (0, 0, 0.0), "w": (0, 0, 0, 0.0), "m": (0, 0.0)}
_STORED = {"m": "qd"}  # a legacy letter: the layout its bytes were written as (the name)
_MAGIC = 0xA0
_M64 = (1 << 64) - 1


def _num(v: Any) -> tuple[int, int, float]:
    return (1, v, 0.0) if v.__class__ is int else (0, 0, v)


def _wide(v: Any) -> tuple[int, int, int, float]:
    """Letter "w": an integer as its high (signed) and low (unsigned) 64 bits, or a float."""
    return (1, v >> 64, v & _M64, 0.0) if v.__class__ is int else (0, 0, 0, v)


def _as_mean(v: Any) -> tuple[int, float]:
    """Letter "m": an INT64 mean's ``(count, exact sum)`` as ``(count, mean)``, the form
    releases before exact INT64 means stored (a ``(count, mean)`` already in it as it is)."""
    n, x = v
    if x.__class__ is int:
        return (n, x / n if n else 0.0)
    return (n, x)


def _stored(layout: Layout) -> Layout:
    """``layout`` as its bytes are laid out (a legacy letter as the layout it was)."""
    if isinstance(layout, tuple):
        return tuple(_stored(sub) for sub in layout)
    return _STORED.get(layout, layout)


class _Gen:
    """Generates the flatten / rebuild functions of one layout (our own source, no user text)."""

    def __init__(self, layout: Layout) -> None:
        self.fmt = ""
        self.zero: list[Any] = []
        self.width = 0  # struct fields per value
        self.flat = self._flat(layout, "v")
        self._layout = layout

    def _flat(self, layout: Layout, var: str) -> str:
        if isinstance(layout, tuple):
            return ", ".join(self._flat(sub, f"{var}[{i}]") for i, sub in enumerate(layout))
        if len(layout) > 1:
            return ", ".join(self._flat(ch, f"{var}[{i}]") for i, ch in enumerate(layout))
        if layout not in _SCALARS:
            msg = f"StructCodec: unknown layout letter {layout!r}; expected one of q, d, n, w, m"
            raise ValueError(msg)
        self.fmt += _SCALARS[layout]
        self.zero.extend(_ZERO[layout])
        self.width += len(_ZERO[layout])
        return f"*{_HELPERS[layout]}({var})" if layout in _HELPERS else var

    def inline(self, var: str) -> str:
        """Source of the flattened value ``var``: "n" inline (flag, int, float), the other
        helpers' letters ("w", "m") by their call."""

        def go(layout: Layout, v: str) -> str:
            if isinstance(layout, tuple):
                return ", ".join(go(sub, f"{v}[{i}]") for i, sub in enumerate(layout))
            if len(layout) > 1:
                return ", ".join(go(ch, f"{v}[{i}]") for i, ch in enumerate(layout))
            if layout == "n":
                isint = f"{v}.__class__ is int"
                return f"{isint}, ({v} if {isint} else 0), (0.0 if {isint} else {v})"
            if layout in _HELPERS:
                return f"*{_HELPERS[layout]}({v})"
            return v

        return go(self._layout, var)

    def rebuild(self, off: int) -> str:
        pos = [off]

        def go(layout: Layout) -> str:
            if isinstance(layout, tuple):
                return "(" + "".join(go(sub) + ", " for sub in layout) + ")"
            if len(layout) > 1:
                return "(" + "".join(go(ch) + ", " for ch in layout) + ")"
            i = pos[0]
            if layout == "n":
                pos[0] += 3
                return f"(t[{i + 1}] if t[{i}] else t[{i + 2}])"
            if layout == "w":
                pos[0] += 4
                return f"((t[{i + 1}] << 64 | t[{i + 2}]) if t[{i}] else t[{i + 3}])"
            if layout == "m":
                pos[0] += 2
                return f"(t[{i}], t[{i + 1}])"
            pos[0] += 1
            return f"t[{i}]"

        return go(self._layout)


# the letters whose values are flattened by a helper (the names the generated code calls)
_HELPERS = {"n": "N", "w": "W", "m": "LM"}
_HELPER_ENV: dict[str, Any] = {"N": _num, "W": _wide, "LM": _as_mean}


class StructCodec:
    """Fixed-size records for numeric lifted values.

    A record is ``<flags:B, stamp:I, e0..., e1...>`` (little-endian); ``flags`` is ``0xA0`` plus
    one bit per non-empty slot, an empty slot is stored as zeros. ``record_size`` bytes each.

    ``legacy``: the layout an earlier release gave the same window (its INT64 means "m" where
    this one has exact "qw"), as the codec :attr:`legacy` (None when there is none): a window
    stored in that form reopens with it (:meth:`RedisStore.attach
    <mtawindows.server.storage.redis_store.RedisStore.attach>`) and keeps it, its stored
    blocks as they were (its means as doubles: as exact as they were).
    """

    def __init__(self, layout: Layout, *, legacy: Layout | None = None) -> None:
        g = _Gen(layout)
        self.layout = layout
        self.name = f"struct/1:{_stored(layout)!r}"
        self.legacy = StructCodec(legacy) if legacy is not None else None
        self._struct = struct.Struct("<BI" + g.fmt + g.fmt)
        self.record_size = self._struct.size
        env: dict[str, Any] = dict(_HELPER_ENV)
        flatten: Callable[[Any], tuple[Any, ...]] = eval(f"lambda v: ({g.flat},)", env)
        self._flatten = flatten
        self._zero = tuple(g.zero)
        self._record_fmt = g.fmt + g.fmt
        self._runs: dict[int, struct.Struct] = {}
        # a whole run flattened by one generated loop, packed by one Struct (our own source)
        fast_env: dict[str, Any] = {
            **_HELPER_ENV,
            "EMPTY": EMPTY,
            "M3": _MAGIC | 3,
            "slow": self._slow_record,
        }
        src = (
            "def flat_run(pairs, checks):\n"
            "    out = []\n"
            "    ext = out.extend\n"
            "    for (a, b), c in zip(pairs, checks):\n"
            "        if a is EMPTY or b is EMPTY:\n"
            "            ext(slow(a, b, c))\n"
            "        else:\n"
            f"            ext((M3, c, {g.inline('a')}, {g.inline('b')}))\n"
            "    return out\n"
        )
        exec(src, fast_env)
        self._flat_run: Callable[[Any, Any], list[Any]] = fast_env["flat_run"]
        w = g.width
        self._rebuild_a: Callable[[tuple[Any, ...]], Any] = eval(f"lambda t: {g.rebuild(2)}", {})
        self._rebuild_b: Callable[[tuple[Any, ...]], Any] = eval(
            f"lambda t: {g.rebuild(2 + w)}", {}
        )
        self._generic = MsgpackCodec()

    def pack_values(self, values: Sequence[Any]) -> bytes:
        return self._generic.pack_values(values)

    def unpack_values(self, data: bytes) -> list[Any]:
        return self._generic.unpack_values(data)

    def _slow_record(self, a: Any, b: Any, c: int) -> tuple[Any, ...]:
        if a is EMPTY:
            return (_MAGIC | 2, c, *self._zero, *self._flatten(b))
        return (_MAGIC | 1, c, *self._flatten(a), *self._zero)

    def encode_run(self, pairs: Sequence[Sequence[Any]], checks: Sequence[int]) -> bytes:
        """Records for consecutive positions (``checks`` are their stamps)."""
        n = len(pairs)
        run = self._runs.get(n)
        if run is None:
            run = struct.Struct("<" + ("BI" + self._record_fmt) * n)
            if len(self._runs) < 64:
                self._runs[n] = run
        try:
            return run.pack(*self._flat_run(pairs, checks))
        except (struct.error, TypeError, IndexError, OverflowError, ValueError):
            return self._encode_run_checked(pairs, checks)  # names the culprit

    def _encode_run_checked(self, pairs: Sequence[Sequence[Any]], checks: Sequence[int]) -> bytes:
        pack = self._struct.pack
        flatten = self._flatten
        zero = self._zero
        out = []
        try:
            for (a, b), c in zip(pairs, checks, strict=True):
                if a is EMPTY:
                    out.append(pack(_MAGIC | 2, c, *zero, *flatten(b)))
                elif b is EMPTY:
                    out.append(pack(_MAGIC | 1, c, *flatten(a), *zero))
                else:
                    out.append(pack(_MAGIC | 3, c, *flatten(a), *flatten(b)))
        except (struct.error, TypeError, IndexError, OverflowError) as ex:
            msg = (
                f"StructCodec {self.layout!r}: cannot encode the pair {tuple(a for a in (a, b))!r} "
                f"({ex}); expected numbers of that layout (int64 / float64)"
            )
            raise CodecError(msg) from ex
        return b"".join(out)

    def decode_run(self, data: bytes, checks: Sequence[int]) -> list[tuple[Any, Any]]:
        size = self.record_size
        if len(data) != size * len(checks):
            msg = f"expected {len(checks)} records of {size} bytes, got {len(data)} bytes"
            raise CorruptDataError(msg)
        ra = self._rebuild_a
        rb = self._rebuild_b
        out: list[tuple[Any, Any]] = []
        for t, c in zip(self._struct.iter_unpack(data), checks, strict=True):
            f = t[0]
            if f & 0xFC != _MAGIC or not f & 3 or t[1] != c:
                msg = "record does not belong at this position of this window"
                raise CorruptDataError(msg)
            out.append((ra(t) if f & 1 else EMPTY, rb(t) if f & 2 else EMPTY))
        return out

    def __repr__(self) -> str:
        return f"StructCodec({self.layout!r})"


def _layout_of(monoid: Any) -> Layout | None:
    fields = getattr(monoid, "monoids", None)
    if fields is not None and type(monoid).__name__ == "Record":
        subs = [_layout_of(m) for m in fields]
        if any(s is None for s in subs):
            return None
        return tuple(s for s in subs if s is not None)
    layout = getattr(monoid, "codec_layout", None)
    return layout if isinstance(layout, str) and layout else None


def codec_for(monoid: Any) -> Any:
    """The codec of ``monoid``: its own ``codec``, a :class:`StructCodec` from its
    ``codec_layout`` (records too), else :class:`MsgpackCodec`."""
    own = getattr(monoid, "codec", None)
    if own is not None:
        for attr in ("name", "record_size", "pack_values", "unpack_values"):
            if not hasattr(own, attr):
                msg = f"codec of {monoid!r}: expected an object with {attr!r}, got {own!r}"
                raise TypeError(msg)
        return own
    layout = _layout_of(monoid)
    return StructCodec(layout) if layout is not None else MsgpackCodec()
