"""Every Redis key of mtawindows, and its hash tag: the one place that builds them.

A key starts with the server's prefix (``mtaw`` by default, ``--redis-prefix``). Everything of
one stream shares the stream's hash tag ``{<stream>}``, so it lives in one Redis Cluster slot
and one Lua script can check the stream's fence and write any of its keys atomically::

    {prefix}:svc:index                      set     every stream's name (the only global key)
    {prefix}:svc:{<stream>}:def             hash    "spec": StreamSpec; "w:<window>": its record
    {prefix}:svc:{<stream>}:journal         list    the durable windows' batches (journal.py)
    {prefix}:svc:{<stream>}:state           string  the stream's state at a checkpoint
    {prefix}:svc:{<stream>}:lease           string  "member\\tincarnation\\taddress\\ttoken", PX
    {prefix}:svc:{<stream>}:fence           int     the fencing token (INCR, never deleted)
    {prefix}:{<stream>}:w:<id>:meta|ckpt|log|b:<level>:<block>
                                                    a service window's data (redis_store.py)
    {prefix}:{<id>}:meta|ckpt|log|b:...             a window used on its own (no service)
    {prefix}:{cluster}:members              zset    member -> its last heartbeat (ms)
    {prefix}:{cluster}:info                 hash    member -> "address\\tincarnation\\tstreams"
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "DEFAULT_PREFIX",
    "MemberKeys",
    "StreamKeys",
    "WindowKeys",
    "index_key",
    "stream_tag",
]

DEFAULT_PREFIX = "mtaw"


def stream_tag(prefix: str, stream: str) -> str:
    """The common part of a stream's keys: ``{prefix}:svc:{<stream>}`` (one hash slot)."""
    return f"{prefix}:svc:{{{stream}}}"


def index_key(prefix: str) -> str:
    """The set of every stream's name."""
    return f"{prefix}:svc:index"


@dataclass(frozen=True, slots=True)
class StreamKeys:
    """The keys of one stream (all under its hash tag)."""

    definitions: str
    journal: str
    state: str
    lease: str
    fence: str

    @classmethod
    def of(cls, prefix: str, stream: str) -> StreamKeys:
        tag = stream_tag(prefix, stream)
        return cls(f"{tag}:def", f"{tag}:journal", f"{tag}:state", f"{tag}:lease", f"{tag}:fence")


@dataclass(frozen=True, slots=True)
class MemberKeys:
    """The cluster's membership: heartbeats (a sorted set) and members' records (a hash)."""

    members: str
    info: str

    @classmethod
    def of(cls, prefix: str) -> MemberKeys:
        tag = f"{prefix}:{{cluster}}"
        return cls(f"{tag}:members", f"{tag}:info")


class WindowKeys:
    """A window's keys: its definition (``meta``), checkpoint, log and level blocks."""

    __slots__ = ("checkpoint", "log", "meta", "prefix", "tag")

    def __init__(self, prefix: str, window_id: str, tag: str | None = None) -> None:
        self.prefix = prefix
        # a window of the service shares its stream's hash tag (one slot: the stream's fence
        # guards every write); a window on its own has a tag of its own
        self.tag = f"{prefix}:{{{tag}}}:w:{window_id}" if tag else f"{prefix}:{{{window_id}}}"
        self.meta = f"{self.tag}:meta"
        self.checkpoint = f"{self.tag}:ckpt"
        self.log = f"{self.tag}:log"

    def block(self, level: int, block: int) -> str:
        return f"{self.tag}:b:{level}:{block}"

    @property
    def pattern(self) -> str:
        return f"{self.tag}:*"
