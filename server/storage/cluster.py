"""Membership, leases and fencing in Redis: the cluster's system of record (no other
coordination service).

**Members.** Every server heartbeats into ``{prefix}:{cluster}:members`` (a sorted set scored
by the time of its last heartbeat, Redis's own clock) and ``{prefix}:{cluster}:info`` (its
address, incarnation and stream count); a member is live while its last heartbeat is younger
than the member TTL. One Lua script per heartbeat writes the beat and answers the live members.

**Leases.** A stream is owned by one member under a lease, in the stream's own hash slot::

    {prefix}:svc:{<stream>}:lease   "member\\tincarnation\\taddress\\ttoken", expires (PX)
    {prefix}:svc:{<stream>}:fence   the stream's fencing token: INCR at every acquisition,
                                    never decreases, never deleted

Acquiring takes a free lease (or one held by an earlier incarnation of the same member: a
restarted server takes its streams back at once) and increments the fence: the new owner's
token. Renewing extends the lease only while the fence still holds the renewer's token, so an
owner that was paused past its lease and lost the stream cannot renew it back.

**Fencing.** Every write of a stream's data (journal, state, definitions, the windows' blocks,
checkpoints and deletions) is one Lua script that first compares the fence with the writer's
token and refuses the whole write (``FENCED``) when they differ; the keys all share the stream's
hash tag, so the script runs in one slot on Redis Cluster too. A paused or partitioned old owner
can therefore never write after a newer owner took the stream: it learns so from the refusal
(:class:`FencedError`) or from its lease, and drops the stream.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis

from .protocol import StoreError, StoreUnavailableError

__all__ = [
    "Fence",
    "FencedError",
    "Lease",
    "Leases",
    "Member",
    "Membership",
    "check_reply",
    "fenced",
    "replicas_waiter",
    "stream_tag",
]


class FencedError(StoreError):
    """A write was refused: a newer owner holds the stream (nothing of it was applied)."""


Waiter = Callable[[Any, str, Callable[[Any], Any]], Any]


def replicas_waiter(replicas: int, timeout_ms: int) -> Waiter | None:
    """``wait(client, key, write)``: run ``write(pipe)`` then Redis ``WAIT`` on one connection
    of the node holding ``key`` (so WAIT counts that write) and return the write's reply;
    :class:`StoreUnavailableError` when fewer than ``replicas`` replicas acknowledged it within
    ``timeout_ms`` (the write may be there: the caller treats it as unacknowledged). None for
    ``replicas`` 0: no waiting."""
    if replicas <= 0:
        return None

    def wait(client: Any, key: str, write: Callable[[Any], Any]) -> Any:
        from .connect import pipeline_on_key_node

        pipe = pipeline_on_key_node(client, key)
        write(pipe)
        pipe.execute_command("WAIT", replicas, timeout_ms)
        replies = pipe.execute()
        acked = int(replies[-1])
        if acked < replicas:
            msg = (
                f"a write of {key!r} reached {acked} of {replicas} replicas within "
                f"{timeout_ms} ms (Redis WAIT): not acknowledged"
            )
            raise StoreUnavailableError(msg)
        return replies[0]

    return wait


def stream_tag(prefix: str, stream: str) -> str:
    """The common part of a stream's keys: ``{prefix}:svc:{<stream>}`` (one hash slot)."""
    return f"{prefix}:svc:{{{stream}}}"


# KEYS[1] the fence, KEYS[2..] one key per operation; ARGV[1] the writer's token (0: no fence,
# KEYS[1] is then any key of the slot), then per operation: command, argument count, arguments.
# All or nothing: the check comes first, and a script runs alone.
_FENCED = """
if ARGV[1] ~= '0' then
  local f = redis.call('GET', KEYS[1])
  if f ~= ARGV[1] then
    return redis.error_reply('FENCED the stream belongs to token ' .. tostring(f) ..
      ', this writer holds ' .. ARGV[1])
  end
end
local a = 2
local r = 0
for k = 2, #KEYS do
  local n = tonumber(ARGV[a + 1])
  r = redis.call(ARGV[a], KEYS[k], unpack(ARGV, a + 2, a + 1 + n))
  a = a + 2 + n
end
return r
"""

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

# KEYS members (zset), info (hash); ARGV member, info, ttl ms, "1" beat / "0" leave
_HEARTBEAT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[3])
local prev_beat = redis.call('ZSCORE', KEYS[1], ARGV[1]) or false
local prev_info = redis.call('HGET', KEYS[2], ARGV[1]) or false
if ARGV[4] == '1' then
  redis.call('ZADD', KEYS[1], now, ARGV[1])
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
else
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('HDEL', KEYS[2], ARGV[1])
end
local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - 30 * ttl)
for _, m in ipairs(gone) do
  redis.call('ZREM', KEYS[1], m)
  redis.call('HDEL', KEYS[2], m)
end
local live = redis.call('ZRANGEBYSCORE', KEYS[1], now - ttl, '+inf', 'WITHSCORES')
local out = {now, prev_beat, prev_info}
for i = 1, #live, 2 do
  out[#out + 1] = live[i]
  out[#out + 1] = live[i + 1]
  out[#out + 1] = redis.call('HGET', KEYS[2], live[i]) or ''
end
return out
"""

# KEYS members, info; ARGV member: (now, its last heartbeat or false, its info or false)
_WHO = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return {now, redis.call('ZSCORE', KEYS[1], ARGV[1]) or false,
        redis.call('HGET', KEYS[2], ARGV[1]) or false}
"""

_scripts: dict[tuple[int, str], Any] = {}
_scripts_lock = threading.Lock()


def _script(client: Any, source: str) -> Any:
    """``source`` registered with ``client`` (once per client)."""
    key = (id(client), source)
    s = _scripts.get(key)
    if s is None:
        with _scripts_lock:
            s = _scripts.get(key)
            if s is None:
                s = _scripts[key] = client.register_script(source)
    return s


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def is_fenced(ex: BaseException) -> bool:
    return isinstance(ex, redis.ResponseError) and str(ex).startswith("FENCED")


@dataclass
class Fence:
    """A writer's fencing token for one stream (shared by its journal and its windows' stores).

    ``token`` 0 means "not fenced" (a store used on its own, outside the service): writes go
    through plainly. ``lost`` is set when a write was refused; the owner then drops the stream.
    """

    key: str
    token: int = 0
    lost: bool = False

    @property
    def active(self) -> bool:
        return self.token > 0


Op = tuple[str, str, Sequence[Any]]  # (command, key, arguments)


def fenced(client: Any, fence: Fence | None, ops: Sequence[Op], *, pipe: Any = None) -> Any:
    """Run ``ops`` (each ``(command, key, args)``, keys of one hash slot) as one atomic write:
    one script when ``fence`` is active, refused with :class:`FencedError` (nothing applied)
    when a newer owner holds the stream; else plain commands (in ``MULTI`` when several). With ``pipe``, queue it there (the caller executes and
    checks the reply with :func:`check_reply`). Returns the last command's reply."""
    if not ops:
        return None
    if fence is None or not fence.active:  # unfenced: plain commands (MULTI for several)
        p = pipe if pipe is not None else client.pipeline(transaction=len(ops) > 1)
        for cmd, key, args in ops:
            p.execute_command(cmd, key, *args)
        if pipe is not None:
            return None
        replies = p.execute()
        return replies[-1] if replies else None
    keys = [fence.key]
    argv: list[Any] = [fence.token]
    for cmd, key, args in ops:
        keys.append(key)
        argv.append(cmd)
        argv.append(len(args))
        argv.extend(args)
    script = _script(client, _FENCED)
    try:
        return script(keys=keys, args=argv, client=pipe if pipe is not None else client)
    except redis.ResponseError as ex:
        raise check_reply(ex, fence) from ex


def check_reply(ex: BaseException, fence: Fence | None) -> BaseException:
    """The error to raise for a failed fenced write: :class:`FencedError` (and the fence marked
    lost) for a refusal, else ``ex``."""
    if is_fenced(ex):
        if fence is not None:
            fence.lost = True
        return FencedError(str(ex))
    return ex


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
        parts = _text(raw).split("\t")
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

    def keys(self, stream: str) -> tuple[str, str]:
        tag = stream_tag(self.prefix, stream)
        return f"{tag}:lease", f"{tag}:fence"

    def fence(self, stream: str, token: int) -> Fence:
        """The fence a writer holding ``stream``'s lease under ``token`` writes through."""
        return Fence(self.keys(stream)[1], token)

    def _fail(self, ex: Exception, doing: str) -> StoreError:
        return StoreUnavailableError(f"{doing}: Redis is unavailable ({type(ex).__name__}: {ex})")

    def acquire(self, stream: str, *, force: bool = False) -> tuple[Lease | None, Lease | None]:
        """Take ``stream``'s lease: ``(ours, None)``, or ``(None, the holder's)`` when another
        member holds it. ``force`` takes it from any holder (one known to be dead: the store
        was just started by this server); the fence still shuts the holder out."""
        script = _script(self.client, _ACQUIRE)
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
        script = _script(self.client, _RENEW)
        out: dict[str, bool] = {}
        failed: Exception | None = None
        for names, pipe in _node_pipelines(self.client, list(fences), lambda n: self.keys(n)[0]):
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

    def release(self, stream: str, token: int) -> bool:
        try:
            r = _script(self.client, _RELEASE)(keys=list(self.keys(stream)), args=[token])
        except redis.RedisError as ex:
            raise self._fail(ex, f"release the lease of stream {stream!r}") from ex
        return int(r) == 1

    def holder(self, stream: str) -> Lease | None:
        """Who holds ``stream``'s lease now (None: nobody)."""
        lease_key, _ = self.keys(stream)
        try:
            pipe = self.client.pipeline(transaction=False)
            pipe.get(lease_key)
            pipe.pttl(lease_key)
            raw, ttl = pipe.execute()
        except redis.RedisError as ex:
            raise self._fail(ex, f"read the lease of stream {stream!r}") from ex
        return Lease.parse(stream, raw, max(0, int(ttl)))

    def holders(self, streams: Sequence[str]) -> list[Lease | None]:
        pipe = self.client.pipeline(transaction=False)
        for s in streams:
            pipe.get(self.keys(s)[0])
        try:
            raws = pipe.execute()
        except redis.RedisError as ex:
            raise self._fail(ex, f"read the leases of {len(streams)} streams") from ex
        return [Lease.parse(s, r) for s, r in zip(streams, raws, strict=True)]


@dataclass(frozen=True)
class Member:
    id: str
    address: str
    incarnation: str
    age_ms: int
    streams: int

    @classmethod
    def parse(cls, member: Any, now: int, beat: Any, info: Any) -> Member:
        """A member from Redis's record: its id, its last heartbeat (ms, Redis's clock) and
        its info ``address\tincarnation\tstreams``; ``now`` the time of the reading."""
        mid = _text(member)
        parts = _text(info).split("\t") if info else []
        address = parts[0] if parts and parts[0] else mid
        incarnation = parts[1] if len(parts) > 1 else ""
        streams = int(parts[2]) if len(parts) > 2 and parts[2].isdigit() else 0
        return cls(mid, address, incarnation, max(0, now - int(float(_text(beat)))), streams)


@dataclass
class Membership:
    """This server's membership: its heartbeat and the live members it last saw."""

    client: Any
    prefix: str
    member: str
    incarnation: str
    address: str
    ttl_ms: int
    members: dict[str, Member] = field(default_factory=dict)
    # another live incarnation heartbeating under this member id (a misconfiguration, or a
    # replacement started while this process was paused): (its incarnation, ms since its beat)
    rival: tuple[str, int] | None = None

    @property
    def _keys(self) -> list[str]:
        tag = f"{self.prefix}:{{cluster}}"
        return [f"{tag}:members", f"{tag}:info"]

    def beat(self, streams: int, *, leave: bool = False) -> dict[str, Member]:
        """Heartbeat (or leave) and return the live members, this one included."""
        info = f"{self.address}\t{self.incarnation}\t{streams}"
        try:
            out = _script(self.client, _HEARTBEAT)(
                keys=self._keys, args=[self.member, info, self.ttl_ms, "0" if leave else "1"]
            )
        except redis.RedisError as ex:
            msg = f"heartbeat of member {self.member!r}: Redis is unavailable ({ex})"
            raise StoreUnavailableError(msg) from ex
        now = int(out[0])
        if not leave:
            rival = self._other(now, out[1], out[2])
            if rival is not None and rival[1] < self.ttl_ms:
                self.rival = rival
        members: dict[str, Member] = {}
        for i in range(3, len(out), 3):
            m = Member.parse(out[i], now, out[i + 1], out[i + 2])
            members[m.id] = m
        self.members = members
        return members

    def _other(self, now: int, beat: Any, info: Any) -> tuple[str, int] | None:
        """(incarnation, heartbeat age) of this id's record when another process wrote it."""
        if not beat or not info:
            return None
        m = Member.parse(self.member, now, beat, info)
        if not m.incarnation or m.incarnation == self.incarnation:
            return None
        return m.incarnation, m.age_ms

    def other_incarnation(self) -> tuple[str, int] | None:
        """(incarnation, heartbeat age in ms) of another process using this member id, as
        Redis last heard of it; None when there is none."""
        try:
            now, beat, info = _script(self.client, _WHO)(keys=self._keys, args=[self.member])
        except redis.RedisError as ex:
            msg = f"read member {self.member!r}: Redis is unavailable ({ex})"
            raise StoreUnavailableError(msg) from ex
        return self._other(int(now), beat, info)

    def reset(self) -> None:
        """Forget every member (a store this server just started: they are all dead)."""
        try:
            self.client.delete(*self._keys)
        except redis.RedisError as ex:
            msg = f"reset the members: Redis is unavailable ({ex})"
            raise StoreUnavailableError(msg) from ex
