"""Key groups' leases: on a cluster each key group of a keyed stream is owned on its own, as a
unit named ``"<stream>#<g>"`` (:func:`mtawindows.v1.keys.group_unit`), under a fencing token of
its own; but a member's **lease** covers every group of the stream it holds, so keeping them
costs one command per stream and heartbeat however many groups (or keys) it holds. Under the
stream's hash tag (one slot, one script)::

    {prefix}:svc:{<stream>}:gholders          hash    group -> "member\\tincarnation\\taddress\\ttoken"
    {prefix}:svc:{<stream>}:glease:<member>   string  the member's incarnation, expires (PX)
    {prefix}:svc:{<stream>}:g:<g>:fence       int     the group's token: INCR at every taking
    {prefix}:svc:{<stream>}:ggen              int     INCR at every taking of any group

A group is held by the member its ``gholders`` record names while that member's ``glease``
lives. **Taking** a group (a script) succeeds when it has no record, or its record names this
member, or the named member's lease is gone (it stopped renewing: dead, paused or cut off); it
increments the group's fence (the new holder's token, which every write of the group's data
checks, storage/fencing.py), records the holder, refreshes the taker's lease and bumps the
generation. **Renewing** refreshes the member's lease and reads the generation: when it moved
since the member's last renewal, some group of the stream was taken by someone, and the
member checks its groups' records (one HMGET) and drops those it no longer holds, so a member
that was paused past its lease finds out before it serves them again (as a stream's renewal
does). **Releasing** deletes the record when it still names the releaser's token.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis

from mtawindows.v1.keys import split_unit

from .fencing import Fence
from .keys import GroupKeys, StreamKeys, group_lease_keys, member_group_lease
from .lua import registered, text

__all__ = ["GroupLeases"]

# KEYS holders, the group's fence, the taker's lease, generation[, the holder's lease]
# ARGV group, member, incarnation, ttl ms, address, force ("1"), the record read before ("")
_TAKE = """
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if cur and ARGV[6] ~= '1' then
  local member = string.match(cur, '^([^\\t]*)')
  if member ~= ARGV[2] then
    if cur ~= ARGV[7] then return {0, cur, -2} end
    if KEYS[5] and redis.call('EXISTS', KEYS[5]) == 1 then
      return {0, cur, redis.call('PTTL', KEYS[5])}
    end
  end
end
local token = redis.call('INCR', KEYS[2])
local v = ARGV[2] .. '\\t' .. ARGV[3] .. '\\t' .. ARGV[5] .. '\\t' .. token
redis.call('HSET', KEYS[1], ARGV[1], v)
redis.call('SET', KEYS[3], ARGV[3], 'PX', ARGV[4])
local gen = redis.call('INCR', KEYS[4])
return {1, v, tonumber(ARGV[4]), gen}
"""

# KEYS the member's lease, generation, definitions version; ARGV incarnation, ttl ms
_RENEW = """
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {tonumber(redis.call('GET', KEYS[2]) or '0'), tonumber(redis.call('GET', KEYS[3]) or '0')}
"""

# KEYS holders; ARGV group, the holder's record
_RELEASE = """
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
return 1
"""


class GroupLeases:
    """Take, renew, release and read key groups' leases for one member (``Leases`` hands
    group units here). ``lease_type`` builds the :class:`~.leases.Lease` records."""

    def __init__(
        self,
        client: Any,
        prefix: str,
        member: str,
        incarnation: str,
        address: str,
        ttl_ms: int,
        lease_type: Any,
    ) -> None:
        self.client = client
        self.prefix = prefix
        self.member = member
        self.incarnation = incarnation
        self.address = address
        self.ttl_ms = int(ttl_ms)
        self.lease_type = lease_type
        # group unit -> the generation of its stream at which it was last known held here: a
        # renewal that reads another checks the unit's record (renewals may run at once, from
        # the heartbeat and from a call: each unit is vouched for by its own check)
        self.checked: dict[str, int] = {}
        self.versions: dict[str, int] = {}  # stream -> its definitions version, as renewed

    def fence(self, unit: str, token: int) -> Fence:
        stream, g = _split(unit)
        return Fence(GroupKeys.of(self.prefix, stream, g).fence, token)

    def acquire(self, unit: str, *, force: bool = False) -> tuple[Any, Any]:
        """Take group ``unit``: ``(ours, None)``, or ``(None, the holder's)``."""
        stream, g = _split(unit)
        holders, _gen = group_lease_keys(self.prefix, stream)
        cur = self.client.hget(holders, g)
        keys, args = self._take_call(stream, g, cur, force)
        return self._taken(unit, registered(self.client, _TAKE)(keys=keys, args=args))

    def acquire_many(self, units: Sequence[str], *, force: bool = False) -> list[tuple[Any, Any]]:
        """:meth:`acquire` of several groups of **one** stream in two pipelined round trips
        (not two per group): ``(ours, None)`` or ``(None, the holder's)`` per unit, in order;
        a unit whose script failed is ``(None, None)`` (not taken)."""
        if not units:
            return []
        from .connect import pipeline_on_key_node

        parsed = [_split(u) for u in units]
        streams = {stream for stream, _ in parsed}
        if len(streams) != 1:
            msg = f"acquire_many: groups of one stream at a time, got {sorted(streams)}"
            raise ValueError(msg)
        stream = parsed[0][0]
        holders, _gen = group_lease_keys(self.prefix, stream)
        seen_all = self.client.hmget(holders, [g for _, g in parsed])
        script = registered(self.client, _TAKE)
        pipe = pipeline_on_key_node(self.client, holders)
        for (_, g), cur in zip(parsed, seen_all, strict=True):
            keys, args = self._take_call(stream, g, cur, force)
            script(keys=keys, args=args, client=pipe)
        return [
            (None, None) if isinstance(reply, Exception) else self._taken(unit, reply)
            for unit, reply in zip(units, pipe.execute(raise_on_error=False), strict=True)
        ]

    def _take_call(self, stream: str, g: int, cur: Any, force: bool) -> tuple[list[Any], list[Any]]:
        """The keys and arguments of the take script for group ``g`` whose holder's record
        was ``cur`` (the compare-and-set's expected value)."""
        holders, gen = group_lease_keys(self.prefix, stream)
        seen = text(cur) if cur is not None else ""
        keys = [
            holders,
            GroupKeys.of(self.prefix, stream, g).fence,
            member_group_lease(self.prefix, stream, self.member),
            gen,
        ]
        other = seen.split("\t", 1)[0] if seen else ""
        if other and other != self.member:
            keys.append(member_group_lease(self.prefix, stream, other))
        args = [g, self.member, self.incarnation, self.ttl_ms, self.address, int(force), seen]
        return keys, args

    def _taken(self, unit: str, reply: Any) -> tuple[Any, Any]:
        """The take script's reply: ``(ours, None)``, or ``(None, the holder's)``."""
        ok, raw, ttl = reply[:3]
        if int(ttl) == -2:  # taken meanwhile by another: its lease is fresh
            ttl = self.ttl_ms
        lease = self.lease_type.parse(unit, raw, max(0, int(ttl)))
        if int(ok) != 1:
            return None, lease
        self.checked[unit] = int(reply[3])
        return lease, None

    def release_many(self, held: Sequence[tuple[str, int]]) -> list[bool]:
        """:meth:`release` of several groups of one stream (unit, token), one round trip."""
        if not held:
            return []
        from .connect import pipeline_on_key_node

        script = registered(self.client, _RELEASE)
        stream = _split(held[0][0])[0]
        holders, _gen = group_lease_keys(self.prefix, stream)
        pipe = pipeline_on_key_node(self.client, holders)
        for unit, token in held:
            s, g = _split(unit)
            if s != stream:
                msg = f"release_many: groups of one stream at a time, got {s!r} and {stream!r}"
                raise ValueError(msg)
            record = f"{self.member}\t{self.incarnation}\t{self.address}\t{token}"
            self.checked.pop(unit, None)
            script(keys=[holders], args=[g, record], client=pipe)
        return [
            not isinstance(r, Exception) and int(r) == 1 for r in pipe.execute(raise_on_error=False)
        ]

    def renew(self, fences: dict[str, Fence], pipe_of: Any) -> dict[str, bool]:
        """Renew this member's lease of every stream of ``fences`` (group units -> our
        fences), one script per stream; where a group of the stream was taken since the last
        renewal, check which of ours we still hold (one HMGET). Unit -> still held."""
        by_stream: dict[str, list[str]] = {}
        for unit in fences:
            by_stream.setdefault(_split(unit)[0], []).append(unit)
        script = registered(self.client, _RENEW)
        out: dict[str, bool] = {}
        failed: Exception | None = None
        check: dict[str, int] = {}  # stream -> the generation read
        for streams, pipe in pipe_of(list(by_stream)):
            for stream in streams:
                _holders, gen = group_lease_keys(self.prefix, stream)
                keys = [
                    member_group_lease(self.prefix, stream, self.member),
                    gen,
                    StreamKeys.of(self.prefix, stream).version,
                ]
                script(keys=keys, args=[self.incarnation, self.ttl_ms], client=pipe)
            try:
                replies = pipe.execute(raise_on_error=False)
            except redis.RedisError as ex:
                failed = ex
                continue
            for stream, r in zip(streams, replies, strict=True):
                if isinstance(r, Exception):
                    failed = r
                    continue
                generation, version = int(r[0]), int(r[1])
                self.versions[stream] = version
                for unit in by_stream[stream]:
                    if self.checked.get(unit) == generation:
                        out[unit] = True
                    else:
                        check[stream] = generation
        for stream, generation in check.items():  # a group was taken: are ours still ours?
            units = [u for u in by_stream[stream] if u not in out]
            holders, _gen = group_lease_keys(self.prefix, stream)
            try:
                raws = self.client.hmget(holders, [_split(u)[1] for u in units])
            except redis.RedisError as ex:
                failed = ex  # not renewed: checked again at the next renewal
                continue
            for unit, raw in zip(units, raws, strict=True):
                lease = self.lease_type.parse(unit, raw)
                held = (
                    lease is not None
                    and lease.member == self.member
                    and lease.token == fences[unit].token
                )
                out[unit] = held
                if held:
                    self.checked[unit] = generation
                else:
                    self.checked.pop(unit, None)
        if failed is not None and not out:
            raise failed
        return out

    def release(self, unit: str, token: int) -> bool:
        stream, g = _split(unit)
        holders, _gen = group_lease_keys(self.prefix, stream)
        record = f"{self.member}\t{self.incarnation}\t{self.address}\t{token}"
        self.checked.pop(unit, None)
        r = registered(self.client, _RELEASE)(keys=[holders], args=[g, record])
        return int(r) == 1

    def holders(self, units: Sequence[str]) -> list[Any]:
        """The live holders of group ``units`` (None: free, or its holder's lease is gone)."""
        if not units:
            return []
        pipe = self.client.pipeline(transaction=False)
        for unit in units:
            stream, g = _split(unit)
            pipe.hget(group_lease_keys(self.prefix, stream)[0], g)
        leases = [self.lease_type.parse(u, r) for u, r in zip(units, pipe.execute(), strict=True)]
        pipe = self.client.pipeline(transaction=False)
        for unit, lease in zip(units, leases, strict=True):
            if lease is not None:
                pipe.pttl(member_group_lease(self.prefix, _split(unit)[0], lease.member))
        ttls = iter(pipe.execute())
        out: list[Any] = []
        for lease in leases:
            if lease is None:
                out.append(None)
                continue
            ttl = int(next(ttls))
            out.append(
                self.lease_type(
                    lease.stream, lease.member, lease.incarnation, lease.address, lease.token, ttl
                )
                if ttl > 0
                else None
            )
        return out

    def of_stream(self, stream: str, groups: int) -> list[Any]:  # list[Lease | None]
        """The recorded holder of each group ``0 .. groups-1`` of ``stream`` (None: none),
        one HGETALL; whether their leases live is the caller's to judge (membership)."""
        raw = self.client.hgetall(group_lease_keys(self.prefix, stream)[0])
        got = {int(text(k)): v for k, v in raw.items()}
        return [self.lease_type.parse(f"{stream}#{g}", got.get(g)) for g in range(groups)]


def _split(unit: str) -> tuple[str, int]:
    stream, g = split_unit(unit)
    if g is None:  # pragma: no cover - the callers dispatch on it
        msg = f"not a key group's unit: {unit!r}"
        raise ValueError(msg)
    return stream, g
