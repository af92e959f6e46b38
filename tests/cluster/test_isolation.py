"""A member cut off from the cluster's Redis knows it (issue 26, item 1): past half a lease
without an answered heartbeat its stream calls answer UNAVAILABLE ``MEMBER_ISOLATED`` at once
(naming the members it last knew), its health is NOT_SERVING, and ``GetClusterMap`` reports
the age of its view instead of claiming that everyone is live; the first answered heartbeat
makes it serve again. Real servers on a real Redis, the Redis frozen with SIGSTOP (every
member is then cut off at once: what one member sees of a partition)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import grpc
import pytest

from mtawindows.client import Aggregation, Field, Policy, StreamSpec, WindowSpec
from mtawindows.testing import LocalCluster
from mtawindows.v1 import windows_pb2 as pb
from mtawindows.v1 import windows_pb2_grpc as pb_grpc
from tests.support.waiting import error_info, wait_until

pytestmark = [pytest.mark.server, pytest.mark.slow]

LEASE_MS = 1000  # isolation after half of it: 500 ms


def test_a_member_cut_off_from_redis_refuses_stream_calls_and_reports_its_view(
    tmp_path: Path,
) -> None:
    with LocalCluster(2, "--lease-ms", str(LEASE_MS), data_dir=tmp_path / "c") as cluster:
        with cluster.client() as c:
            c.create_stream(StreamSpec("s", (Field("x", "DOUBLE"),), wall_clock=False))
            c.create_window(WindowSpec("s", "n", (Aggregation("n", "count"),), Policy.count(10)))
            c.append("s", {"ts": [1], "x": [1.0]}, producer_id="p", sequence=1)
        owner = cluster.owner("s")
        other = next(srv for srv in cluster.servers if srv is not owner)
        channel = grpc.insecure_channel(owner.target)
        stub = pb_grpc.WindowServiceStub(channel)
        assert cluster.redis is not None and cluster.redis.pid is not None
        redis_pid = cluster.redis.pid
        os.kill(redis_pid, signal.SIGSTOP)
        try:
            cut = time.monotonic()
            wait_until(lambda: owner.health() == "NOT_SERVING", "the owner NOT_SERVING", 10)
            noticed = time.monotonic() - cut
            assert noticed < 5, noticed  # half a lease (0.5 s) plus the health loop's look

            began = time.monotonic()
            with pytest.raises(grpc.RpcError) as info:
                stub.Query(pb.QueryRequest(stream="s", window="n"), timeout=5)
            took = time.monotonic() - began
            assert info.value.code() == grpc.StatusCode.UNAVAILABLE
            ei = error_info(info.value)
            assert ei.reason == "MEMBER_ISOLATED"
            assert other.target in ei.metadata["members"].split(",")
            assert int(ei.metadata["view_age_ms"]) > LEASE_MS // 2
            assert took < 1.0, took  # refused at once, not after a wait on Redis

            cmap = stub.GetClusterMap(pb.GetClusterMapRequest(), timeout=5)
            assert cmap.isolated
            assert cmap.view_age_ms > LEASE_MS // 2
            assert all(m.heartbeat_age_ms >= LEASE_MS // 2 for m in cmap.members), cmap
            # owners come from Redis, out of reach: the map of a stream is refused
            with pytest.raises(grpc.RpcError) as info:
                stub.GetClusterMap(pb.GetClusterMapRequest(streams=["s"]), timeout=5)
            assert error_info(info.value).reason == "MEMBER_ISOLATED"
        finally:
            os.kill(redis_pid, signal.SIGCONT)
        wait_until(lambda: owner.health() == "SERVING", "SERVING after the heartbeat", 15)
        cmap = stub.GetClusterMap(pb.GetClusterMapRequest(), timeout=5)
        assert not cmap.isolated and cmap.view_age_ms < LEASE_MS
        with cluster.client() as c:
            wait_until(
                lambda: c.query("s", "n").values["n"] == 1, "the acknowledged row is there", 15
            )
        channel.close()
