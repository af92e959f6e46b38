"""Keys of keyed streams: a key's text, and the key group it hashes into.

One function, shared by the servers (which group, hence which owner, holds a key) and the
SDK (which owner an Append's rows go to), so both always agree::

    key_group("host-07", 256)  ->  the same group on every machine, in every release

A key's **text** is the string itself for a STRING key field and its decimal digits for an
INT64 one (``-12`` -> ``"-12"``): results, ListKeys and Query name keys by their text. The group
is CRC-32 (IEEE, as ``zlib.crc32``) of the text's UTF-8 bytes, mixed by the final step of
MurmurHash3 (CRC-32 alone maps near-identical keys to near-identical values), then scaled into
``[0, groups)`` by multiplication (no modulo bias). Frozen: changing it moves every key.

On a cluster each key group is owned on its own: its **unit** name ``"<stream>#<group>"``
(:func:`group_unit`; ``#`` is never in a stream's name) is what leases, fencing and placement
(:func:`mtawindows.v1.placement.place`) are about, so a group is placed on
``place(group_unit(stream, g), live_members)`` by servers and SDK alike.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable

__all__ = [
    "DEFAULT_KEY_GROUPS",
    "MAX_KEY_BYTES",
    "MAX_KEY_GROUPS",
    "group_unit",
    "key_group",
    "key_groups",
    "key_refusal",
    "key_text",
    "possible_key",
    "split_unit",
]

DEFAULT_KEY_GROUPS = 256
MAX_KEY_GROUPS = 4096
MAX_KEY_BYTES = 1024  # a key's text, UTF-8

_M32 = 0xFFFFFFFF
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
GROUP_SEP = "#"


def group_unit(stream: str, group: int) -> str:
    """The unit of ownership of key group ``group`` of ``stream``: ``"<stream>#<group>"``."""
    return f"{stream}{GROUP_SEP}{group}"


def split_unit(unit: str) -> tuple[str, int | None]:
    """``(stream, group)`` of a unit name; ``(stream, None)`` for a whole stream's."""
    stream, sep, g = unit.rpartition(GROUP_SEP)
    if not sep:
        return unit, None
    return stream, int(g)


def possible_key(text: str, int_keys: bool) -> bool:
    """Whether a row could have made the key ``text``: not empty, at most
    :data:`MAX_KEY_BYTES` bytes of UTF-8, and on a stream of INT64 keys an int64's decimal
    text (``"7"``, ``"-12"``; not ``"007"``, ``"+7"``, ``"x"``, ``"9223372036854775808"``). The
    server refuses a call naming any other key; a reader filtering by key skips it."""
    return key_refusal(text, int_keys) is None


def key_refusal(text: str, int_keys: bool) -> str | None:
    """Why no row could have made the key ``text`` (see :func:`possible_key`), or None."""
    if not text:
        return "a key is at least one character, got an empty one"
    size = len(text.encode())
    if size > MAX_KEY_BYTES:
        return f"a key is at most {MAX_KEY_BYTES} bytes of UTF-8 (this one is {size})"
    if not int_keys:
        return None
    try:
        n = int(text)
    except ValueError:
        n = None
    if n is None or str(n) != text:
        return "the key field is INT64: expected an integer in decimal"
    if not _INT64_MIN <= n <= _INT64_MAX:
        return f"the key field is INT64: expected an integer from {_INT64_MIN} to {_INT64_MAX}"
    return None


def key_text(key: object) -> str:
    """The text of a key value: a str as is, an int in decimal (bools are not keys)."""
    if isinstance(key, str):
        return key
    if isinstance(key, int) and not isinstance(key, bool):
        return str(key)
    msg = f"a key is a str or an int, got {type(key).__name__} {key!r}"
    raise TypeError(msg)


def _mix(h: int) -> int:
    """MurmurHash3's fmix32."""
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _M32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _M32
    h ^= h >> 16
    return h


def key_group(key: object, groups: int) -> int:
    """The group in ``[0, groups)`` of ``key`` (a str, or an int of an INT64 key field)."""
    if groups < 1:
        msg = f"groups must be >= 1, got {groups}"
        raise ValueError(msg)
    text = key if isinstance(key, str) else key_text(key)
    return (_mix(zlib.crc32(text.encode("utf-8", "surrogatepass"))) * groups) >> 32


def key_groups(keys: Iterable[object], groups: int) -> list[int]:
    """:func:`key_group` of every key (a batch's key column), computed once per distinct key."""
    seen: dict[object, int] = {}
    out: list[int] = []
    add = out.append
    for k in keys:
        g = seen.get(k)
        if g is None:
            g = seen[k] = key_group(k, groups)
        add(g)
    return out
