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
  forgotten when the owner fails or leaves the map.

A call about stream S goes to S's cached owner, else where placement puts S among the live
members (leaving out members that failed a moment ago), else to a seed. Where that guess is
wrong, the server redirects (``NOT_OWNER``): nothing was done, the client resends at the owner.

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
_WILDCARD_HOSTS = {"0.0.0.0", "::", "[::]", ""}


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
        self._down: dict[str, float] = {}  # address -> until when it is left out (clock)
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

    def is_down(self, address: str) -> bool:
        with self._lock:
            return self._is_down(address, self.clock())

    def _is_down(self, address: str, now: float) -> bool:
        until = self._down.get(address)
        if until is None:
            return False
        if until <= now:
            del self._down[address]
            return False
        return True

    def cached_owner(self, stream: str) -> str | None:
        with self._lock:
            return self._owners.get(stream)

    def route(self, stream: str = "") -> str:
        """Where a call about ``stream`` goes ("" = a call about no stream): its owner, else
        its placement among the live members not failed a moment ago, else a seed."""
        with self._lock:
            now = self.clock()
            if stream:
                owner = self._owners.get(stream)
                if owner is not None and not self._is_down(owner, now):
                    return owner
                if self._members:
                    up = [m for m, a in self._members.items() if not self._is_down(a, now)]
                    chosen = place(stream, up or self._members)
                    assert chosen is not None
                    return self._members[chosen]
            return self._any(now)

    def _any(self, now: float) -> str:
        order = [self._last_good, *self._members.values(), *self.seeds]
        for a in order:
            if a is not None and not self._is_down(a, now):
                return a
        return self._last_good or self.seeds[0]

    def member_addresses(self) -> tuple[str, ...]:
        """Every live member's address (a seed before any map): who ListStreams asks."""
        with self._lock:
            if self._members:
                return tuple(self._members.values())
            return (self._any(self.clock()),)

    def candidates(self) -> list[str]:
        """Whom to ask for the map, in order: the last member that answered, the live
        members, the seeds; those failed a moment ago last."""
        with self._lock:
            now = self.clock()
            order = [self._last_good, *self._members.values(), *self.seeds]
            seen: list[str] = []
            for a in order:
                if a is not None and a not in seen:
                    seen.append(a)
            return sorted(seen, key=lambda a: self._is_down(a, now))  # stable

    # -- what the client learns
    def learn(self, reply: pb.ClusterMap, via: str) -> ClusterMap:
        """Take the map ``reply`` that the member at ``via`` answered."""
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
            self._install(cmap, via)
            by_id = {m.id: m.address for m in cmap.members}
            for o in reply.owners:
                if o.member:
                    self._set_owner(o.stream, by_id.get(o.member) or o.address or o.member)
                else:
                    self._owners.pop(o.stream, None)
        return cmap

    def learn_single(self, via: str) -> ClusterMap:
        """The server at ``via`` has no ``GetClusterMap`` (an older server): a cluster of
        one, every call goes to it."""
        cmap = ClusterMap((ClusterMember(via, via),), 0, via)
        with self._lock:
            self._install(cmap, via)
        return cmap

    def _install(self, cmap: ClusterMap, via: str) -> None:
        old = self._incarnations
        self._map = cmap
        self._members = {m.id: m.address for m in cmap.members}
        self._incarnations = {m.id: m.incarnation for m in cmap.members}
        for m in cmap.members:  # a member back with a new process is up again
            if m.incarnation and old.get(m.id, m.incarnation) != m.incarnation:
                self._down.pop(m.address, None)
        self._down.pop(via, None)
        live = set(self._members.values())
        self._owners = {s: a for s, a in self._owners.items() if a in live}
        self._fetched_at = self.clock()
        self._stale = False
        self._last_good = via
        if len(cmap.members) > 1:
            self._clustered = True

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
            self._down.pop(address, None)

    def failed(self, address: str) -> None:
        """The server at ``address`` could not be reached (or is stopping): leave it out of
        placement for a lease, forget the streams it owned, and refresh the map before the
        next call."""
        with self._lock:
            lease = (self._map.lease_ms / 1000) if self._map is not None else 0.0
            self._down[address] = self.clock() + max(1.0, lease)
            self._owners = {s: a for s, a in self._owners.items() if a != address}
            if self._last_good == address:
                self._last_good = None
            self._stale = True

    def fetch_failed(self) -> None:
        """No candidate answered for the map: keep the one held (if any) until the next try."""
        with self._lock:
            self._stale = True

    def owners(self) -> dict[str, str]:
        """A copy of the owners known (stream -> address)."""
        with self._lock:
            return dict(self._owners)
