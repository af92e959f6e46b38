"""The Python SDK: :class:`WindowClient` (blocking) and :class:`AsyncWindowClient` (asyncio).

    from mtawindows.client import WindowClient, StreamSpec, Field, WindowSpec, Aggregation, Policy

    with WindowClient("localhost:50051") as c:
        c.create_stream(StreamSpec("cpu", (Field("load", "DOUBLE"),)))
        c.create_window(WindowSpec("cpu", "last_hour",
                                   (Aggregation("peak", "max", "load"), Aggregation("n", "count")),
                                   Policy.time_range(timedelta(hours=1))))
        c.append("cpu", {"ts": [t0, t1], "load": [0.5, 0.7]}, producer_id="agent-1", sequence=1)
        c.query("cpu", "last_hour").values   # {"peak": 0.7, "n": 2}

``"localhost:50051"`` may be several servers, ``"a:50051,b:50051"`` (or a list): the seeds of
a cluster. The client learns the members from them and sends each call to the server that owns
its stream, following the cluster as streams move (``c.cluster_map()``, ``c.owner(stream)``).

Rows go as a dict of columns, a list of row dicts, or a pyarrow Table/RecordBatch (sent as
Arrow IPC). Calls take ``timeout=`` (seconds; default from the client). Appends with a
``producer_id`` and ``sequence`` are idempotent, so they are retried on UNAVAILABLE and
DEADLINE_EXCEEDED (reads too), across a failover to another server as well, with the same key;
other appends are never resent after their server failed. Failures raise the typed exceptions
of :mod:`mtawindows.client.errors`.

This module gathers the SDK in one import; the parts live by idea: :mod:`.blocking`
(:class:`WindowClient`), :mod:`.aio` (:class:`AsyncWindowClient`), :mod:`.calls` (the request
layer both share: one description per RPC, retries, errors), :mod:`.channel` (channels,
credentials, the token header), :mod:`.rows` (rows as Append payloads), :mod:`.batch_writer`
(:class:`BatchWriter`), :mod:`.cluster` (what the client knows of the cluster) and
:mod:`.routing` (per-key stream names).
"""

from __future__ import annotations

from .aio import AsyncWindowClient
from .batch_writer import BatchWriter
from .blocking import WindowClient
from .calls import append_request
from .channel import DEFAULT_TARGET, channel_options, credentials
from .errors import MtaWindowsError
from .rows import encode_rows

__all__ = [
    "DEFAULT_TARGET",
    "AsyncWindowClient",
    "BatchWriter",
    "MtaWindowsError",
    "WindowClient",
    "append_request",
    "channel_options",
    "credentials",
    "encode_rows",
]
