"""Every Redis key of mtawindows, and its hash tag: the one place that builds them.

A key starts with the server's prefix (``mtaw`` by default, ``--redis-prefix``). Everything of
one stream shares the stream's hash tag ``{<stream>}``, so it lives in one Redis Cluster slot
and one Lua script can check the stream's fence and write any of its keys atomically::

    {prefix}:svc:index                      set     every stream's name (a global key)
    {prefix}:svc:{<stream>}:def             hash    "spec": StreamSpec; "w:<window>": its record
    {prefix}:svc:{<stream>}:journal         list    the durable windows' batches (journal.py)
    {prefix}:svc:{<stream>}:state           string  the stream's state at a checkpoint
    {prefix}:svc:{<stream>}:lease           string  "member\\tincarnation\\taddress\\ttoken", PX
    {prefix}:svc:{<stream>}:fence           int     the fencing token (INCR, never deleted)
    {prefix}:svc:{<stream>}:g:<g>:keys      hash    a keyed stream's group g: key -> its state
    {prefix}:svc:{<stream>}:g:<g>:touch     hash    key -> when it last took a row (key_ttl)
    {prefix}:svc:{<stream>}:g:<g>:state     string  the group's state (lsn, producers, counters)
    {prefix}:svc:{<stream>}:g:<g>:journal   list    the group's batches and key deletions
                                                    (durable windows)
    {prefix}:svc:{<stream>}:g:<g>:fence     int     the group's fencing token (as :fence)
    {prefix}:svc:{<stream>}:gholders        hash    group -> "member\tincarnation\taddress\ttoken"
    {prefix}:svc:{<stream>}:glease:<member> string  the member's lease on its groups (PX)
    {prefix}:svc:{<stream>}:ggen            int     bumped by every group taken (leases.py)
    {prefix}:svc:{<stream>}:defv            int     a keyed stream's definitions version
    {prefix}:svc:groups                     hash    keyed stream's name -> its key groups
    {prefix}:{<stream>}:w:<id>:meta|ckpt|log|b:<level>:<block>
                                                    a service window's data (redis_store.py);
                                                    a keyed stream's key's full window: <id>
                                                    is k:<hex> (key_window_base)
    {prefix}:{<id>}:meta|ckpt|log|b:...             a window used on its own (no service)
    {prefix}:{cluster}:members              zset    member -> its last heartbeat (ms)
    {prefix}:{cluster}:info                 hash    member -> "address\\tincarnation\\tstreams"
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "DEFAULT_PREFIX",
    "GroupKeys",
    "MemberKeys",
    "StreamKeys",
    "WindowKeys",
    "group_lease_keys",
    "groups_key",
    "index_key",
    "key_window_base",
    "member_group_lease",
    "stream_tag",
]

DEFAULT_PREFIX = "mtaw"


def stream_tag(prefix: str, stream: str) -> str:
    """The common part of a stream's keys: ``{prefix}:svc:{<stream>}`` (one hash slot)."""
    return f"{prefix}:svc:{{{stream}}}"


def index_key(prefix: str) -> str:
    """The set of every stream's name."""
    return f"{prefix}:svc:index"


def groups_key(prefix: str) -> str:
    """The hash of every keyed stream's name -> its number of key groups."""
    return f"{prefix}:svc:groups"


@dataclass(frozen=True, slots=True)
class StreamKeys:
    """The keys of one stream (all under its hash tag)."""

    definitions: str
    journal: str
    state: str
    lease: str
    fence: str
    version: str

    @classmethod
    def of(cls, prefix: str, stream: str) -> StreamKeys:
        tag = stream_tag(prefix, stream)
        return cls(
            f"{tag}:def",
            f"{tag}:journal",
            f"{tag}:state",
            f"{tag}:lease",
            f"{tag}:fence",
            f"{tag}:defv",
        )


@dataclass(frozen=True, slots=True)
class GroupKeys:
    """The keys of one key group of a keyed stream (under the stream's hash tag: its fence
    guards them, and a group's flush is one script)."""

    keys: str
    touch: str
    state: str
    journal: str
    fence: str

    @classmethod
    def of(cls, prefix: str, stream: str, group: int) -> GroupKeys:
        tag = f"{stream_tag(prefix, stream)}:g:{group}"
        return cls(f"{tag}:keys", f"{tag}:touch", f"{tag}:state", f"{tag}:journal", f"{tag}:fence")


def group_lease_keys(prefix: str, stream: str) -> tuple[str, str]:
    """(the holders hash, the generation counter) of ``stream``'s key groups."""
    tag = stream_tag(prefix, stream)
    return f"{tag}:gholders", f"{tag}:ggen"


def member_group_lease(prefix: str, stream: str, member: str) -> str:
    """The lease of ``member`` on every key group of ``stream`` it holds."""
    return f"{stream_tag(prefix, stream)}:glease:{member}"


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


def key_window_base(prefix: str, stream: str) -> str:
    """The common start of the keys of a keyed stream's full key windows (their ids are
    ``k:<hex>``): ``{prefix}:{<stream>}:w:k:``, then ``<hex>:meta``, ``<hex>:b:...``."""
    return WindowKeys(prefix, "k:", stream).tag
