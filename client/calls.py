"""The request layer both clients share: one :class:`Call` per RPC, the retry policy, the errors.

A :class:`Call` says everything about one RPC but the sending: the service method, the request,
the stream it is about (where the cluster routes it), how to decode the reply, and whether the
call may be sent again after its server failed (reads, and appends with an idempotency key).
:class:`~mtawindows.client.WindowClient` sends it through the blocking stubs and
:class:`~mtawindows.client.AsyncWindowClient` through the grpc.aio stubs, each in the same loop
over a :class:`Course`: the try goes where the course says (the stream's owner, see
:mod:`.cluster_map`); a failure either ends the call as the typed exception of
:mod:`mtawindows.client.errors` (naming the server's address) or is followed to the owner
(``NOT_OWNER``), or waited out (``STREAM_MOVING``, a server unreachable, a timeout) with a
jittered exponential :func:`backoff`, within a time budget (``retry_time``).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from google.protobuf.message import Message

from mtawindows.v1 import convert
from mtawindows.v1 import windows_pb2 as pb
from mtawindows.v1.keys import key_text
from mtawindows.v1.reasons import Reason
from mtawindows.v1.relay import FORWARDABLE
from mtawindows.v1.types import (
    AppendResult,
    KeyInfo,
    StreamInfo,
    StreamSpec,
    WindowInfo,
    WindowResult,
    WindowSpec,
)

from .errors import (
    DeadlineExceededError,
    InvalidArgumentError,
    MtaWindowsError,
    RedirectLoopError,
    UnavailableError,
    Violation,
)
from .rows import Rows, Schema, _arrow_ipc, encode_rows

if TYPE_CHECKING:
    from .cluster_map import Topology

R = TypeVar("R")  # the reply message
T = TypeVar("T")  # what the client returns

RESULTS = {"none": pb.NONE, "final": pb.FINAL, "per_row": pb.PER_ROW}
RETRYABLE = (UnavailableError, DeadlineExceededError)
DEFAULT_TRIES = 7  # tries of a call to a server alone (not a cluster), unless retries is set
# (their pauses, 50 ms doubling with jitter, wait out about 1.5 to 4.5 s: a server restarting)
MAX_REDIRECTS = 8  # NOT_OWNER redirects one call follows (relays through a member included)

Key = str | int  # a key of a keyed stream: a STRING key field's str, an INT64 one's int


@dataclass(frozen=True)
class Call(Generic[R, T]):
    """One RPC: ``method`` of the WindowService with ``request``; ``decode`` turns the reply
    into what the client returns; ``retry``: safe to send again after its server failed
    (UNAVAILABLE, DEADLINE_EXCEEDED: the server applies it at most once); ``stream``: the
    stream it is about, which decides the server it goes to ("" = any server)."""

    method: str
    request: Message
    decode: Callable[[R], T]
    retry: bool
    stream: str = ""


# --------------------------------------------------------------------------- one per RPC


def _nothing(_: object) -> None:
    return None


def _same(m: R) -> R:
    return m


def create_stream(spec: StreamSpec) -> Call[pb.StreamInfo, StreamInfo]:
    req = pb.CreateStreamRequest(spec=convert.stream_spec_to_proto(spec))
    return Call("CreateStream", req, convert.stream_info_from_proto, False, spec.name)


def delete_stream(name: str) -> Call[pb.DeleteStreamResponse, None]:
    return Call("DeleteStream", pb.DeleteStreamRequest(name=name), _nothing, False, name)


def list_streams() -> Call[pb.ListStreamsResponse, list[StreamInfo]]:
    """ListStreams of one server (the streams it owns: the clients ask every member and
    :func:`merge_streams`)."""

    def decode(m: pb.ListStreamsResponse) -> list[StreamInfo]:
        return [convert.stream_info_from_proto(s) for s in m.streams]

    return Call("ListStreams", pb.ListStreamsRequest(), decode, retry=True)


def merge_streams(lists: Sequence[list[StreamInfo]]) -> list[StreamInfo]:
    """The streams of every member, one per name (a stream has one owner; during a hand-over
    two may list it: the first member's stays). One member's list as it came; several
    sorted by name."""
    if len(lists) == 1:
        return list(lists[0])
    merged: dict[str, StreamInfo] = {}
    for got in lists:
        for s in got:
            merged.setdefault(s.spec.name, s)
    return [merged[n] for n in sorted(merged)]


def get_cluster_map(streams: Sequence[str] = ()) -> Call[pb.ClusterMap, pb.ClusterMap]:
    """GetClusterMap: the live members, and the owners of ``streams`` (kept as the message:
    the topology takes it, :meth:`~mtawindows.client.cluster_map.Topology.learn`)."""
    req = pb.GetClusterMapRequest(streams=list(streams))
    return Call("GetClusterMap", req, lambda m: m, retry=True)


def get_stream(name: str) -> Call[pb.StreamInfo, StreamInfo]:
    req = pb.GetStreamRequest(name=name)
    return Call("GetStream", req, convert.stream_info_from_proto, True, name)


def create_window(spec: WindowSpec) -> Call[pb.WindowInfo, WindowInfo]:
    req = pb.CreateWindowRequest(spec=convert.window_spec_to_proto(spec))
    return Call("CreateWindow", req, convert.window_info_from_proto, False, spec.stream)


def delete_window(stream: str, name: str) -> Call[pb.DeleteWindowResponse, None]:
    req = pb.DeleteWindowRequest(stream=stream, name=name)
    return Call("DeleteWindow", req, _nothing, False, stream)


def get_window(stream: str, name: str) -> Call[pb.WindowInfo, WindowInfo]:
    req = pb.GetWindowRequest(stream=stream, name=name)
    return Call("GetWindow", req, convert.window_info_from_proto, True, stream)


def list_windows(stream: str) -> Call[pb.ListWindowsResponse, list[WindowInfo]]:
    def decode(m: pb.ListWindowsResponse) -> list[WindowInfo]:
        return [convert.window_info_from_proto(w) for w in m.windows]

    return Call("ListWindows", pb.ListWindowsRequest(stream=stream), decode, True, stream)


def append_request(
    stream: str,
    rows: Rows,
    schema: Mapping[str, str] | None,
    producer_id: str | None,
    sequence: int | None,
    results: str,
    windows: Sequence[str],
    arrow: bool = False,
) -> pb.AppendRequest:
    """The AppendRequest of ``rows`` (see :func:`~mtawindows.client.rows.encode_rows`);
    ``results`` is "none", "final" or "per_row" (ValueError otherwise); ``arrow``: per-row
    results as Arrow (``results="per_row"`` only, ValueError otherwise)."""
    mode = result_mode(results, arrow)
    columns, ipc, _ = encode_rows(_arrow_if_large(rows), schema)
    return pb.AppendRequest(
        stream=stream,
        columns=columns,
        arrow_ipc=ipc,
        producer_id=producer_id or "",
        sequence=sequence or 0,
        results=mode,
        windows=list(windows),
        arrow_results=arrow,
    )


def result_mode(results: str, arrow: bool) -> pb.ResultMode:
    """The AppendRequest's ``results`` for ``results`` ("none", "final" or "per_row",
    ValueError otherwise) and ``arrow`` (per-row results as Arrow: ``results="per_row"``
    only, ValueError otherwise; TypeError unless a bool)."""
    mode = RESULTS.get(results.lower()) if isinstance(results, str) else None
    if mode is None:
        msg = f"results: expected one of {list(RESULTS)}, got {results!r}"
        raise ValueError(msg)
    if not isinstance(arrow, bool):
        msg = f"arrow: expected True or False, got {type(arrow).__name__} {arrow!r}"  # type: ignore[unreachable,unused-ignore]
        raise TypeError(msg)
    if arrow and mode != pb.PER_ROW:
        msg = (
            f'arrow=True asks for per-row results as Arrow tables: it needs results="per_row", '
            f"got results={results!r}"
        )
        raise ValueError(msg)
    return mode


def append(request: pb.AppendRequest) -> Call[pb.AppendResponse, AppendResult]:
    """An Append (built by :func:`append_request`); retried only with an idempotency key
    (``producer_id`` and ``sequence``). An Arrow batch of more than :data:`STREAM_BYTES`
    goes as an AppendStream of :class:`Pieces` (the server holds a unary request about
    three times over; pieces, about once): the same batch, applied the same way."""
    retry = bool(request.producer_id and request.sequence)
    if len(request.arrow_ipc) > STREAM_BYTES:
        pieces = Pieces(request, PIECE_BYTES)
        return Call("AppendStream", pieces, convert.append_result_from_proto, retry, request.stream)
    return Call("Append", request, convert.append_result_from_proto, retry, request.stream)


STREAM_BYTES = 4 << 20  # an Arrow batch larger than this goes as AppendStream pieces


def _arrow_if_large(rows: Rows) -> Rows:
    """A pandas DataFrame of more than :data:`STREAM_BYTES` as a pyarrow Table (sent as
    AppendStream pieces, as an Arrow batch that large is); as it is when Arrow cannot take
    it (mixed object columns: protobuf columns then, as for a small one)."""
    usage = getattr(rows, "memory_usage", None)
    if usage is None or not hasattr(rows, "columns") or hasattr(rows, "schema"):
        return rows
    try:
        if int(usage(index=False, deep=True).sum()) <= STREAM_BYTES:
            return rows
        import pyarrow as pa

        return pa.Table.from_pandas(rows, preserve_index=False)
    except (TypeError, ValueError, ImportError):  # pyarrow's ArrowInvalid is a ValueError
        return rows


PIECE_BYTES = 1 << 18  # of about this many bytes each (gRPC holds each about three times)


class Pieces:
    """The messages of an AppendStream for the Arrow batch of ``request``: the first is the
    request with the first rows (and ``rows``, the batch's rows in all), each later one only
    the next rows' ``arrow_ipc``, about ``piece_bytes`` each. Iterable again for each try;
    a piece is encoded when gRPC asks for it. A try relayed through another member (the
    owner cut off from this client) sends ``request`` whole as an Append instead: members
    relay unary calls only."""

    def __init__(self, request: pb.AppendRequest, piece_bytes: int) -> None:
        import pyarrow as pa

        self.request = request  # whole: what a relay through another member sends (Append)
        self.table = pa.ipc.open_stream(pa.py_buffer(request.arrow_ipc)).read_all()
        self.head = pb.AppendRequest()
        self.head.CopyFrom(request)
        self.head.ClearField("arrow_ipc")
        n = self.table.num_rows
        self.head.rows = n
        self.per = max(1, piece_bytes * n // max(1, self.table.nbytes))

    def __iter__(self) -> Iterator[pb.AppendRequest]:
        n = self.table.num_rows
        starts = range(0, max(n, 1), self.per)
        for i, at in enumerate(starts):
            piece = pb.AppendRequest()
            if i == 0:
                piece.CopyFrom(self.head)
            elif i == len(starts) - 1:
                piece.rows = n  # the end mark: a stream cut before it applies nothing
            piece.arrow_ipc = _arrow_ipc(self.table.slice(at, self.per))
            yield piece

    def ByteSize(self) -> int:
        """About the largest message's size (what a client's message limit is checked on)."""
        return int(self.head.ByteSize() + self.table.slice(0, self.per).nbytes + 1024)


def append_part(request: pb.AppendRequest) -> Call[pb.AppendResponse, pb.AppendResponse]:
    """One part of an Append split by key group (:mod:`.key_groups`): as :func:`append`, but
    the reply is kept as the message, for :func:`~.key_groups.merge_append`."""
    retry = bool(request.producer_id and request.sequence)
    return Call("Append", request, _same, retry, request.stream)


def query(
    stream: str,
    window: str,
    key: Key | None = None,
    range: timedelta | None = None,
    count: int | None = None,
) -> Call[pb.WindowResult, WindowResult]:
    """Query: the window's result; of a keyed stream, ``key``'s (its text, see
    :func:`~mtawindows.v1.keys.key_text`; required there, None elsewhere). With ``range`` (a
    timedelta >= 0: the rows newer than the newest minus it) or ``count`` (an int >= 1: the
    newest rows), the result over that suffix of the window (query-time ranges); not both.
    ValueError or TypeError naming the argument before anything is sent."""
    if range is not None and count is not None:
        msg = f"query: expected range or count, not both; got range={range}, count={count}"
        raise ValueError(msg)
    duration = None
    if range is not None:
        if not isinstance(range, timedelta):
            msg = f"query: range must be a timedelta, got {type(range).__name__} {range!r}"  # type: ignore[unreachable,unused-ignore]
            raise TypeError(msg)
        if range < timedelta(0):
            msg = f"query: range must be >= 0, got {range}"
            raise ValueError(msg)
        duration = convert.duration_to_proto(range)
    if count is not None:
        if isinstance(count, bool) or not isinstance(count, int):
            msg = f"query: count must be an int, got {type(count).__name__} {count!r}"
            raise TypeError(msg)
        if count < 1:
            msg = f"query: count must be >= 1 (leave it out for the whole window), got {count}"
            raise ValueError(msg)
    text = _key(key)
    if key is not None and not text:
        # on the wire an empty key is no key (the unkeyed form): refused here, as the server
        # refuses an empty key everywhere else
        msg = "query: a key is at least one character, got an empty one (leave key out on an unkeyed stream)"
        raise InvalidArgumentError(
            msg, reason=str(Reason.INVALID_ARGUMENT), violations=[Violation("key", msg)]
        )
    req = pb.QueryRequest(stream=stream, window=window, key=text, range=duration, count=count or 0)
    return Call("Query", req, convert.result_from_proto, True, stream)


def read_results(
    stream: str, window: str, after_sequence: int, limit: int
) -> Call[pb.ReadResultsResponse, tuple[list[WindowResult], int]]:
    def decode(m: pb.ReadResultsResponse) -> tuple[list[WindowResult], int]:
        return [convert.result_from_proto(r) for r in m.results], m.latest_sequence

    req = pb.ReadResultsRequest(
        stream=stream, window=window, after_sequence=after_sequence, limit=limit
    )
    return Call("ReadResults", req, decode, True, stream)


def subscribe_request(stream: str, window: str, keys: Iterable[Key] = ()) -> pb.SubscribeRequest:
    """The request of the Subscribe stream; ``keys``: a keyed stream's keys to follow (empty:
    every key)."""
    return pb.SubscribeRequest(stream=stream, window=window, keys=key_texts(keys))


def subscribe(
    stream: str, window: str, keys: Iterable[Key] = ()
) -> Call[pb.SubscribeEvent, tuple[int, WindowResult]]:
    """Subscribe (a server stream; ``decode`` is :func:`event`). Sent again where the stream
    moved (``NOT_OWNER``, ``STREAM_MOVING``), and after its server failed only in a cluster:
    one server gone ends the subscription, as ever."""
    return Call("Subscribe", subscribe_request(stream, window, keys), event, False, stream)


def event(m: pb.SubscribeEvent) -> tuple[int, WindowResult]:
    """A Subscribe event as (batch number, result)."""
    return m.batch, convert.result_from_proto(m.result)


# --------------------------------------------------------------------------- keyed streams


@dataclass(frozen=True)
class KeyPage:
    """One page of :meth:`~mtawindows.client.WindowClient.list_keys`: the keys in key order
    (their text, bytewise; counters only, no results) and the token of the next page ("" after
    the last)."""

    keys: list[KeyInfo]
    next_page_token: str = ""


def _key(key: Key | None) -> str:
    """A key's text on the wire ("" for None: no key)."""
    return "" if key is None else key_text(key)


def key_texts(keys: Iterable[Key]) -> list[str]:
    """The texts of ``keys`` (a str alone is refused: it would be taken letter by letter)."""
    if isinstance(keys, str | bytes):
        msg = f"keys: expected a list of keys, got {type(keys).__name__} {keys!r}; write [{keys!r}]"
        raise TypeError(msg)
    return [key_text(k) for k in keys]


def list_keys(
    stream: str, prefix: str = "", limit: int = 0, page_token: str = ""
) -> Call[pb.ListKeysResponse, KeyPage]:
    """ListKeys: a page of a keyed stream's keys starting with ``prefix``, at most ``limit``
    (0: the server's default) after ``page_token``. Read-only."""

    def decode(m: pb.ListKeysResponse) -> KeyPage:
        return KeyPage([convert.key_info_from_proto(k) for k in m.keys], m.next_page_token)

    req = pb.ListKeysRequest(stream=stream, prefix=prefix, limit=limit, page_token=page_token)
    return Call("ListKeys", req, decode, True, stream)


def list_keys_part(
    stream: str, prefix: str = "", limit: int = 0, page_token: str = ""
) -> Call[pb.ListKeysResponse, pb.ListKeysResponse]:
    """ListKeys of one member of a cluster (the keys of the groups it holds, and which:
    ``groups``), kept as the message for :func:`~.key_groups.merge_key_pages`."""
    req = pb.ListKeysRequest(stream=stream, prefix=prefix, limit=limit, page_token=page_token)
    return Call("ListKeys", req, _same, True, stream)


def get_key(stream: str, key: Key) -> Call[pb.KeyInfo, KeyInfo]:
    """GetKey: one key's counters and each window's result for it. Read-only."""
    req = pb.GetKeyRequest(stream=stream, key=key_text(key))
    return Call("GetKey", req, convert.key_info_from_proto, True, stream)


def delete_key(stream: str, key: Key) -> Call[pb.DeleteKeyResponse, None]:
    """DeleteKey: not idempotent (``KEY_NOT_FOUND`` the second time), so never resent after
    its server failed."""
    req = pb.DeleteKeyRequest(stream=stream, key=key_text(key))
    return Call("DeleteKey", req, _nothing, False, stream)


def compute(
    stream: str,
    rows: Any,
    windows: Sequence[str] = (),
    key_column: str | None = None,
    context_rows: int = 0,
) -> Call[pb.ComputeResponse, dict[str, Any]]:
    """Compute: the per-row results of ``stream``'s windows over ``rows`` (a pyarrow Table or
    RecordBatch, or a pandas DataFrame), each key's rows (``key_column``; default the stream's
    key field) one window starting empty, nothing stored; window name -> ``pyarrow.Table``
    (outputs, ``_size``, ``_row``). Read-only, so resent after a failure. TypeError or
    ValueError naming the argument before anything is sent."""
    import pyarrow as pa

    if (
        isinstance(context_rows, bool)
        or not isinstance(context_rows, int)
        or not 0 <= context_rows < 2**63
    ):
        msg = f"compute: context_rows must be an int from 0 to 2**63 - 1, got {context_rows!r}"
        raise ValueError(msg)
    if not isinstance(rows, pa.Table | pa.RecordBatch):
        if type(rows).__name__ != "DataFrame":
            msg = (
                "compute: rows must be a pyarrow Table or RecordBatch, or a pandas DataFrame; "
                f"got {type(rows).__name__}"
            )
            raise TypeError(msg)
        rows = pa.Table.from_pandas(rows, preserve_index=False)

    def decode(m: pb.ComputeResponse) -> dict[str, Any]:
        return {r.window: convert.arrow_table(r.arrow_ipc) for r in m.results}

    req = pb.ComputeRequest(
        stream=stream,
        windows=list(windows),
        arrow_ipc=_arrow_ipc(rows),
        key_column=key_column or "",
        context_rows=context_rows,
    )
    return Call("Compute", req, decode, True, stream)


def schema_of(info: StreamInfo) -> Schema:
    """A stream's column types by name, the timestamp field included (how appends type rows),
    and how its plain-number timestamps read."""
    spec = info.spec
    s = Schema({f.name: str(f.type) for f in spec.fields})
    s[spec.timestamp_field] = "TIMESTAMP"
    s.ts_field, s.ts_unit, s.wall_clock = spec.timestamp_field, spec.ts_unit, spec.wall_clock
    return s


# --------------------------------------------------------------------------- retries, errors


def backoff(attempt: int) -> float:
    """Seconds to wait after failed try ``attempt`` (from 0): 50 ms doubling up to 2 s, times a
    random 0.5 to 1.5."""
    return float(min(2.0, 0.05 * 2**attempt) * (0.5 + random.random()))


@dataclass(frozen=True)
class Step:
    """What a call does after a failed try that it survives: wait ``pause`` seconds, then
    send again (to :meth:`Course.address`)."""

    pause: float


class Course:
    """One call's way through the cluster: where each try goes, and what a failure means.

    Each try goes where :meth:`Topology.way` says: the stream's owner, or, when the owner is
    cut off from this client but live in the map, another live member that forwards the call
    to it (a call of :data:`FORWARDABLE`; :attr:`forward` is then set for the try). After a
    failed try, :meth:`failed` either raises the typed error (the call ends) or says how long
    to wait before the next try:

    * ``NOT_OWNER`` (nothing was done): the owner is noted and the call resent there at once
      (any call); an owner cut off from this client is reached through another member at
      once; one that answered unwell a moment ago, or one this redirect chain already
      visited, is tried after a pause instead. At most :data:`MAX_REDIRECTS` redirects, then
      :class:`~mtawindows.client.errors.RedirectLoopError`. A redirect that names a key
      ``group`` notes that group's holder (not the stream's owner).
    * ``STREAM_MOVING`` / ``FENCED`` (nothing was done): wait ``retry_after_ms`` (or the
      backoff), look the owner up again, resend (any call); one that names a key ``group``
      forgets that group's holder only.
    * ``MEMBER_ISOLATED`` (nothing was done: the server is cut off from the cluster's
      Redis): it becomes a suspect, the map and the owner are asked of another member, the
      call is resent (any call) after the backoff.
    * Any other UNAVAILABLE (unreachable, ``STORE_UNAVAILABLE``, ``SERVER_STOPPING``, ...),
      DEADLINE_EXCEEDED, or CANCELLED by the server (one stopping cuts the calls in flight):
      the server becomes a suspect (:meth:`Topology.failed`; cut off when it did not answer
      at all) and the map and the owner are asked of another member; resent only when the
      call may be (``Call.retry``: reads, appends with an idempotency key), after the
      backoff. ``OWNER_UNREACHABLE`` (a relay could not reach the owner) makes the owner the
      suspect, not the relay.

    The budget, in a cluster: ``retry_time`` seconds from the call's first try (the clock of
    the topology), after which no new try starts (a try in flight still runs to its own
    deadline): enough to wait out a failover (the lease, then the new owner opens the
    stream). ``retries`` (when given) also bounds the tries. A server alone (one seed, no map
    of several members) gets :data:`DEFAULT_TRIES` tries after a timeout or a failure, as
    there is nowhere else to go.
    """

    def __init__(
        self,
        call: Call[Any, Any],
        topology: Topology,
        *,
        retries: int | None,
        retry_time: float,
        retry: bool | None = None,
    ) -> None:
        self.call = call
        self.stream = call.stream
        self.topology = topology
        self.retries = retries
        self.retry_time = retry_time
        self.retry = call.retry if retry is None else retry
        self.tries = 0  # failed tries followed by a pause
        self.counted = 0  # of which after a timeout or a store failure
        self.paused = 0.0
        self.redirects = 0
        self.chain: list[str] = []  # addresses since the last pause (redirects followed)
        self.path: list[str] = []  # every address tried, for the loop's error
        self.lookup = False  # ask the map for this stream's owner before the next try
        # may go through a member to its owner (an AppendStream's batch then goes whole)
        self.relay = call.method in FORWARDABLE or isinstance(call.request, Pieces)
        self.forward = False  # the last try asks its server to forward it (a relay)
        self.aim = ""  # the server the last try means to reach (the owner behind a relay)
        self.last = ""  # where the last try went
        self.started = topology.clock()
        self._next: str | None = None
        # a NOT_OWNER naming a key group is followed to its holder (a call about one key);
        # False: it ends the call (a keyed Append sent whole, which the client then splits)
        self.follow_groups = True

    def address(self) -> str:
        """Where the next try goes: a redirect's owner, else the topology's way (and
        :attr:`forward`: whether the try asks that server to forward it to the owner)."""
        if self._next is not None:
            address, self.forward = self._next, False
        else:
            address, self.forward = self.topology.way(self.stream, relay=self.relay)
        self._next = None
        owner = self.topology.cached_owner(self.stream) if self.forward else None
        self.aim = owner or address
        self.last = address
        self.chain.append(address)
        self.path.append(address)
        return address

    def spent(self) -> float:
        """Seconds of the budget used: since the first try (or the pauses, if more)."""
        return max(self.topology.clock() - self.started, self.paused)

    def gone(self) -> bool:
        """After a fresh look at the map: whether the server the try in flight means to
        reach (:attr:`aim`) no longer owns the stream (it moved, or is moving) or left the
        cluster, so that an idempotent try still waiting there may be given up."""
        t = self.topology
        return self.aim not in t.live() or t.cached_owner(self.stream) != self.aim

    def abandoned(self, waited: float) -> UnavailableError:
        """The error of a try given up after ``waited`` seconds (see :meth:`gone`), naming
        the server it meant to reach (the suspect)."""
        owner = self.topology.cached_owner(self.stream) or "none: it is moving"
        msg = (
            f"{self.call.method}: no answer from {self.aim} in {waited:.1f}s, and the cluster "
            f"map says stream {self.stream!r} is no longer served there (owner {owner}): "
            "the try was given up"
        )
        return UnavailableError(msg, target=self.aim)

    def failed(self, ex: MtaWindowsError) -> Step:
        """The try that went to ``ex.target`` failed with ``ex``: raises ``ex`` when the call
        ends here, else the :class:`Step` before the next try."""
        t = self.topology
        address = ex.target or ""
        reason = ex.reason
        if reason == Reason.NOT_OWNER:
            return self._redirect(ex)
        if reason in (Reason.STREAM_MOVING, Reason.FENCED):
            group = named_group(ex)
            if group is not None and self.stream:  # one key group moves, not the stream
                t.forget_group(self.stream, group)
            elif self.stream:
                t.forget(self.stream)
            self.lookup = True
            after = _millis(ex.metadata.get("retry_after_ms"))
            return self._pause(ex, after if after is not None else self._backoff(), True)
        if reason == Reason.MEMBER_ISOLATED:  # refused before anything: any call
            if address:
                t.failed(address, unreachable=False)
            t.introduce((ex.metadata.get("members") or "").split(","))
            self.lookup = True
            return self._pause(ex, self._backoff(), failover=True)
        if reason == Reason.OWNER_UNREACHABLE:  # the relay answered: the owner did not
            owner = ex.metadata.get("owner") or ""
            if owner:
                t.failed(owner)
            self.lookup = True
            if not self.retry:
                raise ex
            return self._pause(ex, self._backoff(), failover=True)
        # CANCELLED: by a server going away; no reason: the server did not answer at all
        if ex.code in ("UNAVAILABLE", "CANCELLED", "DEADLINE_EXCEEDED"):
            if address:
                t.failed(address, unreachable=not reason)
            self.lookup = True
            if not self.retry and not never_sent(ex):
                raise ex
            return self._pause(ex, self._backoff(), failover=True)
        raise ex

    def _redirect(self, ex: MtaWindowsError) -> Step:
        md = ex.metadata
        stream = md.get("stream") or self.stream
        owner = md.get("owner") or md.get("owner_id") or ""
        if not owner:  # no live owner to name: the stream is moving
            self.lookup = True
            return self._pause(ex, self._backoff(), failover=True)
        t = self.topology
        group = named_group(ex)
        if group is None:
            t.redirected(stream, owner)
        else:  # a key group's holder, not the stream's owner
            t.group_redirected(stream, group, owner)
            if not self.follow_groups:
                raise ex
        # a relay that answered NOT_OWNER itself (it does not forward) is not asked again
        refused = self.forward and ex.target == self.last
        through = self.relay and not refused and t.relayable(owner)
        if t.is_down(owner) and not through:
            self.lookup = True  # unwell, or unreachable without a relay: wait, ask again
            return self._pause(ex, self._backoff(), failover=True)
        self.redirects += 1
        if self.redirects > MAX_REDIRECTS:
            # the members disagree on the owner: for a moment in a failover (a member that
            # has not seen the move yet), or for good; a pause and a fresh map, until the
            # call's budget is spent (then this error)
            path = " -> ".join([*self.path, owner])
            msg = (
                f"stream {stream!r}: the servers sent the call on {self.redirects - 1} times "
                f"without one taking it (NOT_OWNER: {path}); they disagree on the owner"
            )
            loop = RedirectLoopError(
                msg,
                path=[*self.path, owner],
                code=ex.code,
                reason=ex.reason,
                metadata=ex.metadata,
                target=ex.target,
            )
            loop.__cause__ = ex
            self.lookup = True
            return self._pause(loop, self._backoff(), failover=True)
        if through:  # cut off from this client: through another member (address())
            return Step(0.0)
        if owner in self.chain:  # back to where this chain went before: let it settle
            self._next = owner
            return self._pause(ex, self._backoff(), failover=True)
        self._next = owner
        return Step(0.0)

    def _backoff(self) -> float:
        """The pause after the failed tries so far: :func:`backoff`; in a cluster at most
        about a quarter lease (with jitter), the pace of its heartbeats and renewals, at
        which a move can progress (each try asks the map of another member first)."""
        wait = backoff(self.tries)
        cmap = self.topology.map
        if self.topology.clustered and cmap is not None and cmap.lease_ms > 0:
            tick = max(0.05, cmap.lease_ms / 4000)
            wait = min(wait, tick * (0.5 + random.random()))
        return wait

    def _pause(self, ex: MtaWindowsError, wait: float, failover: bool) -> Step:
        clustered = self.topology.clustered
        self.tries += 1
        if not (failover and clustered):
            self.counted += 1
        if self.retries is not None:
            if self.tries >= self.retries:
                raise ex
        elif not clustered and self.counted >= DEFAULT_TRIES:
            raise ex
        left = self.retry_time - self.spent()
        if left <= 0:
            raise ex
        wait = max(0.0, min(wait, left))
        self.paused += wait
        self.chain = []
        return Step(wait)


class GroupCourse(Course):
    """The course of a call about key groups of a keyed stream on a cluster (``groups``: an
    Append part's groups, or the one group of a key's Query, GetKey, DeleteKey, Subscribe):
    each try goes to the holder of the first group (:meth:`Topology.group_way`: the holder,
    else placement of the unit ``"stream#group"``), never through a relay; a redirect naming
    a group notes that group's holder, and :meth:`gone` asks whether the server tried still
    holds every group. The rules after a failure are :class:`Course`'s. A caller that sends
    to a server of its own choosing (an Append part, a subscription at one member) says so
    with :meth:`aim_at`."""

    def __init__(
        self,
        call: Call[Any, Any],
        topology: Topology,
        *,
        groups: Sequence[int],
        retries: int | None,
        retry_time: float,
        retry: bool | None = None,
    ) -> None:
        super().__init__(call, topology, retries=retries, retry_time=retry_time, retry=retry)
        self.groups = tuple(groups)
        self.relay = False

    def address(self) -> str:
        if self._next is not None:
            address = self._next
        elif self.groups:
            address = self.topology.group_way(self.stream, self.groups[0])
        else:
            address = self.topology.route(self.stream)
        self._next = None
        self.aim_at(address)
        return address

    def aim_at(self, address: str) -> None:
        """The next try goes to ``address`` (chosen by the caller)."""
        self.forward = False
        self.aim = self.last = address
        self.chain.append(address)
        self.path.append(address)

    def gone(self) -> bool:
        t = self.topology
        if self.aim not in t.live():
            return True
        return any(t.holder(self.stream, g) != self.aim for g in self.groups)

    def fork(self, call: Call[Any, Any], groups: Sequence[int]) -> GroupCourse:
        """A course for a share of this one's work (an Append part split again): ``call``
        about ``groups``, with the tries, pauses and redirects spent so far (its budget)."""
        out = GroupCourse(
            call,
            self.topology,
            groups=groups,
            retries=self.retries,
            retry_time=self.retry_time,
            retry=self.retry,
        )
        out.tries, out.counted, out.paused = self.tries, self.counted, self.paused
        out.redirects, out.started = self.redirects, self.started
        out.path = list(self.path)
        return out


def named_group(ex: MtaWindowsError) -> int | None:
    """The key group a refusal names (metadata ``group``), None when it names none."""
    raw = ex.metadata.get("group")
    try:
        return int(raw) if raw else None
    except ValueError:
        return None


# what gRPC says of a call it could not even send (no connection): nothing was done, so any
# call may go elsewhere (gRPC's own "transparent retry" rule)
_NEVER_SENT = ("failed to connect to all addresses", "connections to all backends failing")


def never_sent(ex: MtaWindowsError) -> bool:
    """Whether ``ex`` is gRPC's refusal of a call it never sent (no connection to the server):
    UNAVAILABLE without an ErrorInfo reason, and a connection failure in its text."""
    if ex.code != "UNAVAILABLE" or ex.reason:
        return False
    text = ex.message.lower()
    return any(m in text for m in _NEVER_SENT)


def left(deadline: float | None) -> float | None:
    """Seconds from now to ``deadline`` (``time.monotonic``; None: no bound)."""
    return None if deadline is None else max(0.001, deadline - time.monotonic())


def resume(course: Course, ended: MtaWindowsError) -> Step:
    """How a subscription goes on after it ended with ``ended``: its own deadline ends it,
    the rest is the course's rule (see :func:`subscribe`)."""
    if ended.code == "DEADLINE_EXCEEDED":
        raise ended
    return course.failed(ended)


def _millis(raw: str | None) -> float | None:
    """Metadata ``retry_after_ms`` in seconds (None when absent or not a number)."""
    try:
        return max(0.0, int(raw or "") / 1000)
    except ValueError:
        return None


__all__ = [
    "DEFAULT_TRIES",
    "FORWARDABLE",
    "MAX_REDIRECTS",
    "RESULTS",
    "RETRYABLE",
    "Call",
    "Course",
    "GroupCourse",
    "Key",
    "KeyPage",
    "Step",
    "append",
    "append_part",
    "append_request",
    "backoff",
    "create_stream",
    "create_window",
    "delete_key",
    "delete_stream",
    "delete_window",
    "event",
    "get_cluster_map",
    "get_key",
    "get_stream",
    "get_window",
    "key_texts",
    "left",
    "list_keys",
    "list_keys_part",
    "list_streams",
    "list_windows",
    "merge_streams",
    "named_group",
    "query",
    "read_results",
    "result_mode",
    "resume",
    "schema_of",
    "subscribe",
    "subscribe_request",
]
