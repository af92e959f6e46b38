"""What users defined, persisted in Redis next to the data: each stream's spec and its windows'
records (``{prefix}:svc:{<stream>}:def``) and the index of every stream's name
(``{prefix}:svc:index``); the keys come from :mod:`mtawindows.server.storage.keys`.

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
from mtawindows.v1.types import StreamSpec, WindowSpec

from ..storage.fencing import Fence, Op, fenced
from ..storage.keys import StreamKeys, index_key
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
        key = self._key(spec.name)
        self._write(spec.name, fence, [("DEL", key, ()), ("HSET", key, ("spec", blob))])
        self.redis.sadd(self.index, spec.name)

    def delete_stream(self, stream: str, fence: Fence | None) -> None:
        self._write(stream, fence, [("DEL", self._key(stream), ())])
        self.redis.srem(self.index, stream)

    def save_window(self, spec: WindowSpec, window_id: str, fence: Fence | None) -> None:
        record = pb.WindowInfo(spec=convert.window_spec_to_proto(spec))
        blob = window_id.encode() + b"\n" + bytes(record.SerializeToString())
        self._write(
            spec.stream, fence, [("HSET", self._key(spec.stream), (f"w:{spec.name}", blob))]
        )

    def delete_window(self, stream: str, name: str, fence: Fence | None) -> None:
        self._write(stream, fence, [("HDEL", self._key(stream), (f"w:{name}",))])

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
