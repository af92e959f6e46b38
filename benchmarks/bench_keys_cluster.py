"""Keyed streams on a cluster (issue: ownership by key group): moves, kill -9, idle cost.

    python benchmarks/bench_keys_cluster.py            # 1,000,000 keys (< 10 minutes, 2 cores)
    python benchmarks/bench_keys_cluster.py --quick    # 20,000 keys (< 90 s): smoke test, CI
    python benchmarks/bench_keys_cluster.py --keep     # keep the servers' logs (printed path)

A :class:`~mtawindows.testing.LocalCluster` of 3 ``mtawindows serve`` processes (``--lease-ms
1000``, ``--flush-interval 1``) on one embedded Redis (valkey, its default AOF ``appendfsync
always``). One keyed stream ``hosts`` (``host`` STRING key, ``x`` DOUBLE, ``--groups`` key
groups, default 256), one durable window ``w``: count + sum + max of ``x`` over a count policy
that keeps every row. Each group ``hosts#g`` is placed, leased and moved on its own; every call
below is a raw stub call at the group's holder as ``GetClusterMap(streams=["hosts"])`` names it
(``owners[0].group_members``; "" while a group moves: where placement puts it), refused rows
(NOT_OWNER, STREAM_MOVING: nothing applied) split again by the map read again and sent again.

0. The stream is created on the 3 members, the **idle** cost measured with no keys (3.), then
   the third member leaves (SIGTERM): the ingest runs on 2.
1. **ingest**: ``--keys`` keys x 2 rows, 10,000-row batches (pass p appends row p of every
   key, keys in order), each split by group holder, the parts sent concurrently, two batches
   in flight. Rows acknowledged per second (no target: the load the moves are made under).
2. **join / leave**: a **probe** appends, round after round, one row to one probe key of every
   group, at the holder the map names, and records when each group took a row (and where).
   A round of single-row Appends to 256 groups takes 0.5-1 s on 2 busy cores (each is a
   durable Append), far too coarse for a 1 s target, so the probe batches: one worker per
   member the map routes groups to (``--probe-threads`` per member), each sending one Append
   with a row for every group routed to it, every 50 ms at most; a refusal names one group:
   that group goes alone to the owner named (NOT_OWNER) and the rest is split again by a fresh
   map (as the SDK does). A member slow to answer holds up only its own groups. Then the third
   member starts (join: the groups placed on it move to it), or a member is stopped with
   SIGTERM (leave: it hands its groups over). A group's **unavailability** is the longest gap
   between two of its acknowledged probe rows from the action to the end (the map settled on
   the placement, then 1.5 s more): p50 / p99 / max over the groups that moved (target: every
   group under 1 s), beside the longest gap of the groups that did not move (a stall of their
   members, or of the machine) and the probe's median round (its resolution). The notes place
   the action in wall-clock UTC (the servers' logs' clock), with the slowest probe calls and
   the longest gaps relative to it.
3. **idle**: no calls, a flush interval after the last: Redis commands/s (INFO
   ``total_commands_processed``, the commands of the members' scripts included, over
   ``--idle-s``, default 10 s), EVALSHA calls/s, Redis and member CPU; with no keys (0.) and
   on the 3 members after the ingest and the join: the heartbeats and group lease renewals do
   not grow with keys (target: with the keys < 1.1 x without).
4. **kill -9**: the member that left comes back (3 members); ``--durable-keys`` of the
   ingested keys take a third acknowledged row (the model: every acknowledged row of every
   key), the probe runs, and the moment the last part is acknowledged one member is killed
   with SIGKILL. Time from the kill to the first append to a group the dead member held served
   by another member (target < 5 s; and to the last of those groups), the unavailability of
   its groups, then every durable key, every probe key and 1,000 other keys queried at their
   groups' new holders against the model: acknowledged rows lost (target 0; a probe row whose
   call died with its member may be there or not).

Every phase is bounded in time (a phase past its bound ends the run with an error, after the
figures so far are written); the servers and Redis stop on exit, whatever happens.
Writes benchmarks/results/keys-cluster.{csv,md,png} and keys-cluster-samples.csv
(``--quick``: keys-cluster-quick.*; ``--out`` another folder).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import redis

sys.path.insert(0, str(Path(__file__).parent))
from bench_cluster import Report, cpu_seconds, load_average, quantile, write

from mtawindows.client.errors import from_rpc_error
from mtawindows.testing import LocalCluster
from mtawindows.v1 import convert
from mtawindows.v1 import windows_pb2 as pb
from mtawindows.v1 import windows_pb2_grpc as pb_grpc
from mtawindows.v1.keys import DEFAULT_KEY_GROUPS, group_unit, key_group, key_groups
from mtawindows.v1.placement import place
from mtawindows.v1.types import Aggregation, Field, Policy, Storage, StreamSpec, WindowSpec

OUT = Path(__file__).resolve().parent / "results"
STREAM = "hosts"
BATCH = 10_000
ROWS_PER_KEY = 2  # ingest passes; the durable keys take a third row
LEASE_MS = 1000
FLUSH_S = 1.0
TAIL_S = 1.5  # the probe runs on this long after the map settled
SETTLE_S = 60.0  # bound of a wait for the map to settle on the placement
PROBE_ROUND_S = 0.05  # a probe worker's round at most this often: the probe's resolution
SLOW_CALL_S = 0.25  # a probe call this long is noted (when, where)
VERIFY_SAMPLE = 1000  # ingested keys (beyond the durable ones) checked after the kill
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", 1 << 30),
    ("grpc.max_receive_message_length", 1 << 30),
    # a member restarted on its port is dialled again at once, not after a backoff of seconds
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 500),
]
REFUSED = ("NOT_OWNER", "STREAM_MOVING")  # nothing applied: send the rows again
# a member cut off from Redis (no heartbeat answered for half a lease) refuses every call
# before doing anything: send again (elsewhere, or once it is back)
ISOLATED = "MEMBER_ISOLATED"


def key_of(i: int) -> str:
    return f"host-{i:07d}"


def value_of(i: int, p: int) -> float:
    return float((i * 7 + p * 13) % 101)


class PhaseTimeout(TimeoutError):
    """A phase ran past its bound."""


class Deadline:
    """A phase's bound: ``check()`` raises :class:`PhaseTimeout` naming it once passed."""

    def __init__(self, what: str, seconds: float) -> None:
        self.what = what
        self.seconds = seconds
        self.at = time.monotonic() + seconds

    def left(self) -> float:
        return self.at - time.monotonic()

    def check(self) -> None:
        if time.monotonic() > self.at:
            msg = f"{self.what}: not done within {self.seconds:.0f}s"
            raise PhaseTimeout(msg)


# --------------------------------------------------------------------------- routing
class Router:
    """The client's view of the cluster: a channel per member, and the holder of every key
    group as the latest ``GetClusterMap(streams=[STREAM])`` says (re-read at most every
    ``min_age`` seconds however many threads ask)."""

    def __init__(self, cluster: LocalCluster, groups: int) -> None:
        self.cluster = cluster
        self.groups = groups
        self.holders: list[str] = [""] * groups
        self.members: list[str] = []
        self.read_at = 0.0
        self.reads = 0
        self._lock = threading.Lock()
        self._reading = threading.Lock()
        self._channels: dict[str, grpc.Channel] = {}

    def stub(self, target: str) -> pb_grpc.WindowServiceStub:
        with self._lock:
            ch = self._channels.get(target)
            if ch is None:
                ch = self._channels[target] = grpc.insecure_channel(target, CHANNEL_OPTIONS)
        return pb_grpc.WindowServiceStub(ch)

    def refresh(self, min_age: float = 0.02, *, wait: bool = False) -> list[str]:
        """Read the map again (unless it was read in the last ``min_age`` s, or another
        thread is reading it and not ``wait``); the holders."""
        if time.monotonic() - self.read_at < min_age:
            return self.holders
        if not self._reading.acquire(blocking=wait):
            return self.holders
        try:
            for srv in self.cluster.live:
                try:
                    req = pb.GetClusterMapRequest(streams=[STREAM])
                    m = self.stub(srv.target).GetClusterMap(req, timeout=5)
                except grpc.RpcError:
                    continue
                got = list(m.owners[0].group_members)
                if len(got) == self.groups:
                    self.holders = got
                    self.members = [x.address for x in m.members]
                    self.read_at = time.monotonic()
                    self.reads += 1
                    break
        finally:
            self._reading.release()
        return self.holders

    def target_of(self, g: int) -> str:
        """Where group ``g``'s rows go: its holder, else (moving) where placement puts it."""
        h = self.holders[g]
        if h:
            return h
        ids = self.members or [s.target for s in self.cluster.live]
        return place(group_unit(STREAM, g), ids) or ids[0]

    def wait_placed(self, deadline: Deadline) -> float:
        """Until every group is held where placement puts it among the live members;
        the seconds it took."""
        t0 = time.monotonic()
        while True:
            ids = sorted(s.target for s in self.cluster.live)
            want = [place(group_unit(STREAM, g), ids) for g in range(self.groups)]
            got = self.refresh(0.0, wait=True)
            if got == want and sorted(self.members) == ids:
                return time.monotonic() - t0
            if time.monotonic() > deadline.at:
                held = {t: got.count(t) for t in set(got)}
                msg = f"{deadline.what}: the groups did not settle within {deadline.seconds:.0f}s (held: {held})"  # fmt: skip
                raise PhaseTimeout(msg)
            time.sleep(0.05)

    def close(self) -> None:
        with self._lock:
            for ch in self._channels.values():
                ch.close()
            self._channels.clear()


def append_request(keys: Sequence[str], ts: Sequence[int], xs: Sequence[float]) -> pb.AppendRequest:  # fmt: skip
    return pb.AppendRequest(
        stream=STREAM,
        columns=[
            convert.column_to_proto("ts", "INT64", ts),
            convert.column_to_proto("host", "STRING", keys),
            convert.column_to_proto("x", "DOUBLE", xs),
        ],
    )


@dataclass
class Rows:
    """Rows to append: parallel lists (a key, its group, timestamp and value)."""

    keys: list[str]
    groups: list[int]
    ts: list[int]
    xs: list[float]


def deliver(router: Router, rows: Rows, pool: ThreadPoolExecutor, deadline: Deadline) -> int:
    """Append ``rows`` at their groups' holders (one part per holder, the parts concurrent);
    parts refused (NOT_OWNER, STREAM_MOVING: nothing applied) are split again by the map
    read again and sent again. The rows acknowledged (all of them); any other error raises."""

    def send(target: str, idx: list[int]) -> tuple[int, list[int]]:
        req = append_request(
            [rows.keys[i] for i in idx], [rows.ts[i] for i in idx], [rows.xs[i] for i in idx]
        )
        try:
            resp = router.stub(target).Append(req, timeout=max(1.0, min(120.0, deadline.left())))
        except grpc.RpcError as err:
            ex = from_rpc_error(err, target)
            if ex.reason in (*REFUSED, ISOLATED):
                return 0, idx
            raise
        if resp.rows_applied != len(idx):
            msg = f"Append at {target}: {resp.rows_applied} rows applied of {len(idx)}"
            raise RuntimeError(msg)
        return len(idx), []

    pending = list(range(len(rows.keys)))
    done = 0
    while pending:
        parts: dict[str, list[int]] = {}
        for i in pending:
            parts.setdefault(router.target_of(rows.groups[i]), []).append(i)
        futures = [pool.submit(send, t, idx) for t, idx in parts.items()]
        pending = []
        for f in futures:
            n, again = f.result()
            done += n
            pending += again
        if pending:
            deadline.check()
            time.sleep(0.02)
            router.refresh(0.0, wait=True)
    return done


# --------------------------------------------------------------------------- the probe
@dataclass
class ProbeModel:
    """Every probe key's acknowledged rows (each x = 1.0) and the rows whose outcome is not
    known (the call failed without a refusal: the member died during it)."""

    keys: list[str]
    acked: list[int]
    uncertain: list[int]
    last_ts: list[int]

    @classmethod
    def for_groups(cls, groups: int) -> ProbeModel:
        """One key per group (``probe-<j>``, the first j that falls in it)."""
        keys: list[str | None] = [None] * groups
        left, j = groups, 0
        while left:
            k = f"probe-{j}"
            g = key_group(k, groups)
            if keys[g] is None:
                keys[g] = k
                left -= 1
            j += 1
        return cls([k or "" for k in keys], [0] * groups, [0] * groups, [0] * groups)


@dataclass
class Probe:
    """One session of the probe (see the module docstring): ``threads`` workers per member
    the map routes groups to, each appending, round after round, one row to the probe key of
    every group of its share in one Append; ``ok[g]`` the times (monotonic) group g took a
    row."""

    router: Router
    model: ProbeModel
    threads: int
    ok: list[list[float]] = field(default_factory=list)
    by: list[list[str]] = field(default_factory=list)  # the member that took each row
    slow_calls: list[tuple[float, float, str, int, str]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    started: float = 0.0
    stopped: float = 0.0
    _stop: threading.Event = field(default_factory=threading.Event)
    _workers: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _busy: set[int] = field(default_factory=set)  # groups a worker is sending now

    def __post_init__(self) -> None:
        self.ok = [[] for _ in self.model.keys]
        self.by = [[] for _ in self.model.keys]

    def _slow(self, t0: float, target: str, groups: int, outcome: str) -> None:
        """Note a call that took more than ``SLOW_CALL_S`` (when, where, what came)."""
        took = time.monotonic() - t0
        if took > SLOW_CALL_S:
            with self._lock:
                self.slow_calls.append((took, t0, target, groups, outcome))

    def _count(self, what: str) -> None:
        with self._lock:
            self.counts[what] = self.counts.get(what, 0) + 1

    def _send(self, target: str, gs: list[int], *, follow: bool = True) -> bool:
        """One row for each of groups ``gs``' probe keys at ``target``, in one Append (the
        caller holds the groups: no other worker sends them meanwhile, so each key's rows go
        out in timestamp order). A refusal naming a group (NOT_OWNER, STREAM_MOVING: nothing
        applied) takes that group out (a NOT_OWNER's group goes alone to the owner named, at
        once, once) and the rest, split by a fresh map, is sent again at once; any other
        failure ends the round for them. Whether any took its row."""
        m = self.model
        gs = list(gs)
        took = False
        while gs:
            now = time.time_ns()
            ts = []
            for g in gs:
                m.last_ts[g] = max(m.last_ts[g] + 1, now)
                ts.append(m.last_ts[g])
            req = append_request([m.keys[g] for g in gs], ts, [1.0] * len(gs))
            t0 = time.monotonic()
            try:
                resp = self.router.stub(target).Append(req, timeout=2)
            except grpc.RpcError as err:
                ex = from_rpc_error(err, target)
                self._slow(t0, target, len(gs), ex.reason or ex.code)
                group = ex.metadata.get("group", "")
                if ex.reason in REFUSED and group.isdigit() and int(group) in gs:
                    self._count(ex.reason)
                    g = int(group)
                    owner = ex.metadata.get("owner", "") if ex.reason == "NOT_OWNER" else ""
                    if follow and owner and owner != target:
                        self._count("followed NOT_OWNER")
                        took = self._send(owner, [g], follow=False) or took
                    # the rest split by a fresh map (as the SDK does): a refusal names one
                    # group, the others that moved go to their holders' workers
                    self.router.refresh(0.0, wait=True)
                    gs = [x for x in gs if x != g and self.router.target_of(x) == target]
                    continue
                self.router.refresh()
                if ex.reason == ISOLATED:  # refused before anything was done
                    self._count(ex.reason)
                elif ex.reason in REFUSED:
                    self._count(f"{ex.reason} without a group")
                else:  # a dead member: applied or not, nobody knows
                    self._count(f"{ex.code}/{ex.reason}" if ex.reason else ex.code)
                    for g in gs:
                        m.uncertain[g] += 1
                return took
            t = time.monotonic()
            self._slow(t0, target, len(gs), "ok")
            if resp.rows_applied != len(gs):  # never expected: which ones is not known
                self._count(f"{len(gs) - resp.rows_applied} rows not applied")
                for g in gs:
                    m.uncertain[g] += 1
                return took
            for g in gs:
                m.acked[g] += 1
                self.ok[g].append(t)
                self.by[g].append(target)
            return True
        return took

    def _work(self, target: str, part: int) -> None:
        """A worker of member ``target``: round after round, one Append with a row for each
        group the map routes to it (those ``g % threads == part``)."""
        k = self.threads
        while not self._stop.is_set():
            t0 = time.monotonic()
            mine = [g for g in range(part, len(self.ok), k) if self.router.target_of(g) == target]
            with self._lock:  # a group another worker is sending (its old holder's) waits
                gs = [g for g in mine if g not in self._busy]
                self._busy.update(gs)
            try:
                if gs:
                    self._send(target, gs)
            finally:
                with self._lock:
                    self._busy.difference_update(gs)
            # paced (the probe is a client among others, not a load test); no spin
            self._stop.wait(max(0.0, PROBE_ROUND_S - (time.monotonic() - t0)))

    def _supervise(self) -> None:
        """Re-read the map every 100 ms; a worker for every member the map routes to."""
        running: set[str] = set()
        while not self._stop.is_set():
            self.router.refresh(0.1)
            for target in {self.router.target_of(g) for g in range(len(self.ok))} - running:
                running.add(target)
                for part in range(self.threads):
                    w = threading.Thread(target=self._work, args=(target, part), daemon=True)
                    self._workers.append(w)
                    w.start()
            self._stop.wait(0.02)

    def __enter__(self) -> Probe:
        self.router.refresh(0.0, wait=True)
        self.started = time.monotonic()
        sup = threading.Thread(target=self._supervise, daemon=True)
        self._workers.append(sup)
        sup.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for w in list(self._workers):
            w.join(timeout=10)
        self.stopped = time.monotonic()

    def longest_gap(self, g: int, since: float) -> tuple[float, float, float]:
        """The longest time group g took no row from ``since`` to the end of the session
        (from its last row before ``since``, else the session's start, to its next, and so
        on to the end): (seconds, from, to)."""
        prev = self.started
        worst = (0.0, prev, prev)
        for t in sorted(self.ok[g]):
            if t > since and t - prev > worst[0]:
                worst = (t - prev, prev, t)
            prev = t
        if self.stopped - prev > worst[0]:
            worst = (self.stopped - prev, prev, self.stopped)
        return worst

    def first_after(self, g: int, since: float, other_than: str) -> float | None:
        """Seconds from ``since`` to group g's first row after it taken by a member other
        than ``other_than`` (None: none)."""
        return next(
            (
                t - since
                for t, m in sorted(zip(self.ok[g], self.by[g], strict=True))
                if t > since and m != other_than
            ),
            None,
        )

    def median_round(self) -> float:
        """The probe's resolution: the median time between two rows of one group."""
        gaps = [b - a for ts in self.ok for a, b in itertools.pairwise(sorted(ts))]
        return quantile(gaps, 0.5)


# --------------------------------------------------------------------------- the phases
@dataclass
class Bench:
    cluster: LocalCluster
    router: Router
    report: Report
    args: argparse.Namespace
    keys: list[str]
    groups_of: list[int]
    probe_model: ProbeModel
    pool: ThreadPoolExecutor
    ingest_times: list[float] = field(default_factory=list)
    unavailability: dict[str, list[float]] = field(default_factory=dict)
    kill_first: list[float] = field(default_factory=list)
    idle_commands: float = 0.0
    probes: list[tuple[str, Probe]] = field(default_factory=list)  # each phase's session

    @property
    def case(self) -> str:
        return f"{len(self.keys):,} keys, {self.args.groups} groups"

    def probe(self, phase: str) -> Probe:
        p = Probe(self.router, self.probe_model, self.args.probe_threads)
        self.probes.append((phase, p))
        return p

    # ---------------------------------------------------------------- 1. ingest
    def ingest(self, deadline: Deadline) -> None:
        n_keys = len(self.keys)
        print(f"1. ingest: {n_keys:,} keys x {ROWS_PER_KEY} rows", flush=True)
        plan = [(p, first) for p in range(ROWS_PER_KEY) for first in range(0, n_keys, BATCH)]

        def batch(p: int, first: int) -> int:
            idx = range(first, min(n_keys, first + BATCH))
            rows = Rows(
                [self.keys[i] for i in idx],
                [self.groups_of[i] for i in idx],
                [p + 1] * len(idx),
                [value_of(i, p) for i in idx],
            )
            return deliver(self.router, rows, self.pool, deadline)

        acked = 0
        t0 = time.perf_counter()
        with ThreadPoolExecutor(2, thread_name_prefix="batch") as batches:
            inflight: list[Future[int]] = []
            for p, first in plan:
                inflight.append(batches.submit(batch, p, first))
                if len(inflight) >= 2:
                    acked += inflight.pop(0).result(timeout=max(1.0, deadline.left()))
                    self.ingest_times.append(time.perf_counter() - t0)
                    deadline.check()
            for f in inflight:
                acked += f.result(timeout=max(1.0, deadline.left()))
                self.ingest_times.append(time.perf_counter() - t0)
        secs = time.perf_counter() - t0
        self.report.add("ingest", self.case, "rows_per_s", acked / secs, "rows/s", n=acked)
        self.report.add("ingest", self.case, "seconds", secs, "s", n=len(plan))
        self.report.sample("ingest", "batch acknowledged at", self.ingest_times, "s")

    # ---------------------------------------------------------------- 2. join / leave
    def move(self, what: str, act: Callable[[], None], deadline: Deadline) -> None:
        """The probe around ``act`` (a member joins or leaves): per-group unavailability."""
        before = list(self.router.refresh(0.0, wait=True))
        with self.probe(what) as probe:
            time.sleep(0.5)  # the probe's rounds before the move
            t_act, wall = time.monotonic(), time.time()
            act()
            t_done = time.monotonic()
            settle = t_done - t_act + self.router.wait_placed(deadline)
            time.sleep(TAIL_S)
        after = self.router.holders
        moved = [g for g in range(len(before)) if before[g] != after[g]]
        self.report_moves(what, probe, moved, (t_act, wall), settle)
        label = "member start" if what == "join" else "SIGTERM to exit"
        self.report.add(what, self.case, f"{label}_s", t_done - t_act, "s")

    def report_moves(
        self,
        what: str,
        probe: Probe,
        moved: list[int],
        act: tuple[float, float],
        settle: float,
    ) -> None:
        """The unavailability figures of the groups ``moved`` by the action at ``act``
        (monotonic, wall clock), beside the longest gap of the others; the slowest of both
        in the notes, placed in time (the servers' logs are in wall-clock UTC)."""
        t_act, wall = act
        spans = {g: probe.longest_gap(g, t_act) for g in range(len(probe.ok))}
        gaps = [spans[g][0] for g in moved]
        stayed = [g for g in spans if g not in set(moved)]
        floor = [spans[g][0] for g in stayed]
        self.unavailability[what] = gaps
        r, case = self.report, self.case
        r.add(what, case, "groups_moved", len(moved), "groups", n=self.args.groups)
        r.add(what, case, "settle_s", settle, "s (action to the map on the placement)")
        r.add(what, case, "unavailability_p50", quantile(gaps, 0.5), "s", n=len(gaps))
        r.add(what, case, "unavailability_p99", quantile(gaps, 0.99), "s", n=len(gaps))
        worst = max(gaps, default=0.0)
        r.add(
            what,
            case,
            "unavailability_max",
            worst,
            "s",
            n=len(gaps),
            target="< 1 s per group" if what != "kill" else "",
            met=(worst < 1.0 and bool(gaps)) if what != "kill" else None,
        )
        r.add(what, case, "unmoved_groups_gap_max", max(floor, default=0.0), "s", n=len(floor))
        r.add(what, case, "probe_round_median", probe.median_round(), "s (probe resolution)")
        r.sample(what, "unavailability per moved group", gaps, "s")
        counts = ", ".join(f"{k} {v}" for k, v in sorted(probe.counts.items())) or "none"
        at = time.strftime("%H:%M:%S", time.gmtime(wall)) + f".{int(wall * 1000) % 1000:03d}"
        r.notes.append(f"{what}: action at {at} UTC; probe calls not acknowledged: {counts}")

        def show(groups: list[int]) -> str:
            slow = sorted(groups, key=lambda g: spans[g][0], reverse=True)[:3]
            return ", ".join(
                f"#{g} {spans[g][0]:.3f}s (+{spans[g][1] - t_act:.2f}s to "
                f"+{spans[g][2] - t_act:.2f}s)"
                for g in slow
            )

        calls = ", ".join(
            f"{took:.2f}s at {t - t_act:+.2f}s to {where} ({n} groups, {out})"
            for took, t, where, n, out in sorted(probe.slow_calls, reverse=True)[:4]
        )
        r.notes.append(
            f"{what}: {len(probe.slow_calls)} probe calls over {SLOW_CALL_S}s; the longest: "
            f"{calls or '-'}"
        )
        r.notes.append(f"{what}: longest gaps after the action, moved groups: {show(moved) or '-'}; others: {show(stayed) or '-'}")  # fmt: skip

    # ---------------------------------------------------------------- 3. idle
    def idle(self, seconds: float, keys: int) -> None:
        """Redis commands/s (every command, those of the members' scripts too), EVALSHA
        calls/s (the renewal scripts), Redis CPU and the members' CPU with no calls; the
        second measure (``keys`` > 0) is compared with the first (no keys)."""
        live = self.cluster.live
        print(f"3. idle: {seconds:g}s, {len(live)} members, {keys:,} keys", flush=True)
        r = redis.Redis.from_url(self.cluster.redis_url)

        def read() -> tuple[int, int, float, float]:
            stats, cmd, cpu = r.info("stats"), r.info("commandstats"), r.info("cpu")
            evalsha = int(cmd.get("cmdstat_evalsha", {}).get("calls", 0))
            busy = float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"])
            return int(stats["total_commands_processed"]), evalsha, busy, time.perf_counter()

        try:
            time.sleep(FLUSH_S * 2.5)  # the last dirty groups go out
            pids = [s.pid for s in live]
            c0 = [cpu_seconds(p) for p in pids]
            n0, e0, b0, t0 = read()
            time.sleep(seconds)
            n1, e1, b1, t1 = read()
            c1 = [cpu_seconds(p) for p in pids]
        finally:
            r.close()
        secs = t1 - t0
        cmds = (n1 - n0 - 3) / secs  # less this benchmark's three INFO
        cpu = [(b - a) / secs * 100 for a, b in zip(c0, c1, strict=True)]
        case = f"{keys:,} keys, {self.args.groups} groups, {len(pids)} members"
        rep = self.report
        rep.add("idle", case, "redis_commands_per_s", cmds, "commands/s", n=len(pids))
        if keys and self.idle_commands:
            growth = cmds / self.idle_commands
            rep.add("idle", case, "redis_commands_vs_no_keys", growth, "x", target="< 1.1", met=growth < 1.1)  # fmt: skip
        self.idle_commands = cmds
        rep.add("idle", case, "redis_evalsha_per_s", (e1 - e0) / secs, "calls/s")
        rep.add("idle", case, "redis_cpu", (b1 - b0) / secs * 100, "% of a core")
        rep.add("idle", case, "member_cpu_max", max(cpu), "% of a core", n=len(pids))

    # ---------------------------------------------------------------- 4. kill -9
    def kill(self, victim: int, deadline: Deadline) -> None:
        n_durable = min(self.args.durable_keys, len(self.keys))
        print(f"4. kill -9: {n_durable:,} durable keys take a row, then kill -9", flush=True)
        victim_target = self.cluster.servers[victim].target
        holders = list(self.router.refresh(0.0, wait=True))
        dead = [g for g, h in enumerate(holders) if h == victim_target]
        durable = 0
        with self.probe("kill") as probe:
            time.sleep(0.5)
            for first in range(0, n_durable, BATCH):
                idx = range(first, min(n_durable, first + BATCH))
                rows = Rows(
                    [self.keys[i] for i in idx],
                    [self.groups_of[i] for i in idx],
                    [ROWS_PER_KEY + 1] * len(idx),
                    [value_of(i, ROWS_PER_KEY) for i in idx],
                )
                durable += deliver(self.router, rows, self.pool, deadline)
            t_kill, wall = time.monotonic(), time.time()  # at once after the last acknowledgement
            self.cluster.kill(victim)
            settle = self.router.wait_placed(deadline)
            time.sleep(TAIL_S)
        first = [probe.first_after(g, t_kill, victim_target) for g in dead]
        never = sum(1 for x in first if x is None)
        served = [x for x in first if x is not None]
        self.kill_first = served
        r, case = self.report, self.case
        r.add("kill", case, "durable_rows_acknowledged_before_kill", durable, "rows")
        self.report_moves("kill", probe, dead, (t_kill, wall), settle)
        first_s = min(served, default=float("inf"))
        last_s = max(served, default=float("inf")) if not never else float("inf")
        r.add("kill", case, "kill_to_first_append_served", first_s, "s", n=len(dead), target="< 5 s", met=first_s < 5)  # fmt: skip
        r.add("kill", case, "kill_to_every_dead_group_served", last_s, "s", n=len(dead), target="< 5 s", met=last_s < 5)  # fmt: skip
        r.add("kill", case, "dead_groups_never_served", never, "groups", n=len(dead))
        r.sample("kill", "kill to first append per dead group", served, "s")
        self.verify(n_durable, deadline)

    def _holders(self, g: int) -> str:
        """Group ``g``'s probe rows by the member that took them, run by run."""
        runs: list[list[Any]] = []
        for phase, p in self.probes:
            for who in p.by[g]:
                who = f"{phase}:{who.rsplit(':', 1)[-1]}"
                if runs and runs[-1][0] == who:
                    runs[-1][1] += 1
                else:
                    runs.append([who, 1])
        return ", ".join(f"{w} x{n}" for w, n in runs) or "none"

    def verify(self, n_durable: int, deadline: Deadline) -> None:
        """Every durable key, every probe key and a sample of the other keys, queried at
        their groups' holders, against the model."""
        rng = random.Random(11)
        others = range(n_durable, len(self.keys))
        sample = rng.sample(others, min(VERIFY_SAMPLE, len(others)))
        checks: list[tuple[str, int, int, float, int]] = []  # key, group, n, s, uncertain
        for i in range(n_durable):
            s = sum(value_of(i, p) for p in range(ROWS_PER_KEY + 1))
            checks.append((self.keys[i], self.groups_of[i], ROWS_PER_KEY + 1, s, 0))
        for i in sample:
            s = sum(value_of(i, p) for p in range(ROWS_PER_KEY))
            checks.append((self.keys[i], self.groups_of[i], ROWS_PER_KEY, s, 0))
        m = self.probe_model
        for g, k in enumerate(m.keys):
            checks.append((k, g, m.acked[g], float(m.acked[g]), m.uncertain[g]))

        retried: dict[str, int] = {}

        def query(key: str, g: int) -> tuple[int, float]:
            target = self.router.target_of(g)
            while True:
                try:
                    res = self.router.stub(target).Query(
                        pb.QueryRequest(stream=STREAM, window="w", key=key), timeout=30
                    )
                    return res.values["n"].int_value, res.values["s"].double_value
                except grpc.RpcError as err:
                    ex = from_rpc_error(err, target)
                    if ex.reason == "KEY_NOT_FOUND":
                        return 0, 0.0
                    transient = ex.code in ("UNAVAILABLE", "DEADLINE_EXCEEDED")
                    if ex.reason not in REFUSED and not transient:
                        raise
                    what = ex.reason or ex.code
                    retried[what] = retried.get(what, 0) + 1  # (racy counts: a note only)
                    deadline.check()
                    target = ex.metadata.get("owner") or self.router.target_of(g)
                    time.sleep(0.05)
                    self.router.refresh()

        t0 = time.perf_counter()
        futures = [self.pool.submit(query, k, g) for k, g, *_ in checks]
        lost = {"durable": 0, "sample": 0, "probe": 0}
        wrong = dict.fromkeys(lost, 0)
        for j, (f, (key, _g, n, s, unsure)) in enumerate(zip(futures, checks, strict=True)):
            kind = "durable" if j < n_durable else "sample" if j < n_durable + len(sample) else "probe"  # fmt: skip
            try:
                got_n, got_s = f.result(timeout=max(1.0, deadline.left()))
            except BaseException:
                for later in futures:  # the queries not started yet are dropped
                    later.cancel()
                raise
            lost[kind] += max(0, n - got_n)
            if kind == "probe":  # every x is 1.0; a row whose call died may be there or not
                bad = not n <= got_n <= n + unsure or abs(got_s - got_n) > 1e-6
            else:
                bad = got_n != n or abs(got_s - s) > 1e-6
            if bad:
                wrong[kind] += 1
                if wrong[kind] <= 3:
                    self.report.notes.append(
                        f"verify: {kind} key {key!r}: got n={got_n} s={got_s}, model n={n} "
                        f"s={s} (+{unsure} rows of unknown outcome); rows taken by "
                        + self._holders(_g)
                    )
        secs = time.perf_counter() - t0
        r, case = self.report, self.case
        if retried:
            r.notes.append(
                "verify: queries sent again after "
                + ", ".join(f"{k} {v}" for k, v in sorted(retried.items()))
            )
        total = sum(lost.values())
        r.add("kill", case, "acknowledged_rows_lost", total, "rows", n=len(checks), target="0", met=total == 0)  # fmt: skip
        for kind, n_keys in (("durable", n_durable), ("sample", len(sample)), ("probe", len(m.keys))):  # fmt: skip
            r.add("kill", f"{case}, {kind} keys", "rows_lost", lost[kind], "rows", n=n_keys)
            r.add("kill", f"{case}, {kind} keys", "keys_wrong", wrong[kind], "keys", n=n_keys)
        r.add("kill", case, "verify_queries_per_s", len(checks) / secs, "queries/s", n=len(checks))
        r.add("kill", case, "probe_rows_uncertain", sum(m.uncertain), "rows (their call failed unrefused)")  # fmt: skip


# --------------------------------------------------------------------------- output
def plot(bench: Bench, path: Path) -> None:
    """Ingest progress, per-group unavailability (CDF per move), kill to first append per
    dead group, and every figure against its target."""
    try:
        import matplotlib
    except ImportError:
        print("matplotlib is not installed: no plot", flush=True)
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    report = bench.report
    fig, axes = plt.subplots(2, 2, figsize=(12, 8))
    a, b, c, d = axes.flat
    times = bench.ingest_times
    if times:
        a.plot(times, [min((i + 1) * BATCH, len(bench.keys) * ROWS_PER_KEY) for i in range(len(times))], "-")  # fmt: skip
    a.set_xlabel("seconds")
    a.set_ylabel("rows acknowledged")
    a.set_title(f"1. ingest: {len(bench.keys):,} keys x {ROWS_PER_KEY} rows, 2 members")
    for what, gaps in bench.unavailability.items():
        xs = sorted(gaps)
        if xs:
            b.plot(xs, [(i + 1) / len(xs) for i in range(len(xs))], drawstyle="steps-post", label=f"{what} ({len(xs)} groups)")  # fmt: skip
    b.axvline(1.0, color="red", linestyle=":", label="target 1 s (join, leave)")
    b.set_xlabel("longest gap between acknowledged probe rows (s)")
    b.set_ylabel("CDF over the groups moved")
    b.set_title("2. unavailability per moved group")
    b.legend(fontsize=8)
    first = sorted(bench.kill_first)
    if first:
        c.plot(range(1, len(first) + 1), first, "o", markersize=3)
    c.axhline(5.0, color="red", linestyle=":", label="target 5 s")
    c.set_ylim(bottom=0)
    c.set_xlabel("dead member's groups (sorted)")
    c.set_ylabel("kill -9 to first append served (s)")
    c.set_title("4. kill -9")
    c.legend(fontsize=8)
    checks = [r for r in report.rows if str(r["target"]).startswith(("<", "0"))]
    labels, ratios = [], []
    for r in checks:
        words = str(r["target"]).split()
        bound = float(words[1] if words[0] == "<" else words[0])
        ratios.append(r["value"] / bound if bound else float(r["value"] > 0))
        labels.append(f"{r['experiment']}: {r['metric']} ({r['target']})")
    d.barh(labels, ratios, color=["tab:green" if r["met"] == "yes" else "tab:red" for r in checks])
    d.axvline(1.0, color="black", linestyle=":")
    d.tick_params(axis="y", labelsize=7)
    d.set_xlabel("measured / bound (0 target: any > 0 shows as 1)")
    d.set_title("targets")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


# --------------------------------------------------------------------------- main
def run(bench: Bench, args: argparse.Namespace) -> None:
    cluster, router = bench.cluster, bench.router
    end = time.monotonic() + args.budget

    @contextlib.contextmanager
    def phase(label: str, seconds: float) -> Iterator[Deadline]:
        """A phase bounded by ``seconds`` and by what is left of the run's budget."""
        left = end - time.monotonic()
        if left <= 0:
            msg = f"{label}: the run's budget of {args.budget:.0f}s is spent"
            raise PhaseTimeout(msg)
        t = time.perf_counter()
        yield Deadline(label, min(seconds, left))
        print(f"  ({label}: {time.perf_counter() - t:.1f}s)", flush=True)

    with phase("create the stream", 90) as dl:
        spec = StreamSpec(
            STREAM,
            (Field("host", "STRING"), Field("x", "DOUBLE")),
            key="host",
            key_groups=args.groups,
            wall_clock=False,
        )
        window = WindowSpec(
            STREAM,
            "w",
            (Aggregation("n", "count"), Aggregation("s", "sum", "x"), Aggregation("m", "max", "x")),
            Policy.count(100_000),  # per key: far more than any key takes here
            storage=Storage("redis", durable=True),
        )
        with cluster.client() as c:
            c.create_stream(spec)
            c.create_window(window)
        router.wait_placed(dl)
    with phase("idle, no keys", args.idle_s + 30):
        bench.idle(args.idle_s, 0)
    with phase("the third member leaves before the ingest", SETTLE_S + 30) as dl:
        cluster.servers[2].stop(timeout=dl.left())
        cluster.wait_formed(timeout=dl.left())
        router.wait_placed(dl)
    with phase("ingest", args.ingest_timeout) as dl:
        bench.ingest(dl)
    with phase("join", SETTLE_S + 60) as dl:
        print("2. join: the third member starts", flush=True)
        joiner = cluster.servers[2]
        bench.move("join", lambda: joiner.start(timeout=dl.left()), dl)
    with phase("idle", args.idle_s + 30):
        bench.idle(args.idle_s, len(bench.keys))
    leaver = cluster.servers[0]
    with phase("leave", SETTLE_S + 60) as dl:
        print(f"2. leave: SIGTERM to {leaver.target}", flush=True)
        bench.move("leave", lambda: leaver.stop(timeout=dl.left()), dl)
    with phase("the member that left comes back", SETTLE_S + 60) as dl:
        leaver.start(timeout=dl.left())
        cluster.wait_formed(timeout=dl.left())
        router.wait_placed(dl)
    with phase("kill -9 + verify", args.kill_timeout) as dl:
        bench.kill(1, dl)


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="20,000 keys, 5,000 durable (< 90 s)")
    ap.add_argument("--keys", type=int, default=1_000_000, help="keys ingested (default 1,000,000)")
    ap.add_argument("--durable-keys", type=int, default=100_000, help="keys checked after kill -9")
    ap.add_argument("--groups", type=int, default=DEFAULT_KEY_GROUPS, help="key groups")
    ap.add_argument("--probe-threads", type=int, default=1, help="probe workers per member")
    ap.add_argument("--idle-s", type=float, default=10.0, help="seconds of the idle measure")
    ap.add_argument("--ingest-timeout", type=float, default=0, help="bound (s; 0: by --keys)")
    ap.add_argument("--budget", type=float, default=0, help="bound of the run (s; 0: 570, quick 150)")  # fmt: skip
    ap.add_argument("--out", type=Path, default=OUT, help="folder of the results")
    ap.add_argument("--keep", action="store_true", help="keep the servers' data dir and logs")
    args = ap.parse_args(argv)
    if args.quick:
        args.keys, args.durable_keys = 20_000, 5_000
    # bounds: ingest at 10k rows/s at worst, the verification at 1k queries/s at worst
    args.ingest_timeout = args.ingest_timeout or max(60.0, args.keys * ROWS_PER_KEY / 10_000)
    args.budget = args.budget or (150.0 if args.quick else 570.0)
    args.kill_timeout = SETTLE_S + 30 + (args.durable_keys + VERIFY_SAMPLE + args.groups) / 1000
    stem = "keys-cluster-quick" if args.quick else "keys-cluster"
    report = Report()
    load_before = load_average()
    t_start = time.perf_counter()
    root = Path(tempfile.mkdtemp(prefix="mtaw-bench-kc-"))
    print(f"data dir (servers' logs: server<i>/server.log): {root}", flush=True)
    keys = [key_of(i) for i in range(args.keys)]
    cluster = LocalCluster(
        3,
        "--lease-ms", str(LEASE_MS),
        data_dir=root,
        flush_interval=FLUSH_S,
    )  # fmt: skip
    router = Router(cluster, args.groups)
    error: BaseException | None = None
    with (
        ThreadPoolExecutor(8, thread_name_prefix="part") as pool,
        contextlib.ExitStack() as stack,
    ):
        stack.callback(router.close)
        stack.enter_context(cluster)  # started here, stopped (every member, Redis) on exit
        bench = Bench(
            cluster,
            router,
            report,
            args,
            keys,
            key_groups(keys, args.groups),
            ProbeModel.for_groups(args.groups),
            pool,
        )
        try:
            run(bench, args)
        except Exception as ex:  # the figures so far are written, then it is raised
            error = ex
            report.notes.append(f"ABORTED: {type(ex).__name__}: {ex}")
    logs = sorted(root.glob("server*/server.log"))
    header = [
        f"run: {time.strftime('%Y-%m-%d %H:%M')}, {'--quick' if args.quick else 'full'}, "
        f"{time.perf_counter() - t_start:.0f}s; {os.cpu_count()} cores; load average "
        f"{load_before} before, {load_average()} after (other processes share the machine)",
        f"LocalCluster of 3 servers (--lease-ms {LEASE_MS} --flush-interval {FLUSH_S:g}), one "
        "embedded valkey (AOF appendfsync always); the stream is created on 3, the third "
        "leaves before the ingest (2 members) and joins after it; leave = SIGTERM to member 0 "
        "(it comes back before the kill); kill -9 of member 1",
        f"stream {STREAM!r}: STRING key, {args.groups} key groups; window w: count+sum+max over "
        f"a count policy of 100,000 (durable); {len(keys):,} keys x {ROWS_PER_KEY} rows in "
        f"{BATCH:,}-row batches split by holder; probe: one key per group, "
        f"{args.probe_threads} worker(s) per member, one Append per worker round (at most "
        f"every {PROBE_ROUND_S * 1000:.0f} ms) with a row for each group routed there",
    ]
    table = write(report, args.out, stem, header)
    print(table)
    plot(bench, args.out / f"{stem}.png")
    if args.keep or error is not None:
        print(f"kept: {root} ({len(logs)} server logs)", flush=True)
    else:
        shutil.rmtree(root, ignore_errors=True)
    if error is not None:
        raise error


if __name__ == "__main__":
    main()
