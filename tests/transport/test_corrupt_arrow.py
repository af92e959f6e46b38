"""Arrow bytes that read but are not valid (offsets past their buffer, text that is not
UTF-8, dictionary indices out of range): refused as BAD_ARROW before anything reads the
data, by Append, AppendStream and Compute alike. Before, a string column whose last offset
pointed past its buffer crashed the server (SIGSEGV) on a unary Append, and invalid text
answered INTERNAL. Found by an outsider flipping bits; checked here the same way: a corrupt
offset, then random single-bit flips of a valid batch, each answered with a refusal or
applied whole, never INTERNAL, the server up throughout and the window holding exactly the
rows of the batches acknowledged."""

from __future__ import annotations

import random
from pathlib import Path

import grpc
import numpy as np
import pyarrow as pa
import pytest

from mtawindows.client import Aggregation, Field, Policy, StreamSpec, WindowSpec
from mtawindows.client.errors import from_rpc_error
from mtawindows.client.rows import _arrow_ipc
from mtawindows.testing import LocalServer
from mtawindows.v1 import windows_pb2 as pb
from mtawindows.v1 import windows_pb2_grpc as pb_grpc

pytestmark = [pytest.mark.server, pytest.mark.redis]

N = 20


def batch(t0: int) -> pa.Table:
    return pa.table(
        {
            "ts": pa.array(t0 + np.arange(N, dtype=np.int64), pa.timestamp("ns", tz="UTC")),
            "v": pa.array(np.arange(N, dtype=float)),
            "k": pa.array(["ab"] * N),
        }
    )


def corrupt_offset(data: bytes) -> bytes:
    """The string column's last offset (40) as 2^30: the framing reads, the data does not."""
    tail = np.array([38, 40], dtype=np.int32).tobytes()
    at = data.rfind(tail) + 4
    assert at > 4
    return data[:at] + np.array([1 << 30], dtype=np.int32).tobytes() + data[at + 4 :]


def test_corrupt_arrow_is_refused_and_the_server_stays_up(tmp_path: Path) -> None:
    rng = random.Random(5)
    with LocalServer(tmp_path / "d") as srv, srv.client() as c:
        c.create_stream(StreamSpec("s", (Field("v", "DOUBLE"), Field("k", "STRING"))))
        aggs = (Aggregation("n", "count"), Aggregation("last", "last", "k"))
        c.create_window(WindowSpec("s", "w", aggs, Policy.count(10**9)))
        stub = pb_grpc.WindowServiceStub(grpc.insecure_channel(srv.target))

        replies: list[pb.AppendResponse] = []

        def reason(call: object, request: object) -> str:
            try:
                replies.append(call(request, timeout=20))  # type: ignore[operator]
            except grpc.RpcError as err:
                return from_rpc_error(err, srv.target).reason
            return "OK"

        bad = corrupt_offset(_arrow_ipc(batch(0)))
        assert reason(stub.Append, pb.AppendRequest(stream="s", arrow_ipc=bad)) == "BAD_ARROW"
        one = pb.AppendRequest(stream="s", rows=N, arrow_ipc=bad)
        assert reason(stub.AppendStream, iter([one])) == "BAD_ARROW"
        assert reason(stub.Compute, pb.ComputeRequest(stream="s", arrow_ipc=bad)) == "BAD_ARROW"
        text = pa.array([b"\xff\xfe"] * N, pa.binary()).view(pa.string())  # not UTF-8
        invalid = _arrow_ipc(batch(0).set_column(2, "k", text))
        assert reason(stub.Append, pb.AppendRequest(stream="s", arrow_ipc=invalid)) == "BAD_ARROW"
        assert c.query("s", "w").values["n"] == 0
        # random single-bit flips of valid batches (newer each time): refused or applied whole
        applied = 0
        for i in range(150):
            data = bytearray(_arrow_ipc(batch((i + 1) * 10**12)))
            at = rng.randrange(len(data))
            data[at] ^= 1 << rng.randrange(8)
            got = reason(stub.Append, pb.AppendRequest(stream="s", arrow_ipc=bytes(data)))
            assert got != "INTERNAL", (i, at)
            if got == "OK":
                applied += replies[-1].rows_applied
        assert srv.health() == "SERVING"
        assert c.query("s", "w").values["n"] == applied
