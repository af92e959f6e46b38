"""What users defined, persisted in Redis next to the data: each stream's spec and its windows'
records (``{prefix}:svc:{<stream>}:def``) and the index of every stream's name
(``{prefix}:svc:index``), with each keyed stream's number of key groups
(``{prefix}:svc:groups``: on a cluster every group is a unit of ownership, ``"<stream>#<g>"``);
the keys come from :mod:`mtawindows.server.storage.keys`. Every change of a stream's windows
bumps its definitions version (``defv``): the members holding groups of a keyed stream reload
its windows when it moves.

A window's record is ``"<window id>\\n<WindowInfo protobuf>"`` (the id is hex: no newline).
Every write of a stream's definitions goes through its fence (the owner's token) when it has
one, so a server that lost the stream writes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import redis

from mtawindows.v1 import convert
from mtawindows.v1 import windows_pb2 as pb
from mtawindows.v1.keys import DEFAULT_KEY_GROUPS, group_unit, split_unit
from mtawindows.v1.types import StreamSpec, WindowSpec

from ..storage.fencing import Fence, Op, fenced
from ..storage.keys import StreamKeys, groups_key, index_key
from ..storage.protocol import StoreError
from .refusals import store_unavailable

__all__ = ["Definitions", "StoredStream", "StoredWindow"]


@dataclass(frozen=True)
class StoredWindow:
    name: str
    spec: WindowSpec
    window_id: str  # "" for a memory window; "s:<hex>" for one keyed under its stream's tag


@dataclass(frozen=True)
class StoredStream:
    spec: StreamSpec
    windows: tuple[StoredWindow, ...]


class Definitions:
    """The definitions of every stream under ``prefix`` in one Redis (or Redis Cluster)."""

    def __init__(self, client: Any, prefix: str) -> None:
        self.redis = client
        self.prefix = prefix
        self.index = index_key(prefix)
        self.groups = groups_key(prefix)

    def _key(self, stream: str) -> str:
        return StreamKeys.of(self.prefix, stream).definitions

    def _write(self, stream: str, fence: Fence | None, ops: list[Op]) -> None:
        """A fenced write of ``stream``'s definitions (refused: FENCED, nothing written)."""
        try:
            fenced(self.redis, fence, ops)
        except (StoreError, redis.RedisError) as ex:
            raise store_unavailable(stream, ex) from None

    def save_stream(self, spec: StreamSpec, fence: Fence | None) -> None:
        """A new stream: its spec alone (an earlier stream's leftovers go) and its name indexed."""
        blob = convert.stream_spec_to_proto(spec).SerializeToString()
        keys = StreamKeys.of(self.prefix, spec.name)
        self._write(
            spec.name,
            fence,
            [
                ("DEL", keys.definitions, ()),
                ("HSET", keys.definitions, ("spec", blob)),
                ("INCR", keys.version, ()),
            ],
        )
        try:
            if spec.key:
                self.redis.hset(self.groups, spec.name, spec.key_groups or DEFAULT_KEY_GROUPS)
            else:
                self.redis.hdel(self.groups, spec.name)
            self.redis.sadd(self.index, spec.name)
        except redis.RedisError as ex:
            raise store_unavailable(spec.name, ex) from None

    def delete_stream(self, stream: str, fence: Fence | None) -> None:
        keys = StreamKeys.of(self.prefix, stream)
        self._write(stream, fence, [("DEL", keys.definitions, ()), ("INCR", keys.version, ())])
        try:
            self.redis.srem(self.index, stream)
            self.redis.hdel(self.groups, stream)
        except redis.RedisError as ex:
            raise store_unavailable(stream, ex) from None

    def save_window(
        self, spec: WindowSpec, window_id: str, fence: Fence | None, *, key: str | None = None
    ) -> None:
        """Window ``spec`` under its name (or ``key``: a hidden host's "~<id>")."""
        record = pb.WindowInfo(spec=convert.window_spec_to_proto(spec))
        blob = window_id.encode() + b"\n" + bytes(record.SerializeToString())
        keys = StreamKeys.of(self.prefix, spec.stream)
        self._write(
            spec.stream,
            fence,
            [
                ("HSET", keys.definitions, (f"w:{key or spec.name}", blob)),
                ("INCR", keys.version, ()),
            ],
        )

    def delete_window(self, stream: str, name: str, fence: Fence | None) -> None:
        keys = StreamKeys.of(self.prefix, stream)
        self._write(
            stream, fence, [("HDEL", keys.definitions, (f"w:{name}",)), ("INCR", keys.version, ())]
        )

    def version(self, stream: str) -> int:
        """``stream``'s definitions version (bumped by every change of its windows)."""
        try:
            return int(self.redis.get(StreamKeys.of(self.prefix, stream).version) or 0)
        except redis.RedisError as ex:
            raise store_unavailable(stream, ex) from None

    def load(self, stream: str) -> StoredStream | None:
        """``stream``'s definitions (its windows by name); None when there is no such stream."""
        defs = self.redis.hgetall(self._key(stream))
        spec_blob = defs.pop(b"spec", None)
        if spec_blob is None:
            return None
        spec = convert.stream_spec_from_proto(pb.StreamSpec.FromString(spec_blob))
        windows = []
        for key, blob in sorted(defs.items()):
            window_id, _, rest = blob.partition(b"\n")
            info = pb.WindowInfo.FromString(rest)
            wspec = convert.window_spec_from_proto(info.spec)
            windows.append(StoredWindow(key.decode()[2:], wspec, window_id.decode()))
        return StoredStream(spec, tuple(windows))

    def names(self) -> list[str]:
        """Every stream's name (the index), sorted."""
        raw = self.redis.smembers(self.index)
        return sorted(r.decode() if isinstance(r, bytes) else str(r) for r in raw)

    def exists(self, stream: str) -> bool:
        return bool(self.redis.sismember(self.index, stream))

    def key_groups(self) -> dict[str, int]:
        """Every keyed stream's name -> its number of key groups."""
        raw = self.redis.hgetall(self.groups)
        return {_text(k): int(v) for k, v in raw.items()}

    def units(self) -> list[str]:
        """Every unit of ownership: each stream's name and, for a keyed stream, each of its key
        groups' (``"<stream>#<g>"``)."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.smembers(self.index)
        pipe.hgetall(self.groups)
        raw, groups = pipe.execute()
        names = sorted(_text(r) for r in raw)
        n_groups = {_text(k): int(v) for k, v in groups.items()}
        out: list[str] = []
        for name in names:
            out.append(name)
            out.extend(group_unit(name, g) for g in range(n_groups.get(name, 0)))
        return out

    def unit_exists(self, unit: str) -> bool:
        """Whether ``unit`` (a stream's name, or a key group's) names something that exists."""
        stream, g = split_unit(unit)
        if g is None:
            return self.exists(stream)
        n = self.redis.hget(self.groups, stream)
        return n is not None and 0 <= g < int(n)


def _text(raw: Any) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)
