"""Membership in Redis: the cluster's system of record (no other coordination service);
:mod:`.leases` and :mod:`.fencing` build ownership on it.

**Members.** Every server heartbeats into ``{prefix}:{cluster}:members`` (a sorted set scored
by the time of its last heartbeat, Redis's own clock) and ``{prefix}:{cluster}:info`` (its
address, incarnation and stream count); a member is live while its last heartbeat is younger
than the member TTL. One Lua script per heartbeat writes the beat and answers the live members.

Keys (:mod:`.keys`): :class:`~.keys.MemberKeys`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import redis

from .keys import MemberKeys
from .lua import registered, text
from .protocol import StoreUnavailableError

__all__ = ["Member", "Membership"]

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
        mid = text(member)
        parts = text(info).split("\t") if info else []
        address = parts[0] if parts and parts[0] else mid
        incarnation = parts[1] if len(parts) > 1 else ""
        streams = int(parts[2]) if len(parts) > 2 and parts[2].isdigit() else 0
        return cls(mid, address, incarnation, max(0, now - int(float(text(beat)))), streams)


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
        k = MemberKeys.of(self.prefix)
        return [k.members, k.info]

    def beat(self, streams: int, *, leave: bool = False) -> dict[str, Member]:
        """Heartbeat (or leave) and return the live members, this one included."""
        info = f"{self.address}\t{self.incarnation}\t{streams}"
        try:
            out = registered(self.client, _HEARTBEAT)(
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
            now, beat, info = registered(self.client, _WHO)(keys=self._keys, args=[self.member])
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
