"""What a client knows of the cluster: the live members, where each stream lives, which
servers just failed, and where a call about a stream goes first (:class:`Topology`).

Servers that share one Redis form a cluster; each stream is owned by one live member under a
lease (the owner of record), and the members put streams where rendezvous hashing over the
live member ids sends them (:func:`mtawindows.v1.placement.place`). A client starts from
seed addresses and learns the rest:

* the **map** (live members, the lease time) from ``GetClusterMap`` on any member or seed,
  fetched at the first call, again after a failure that may mean a member died, and at least
  every ``refresh_interval`` seconds; an older server without ``GetClusterMap``
  (UNIMPLEMENTED) is a cluster of one;
* the **owners**: stream -> address, from ``NOT_OWNER`` redirects and ``GetClusterMap(streams)``,
  forgotten when the owner fails or leaves the map;
* the **group holders** of a keyed stream on a cluster (``StreamOwner.group_members``: the
  member holding each key group, "" while one moves), from ``GetClusterMap(streams)`` and the
  ``NOT_OWNER`` redirects that name a ``group``; a holder that leaves the map is forgotten, and
  the whole list is asked again after ``refresh_interval`` (:meth:`Topology.holders`).

A call about key group G of stream S (an Append's rows of that group, a key's Query, GetKey,
DeleteKey) goes to G's holder, else where placement puts the unit ``"S#G"``
(:func:`mtawindows.v1.keys.group_unit`) among the live members that are not suspects
(:meth:`Topology.group_way`); the stream's own calls go to S's owner as below.

A call about stream S goes to S's cached owner, else where placement puts S among the live
members (leaving out the suspects), else to a seed. Where that guess is wrong, the server
redirects (``NOT_OWNER``): nothing was done, the client resends at the owner.

**Suspects.** A member whose call failed UNAVAILABLE (any reason) or DEADLINE_EXCEEDED is a
suspect for a lease (at least a second; twice as long each time it fails again after its
suspicion ran out, up to 8 times, until it answers): it is left out of placement and asked
for the map last. One that did not answer at all (no status of its own: unreachable, silent,
a deadline) is **cut** off from this client: a call for a stream it owns, while the map still
lists it, goes to another live member with the header ``mtawindows-forward: 1`` (the relay:
where placement puts the stream among the other live members, which is where the stream goes
if the owner dies), and the relay forwards it to the owner. An owner that answered, but
unwell (``STORE_UNAVAILABLE``, ``MEMBER_ISOLATED``, ``SERVER_STOPPING``), is still called
directly: its streams move when it is really gone, and the map says so.

**Stale maps.** A map answered by a member that is cut off from the cluster's Redis
(``isolated``, or ``view_age_ms`` over half its lease) is not taken while another member
answers a fresh one (:meth:`Topology.stale`).

Member id == the advertised address (``--advertise``); a cluster of one is called at the address
the client reached it at (its advertised one may be a bind address such as ``0.0.0.0``).
Thread-safe: the clients share one topology between threads (or tasks).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from mtawindows.v1 import windows_pb2 as pb
from mtawindows.v1.keys import group_unit
from mtawindows.v1.placement import place

from .routing import split_targets

__all__ = [
    "MAX_OWNERS",
    "ClusterMap",
    "ClusterMember",
    "Topology",
    "seeds_of",
]

MAX_OWNERS = 100_000  # owners cached at most (the cache starts over past it)
MAX_GROUP_MAPS = 10_000  # keyed streams whose group holders are cached at most (idem)
MIN_GAP_RETRY = 0.2  # seconds at least before group holders with a gap are asked again
_WILDCARD_HOSTS = {"0.0.0.0", "::", "[::]", ""}
MAX_HINTS = 64  # addresses learnt from MEMBER_ISOLATED refusals, kept at most
MAX_DOUBLINGS = 3  # a suspicion lasts at most 2**3 times the first


@dataclass(frozen=True)
class ClusterMember:
    """A live server of the cluster: ``id`` (its advertised ``host:port``), the ``address``
    the client calls it at, its process ``incarnation``, how old its last heartbeat was
    (``heartbeat_age_ms``) and how many streams it owned then (``streams``)."""

    id: str
    address: str
    incarnation: str = ""
    heartbeat_age_ms: int = 0
    streams: int = 0


@dataclass(frozen=True)
class ClusterMap:
    """The cluster as one member saw it: the live ``members`` (ordered by id), the lease of a
    stream's owner (``lease_ms``; 0 for an older server without cluster support) and the id
    of the member that answered (``answered_by``)."""

    members: tuple[ClusterMember, ...]
    lease_ms: int = 0
    answered_by: str = ""

    @property
    def addresses(self) -> tuple[str, ...]:
        """Where the client calls each member, in member order."""
        return tuple(m.address for m in self.members)


def seeds_of(target: str | Sequence[str]) -> tuple[str, ...]:
    """A client's seeds: ``"host:port"``, ``"a:1,b:2"`` or a list of those, as distinct
    addresses in the order given (ValueError for an empty entry or a repeat)."""
    raw = target if isinstance(target, str) else ",".join(target)
    return split_targets(raw)


def _host(address: str) -> str:
    return address.rpartition(":")[0]


class Topology:
    """The client's view of the cluster (see the module docstring).

    ``seeds``: where to start; ``refresh_interval``: the map's longest life in seconds;
    ``clock``: monotonic seconds (tests pass a fake one)."""

    def __init__(
        self,
        seeds: Sequence[str],
        *,
        refresh_interval: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not seeds:
            msg = "seeds: expected at least one host:port"
            raise ValueError(msg)
        self.seeds = tuple(seeds)
        self.refresh_interval = refresh_interval
        self.clock = clock
        self._lock = threading.Lock()
        self._map: ClusterMap | None = None
        self._members: dict[str, str] = {}  # live member id -> address (the map's)
        self._incarnations: dict[str, str] = {}
        self._owners: dict[str, str] = {}  # stream -> address of its owner
        # keyed stream -> address of each key group's holder ("" = none known: placement);
        # empty = the stream's groups are not owned apart (unkeyed, or a server alone)
        self._groups: dict[str, list[str]] = {}
        self._groups_at: dict[str, float] = {}  # when each was learnt (clock)
        self._down: dict[str, float] = {}  # suspects: address -> until when (clock)
        self._cut: set[str] = set()  # suspects that did not answer at all
        self._strikes: dict[str, int] = {}  # address -> suspicions since it last answered
        self._hints: list[str] = []  # members named by a cut-off member (MEMBER_ISOLATED)
        self._fetched_at = -math.inf
        self._stale = True
        self._last_good: str | None = None
        # several seeds, or a map of several members seen: a cluster, where a failed server's
        # streams move to another (the clients wait for that); else one server, as ever
        self._clustered = len(self.seeds) > 1

    # -- what the client reads
    @property
    def known(self) -> bool:
        """Whether a map was ever learnt."""
        return self._map is not None

    @property
    def clustered(self) -> bool:
        """Several seeds, or a map of several members seen since the client started."""
        return self._clustered

    @property
    def map(self) -> ClusterMap | None:
        return self._map

    def needs_refresh(self) -> bool:
        """No map yet, a failure since the last one, or the map older than the interval."""
        with self._lock:
            return self._stale or self.clock() - self._fetched_at >= self.refresh_interval

    @staticmethod
    def stale(reply: pb.ClusterMap) -> bool:
        """Whether a map was answered from a stale view: by a member cut off from the
        cluster's Redis (``isolated``, or its view older than half its lease)."""
        return bool(reply.isolated) or (
            reply.lease_ms > 0 and reply.view_age_ms * 2 > reply.lease_ms
        )

    def is_down(self, address: str) -> bool:
        """Whether ``address`` is a suspect now (see the module docstring)."""
        with self._lock:
            return self._is_down(address, self.clock())

    def is_cut(self, address: str) -> bool:
        """Whether ``address`` is a suspect that did not answer at all (a partition, a
        silent or dead server) rather than one that answered unwell."""
        with self._lock:
            return self._is_down(address, self.clock()) and address in self._cut

    def _is_down(self, address: str, now: float) -> bool:
        until = self._down.get(address)
        if until is None:
            return False
        if until <= now:
            del self._down[address]
            self._cut.discard(address)
            return False
        return True

    def cached_owner(self, stream: str) -> str | None:
        with self._lock:
            return self._owners.get(stream)

    def route(self, stream: str = "") -> str:
        """Where a call about ``stream`` goes ("" = a call about no stream) when it cannot be
        forwarded: its owner unless that one is cut off from this client, else its placement
        among the live members that are not suspects, else a seed."""
        return self.way(stream)[0]

    def way(self, stream: str = "", *, relay: bool = False) -> tuple[str, bool]:
        """Where a call about ``stream`` goes, and whether it asks that server to forward it
        to the owner: as :meth:`route`, but with ``relay`` (a call that may be forwarded) an
        owner cut off from this client that the map still lists is reached through the live
        member placement puts the stream on among the others (module docstring)."""
        with self._lock:
            now = self.clock()
            if stream:
                owner = self._owners.get(stream)
                if owner is not None:
                    if not (self._is_down(owner, now) and owner in self._cut):
                        return owner, False
                    others = self._relays(owner, now) if relay else []
                    if others:
                        chosen = place(stream, others)
                        assert chosen is not None
                        return self._members[chosen], True
                if self._members:
                    up = [m for m, a in self._members.items() if not self._is_down(a, now)]
                    chosen = place(stream, up or self._members)
                    assert chosen is not None
                    return self._members[chosen], False
            return self._any(now), False

    def relayable(self, owner: str) -> bool:
        """Whether calls for ``owner``'s streams go through another member now: it is cut
        off from this client, the map still lists it, and another live member is no
        suspect."""
        with self._lock:
            now = self.clock()
            return (
                self._is_down(owner, now) and owner in self._cut and bool(self._relays(owner, now))
            )

    def _relays(self, owner: str, now: float) -> list[str]:
        """The members that may forward to ``owner``: the others, live, no suspects (none
        when the map does not list ``owner``)."""
        if owner not in self._members.values():
            return []
        return [m for m, a in self._members.items() if a != owner and not self._is_down(a, now)]

    def _any(self, now: float) -> str:
        order = [self._last_good, *self._members.values(), *self.seeds, *self._hints]
        for a in order:
            if a is not None and not self._is_down(a, now):
                return a
        return self._last_good or self.seeds[0]

    def live(self) -> tuple[str, ...]:
        """The addresses of the members the map lists (none before a map)."""
        with self._lock:
            return tuple(self._members.values())

    def member_addresses(self) -> tuple[str, ...]:
        """Every live member's address (a seed before any map): who ListStreams asks."""
        with self._lock:
            if self._members:
                return tuple(self._members.values())
            return (self._any(self.clock()),)

    def candidates(self, avoid: Sequence[str] = ()) -> list[str]:
        """Whom to ask for the map, in order: the last member that answered, the live
        members, the seeds, the members a cut-off one named; the suspects last, and none of
        ``avoid``."""
        with self._lock:
            now = self.clock()
            order = [self._last_good, *self._members.values(), *self.seeds, *self._hints]
            seen: list[str] = []
            for a in order:
                if a is not None and a not in seen and a not in avoid:
                    seen.append(a)
            return sorted(seen, key=lambda a: self._is_down(a, now))  # stable

    # -- what the client learns
    def learn(self, reply: pb.ClusterMap, via: str, *, fresh: bool = True) -> ClusterMap:
        """Take the map ``reply`` that the member at ``via`` answered; not ``fresh`` (a stale
        map, taken for want of another), ``via`` stays a suspect and the map is asked again
        before the next call."""
        members = []
        for m in reply.members:
            address = m.address or m.id
            if m.id == reply.self and (
                len(reply.members) == 1 or _host(address) in _WILDCARD_HOSTS
            ):
                address = via  # a cluster of one is where we reached it
            members.append(
                ClusterMember(m.id, address, m.incarnation, m.heartbeat_age_ms, m.streams)
            )
        if not members:  # a member that knows no members (not even itself): it alone
            members.append(ClusterMember(reply.self or via, via))
        cmap = ClusterMap(tuple(members), reply.lease_ms, reply.self)
        with self._lock:
            self._install(cmap, via, fresh=fresh)
            by_id = {m.id: m.address for m in cmap.members}
            now = self.clock()
            for o in reply.owners:
                if o.member:
                    self._set_owner(o.stream, by_id.get(o.member) or o.address or o.member)
                else:
                    self._owners.pop(o.stream, None)
                if len(self._groups) >= MAX_GROUP_MAPS and o.stream not in self._groups:
                    self._groups.clear()
                    self._groups_at.clear()
                # a holder that is no live member of this map is none (placement, redirects)
                self._groups[o.stream] = [by_id.get(m, "") for m in o.group_members]
                self._groups_at[o.stream] = now
        return cmap

    def learn_single(self, via: str) -> ClusterMap:
        """The server at ``via`` has no ``GetClusterMap`` (an older server): a cluster of
        one, every call goes to it."""
        cmap = ClusterMap((ClusterMember(via, via),), 0, via)
        with self._lock:
            self._install(cmap, via)
        return cmap

    def _install(self, cmap: ClusterMap, via: str, *, fresh: bool = True) -> None:
        old = self._incarnations
        self._map = cmap
        self._members = {m.id: m.address for m in cmap.members}
        self._incarnations = {m.id: m.incarnation for m in cmap.members}
        for m in cmap.members:  # a member back with a new process is up again
            if m.incarnation and old.get(m.id, m.incarnation) != m.incarnation:
                self._clear(m.address)
        live = set(self._members.values())
        self._owners = {s: a for s, a in self._owners.items() if a in live}
        for holders in self._groups.values():
            for g, a in enumerate(holders):
                if a and a not in live:
                    holders[g] = ""
        self._fetched_at = self.clock()
        if fresh:
            self._clear(via)
            self._stale = False
            self._last_good = via
        if len(cmap.members) > 1:
            self._clustered = True

    def _clear(self, address: str) -> None:
        """``address`` answered: no longer a suspect."""
        self._down.pop(address, None)
        self._cut.discard(address)
        self._strikes.pop(address, None)

    def redirected(self, stream: str, owner: str) -> None:
        """A server said ``owner`` (an address) owns ``stream``."""
        with self._lock:
            self._set_owner(stream, owner)

    def _set_owner(self, stream: str, address: str) -> None:
        if len(self._owners) >= MAX_OWNERS and stream not in self._owners:
            self._owners.clear()
        self._owners[stream] = address

    def forget(self, stream: str) -> None:
        """``stream``'s owner is no longer known (it moves)."""
        with self._lock:
            self._owners.pop(stream, None)
            self._stale = True

    def answered(self, address: str) -> None:
        """The server at ``address`` answered a call."""
        with self._lock:
            self._last_good = address
            self._clear(address)

    def failed(self, address: str, *, unreachable: bool = True) -> None:
        """The server at ``address`` failed a call (UNAVAILABLE, DEADLINE_EXCEEDED): a
        suspect for a lease (at least a second; doubled each time it fails again after its
        suspicion ran out, up to 8 times), left out of placement and asked for the map last;
        ``unreachable``: it did not answer at all (the calls for its streams are forwarded
        through another member meanwhile, :meth:`way`). The map is asked again before the
        next call."""
        with self._lock:
            now = self.clock()
            lease = (self._map.lease_ms / 1000) if self._map is not None else 0.0
            strikes = self._strikes.get(address, 0)
            if not self._is_down(address, now):
                strikes += 1
                self._strikes[address] = strikes
            until = now + max(1.0, lease) * 2 ** min(strikes - 1, MAX_DOUBLINGS)
            self._down[address] = max(until, self._down.get(address, until))
            if unreachable:
                self._cut.add(address)
            if self._last_good == address:
                self._last_good = None
            self._stale = True

    def introduce(self, addresses: Sequence[str]) -> None:
        """Members a cut-off member named (``MEMBER_ISOLATED``): asked for the map after
        the others."""
        with self._lock:
            for a in addresses:
                a = a.strip()
                if a and a not in self._hints and a not in self.seeds:
                    self._hints.append(a)
            del self._hints[:-MAX_HINTS]

    def fetch_failed(self) -> None:
        """No candidate answered for the map: keep the one held (if any) until the next try."""
        with self._lock:
            self._stale = True

    def owners(self) -> dict[str, str]:
        """A copy of the owners known (stream -> address)."""
        with self._lock:
            return dict(self._owners)

    # -- key groups of keyed streams
    def holders(self, stream: str, *, fresh: bool = True) -> tuple[str, ...] | None:
        """The address of each key group's holder of ``stream`` ("" where none is known),
        indexed by group; ``()`` when its groups are not owned apart (an unkeyed stream, a
        server alone, a server without group ownership); None when not known: never asked,
        or, with ``fresh``, due to be asked again (``GetClusterMap``): asked more than
        ``refresh_interval`` seconds ago, or (some group without a holder: it moves, or a
        new stream's groups are being taken) more than a quarter lease ago."""
        with self._lock:
            holders = self._groups.get(stream)
            if holders is None or not fresh:
                return None if holders is None else tuple(holders)
            age = self.clock() - self._groups_at.get(stream, -math.inf)
            if age >= self.refresh_interval:
                return None
            if "" in holders and age >= self._gap_retry():
                return None
            return tuple(holders)

    def _gap_retry(self) -> float:
        """Seconds before holders with a gap are asked again: a quarter lease, at least
        :data:`MIN_GAP_RETRY` (a move progresses at the pace of the renewals)."""
        lease = self._map.lease_ms / 1000 if self._map is not None else 0.0
        return max(MIN_GAP_RETRY, lease / 4)

    def holder(self, stream: str, group: int) -> str:
        """The address of the holder of ``group`` of ``stream`` ("" when none is known)."""
        with self._lock:
            holders = self._groups.get(stream) or ()
            return holders[group] if 0 <= group < len(holders) else ""

    def group_way(self, stream: str, group: int) -> str:
        """Where a call about key group ``group`` of ``stream`` goes: its holder unless that
        one is a suspect, else where placement puts the unit ``"stream#group"`` among the
        live members that are not suspects (all of them when every one is), else where the
        stream's calls go (:meth:`route`). No relay: a holder cut off from this client is
        waited for (its groups move when it is really gone)."""
        with self._lock:
            now = self.clock()
            holders = self._groups.get(stream) or ()
            holder = holders[group] if 0 <= group < len(holders) else ""
            if holder and not self._is_down(holder, now):
                return holder
            if self._members:
                up = [m for m, a in self._members.items() if not self._is_down(a, now)]
                chosen = place(group_unit(stream, group), up or self._members)
                assert chosen is not None
                return self._members[chosen]
        return self.route(stream)

    def group_redirected(self, stream: str, group: int, owner: str) -> None:
        """A server said ``owner`` (an address) holds key group ``group`` of ``stream``
        (nothing is noted for a stream whose group holders are not known)."""
        with self._lock:
            holders = self._groups.get(stream)
            if holders is not None and 0 <= group < len(holders):
                holders[group] = owner

    def forget_group(self, stream: str, group: int) -> None:
        """Key group ``group`` of ``stream`` has no holder known now (it moves)."""
        with self._lock:
            holders = self._groups.get(stream)
            if holders is not None and 0 <= group < len(holders):
                holders[group] = ""
            self._stale = True

    def forget_groups(self, stream: str) -> None:
        """Nothing is known of ``stream``'s group holders (it was deleted)."""
        with self._lock:
            self._groups.pop(stream, None)
            self._groups_at.pop(stream, None)
