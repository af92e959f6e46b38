"""Which streams this server owns (:class:`Ownership`): membership, leases, placement and the
moves between servers.

A server is a **member** of the cluster of every server on its Redis (storage/membership.py, storage/leases.py, storage/fencing.py): it
heartbeats every quarter lease, and each heartbeat answers the live members. A stream is
**placed** by rendezvous hashing over the live members (:func:`mtawindows.v1.placement.place`)
and **owned** under a lease whose fencing token guards every write of its data.

- A call about a stream this server does not own (:meth:`Ownership.route`) is answered with the
  owner (``NOT_OWNER``: the lease holder, or the member the stream is placed on when nobody
  holds it), or, when the stream is placed here and free, opens it here (:meth:`adopt`: take the
  lease, load it from Redis). A stream whose holder died waits for the lease to run out:
  ``STREAM_MOVING`` with the time left.
- Every tick renews the leases this server holds (one pipelined round trip); one it lost (a
  newer owner's token in the fence) is dropped at once, nothing written. Between renewals a
  stream is served only while its local lease deadline (the renewal's send time plus 80% of the
  lease) has not passed, so a server that was paused past its lease renews (and finds out)
  before it serves the stream again.
- **Rebalancing** (each tick): a stream owned here but now placed on another live member is
  released (a last flush, then the lease); a stream placed here that nobody holds is adopted.
  Moving a stream costs its local state only (tails, heads, caches): the rest is in Redis.
- **Key groups.** Every key group of a keyed stream is a unit of its own, ``"<stream>#<g>"``
  (:func:`mtawindows.v1.keys.group_unit`): placed, leased, fenced, adopted, released and
  rebalanced exactly as a stream is, its lease renewed with the member's other groups of the
  stream in one script (storage/leases.py). The stream's own unit (its name) holds its
  definitions' calls. A call that touches groups asks :meth:`serve_groups` first (from the
  stream, under its calls' lock): fresh groups pass, stale ones renew, free ones placed here
  are adopted on the spot, the others answer ``NOT_OWNER`` naming the group's holder. A
  holder follows the stream's definitions version (read by its renewals) between calls.
"""

from __future__ import annotations

import functools
import gc
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from mtawindows.v1.keys import group_unit, split_unit
from mtawindows.v1.placement import place
from mtawindows.v1.reasons import Reason

from ..storage.fencing import Fence
from ..storage.leases import Lease, Leases
from ..storage.membership import Membership
from ..storage.protocol import StoreError
from ..storage.replication import Waiter
from .keyed import KeyedStream
from .refusals import ServiceError, group_refusal, not_found
from .registry import Registry

__all__ = ["Ownership", "not_owner"]

log = logging.getLogger("mtawindows.cluster")

_SAFE_SHARE = 0.8  # of a lease, counted from its renewal's send time: this server serves it
# of a lease without an answered heartbeat: past it this server counts itself cut off
ISOLATION_SHARE = 0.5


def not_owner(stream: str, member: str, address: str, token: int = 0) -> ServiceError:
    """FAILED_PRECONDITION, ``NOT_OWNER``: call ``address`` for ``stream``."""
    return ServiceError(
        "FAILED_PRECONDITION",
        Reason.NOT_OWNER,
        f"stream {stream!r} is served by {address} (member {member}); call it there",
        metadata={"stream": stream, "owner": address, "owner_id": member, "token": str(token)},
    )


def isolated(members: list[str], view_age_ms: int, bound_ms: int) -> ServiceError:
    """UNAVAILABLE, ``MEMBER_ISOLATED``: this server is cut off from the cluster's Redis."""
    return ServiceError(
        "UNAVAILABLE",
        Reason.MEMBER_ISOLATED,
        f"this server has not reached the cluster's Redis for {view_age_ms} ms (more than "
        f"{bound_ms} ms): it serves no stream until it does; call another member",
        metadata={"members": ",".join(members), "view_age_ms": str(view_age_ms)},
    )


def moving(stream: str, retry_after_ms: int, why: str) -> ServiceError:
    """UNAVAILABLE, ``STREAM_MOVING``: no live owner right now; retry after the delay."""
    return ServiceError(
        "UNAVAILABLE",
        Reason.STREAM_MOVING,
        f"stream {stream!r} has no live owner right now ({why}); retry in {retry_after_ms} ms",
        metadata={"stream": stream, "retry_after_ms": str(retry_after_ms)},
    )


class _CollectorClock:
    """Seconds this process spent in the garbage collector's long collections (the
    interpreter stands still then: no heartbeat, no call runs), counted by one callback."""

    def __init__(self) -> None:
        self.total = 0.0
        self._started = 0.0
        gc.callbacks.append(self._on)

    def _on(self, phase: str, info: dict[str, int]) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            self._started = time.monotonic()
        elif self._started:
            self.total += time.monotonic() - self._started
            self._started = 0.0


_COLLECTOR = _CollectorClock()


class Ownership:
    """This server's streams in the cluster (see the module docstring).

    ``member`` is this server's id and ``address`` where clients reach it (both its advertised
    ``host:port``); ``lease_ms`` the lease of a stream's owner. ``serialize(stream, fn)`` runs
    ``fn`` when no call of the stream is in flight (the gRPC layer's per-stream lock); moves
    go through it. ``on_moved(stream, error)`` is told when a stream left this server, with the
    answer its callers get (subscriptions end with it).
    """

    def __init__(
        self,
        registry: Registry,
        *,
        member: str,
        address: str,
        lease_ms: int = 2000,
        wait: Waiter | None = None,
        exclusive: bool = False,
    ) -> None:
        if lease_ms < 200:
            msg = f"lease_ms must be at least 200, got {lease_ms}"
            raise ValueError(msg)
        self.registry = registry
        registry.clustered = True  # a keyed stream's groups come one by one (adopt)
        self.member = member
        self.address = address
        self.lease_ms = int(lease_ms)
        # ordered by start time: of two processes under one member id, the older steps down
        self.incarnation = f"{time.time_ns() // 1_000_000:013d}-{uuid.uuid4().hex[:8]}"
        client = registry.redis
        self.leases = Leases(
            client, registry.prefix, member, self.incarnation, address, self.lease_ms, wait
        )
        # a member is live while its last heartbeat is younger than 3/4 lease (it beats every
        # quarter): one that died is out of placement by the time its leases run out, so its
        # streams go straight to their new members instead of being redirected to it
        self.membership = Membership(
            client, registry.prefix, member, self.incarnation, address, self.lease_ms * 3 // 4
        )
        # the store was just started by this server (the embedded Redis): whoever is recorded
        # in it is dead, so at start-up it takes every stream at once instead of after leases
        self.exclusive = exclusive
        self._forcing = False
        self.fences: dict[str, Fence] = {}  # the streams this server holds
        self.deadlines: dict[str, float] = {}  # stream -> serve it until (monotonic)
        self.lock = threading.RLock()  # adopt / release / drop, one at a time
        self.serialize: Callable[[str, Callable[[], Any]], Any] = lambda _s, fn: fn()
        self.on_moved: Callable[[str, ServiceError], None] = lambda _s, _e: None
        self.usurped = False
        self.on_usurped: Callable[[], None] = lambda: None  # the server stops
        self.interval = self.lease_ms / 4000
        self._unit_names: dict[str, dict[int, str]] = {}  # stream -> group -> its unit's name
        self.moves = 0  # streams released or dropped (metrics, tests)
        self.adopted = 0
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._last_names: list[str] = []
        # when a heartbeat was last answered (monotonic, this server's clock): the age of its
        # view of the cluster; past isolation_ms it counts itself cut off (see isolated())
        self.beat_ok = time.monotonic()
        self.isolation_ms = int(self.lease_ms * ISOLATION_SHARE)
        self._beating = threading.Lock()  # a heartbeat under way
        self.gc_at_beat = _COLLECTOR.total  # the collector's clock when beat_ok was sent
        self.beat_failed = False  # the last heartbeat was not answered

    # -- life cycle
    def start(self) -> None:
        """Join (a first heartbeat), then heartbeat and renew in one thread and rebalance in
        another: a long rebalance (adopting many streams) never delays the heartbeat, or the
        others would think this member dead and take its streams back and forth."""
        if self.exclusive:
            self.membership.reset()
        else:
            self._check_member_id()
        self._beat()  # holds nothing yet
        self._spawn("mtaw-heartbeat", self._heartbeat)
        self._forcing = self.exclusive
        try:
            self.rebalance()
        finally:
            self._forcing = False
        self._spawn("mtaw-rebalance", self.rebalance)

    def _check_member_id(self) -> None:
        """Refuse to start beside a live server with this member id (its advertised address):
        two members of one id would take each other's streams back and forth. An earlier
        process of this id that died (a restart) stops heartbeating within the member TTL:
        wait that long at most."""
        other = self.membership.other_incarnation()
        if other is None or other[1] >= self.lease_ms:
            return
        time.sleep((self.lease_ms - other[1]) / 1000 + self.interval)
        again = self.membership.other_incarnation()
        if again is not None and again[1] < self.lease_ms:
            msg = (
                f"member id {self.member!r} is in use by another live server (incarnation "
                f"{again[0]}, last heartbeat {again[1]} ms ago): give each server its own "
                "--advertise address"
            )
            raise OSError(msg)

    def _spawn(self, name: str, step: Callable[[], None]) -> None:
        t = threading.Thread(target=self._loop, args=(step,), name=name, daemon=True)
        self._threads.append(t)
        t.start()

    def _beat(self) -> None:
        """One heartbeat; its answer refreshes the view (and ends an isolation)."""
        with self._beating:
            self._beat_held()

    def _beat_held(self) -> None:
        sent = time.monotonic()
        collected = _COLLECTOR.total
        try:
            self.membership.beat(sum(1 for n in self.fences if split_unit(n)[1] is None))
        except StoreError:
            self.beat_failed = True
            raise
        self.beat_failed = False
        if sent > self.beat_ok:
            self.beat_ok = sent  # the view is as old as the request that read it
            self.gc_at_beat = collected

    def paused(self) -> bool:
        """Whether a stale view may come of a pause of this process rather than of the store
        (a long garbage collection, a stall): the last heartbeat was answered and none is
        under way. A heartbeat right now (:meth:`beat_now`) then tells."""
        return not self.beat_failed and not self._beating.locked()

    def beat_now(self) -> bool:
        """After a pause (:meth:`paused`): one heartbeat now, on the caller's thread (never
        the event loop's), unless one is under way. Whether this server is connected again.
        A store that does not answer is found by the heartbeat already under way (the gate
        is closed) or that failed (it stays closed until one is answered)."""
        if not self.paused() or self._stop.is_set():
            return False
        if not self._beating.acquire(blocking=False):
            return False
        try:
            self._beat_held()
        except StoreError:
            return False
        finally:
            self._beating.release()
        return not self.isolated()

    def view_age_ms(self) -> int:
        """Milliseconds, by this server's clock, since its last answered heartbeat was sent,
        but the time the process stood still in full garbage collections since then (a
        million keys' states take a second or more: no heartbeat could be sent, and the
        store did not go away). What the process serves meanwhile is still bounded by its
        leases (:meth:`fresh`, by the plain clock) and their fences."""
        stood = _COLLECTOR.total - self.gc_at_beat
        return int((time.monotonic() - self.beat_ok - stood) * 1000)

    def isolated(self) -> bool:
        """Whether this server is cut off: no heartbeat answered for more than half a lease.
        It then serves no stream (the others are about to take its streams, and its leases
        run out within the lease), reports the age of its view, and is NOT_SERVING."""
        return self.view_age_ms() > self.isolation_ms

    def isolation(self) -> ServiceError:
        """The answer of a cut-off server: MEMBER_ISOLATED with the members it last knew."""
        members = sorted(m.address for m in self.membership.members.values() if m.id != self.member)
        return isolated(members, self.view_age_ms(), self.isolation_ms)

    def _heartbeat(self) -> None:
        self._beat()
        rival = self.membership.rival
        if rival is not None and rival[0] > self.incarnation and not self.usurped:
            # a newer process took this member id (this one was paused past its heartbeat,
            # or two servers share an --advertise): this one steps down, writing nothing
            self.usurped = True
            log.error(
                "member id %s is used by a newer server (incarnation %s): this one (%s) stops",
                self.member,
                rival[0],
                self.incarnation,
            )
            self._stop.set()
            for name in list(self.fences):
                self.lost(name, self.fences.get(name))
            self.on_usurped()
            return
        self.renew()

    def stop(self, *, release: bool = True) -> None:
        """Stop ticking; with ``release`` let every stream go (flushed) and leave the cluster,
        so the others take the streams at once instead of after the lease."""
        t0 = time.monotonic()
        self._stop.set()
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(timeout=10)
        if not release or self.usurped:  # a usurped member leaves its id to the newer one
            return
        stopped = time.monotonic() - t0
        # out of the members first: the others place its streams and key groups on themselves
        # at once and take each as soon as it is released here (not after all of them)
        try:
            self.membership.beat(0, leave=True)
        except StoreError:  # pragma: no cover - the member times out instead
            log.warning("could not leave the cluster: it forgets this member after its TTL")
        try:  # a fresh lease for the hand-over (no tick renews it from here on)
            self.renew()
        except StoreError:
            log.warning("could not renew the leases before handing the streams over")
        # a keyed stream's groups go together, one last flush for all: well within the lease
        # (no tick renews it any more: one group after the other, the last ones would run
        # out and be taken before their flush, which their new holder's fence then refuses)
        groups: dict[str, list[str]] = {}
        for name in list(self.fences):
            stream, group = split_unit(name)
            if stream in self.registry.abandoned:  # a batch still runs: its lease runs out
                continue
            if group is not None:
                groups.setdefault(stream, []).append(name)
                continue
            try:
                self.release(name)
            except Exception:  # pragma: no cover - logged; the lease runs out instead
                log.exception("releasing stream %s at shutdown", name)
        streams = time.monotonic() - t0
        for stream, units in groups.items():
            try:
                self.release_groups(units)
            except Exception:  # pragma: no cover - logged; the leases run out instead
                log.exception("releasing the key groups of stream %s at shutdown", stream)
        log.info(
            "left the cluster in %.3f s (its ticks stopped after %.3f s, its streams released "
            "after %.3f s, then its key groups)",
            time.monotonic() - t0,
            stopped,
            streams,
        )

    def _loop(self, step: Callable[[], None]) -> None:
        while not self._stop.wait(self.interval):
            try:
                step()
            except StoreError as ex:
                log.warning("cluster tick failed: %s", ex)
            except Exception:  # pragma: no cover - logged, the next tick tries again
                log.exception("cluster tick failed")

    def tick(self) -> None:
        """Heartbeat, renew the leases held, rebalance."""
        self._beat()
        self.renew()
        self.rebalance()

    # -- leases
    def renew(self, names: list[str] | None = None) -> None:
        """Renew the leases held (or those of ``names``); drop the streams whose lease is lost.
        Never waits for :attr:`lock` but to drop one (a call may hold it while it adopts a key
        group over Redis round trips: the heartbeat must not wait behind it)."""
        snapshot = dict(self.fences)  # one step under the GIL: no lock needed to read it
        fences = {n: snapshot[n] for n in (names or list(snapshot)) if n in snapshot}
        if not fences:
            return
        sent = time.monotonic()
        held = self.leases.renew(fences)
        for name, ok in held.items():
            if self.fences.get(name) is not fences[name]:
                continue  # moved meanwhile (released, or adopted again with a new token)
            if ok:
                # serving also needs the name held (fresh()): a deadline left behind by a
                # release that raced this renewal serves nothing
                self.deadlines[name] = self._serve_until(sent)
                continue
            log.warning("lost the lease of stream %s: another server owns it", name)
            self.lost(name, fences[name])

    def _serve_until(self, sent: float) -> float:
        """Until when a lease taken or renewed by a request sent at ``sent`` may be served."""
        return sent + self.lease_ms * _SAFE_SHARE / 1000

    def _hold(self, name: str, token: int, sent: float) -> Fence:
        """Record the lease of ``name`` just taken under ``token``; its fence."""
        fence = self.leases.fence(name, token)
        self.fences[name] = fence
        self.deadlines[name] = self._serve_until(sent)
        return fence

    def fresh(self, name: str) -> bool:
        """Whether this server may serve ``name`` now without asking Redis."""
        return time.monotonic() < self.deadlines.get(name, 0.0) and name in self.fences

    def live(self) -> list[str]:
        """The ids of the live members as last seen (this one always among them), sorted."""
        return sorted({*self.membership.members, self.member})

    def placed(self, name: str) -> str:
        """The member stream ``name`` is placed on."""
        return place(name, self.live()) or self.member

    # -- moves
    def adopt(self, name: str, why: str = "placed here") -> Any:
        """Take ``name``'s lease and open it here: the Stream, or None when another member
        holds the lease or there is no such stream (the lease is then let go)."""
        with self.lock:
            s = self.registry.held(name)
            if s is not None and name in self.fences:
                return s
            sent = time.monotonic()
            ours, _other = self.leases.acquire(name, force=self._forcing)
            if ours is None:
                return None
            fence = self._hold(name, ours.token, sent)
            try:
                s = self.registry.adopt(name, fence)
            except BaseException:
                self._let_go(name, fence)
                raise
            if s is None:
                self._let_go(name, fence)
                return None
            self.adopted += 1
            log.info(
                "stream %s adopted (token %d): %s",
                name,
                fence.token,
                why,
                extra={"stream": name, "members": self.live()},
            )
            return s

    def adopt_groups(self, units: list[str], why: str = "placed here") -> list[str]:
        """Take the leases of key-group units of **one** stream and open them here together:
        two pipelined round trips for the leases and one for the groups' state (a member
        taking many groups at once, as when it joins or another leaves, does one round of
        Redis work, not one per group). The units held here now (those another member holds
        are left to it)."""
        if not units:
            return []
        stream = split_unit(units[0])[0]
        with self.lock:
            held = [u for u in units if u in self.fences and self.registry.held(u) is not None]
            todo = [u for u in units if u not in held]
            if not todo:
                return held
            sent = time.monotonic()
            taken: dict[int, Fence] = {}
            for unit, (ours, _other) in zip(
                todo, self.leases.acquire_groups(todo, force=self._forcing), strict=True
            ):
                if ours is not None:
                    taken[int(split_unit(unit)[1] or 0)] = self._hold(unit, ours.token, sent)
            if not taken:
                return held
            try:
                s = self.registry.adopt_groups(stream, taken)
            except BaseException:
                self._let_go_groups(stream, taken)
                raise
            if s is None:
                self._let_go_groups(stream, taken)
                return held
            self.adopted += len(taken)
            took = time.monotonic() - sent
            log.info(
                "%d key groups of stream %s adopted in %.3f s: %s",
                len(taken),
                stream,
                took,
                why,
                extra={
                    "stream": stream,
                    "groups": sorted(taken),
                    "members": self.live(),
                    "seconds": round(took, 3),
                },
            )
            return held + [group_unit(stream, g) for g in taken]

    def release_groups(self, units: list[str]) -> None:
        """:meth:`release` of key-group units of one stream: one last flush for all of them,
        their leases let go in one round trip, their callers sent to the new holders."""
        if not units:
            return
        stream = split_unit(units[0])[0]

        took: list[float] = []  # the last flush, the leases let go

        def go() -> None:
            with self.lock:
                fences = {int(split_unit(u)[1] or 0): f for u in units if (f := self.fences.get(u))}
                if not fences:
                    return
                t0 = time.monotonic()
                self.registry.release_groups(stream, fences)
                took.append(time.monotonic() - t0)
                self._let_go_groups(stream, fences)
                took.append(time.monotonic() - t0)
                self.moves += len(fences)

        self.serialize(stream, go)
        for unit in units:
            self.on_moved(unit, self._where(unit))
        self.registry.reap(stream)  # their memory, once their leases are let go
        flushed, total = took or (0.0, 0.0)
        log.info(
            "%d key groups of stream %s released in %.3f s (last flush %.3f s)",
            len(units),
            stream,
            total,
            flushed,
            extra={"stream": stream, "members": self.live(), "seconds": round(total, 3)},
        )

    def _let_go_groups(self, stream: str, fences: Mapping[int, Fence]) -> None:
        held = []
        for g, fence in fences.items():
            unit = group_unit(stream, g)
            self.fences.pop(unit, None)
            self.deadlines.pop(unit, None)
            held.append((unit, fence.token))
        try:
            self.leases.release_groups(held)
        except StoreError:  # the leases run out instead
            log.warning("could not release %d key groups of stream %s", len(held), stream)

    def claim(self, name: str) -> Fence:
        """The lease of a stream about to be created here (CreateStream): NOT_OWNER when
        another member holds it or it is placed on another live member. A stream that exists
        is opened (the caller then finds it there)."""
        s = self.registry.held(name)
        if s is not None and s.fence is not None:
            held: Fence = s.fence
            return held
        self._redirect_unless_here(name)
        with self.lock:
            if self.registry.unit_exists(name):
                s = self.adopt(name, "created here")
                if s is not None and s.fence is not None:
                    fence: Fence = s.fence
                    return fence
                self._redirect_unless_here(name)
            sent = time.monotonic()
            ours, other = self.leases.acquire(name)
            if ours is None:
                raise self._answer(name, other)
            fence = self._hold(name, ours.token, sent)
            return fence

    def created(self, name: str, ok: bool) -> None:
        """After CreateStream under :meth:`claim`'s fence: keep the lease, or let it go."""
        if not ok:
            with self.lock:
                fence = self.fences.get(name)
                if fence is not None and name not in self.registry.streams:
                    self._let_go(name, fence)

    def deleted(self, name: str) -> None:
        """After DeleteStream: the lease goes (the fence key stays: a stream created again
        under this name gets a newer token than any writer of the old one)."""
        with self.lock:
            fence = self.fences.get(name)
            if fence is not None:
                self._let_go(name, fence)
            # a keyed stream's groups held here went with it (their fences moved on): forget
            # them quietly, no "lost" to find at the next renewal
            prefix = group_unit(name, 0)[:-1]
            for unit in [u for u in self.fences if u.startswith(prefix)]:
                if split_unit(unit)[0] == name:
                    self.fences.pop(unit, None)
                    self.deadlines.pop(unit, None)

    def release(self, name: str) -> None:
        """Hand ``name`` over: a last flush, the lease let go, callers sent to the new owner."""

        def go() -> None:
            with self.lock:
                fence = self.fences.get(name)
                if fence is None:
                    return
                self.registry.release(name)
                self._let_go(name, fence)
                self.moves += 1

        self.serialize(name, go)
        self.on_moved(name, self._where(name))
        self.registry.reap(split_unit(name)[0])  # a group's memory, once its lease is let go
        log.info("stream %s released", name, extra={"stream": name, "members": self.live()})

    def lost(self, name: str, fence: Fence | None = None) -> ServiceError:
        """``name``'s lease was lost (a refused write, a failed renewal of ``fence``): forget
        the stream without writing; returns the answer its callers get. A stream this server
        holds under another, unrefused token by now (it moved back here meanwhile) stays."""
        # a keyed stream's unit is dropped outside this lock: a call holding the stream's lock
        # may be waiting for it (it adopts the groups it meets, Ownership.serve_groups)
        keyed = split_unit(name)[1] is not None or isinstance(
            self.registry.streams.get(name), KeyedStream
        )
        with self.lock:
            current = self.fences.get(name)
            if current is not None and (current is not fence if fence else not current.lost):
                return moving(name, 50, "it moved back to this server meanwhile")
            had = self.fences.pop(name, None)
            self.deadlines.pop(name, None)
            if not keyed:
                self.registry.drop(name)
            if had is not None:
                self.moves += 1
        if keyed:
            self.registry.drop(name, had)  # only what it held under that fence
            self.registry.reap(split_unit(name)[0])
        answer = self._where(name)
        if had is not None:
            self.on_moved(name, answer)
        return answer

    def _let_go(self, name: str, fence: Fence) -> None:
        self.fences.pop(name, None)
        self.deadlines.pop(name, None)
        try:
            self.leases.release(name, fence.token)
        except StoreError:  # the lease runs out instead
            log.warning("could not release the lease of stream %s", name)

    def rebalance(self) -> None:
        """Release the streams placed elsewhere now; adopt the free ones placed here."""
        live = self.live()
        going: dict[str, list[str]] = {}  # key groups to hand over, by stream: together
        for name in list(self.fences):
            target = place(name, live)
            if target is not None and target != self.member:
                stream, group = split_unit(name)
                if group is None:
                    self.release(name)
                else:
                    going.setdefault(stream, []).append(name)
        for units in going.values():
            self.release_groups(units)
        try:
            names = self.registry.units()
        except Exception as ex:
            log.warning("could not list the streams: %s", ex)
            return
        self._last_names = names
        self._sync_definitions()
        mine = [n for n in names if n not in self.fences and place(n, live) == self.member]
        if mine:
            groups: dict[str, list[str]] = {}  # key groups to take, by stream: together
            for name, holder in zip(mine, self.leases.holders(mine), strict=True):
                if holder is not None and holder.member != self.member and not self._forcing:
                    continue  # the holder lets it go (or its lease runs out)
                stream, group = split_unit(name)
                if group is not None:
                    groups.setdefault(stream, []).append(name)
                    continue
                try:
                    self.adopt(name)
                except (StoreError, ServiceError) as ex:
                    log.warning("could not adopt stream %s: %s", name, ex)
            for stream, units in groups.items():
                try:  # between the calls of its stream (they may adopt groups too)
                    self.serialize(stream, functools.partial(self.adopt_groups, units))
                except (StoreError, ServiceError) as ex:
                    log.warning("could not adopt key groups of stream %s: %s", stream, ex)
        # its subscribers go where its keys are
        for name in self.registry.prune(self.fences, self.serialize):
            self.on_moved(name, self._where(name))

    def _sync_definitions(self) -> None:
        """A keyed stream's windows changed on its owner (its definitions version, as the
        renewal of its groups read it, moved on): every holder of its groups follows, between
        the stream's calls."""
        for name, version in list(self.leases.versions.items()):
            s = self.registry.streams.get(name)
            if not isinstance(s, KeyedStream) or s.defs_version >= version:
                continue
            self.serialize(name, functools.partial(self.registry.sync_definitions, {name: version}))

    # -- routing
    def route(self, name: str) -> Any:
        """The stream ``name`` if this server may serve it now (renewing or adopting it when
        needed), else raise where it is (NOT_OWNER, STREAM_MOVING) or that it does not exist.
        A cut-off server (:meth:`isolated`) serves nothing: MEMBER_ISOLATED."""
        if self.isolated() and not self.beat_now():
            raise self.isolation()
        s = self.registry.held(name)
        if s is not None and name in self.fences:
            if self.fresh(name):
                return s
            self.renew([name])  # a paused server finds out here before it serves again
            if self.fresh(name):
                return s
        self._redirect_unless_here(name)
        if not self.registry.unit_exists(name):
            raise not_found(Reason.STREAM_NOT_FOUND, f"no stream named {name!r}", stream=name)
        s = self.adopt(name, "a call came")
        if s is None:
            holder = self.leases.holder(name)
            if holder is None and not self.registry.unit_exists(name):
                raise not_found(Reason.STREAM_NOT_FOUND, f"no stream named {name!r}", stream=name)
            raise self._answer(name, holder)
        return s

    def _redirect_unless_here(self, name: str) -> None:
        """Raise where ``name`` is when it is not (to be) here: its holder's address, or the
        live member it is placed on when nobody holds it."""
        holder = self.leases.holder(name)
        if holder is not None and holder.member != self.member:
            raise self._answer(name, holder)
        # free, or still ours while this server lets it go: where placement puts it (a call
        # must not take back a stream this server is handing over)
        elsewhere = self._placed_elsewhere(name)
        if elsewhere is None:
            return
        if holder is not None:
            # the lease still names this server (its last flush is under way, or a release
            # failed and the lease runs out): the new member would send the call straight
            # back here, so the caller waits for the hand-over instead of going round
            raise moving(
                name,
                max(50, min(holder.ttl_ms or self.lease_ms, self.lease_ms // 4)),
                f"it is being handed over to {elsewhere.metadata.get('owner', '?')}",
            )
        raise elsewhere

    def _answer(self, name: str, holder: Lease | None) -> ServiceError:
        """Where ``name`` is, for a caller: its live holder (NOT_OWNER), or STREAM_MOVING."""
        if holder is None:
            return moving(name, 100, "its lease was just let go")
        if holder.member == self.member:
            # ours by its lease but not open here (being opened, or let go, at this moment):
            # never send a caller back to this very server
            return moving(name, 100, "it is being opened or let go here")
        if holder.member in self.membership.members:
            return not_owner(name, holder.member, holder.address, holder.token)
        wait = max(50, min(holder.ttl_ms or self.lease_ms, self.lease_ms))
        return moving(name, wait, f"its owner {holder.address} stopped heartbeating")

    def _where(self, name: str) -> ServiceError:
        """The answer for a stream that just left this server."""
        try:
            holder = self.leases.holder(name)
        except StoreError:
            holder = None
        if holder is not None and holder.member != self.member:
            return self._answer(name, holder)
        return self._placed_elsewhere(name) or moving(name, 100, "it is being handed over")

    def _placed_elsewhere(self, name: str) -> ServiceError | None:
        """NOT_OWNER naming the member ``name`` is placed on, when that is not this one."""
        target = self.placed(name)
        if target == self.member:
            return None
        member = self.membership.members.get(target)
        return not_owner(name, target, member.address if member is not None else target)

    # -- key groups
    def serve_groups(self, stream: str, groups: Iterable[int]) -> None:
        """Whether this server may serve key groups ``groups`` of keyed stream ``stream`` now
        (called by the stream, under its calls' lock, with every group a call touches):
        renewed when their lease's serving time ran out, adopted when placed here and free;
        else NOT_OWNER naming the group's holder, or STREAM_MOVING (nothing was done)."""
        if self.isolated() and not self.beat_now():
            raise self.isolation()
        names = self._unit_names.get(stream)
        if names is None:
            if len(self._unit_names) >= 1024:  # (streams deleted meanwhile: kept bounded)
                self._unit_names.clear()
            names = self._unit_names[stream] = {}
        stale = []
        for g in groups:  # (a batch names up to every group of its stream: names kept)
            unit = names.get(g)
            if unit is None:
                unit = names[g] = group_unit(stream, g)
            if not self.fresh(unit):
                stale.append(g)
        if not stale:
            return
        if len(stale) > 1:
            self._take_groups(stream, stale)
        for g in stale:
            unit = group_unit(stream, g)
            if self.fresh(unit):
                continue
            try:
                self.route(unit)
            except ServiceError as ex:
                raise group_refusal(ex, stream, g) from None

    def _take_groups(self, stream: str, stale: list[int]) -> None:
        """Before a call's groups are routed one by one: renew those held here together, and
        adopt together those free and placed here (a call that meets many groups being handed
        over to this member takes them in one round of Redis work, not one per group)."""
        units = [group_unit(stream, g) for g in stale]
        ours = [u for u in units if u in self.fences]
        if ours:
            self.renew(ours)
        rest = [u for u in units if not self.fresh(u)]
        if len(rest) < 2:
            return
        try:
            holders = self.leases.holders(rest)
        except StoreError:
            return  # each is routed on its own, and refused as its own
        free = [
            u
            for u, h in zip(rest, holders, strict=True)
            if (h is None or h.member == self.member) and self.placed(u) == self.member
        ]
        if len(free) > 1 and self.registry.unit_exists(stream):
            self.adopt_groups(free, "a call came")

    def group_members(self, stream: str) -> list[str]:
        """The member holding each key group of ``stream`` ("" for none live); [] for a stream
        without a key."""
        n = self.registry.definitions.key_groups().get(stream, 0)
        if not n:
            return []
        live = set(self.membership.members) | {self.member}
        return [
            lease.member if lease is not None and lease.member in live else ""
            for lease in self.leases.group_holders(stream, n)
        ]

    def owner_of(self, name: str) -> tuple[str, str, int]:
        """(member, address, token) of ``name``'s live owner; ("", "", 0) when none."""
        holder = self.leases.holder(name)
        if holder is None or (
            holder.member != self.member and holder.member not in self.membership.members
        ):
            return "", "", 0
        return holder.member, holder.address, holder.token
