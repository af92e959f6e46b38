"""Keyed streams on a cluster: each key group has its own holder, so the SDK splits what it
sends by group and merges what comes back. The pure parts live here; the clients
(:mod:`.blocking`, :mod:`.aio`) only send and wait.

* :func:`split_append`: an AppendRequest's rows by the holder of each row's key group (the
  key column's value -> :func:`~mtawindows.v1.keys.key_text` ->
  :func:`~mtawindows.v1.keys.key_group`), one :class:`Part` per holder, each with the
  request's ``producer_id`` and ``sequence`` (the servers keep idempotency per group, so a
  resend after a partial failure applies only the groups that were not applied). Columns are
  taken by index arrays (protobuf columns as lists, an Arrow IPC batch with ``Table.take``),
  never as row dicts.
* :func:`merge_append`: the parts' AppendResponses as the one a single server would give:
  counters summed, ``duplicate`` when every part was a duplicate, FINAL results concatenated
  (in part order), per-row results back in input order, ``WindowRowResults.rows`` set when
  not every input row has an entry.
* :class:`KeyedAppend`: one split Append's course over a cluster, without I/O: the parts in
  flight, the answers so far, what to send again after a part is refused (``NOT_OWNER``,
  ``STREAM_MOVING``: split again by the holders of a fresh map) under the routing's rules
  (:class:`~.calls.GroupCourse`).
* :func:`merge_key_pages` / :func:`missing_groups`: the members' ListKeys pages as one page
  in key order (a k-way merge), and which groups no member answered for.
* :func:`split_keys`: keys (texts) by the holder of their group, for Subscribe.

Not atomic across holders: on a single server a refused batch applies nothing; split over
several holders, a part refused for its own rows (``BAD_VALUES``, ``OUT_OF_ORDER``, ...) fails
the call while the other parts may have been applied. With ``producer_id`` and ``sequence``
the batch can be sent again as it was (the applied groups answer duplicate); a violation's
row (``columns[<column>][<row>]``) is renumbered to the input's row.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mtawindows.v1 import convert
from mtawindows.v1 import windows_pb2 as pb
from mtawindows.v1.keys import key_group, key_groups, key_text

from .calls import GroupCourse, append_part
from .errors import InternalError, MtaWindowsError, Violation

if TYPE_CHECKING:
    from .cluster_map import Topology

__all__ = [
    "DEFAULT_LIST_LIMIT",
    "MAX_LIST_LIMIT",
    "KeyedAppend",
    "Part",
    "merge_append",
    "merge_key_pages",
    "missing_groups",
    "renumber",
    "split_append",
    "split_keys",
]

DEFAULT_LIST_LIMIT = 1000  # a ListKeys page without a limit (the server's default)
MAX_LIST_LIMIT = 10_000  # the most keys a ListKeys page holds (the server's bound)
_SCALAR_KINDS = ("doubles", "ints", "strings", "bools", "timestamps")
_CELL = re.compile(r"^(columns\[.*\])\[(\d+)\]$")  # a violation's path: columns[<col>][<row>]

Holder = Callable[[int], str]  # key group -> the address of its holder


@dataclass(frozen=True)
class Part:
    """The rows of an Append that go to one holder: its ``address``, the ``rows`` of the
    input they are (0-based, ascending; None: every row, in order), their key ``groups``
    (ascending) and the ``request`` that carries them."""

    address: str
    rows: list[int] | None
    groups: tuple[int, ...]
    request: pb.AppendRequest


# --------------------------------------------------------------------------- the split


def _column_values(column: pb.Column) -> tuple[str | None, list[Any]]:
    kind = column.WhichOneof("data")
    if kind is None:
        return None, []
    return kind, list(getattr(column, kind).values)


def _arrow_table(request: pb.AppendRequest) -> Any:
    import pyarrow as pa

    return pa.ipc.open_stream(pa.py_buffer(request.arrow_ipc)).read_all()


def _row_keys(request: pb.AppendRequest, key_field: str) -> list[Any] | None:
    """Each row's key value, or None when the request cannot be split (no key column, a
    column of another length, nulls, a type no key has: the server refuses it whole)."""
    if request.arrow_ipc:
        import pyarrow as pa

        try:
            table = _arrow_table(request)
        except Exception:  # not Arrow IPC: the server says so
            return None
        if key_field not in table.column_names:
            return None
        column = table.column(key_field)
        kind = column.type
        if pa.types.is_dictionary(kind):
            kind = kind.value_type
        if column.null_count or not (
            pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_integer(kind)
        ):
            return None
        keys: list[Any] = column.to_pylist()
        return keys
    by_name = {c.name: c for c in request.columns}
    key_column = by_name.get(key_field)
    if key_column is None:
        return None
    kind, keys = _column_values(key_column)
    if kind not in ("strings", "ints", "timestamps"):
        return None
    for c in request.columns:
        k = c.WhichOneof("data")
        if k not in _SCALAR_KINDS or len(getattr(c, k).values) != len(keys):
            return None
    return keys


def _template(request: pb.AppendRequest) -> pb.AppendRequest:
    """``request`` without its rows (every other field, those added later too)."""
    out = pb.AppendRequest()
    for fd, value in request.ListFields():
        if fd.name in ("columns", "arrow_ipc"):
            continue
        if fd.is_repeated:
            getattr(out, fd.name).extend(value)
        elif fd.message_type is not None:
            getattr(out, fd.name).CopyFrom(value)
        else:
            setattr(out, fd.name, value)
    return out


def _take(request: pb.AppendRequest, buckets: Sequence[list[int]]) -> list[pb.AppendRequest]:
    """One request per bucket of row indices: ``request``'s rows at those indices."""
    template = _template(request)
    out = []
    for _ in buckets:
        part = pb.AppendRequest()
        part.CopyFrom(template)
        out.append(part)
    if request.arrow_ipc:
        import pyarrow as pa

        from .rows import _arrow_ipc

        table = _arrow_table(request)
        for part, idx in zip(out, buckets, strict=True):
            part.arrow_ipc = _arrow_ipc(table.take(pa.array(idx, pa.int64())))
        return out
    for column in request.columns:
        kind, values = _column_values(column)
        assert kind is not None  # checked by _row_keys
        for part, idx in zip(out, buckets, strict=True):
            taken = part.columns.add(name=column.name)
            getattr(taken, kind).values.extend([values[i] for i in idx])
    return out


def _compose(outer: list[int] | None, inner: list[int] | None) -> list[int] | None:
    """Rows ``inner`` of a part that is rows ``outer`` of the input, as rows of the input."""
    if outer is None:
        return inner
    if inner is None:
        return outer
    return [outer[i] for i in inner]


def split_append(
    request: pb.AppendRequest,
    key_field: str,
    groups: int,
    holder: Holder,
    rows: list[int] | None = None,
) -> tuple[list[Part], int] | None:
    """``request``'s rows split by the holder of each row's key group (``groups`` groups;
    ``holder``: group -> address, asked once per group that has rows): one :class:`Part` per
    address, in the order of their first row, and the number of rows. ``rows``: the input's
    rows ``request`` carries (when it is a part split again; None: it is the input). One
    part keeps ``request`` as it is. None when the request cannot be split (no rows, no key
    column, columns of different lengths, values no key has): it goes whole to the stream's
    owner, which refuses it or takes it."""
    keys = _row_keys(request, key_field)
    if not keys:
        return None
    row_groups = key_groups(keys, groups)
    where: dict[int, str] = {}
    buckets: dict[str, list[int]] = {}
    held: dict[str, set[int]] = {}
    for i, g in enumerate(row_groups):
        address = where.get(g)
        if address is None:
            address = where[g] = holder(g)
            held.setdefault(address, set()).add(g)
        bucket = buckets.get(address)
        if bucket is None:
            bucket = buckets[address] = []
        bucket.append(i)
    n = len(keys)
    if len(buckets) == 1:
        (address,) = buckets
        return [Part(address, rows, tuple(sorted(held[address])), request)], n
    requests = _take(request, list(buckets.values()))
    for later in requests[1:]:  # the part with the first row counts the batch (once)
        later.continuation = True
    parts = [
        Part(address, _compose(rows, idx), tuple(sorted(held[address])), part)
        for (address, idx), part in zip(buckets.items(), requests, strict=True)
    ]
    return parts, n


def renumber(ex: MtaWindowsError, rows: Sequence[int] | None) -> MtaWindowsError:
    """``ex`` (a part's refusal) with each violation's row (``columns[<column>][<row>]``)
    renumbered from the part's rows to the input's (``rows``: the part's rows of the input)."""
    if rows is None:
        return ex
    row = ex.metadata.get("row", "")
    if row.isdigit() and int(row) < len(rows):  # OUT_OF_ORDER and the like name one row
        ex.metadata["row"] = str(rows[int(row)])
        ex.message = ex.message.replace(f"row {row} ", f"row {rows[int(row)]} ", 1)
    if not ex.violations:
        return ex
    fixed = []
    for v in ex.violations:
        m = _CELL.match(v.field)
        if m is not None and int(m.group(2)) < len(rows):
            v = Violation(f"{m.group(1)}[{rows[int(m.group(2))]}]", v.description)
        fixed.append(v)
    ex.violations = fixed
    return ex


# --------------------------------------------------------------------------- the merge


def _entries(rr: pb.WindowRowResults) -> int:
    n = len(rr.sizes.values)
    for c in rr.columns:
        kind = c.WhichOneof("data")
        if kind is not None:
            n = max(n, len(getattr(c, kind).values))
    return n


def _origins(
    rr: pb.WindowRowResults, rows: list[int] | None, n_rows: int, target: str
) -> list[int]:
    """The input row of each per-row entry of a part's answer ``rr``."""
    part_rows = rows if rows is not None else list(range(n_rows))
    entries = _entries(rr)
    if rr.HasField("rows"):
        return [part_rows[i] for i in rr.rows.values]
    if entries == 0:  # no row applied (a duplicate, every row late): an empty ``rows``
        return []
    if entries != len(part_rows):
        msg = (
            f"Append: {target or 'a server'} answered {entries} per-row results of window "
            f"{rr.window!r} for {len(part_rows)} rows without their rows "
            "(WindowRowResults.rows): they cannot be put back in the input's order"
        )
        raise InternalError(msg, target=target or None)
    return part_rows


def _merge_rows(
    window: str, shares: Sequence[tuple[list[int], pb.WindowRowResults]], n_rows: int
) -> pb.WindowRowResults:
    """One window's per-row results of every part (``shares``: each part's input rows of its
    entries and its results), in input order."""
    origins = [o for rows, _ in shares for o in rows]
    order = sorted(range(len(origins)), key=origins.__getitem__)
    out = pb.WindowRowResults(window=window)
    names: list[str] = []
    kinds: dict[str, str] = {}
    for _, rr in shares:
        for c in rr.columns:
            if c.name not in kinds:
                names.append(c.name)
                kinds[c.name] = ""
            kind = c.WhichOneof("data")
            if kind is not None and not kinds[c.name]:
                kinds[c.name] = kind
    for name in names:
        values: list[Any] = []
        nulls: list[bool] = []
        any_null = False
        for rows, rr in shares:
            column = next((c for c in rr.columns if c.name == name), None)
            if column is None or column.WhichOneof("data") is None:
                if rows:
                    msg = f"Append: per-row results of window {window!r} lack column {name!r}"
                    raise InternalError(msg)
                continue
            got = getattr(column, kinds[name]).values
            values.extend(got)
            if column.nulls:
                any_null = True
                nulls.extend(column.nulls)
            else:
                nulls.extend([False] * len(got))
        merged = out.columns.add(name=name)
        if kinds[name]:
            getattr(merged, kinds[name]).values.extend([values[i] for i in order])
        if any_null:
            merged.nulls.extend([nulls[i] for i in order])
    sizes = [s for _, rr in shares for s in rr.sizes.values]
    out.sizes.SetInParent()  # present, as a server's, even with no entry
    out.sizes.values.extend([sizes[i] for i in order])
    if len(origins) != n_rows:  # present, even empty (no row applied)
        out.rows.SetInParent()
        out.rows.values.extend(sorted(origins))
    return out


def merge_append(
    n_rows: int,
    answers: Sequence[tuple[list[int] | None, pb.AppendResponse]],
    targets: Sequence[str] = (),
) -> pb.AppendResponse:
    """The answer of an Append of ``n_rows`` rows from its parts' ``answers`` (each: the
    part's rows of the input, None for every row, and its AppendResponse; ``targets``: who
    answered, for errors), as one server holding every group would give it: rows applied,
    late and buffered summed; ``duplicate`` when every part was one; the FINAL ``results``
    concatenated in part order; each window's per-row results in input order (an entry's
    input row from the part's ``WindowRowResults.rows``, else the part's rows one for one),
    with ``rows`` set to the input rows that have an entry when not every row has one.
    A single answer for every row is returned as it is."""
    if len(answers) == 1 and answers[0][0] is None:
        return answers[0][1]
    out = pb.AppendResponse()
    out.duplicate = bool(answers) and all(a.duplicate for _, a in answers)
    windows: dict[str, list[tuple[list[int], pb.WindowRowResults]]] = {}
    tables: dict[str, list[Any]] = {}
    for i, (rows, a) in enumerate(answers):
        out.rows_applied += a.rows_applied
        out.rows_late += a.rows_late
        out.rows_buffered += a.rows_buffered
        out.results.extend(a.results)
        target = targets[i] if i < len(targets) else ""
        for rr in a.row_results:
            if rr.arrow_ipc:
                tables.setdefault(rr.window, []).append(_arrow_share(rr, rows))
                continue
            origin = _origins(rr, rows, n_rows, target)
            windows.setdefault(rr.window, []).append((origin, rr))
    for window, shares in windows.items():
        out.row_results.append(_merge_rows(window, shares, n_rows))
    for window, parts in tables.items():
        out.row_results.append(_merge_arrow(window, parts, n_rows))
    return out


def _arrow_share(rr: pb.WindowRowResults, rows: list[int] | None) -> Any:
    """A part's Arrow per-row results with ``_row`` the input's row (``rows``: the part's
    rows of the input, None: every row)."""
    import pyarrow as pa

    table = convert.arrow_table(rr.arrow_ipc)
    if rows is None:
        return table
    i = table.schema.get_field_index("_row")
    origin = pa.array(rows, pa.int64()).take(table.column(i))
    return table.set_column(i, table.schema.field(i), origin)


def _merge_arrow(window: str, parts: Sequence[Any], n_rows: int) -> pb.WindowRowResults:
    """One window's Arrow per-row results of every part, in input order (by ``_row``), with
    ``rows`` (the ``_row`` column) when not every one of the ``n_rows`` rows has one."""
    import pyarrow as pa

    try:
        table = pa.concat_tables(parts, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as ex:
        msg = f"Append: the parts' per-row results of window {window!r} do not agree ({ex})"
        raise InternalError(msg) from None
    table = table.sort_by("_row")
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    out = pb.WindowRowResults(window=window, arrow_ipc=sink.getvalue().to_pybytes())
    if table.num_rows != n_rows:  # present, even empty (no row applied)
        out.rows.values.extend(table.column("_row").to_pylist())
    return out


# --------------------------------------------------------------------------- one split Append


@dataclass
class Pending:
    """A part still to be answered, and its course (its retries, its budget)."""

    part: Part
    course: GroupCourse


class KeyedAppend:
    """One Append of a keyed stream split by key-group holder, as a course without I/O::

        plan = KeyedAppend(request, "host", topology, retries=None, retry_time=10.0)
        if plan.start():                      # False: send it whole, as any Append
            while plan.pending:
                outcomes = [send(p) for p in plan.pending]    # concurrently
                pause = plan.settle(outcomes)                 # raises what ends the call
                if plan.pending:
                    sleep(pause); refresh the map of the stream; plan.resplit()
            answer = plan.result()

    Each part has a :class:`~.calls.GroupCourse` (the routing's rules: a ``NOT_OWNER`` or a
    ``STREAM_MOVING`` is resent, any call; a failure of the server only with an
    idempotency key; within ``retries`` / ``retry_time``, ``MAX_REDIRECTS`` redirects); a
    part sent again is first split again by the holders of the fresh map (its groups may
    now be held by several), each share with a fork of its course. The first error that
    ends a part ends the call (raised with the violations' rows renumbered to the input's;
    the parts answered by then stay applied)."""

    def __init__(
        self,
        request: pb.AppendRequest,
        key_field: str,
        topology: Topology,
        *,
        retries: int | None,
        retry_time: float,
    ) -> None:
        self.request = request
        self.key_field = key_field
        self.stream = request.stream
        self.topology = topology
        self.retries = retries
        self.retry_time = retry_time
        self.n_rows = 0
        self.pending: list[Pending] = []
        self.answers: list[tuple[list[int] | None, pb.AppendResponse]] = []
        self.targets: list[str] = []

    def _holders(self) -> tuple[int, Holder] | None:
        holders = self.topology.holders(self.stream, fresh=False)  # the client asked anew
        if not holders:
            return None
        stream, way = self.stream, self.topology.group_way
        return len(holders), lambda g: way(stream, g)

    def start(self) -> bool:
        """Split the request by the holders known (:meth:`Topology.holders`); False when the
        stream's groups have no holders known or the request cannot be split (then it goes
        whole, as any Append)."""
        known = self._holders()
        if known is None:
            return False
        split = split_append(self.request, self.key_field, known[0], known[1])
        if split is None:
            return False
        parts, self.n_rows = split
        self.pending = [Pending(p, self._course(p)) for p in parts]
        return True

    def _course(self, part: Part) -> GroupCourse:
        return GroupCourse(
            append_part(part.request),
            self.topology,
            groups=part.groups,
            retries=self.retries,
            retry_time=self.retry_time,
        )

    def settle(self, outcomes: Sequence[pb.AppendResponse | MtaWindowsError]) -> float:
        """Take the outcome of each pending part's try (its answer, or its error): answered
        parts are kept, refused ones stay pending (with the pause their course asks for).
        The seconds to wait before the pending parts go again; raises the first error that
        ends its part's course."""
        again: list[Pending] = []
        pause = 0.0
        final: MtaWindowsError | None = None
        for p, got in zip(self.pending, outcomes, strict=True):
            if isinstance(got, pb.AppendResponse):
                self.answers.append((p.part.rows, got))
                self.targets.append(p.part.address)
                continue
            try:
                step = p.course.failed(got)
            except MtaWindowsError as ex:
                final = final or renumber(ex, p.part.rows)
                continue
            again.append(p)
            pause = max(pause, step.pause)
        if final is not None:
            self.pending = []
            if self.answers:  # not atomic across holders: say what went in all the same
                applied = sum(r.rows_applied for _, r in self.answers)
                final.metadata["rows_applied_elsewhere"] = str(applied)
                final.message += (
                    f" [the batch's parts at other holders were applied: {applied} rows; an "
                    "append split over key-group holders is not atomic: resend the corrected "
                    "batch with the same producer_id and sequence and those parts are "
                    "duplicates]"
                )
            raise final
        self.pending = again
        return pause

    def resplit(self) -> None:
        """Split every pending part again by the holders known now (after a fresh map)."""
        known = self._holders()
        out: list[Pending] = []
        for p in self.pending:
            split = None
            if known is not None:
                split = split_append(
                    p.part.request, self.key_field, known[0], known[1], p.part.rows
                )
            if split is None:  # the stream's groups are no longer owned apart
                address = self.topology.route(self.stream)
                out.append(
                    Pending(Part(address, p.part.rows, p.part.groups, p.part.request), p.course)
                )
                continue
            parts = split[0]
            if len(parts) == 1:
                out.append(Pending(parts[0], p.course))
                continue
            out.extend(
                Pending(sub, p.course.fork(append_part(sub.request), sub.groups)) for sub in parts
            )
        self.pending = out

    def result(self) -> pb.AppendResponse:
        """The merged answer (:func:`merge_append`)."""
        return merge_append(self.n_rows, self.answers, self.targets)


# --------------------------------------------------------------------------- ListKeys


def merge_key_pages(
    pages: Iterable[pb.ListKeysResponse], limit: int
) -> tuple[list[pb.KeyInfo], str]:
    """One page of keys from the members' pages for the same request: the first ``limit``
    (0: :data:`DEFAULT_LIST_LIMIT`; at most :data:`MAX_LIST_LIMIT`) in key order (a k-way
    merge; a key two members answered, as during a hand-over, once), and the next page's
    token: the page's last key while keys may follow (a member's page was full, or keys
    were left over), else "". Every member was asked after the same token, so each of its
    pages starts after it: the first ``limit`` of the union are the first ``limit`` of the
    members' first ``limit`` each."""
    pages = list(pages)
    cap = min(limit if limit > 0 else DEFAULT_LIST_LIMIT, MAX_LIST_LIMIT)
    out: list[pb.KeyInfo] = []
    last: str | None = None
    more = any(p.next_page_token for p in pages)
    for k in heapq.merge(*(p.keys for p in pages), key=lambda k: k.key):
        if k.key == last:
            continue
        if len(out) == cap:
            more = True
            break
        out.append(k)
        last = k.key
    return out, (out[-1].key if more and out else "")


def missing_groups(pages: Iterable[pb.ListKeysResponse], groups: int) -> set[int]:
    """The groups of ``range(groups)`` none of ``pages`` answered for. Only asked of a
    cluster's members, each of which names the groups it answered for: a member holding none
    of the stream's groups names none (its empty ``groups`` answers for no group)."""
    missing = set(range(groups))
    for p in pages:
        missing.difference_update(p.groups)
    return missing


# --------------------------------------------------------------------------- Subscribe


def split_keys(keys: Iterable[str], groups: int, holder: Holder) -> dict[str, list[str]]:
    """Keys (texts) by the address of their group's holder (``holder``: group -> address),
    in the order of their first key; each key once."""
    where: dict[int, str] = {}
    out: dict[str, list[str]] = {}
    seen: set[str] = set()
    for k in keys:
        text = key_text(k)
        if text in seen:
            continue
        seen.add(text)
        g = key_group(text, groups)
        address = where.get(g)
        if address is None:
            address = where[g] = holder(g)
        out.setdefault(address, []).append(text)
    return out
