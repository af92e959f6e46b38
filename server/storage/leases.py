"""Leases: a stream is owned by one member at a time, under its fencing token.

**Leases.** A stream is owned by one member under a lease, in the stream's own hash slot::

    {prefix}:svc:{<stream>}:lease   "member\\tincarnation\\taddress\\ttoken", expires (PX)
    {prefix}:svc:{<stream>}:fence   the stream's fencing token: INCR at every acquisition,
                                    never decreases, never deleted

Acquiring takes a free lease (or one held by an earlier incarnation of the same member: a
restarted server takes its streams back at once) and increments the fence: the new owner's
token. Renewing extends the lease only while the fence still holds the renewer's token, so an
owner that was paused past its lease and lost the stream cannot renew it back.

**Key groups.** A keyed stream's key groups are units of their own (``"<stream>#<g>"``), each
with its own fence, under one lease per member and stream: :mod:`.group_leases`, which this
class hands them to (a member's Redis work for ownership grows with its streams, never with
their keys or groups).

Keys (:mod:`.keys`): the stream's ``lease`` and ``fence``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from mtawindows.v1.keys import split_unit

from .fencing import Fence
from .group_leases import GroupLeases
from .keys import StreamKeys
from .lua import registered, text
from .protocol import StoreError, StoreUnavailableError
from .replication import Waiter

__all__ = ["Lease", "Leases"]

# KEYS lease, fence; ARGV member, incarnation, ttl ms, address, "1" = take it from anyone
_ACQUIRE = """
local cur = redis.call('GET', KEYS[1])
if cur and ARGV[5] ~= '1' then
  local member = string.match(cur, '^([^\\t]*)')
  if member ~= ARGV[1] then
    return {0, cur, redis.call('PTTL', KEYS[1])}
  end
end
local token = redis.call('INCR', KEYS[2])
local v = ARGV[1] .. '\\t' .. ARGV[2] .. '\\t' .. ARGV[4] .. '\\t' .. token
redis.call('SET', KEYS[1], v, 'PX', ARGV[3])
return {1, v, tonumber(ARGV[3])}
"""

# KEYS lease, fence; ARGV member, incarnation, token, ttl ms, address
_RENEW = """
if redis.call('GET', KEYS[2]) ~= ARGV[3] then return 0 end
local v = ARGV[1] .. '\\t' .. ARGV[2] .. '\\t' .. ARGV[5] .. '\\t' .. ARGV[3]
redis.call('SET', KEYS[1], v, 'PX', ARGV[4])
return 1
"""

# KEYS lease, fence; ARGV token
_RELEASE = """
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
return 1
"""


def _node_pipelines(
    client: Any, names: list[str], key_of: Callable[[str], str]
) -> list[tuple[list[str], Any]]:
    """``names`` grouped by the Redis node holding ``key_of(name)``, each group with a plain
    pipeline on that node (scripts cannot go through a Redis Cluster pipeline); one group on
    a standalone Redis."""
    from .connect import is_cluster, pipeline_on_key_node

    if not is_cluster(client):
        return [(names, client.pipeline(transaction=False))]
    groups: dict[str, tuple[list[str], Any]] = {}
    for name in names:
        key = key_of(name)
        node = client.get_node_from_key(key)
        group = groups.get(node.name)
        if group is None:
            group = groups[node.name] = ([], pipeline_on_key_node(client, key))
        group[0].append(name)
    return list(groups.values())


@dataclass(frozen=True)
class Lease:
    """A stream's lease as Redis holds it (``token`` is the owner's fencing token)."""

    stream: str
    member: str
    incarnation: str
    address: str
    token: int
    ttl_ms: int = 0

    @classmethod
    def parse(cls, stream: str, raw: Any, ttl_ms: int = 0) -> Lease | None:
        if raw is None:
            return None
        parts = text(raw).split("\t")
        if len(parts) != 4:
            return None
        return cls(stream, parts[0], parts[1], parts[2], int(parts[3]), int(ttl_ms))


class Leases:
    """Acquire, renew, release and read streams' leases for one member."""

    def __init__(
        self,
        client: Any,
        prefix: str,
        member: str,
        incarnation: str,
        address: str,
        ttl_ms: int,
        wait: Waiter | None = None,
    ) -> None:
        self.client = client
        self.wait = wait  # an acquisition waits for the replicas (a new token must not be lost)
        self.prefix = prefix
        self.member = member
        self.incarnation = incarnation
        self.address = address
        self.ttl_ms = int(ttl_ms)
        self.groups = GroupLeases(client, prefix, member, incarnation, address, ttl_ms, Lease)

    @property
    def versions(self) -> dict[str, int]:
        """Keyed stream -> its definitions version, as the last renewal of its groups saw it."""
        return self.groups.versions

    def keys(self, stream: str) -> tuple[str, str]:
        """(lease key, fence key) of ``stream``."""
        k = StreamKeys.of(self.prefix, stream)
        return k.lease, k.fence

    def fence(self, stream: str, token: int) -> Fence:
        """The fence a writer holding ``stream``'s lease (or key group unit's) under ``token``
        writes through."""
        if split_unit(stream)[1] is not None:
            return self.groups.fence(stream, token)
        return Fence(self.keys(stream)[1], token)

    def _fail(self, ex: Exception, doing: str) -> StoreError:
        return StoreUnavailableError(f"{doing}: Redis is unavailable ({type(ex).__name__}: {ex})")

    def acquire(self, stream: str, *, force: bool = False) -> tuple[Lease | None, Lease | None]:
        """Take ``stream``'s lease: ``(ours, None)``, or ``(None, the holder's)`` when another
        member holds it. ``force`` takes it from any holder (one known to be dead: the store
        was just started by this server); the fence still shuts the holder out."""
        if split_unit(stream)[1] is not None:
            try:
                return self.groups.acquire(stream, force=force)
            except redis.RedisError as ex:
                raise self._fail(ex, f"take key group {stream!r}") from ex
        script = registered(self.client, _ACQUIRE)
        keys = list(self.keys(stream))
        args = [self.member, self.incarnation, self.ttl_ms, self.address, int(force)]
        try:
            if self.wait is not None:
                reply = self.wait(
                    self.client, keys[0], lambda p: script(keys=keys, args=args, client=p)
                )
            else:
                reply = script(keys=keys, args=args)
            ok, raw, ttl = reply
        except redis.RedisError as ex:
            raise self._fail(ex, f"take the lease of stream {stream!r}") from ex
        lease = Lease.parse(stream, raw, ttl)
        return (lease, None) if int(ok) == 1 else (None, lease)

    def renew(self, fences: dict[str, Fence]) -> dict[str, bool]:
        """Renew the leases of ``fences`` (stream -> our fence), one pipelined round trip per
        Redis node: stream -> whether we still hold it. A stream whose node did not answer is
        left out (its lease is not extended: it runs out unless a later renewal gets through)."""
        if not fences:
            return {}
        script = registered(self.client, _RENEW)
        out: dict[str, bool] = {}
        failed: Exception | None = None
        units = {n: f for n, f in fences.items() if split_unit(n)[1] is not None}
        if units:  # key groups: one script per stream (group_leases.py)
            try:
                out.update(
                    self.groups.renew(
                        units,
                        lambda streams: _node_pipelines(
                            self.client, streams, lambda n: self.keys(n)[0]
                        ),
                    )
                )
            except redis.RedisError as ex:
                failed = ex
        plain = [n for n in fences if n not in units]
        for names, pipe in _node_pipelines(self.client, plain, lambda n: self.keys(n)[0]):
            for name in names:
                lease_key, fence_key = self.keys(name)
                args = [self.member, self.incarnation, fences[name].token, self.ttl_ms]
                script(keys=[lease_key, fence_key], args=[*args, self.address], client=pipe)
            try:
                replies = pipe.execute(raise_on_error=False)
            except redis.RedisError as ex:
                failed = ex
                continue
            for name, r in zip(names, replies, strict=True):
                if isinstance(r, Exception):
                    failed = r
                    continue
                out[name] = int(r) == 1
        if failed is not None and not out:
            raise self._fail(failed, f"renew {len(fences)} leases")
        return out

    def acquire_groups(
        self, units: Sequence[str], *, force: bool = False
    ) -> list[tuple[Lease | None, Lease | None]]:
        """:meth:`acquire` of several key groups of one stream, pipelined."""
        try:
            out: list[tuple[Lease | None, Lease | None]] = self.groups.acquire_many(
                units, force=force
            )
        except redis.RedisError as ex:
            raise self._fail(ex, f"take key groups {list(units)[:3]!r}...") from ex
        return out

    def release_groups(self, held: Sequence[tuple[str, int]]) -> list[bool]:
        """:meth:`release` of several key groups of one stream ((unit, token) each)."""
        try:
            return self.groups.release_many(held)
        except redis.RedisError as ex:
            raise self._fail(ex, f"release key groups {[u for u, _ in held][:3]!r}...") from ex

    def release(self, stream: str, token: int) -> bool:
        if split_unit(stream)[1] is not None:
            try:
                return self.groups.release(stream, token)
            except redis.RedisError as ex:
                raise self._fail(ex, f"release key group {stream!r}") from ex
        try:
            r = registered(self.client, _RELEASE)(keys=list(self.keys(stream)), args=[token])
        except redis.RedisError as ex:
            raise self._fail(ex, f"release the lease of stream {stream!r}") from ex
        return int(r) == 1

    def holder(self, stream: str) -> Lease | None:
        """Who holds ``stream``'s lease now (None: nobody)."""
        if split_unit(stream)[1] is not None:
            return self.holders([stream])[0]
        lease_key, _ = self.keys(stream)
        try:
            pipe = self.client.pipeline(transaction=False)
            pipe.get(lease_key)
            pipe.pttl(lease_key)
            raw, ttl = pipe.execute()
        except redis.RedisError as ex:
            raise self._fail(ex, f"read the lease of stream {stream!r}") from ex
        return Lease.parse(stream, raw, max(0, int(ttl)))

    def group_holders(self, stream: str, groups: int) -> list[Lease | None]:
        """The recorded holders of ``stream``'s key groups ``0 .. groups-1`` (None: none)."""
        try:
            return self.groups.of_stream(stream, groups)
        except redis.RedisError as ex:
            raise self._fail(ex, f"read the group leases of stream {stream!r}") from ex

    def holders(self, streams: Sequence[str]) -> list[Lease | None]:
        units = [s for s in streams if split_unit(s)[1] is not None]
        if units:  # key groups: their records, and whether their holders' leases live
            try:
                got = dict(zip(units, self.groups.holders(units), strict=True))
            except redis.RedisError as ex:
                raise self._fail(ex, f"read the leases of {len(units)} key groups") from ex
            rest = [s for s in streams if s not in got]
            more = dict(zip(rest, self.holders(rest), strict=True)) if rest else {}
            return [got[s] if s in got else more[s] for s in streams]
        pipe = self.client.pipeline(transaction=False)
        for s in streams:
            pipe.get(self.keys(s)[0])
        try:
            raws = pipe.execute()
        except redis.RedisError as ex:
            raise self._fail(ex, f"read the leases of {len(streams)} streams") from ex
        return [Lease.parse(s, r) for s, r in zip(streams, raws, strict=True)]
