"""A refused request (:class:`ServiceError`) and the builders of the refusals shared by the
service and the transport: a batch over the row limit, a failed store, a bad field.

Reasons are the contract's (:class:`mtawindows.v1.reasons.Reason`); codes are gRPC status
code names.
"""

from __future__ import annotations

import logging
import traceback
import uuid
from collections.abc import Mapping, Sequence

from mtawindows.v1.reasons import Reason
from mtawindows.v1.types import clip, show

from ..storage.fencing import FencedError

log = logging.getLogger("mtawindows.service")


class ServiceError(Exception):
    """A refused request: a gRPC status code name, an UPPER_SNAKE reason, a message naming what
    was wrong, expected and given, and field violations for bad requests."""

    def __init__(
        self,
        code: str,
        reason: str,
        message: str,
        violations: Sequence[tuple[str, str]] = (),
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.violations = list(violations)
        self.metadata = dict(metadata or {})


def batch_too_large(rows: int, limit: int) -> ServiceError:
    return ServiceError(
        "RESOURCE_EXHAUSTED",
        Reason.BATCH_TOO_LARGE,
        f"batch of {rows} rows exceeds the server's limit of {limit} rows per Append; split it",
        metadata={"limit": str(limit), "rows": str(rows)},
    )


def int64_row_result(
    stream: str, window: str, output: str, row: int, value: int, key: str | None = None
) -> ServiceError:
    """INVALID_ARGUMENT, ``BAD_VALUES``: with per-row results, the INT64 sum ``output`` of
    ``window`` (of a keyed stream's ``key``) would be ``value`` after the request's row
    ``row`` (-1: a row a reorder buffer held from an earlier batch), past int64, which a
    per-row result carries (found before the batch changed anything)."""
    shown = (
        str(value) if len(str(value)) <= 40 else f"{str(value)[:20]}...({len(str(value))} digits)"
    )
    of_key = "" if key is None else f" (key {show(key)})"
    meta = {"stream": stream, "window": window, "aggregation": output, "row": str(row)}
    if key is not None:
        meta["key"] = key
    return ServiceError(
        "INVALID_ARGUMENT",
        Reason.BAD_VALUES,
        f"window {window!r}: its sum {output!r}{of_key} would be {shown} after "
        + (
            f"row {row} of this batch"
            if row >= 0
            else "a row the reorder buffer held from an earlier batch (released by this one)"
        )
        + ", past what INT64 holds (-2**63 to 2**63-1), and per-row results carry it "
        "as INT64; nothing was applied. Ask for final results or none (a result past int64 "
        "is answered as the nearest double), or send values whose sums fit",
        [(f"columns (window {window!r}, sum {output!r})", "a per-row INT64 sum past int64")],
        meta,
    )


def lower_failed(stream: str, window: str, output: str, monoid: str, ex: Exception) -> ServiceError:
    """FAILED_PRECONDITION, ``LOWER_FAILED``: the plugin monoid ``monoid`` of aggregation
    ``output`` raised ``ex`` in ``lower`` on a result the batch would give ``window`` (found
    before the batch changed anything, so the same batch fails the same way). The caller gets
    the exception's type, and its text when it is a refusal the plugin means (ValueError,
    TypeError, ArithmeticError, as for a ``lift``); any other text stays in the log, under an
    error id."""
    error_id = new_error_id()
    trace = "".join(traceback.format_exception(type(ex), ex, ex.__traceback__, limit=8))
    log.warning(
        "plugin lower failed, error id %s: stream %r, window %r, aggregation %r (%s): %s",
        error_id,
        stream,
        window,
        output,
        monoid,
        clip(trace, 4000),  # bounded: a plugin's text may be any size
        extra={"error_id": error_id, "stream": stream, "window": window},
    )
    meant = isinstance(ex, ValueError | TypeError | ArithmeticError)
    said = f"{type(ex).__name__}: {clip(str(ex), 200)}" if meant else type(ex).__name__
    return ServiceError(
        "FAILED_PRECONDITION",
        Reason.LOWER_FAILED,
        f"window {window!r}: the lower of aggregation {output!r} (plugin {monoid!r}) raised "
        f"{said} on the result this batch would give; nothing was applied (error id "
        f"{error_id})",
        metadata={
            "stream": stream,
            "window": window,
            "aggregation": output,
            "monoid": monoid,
            "error": said,
            "error_id": error_id,
        },
    )


def new_error_id() -> str:
    """A fresh id for an error the log explains and the caller only names."""
    return uuid.uuid4().hex[:16]


def store_failed(
    where: str, ex: BaseException, metadata: Mapping[str, str] | None = None
) -> ServiceError:
    """UNAVAILABLE, ``STORE_UNAVAILABLE``: the store's error text (hosts, ports, paths) stays
    in the log under an id, which is all the caller gets of it."""
    error_id = new_error_id()
    log.warning(
        "store failed, error id %s: %s: %s",
        error_id,
        where,
        clip(f"{type(ex).__name__}: {ex}", 1000),
        extra={"error_id": error_id, **(metadata or {})},
    )
    return ServiceError(
        "UNAVAILABLE",
        Reason.STORE_UNAVAILABLE,
        f"{where}: the store failed ({type(ex).__name__}, error id {error_id}); retry the "
        "call (an append with the same producer_id and sequence: one that was applied is "
        "then a duplicate)",
        metadata={**(metadata or {}), "error_id": error_id},
    )


def store_unavailable(stream: str, ex: BaseException, window: str | None = None) -> ServiceError:
    if isinstance(ex, FencedError):
        return fenced_out(stream)
    where = f"stream {stream!r}" + (f", window {window!r}" if window else "")
    return store_failed(where, ex, {"stream": stream})


def moved_after_journal(stream: str) -> ServiceError:
    """An append's batch reached the journal, then the stream moved (a fenced write of a
    window): its new owner applies it from the journal. UNAVAILABLE, ``STORE_UNAVAILABLE``
    (the outcome is not "nothing was done"): resend with the same producer id and sequence,
    a duplicate then. Metadata ``fenced``: the gRPC layer drops the stream."""
    return ServiceError(
        "UNAVAILABLE",
        Reason.STORE_UNAVAILABLE,
        f"stream {stream!r} moved to another server while this append was applied; its batch "
        "was journaled and is applied by the new owner: resend it with the same producer_id "
        "and sequence (a duplicate then)",
        metadata={"stream": stream, "fenced": "1"},
    )


def fenced_out(stream: str) -> ServiceError:
    """A write of ``stream`` was refused by its fence (a newer owner holds it), or the stream
    left this server while the call waited: nothing of the call was applied. The server's own
    record: the gRPC layer drops the stream and answers where its owner is."""
    return ServiceError(
        "UNAVAILABLE",
        Reason.FENCED,
        f"stream {stream!r} moved to another server while this call ran; nothing was applied",
        metadata={"stream": stream},
    )


def not_found(reason: str, message: str, **metadata: str) -> ServiceError:
    """NOT_FOUND: no stream or no window of that name (``metadata`` names it)."""
    return ServiceError("NOT_FOUND", reason, message, metadata=metadata)


def invalid(
    field_path: str,
    message: str,
    reason: str = Reason.INVALID_ARGUMENT,
    metadata: Mapping[str, str] | None = None,
    *,
    given: str | None = None,
) -> ServiceError:
    """INVALID_ARGUMENT for one field: the message names the field, says what was wrong (and
    echoes ``given``, already shortened, when set); the violation is (field, what was wrong)."""
    text = f"{field_path}: {message}" if given is None else f"{field_path}: {message}: {given}"
    return ServiceError("INVALID_ARGUMENT", reason, text, [(field_path, message)], metadata)


def group_refusal(ex: ServiceError, stream: str, group: int) -> ServiceError:
    """A refusal about key group ``group``'s unit said about the stream: metadata ``stream``
    (the stream's name), ``group`` and ``unit``, and a message naming the group."""
    unit = f"{stream}#{group}"
    meta = dict(ex.metadata)
    meta.update(stream=stream, group=str(group), unit=unit)
    message = ex.message.replace(f"stream {unit!r}", f"key group {group} of stream {stream!r}")
    return ServiceError(ex.code, ex.reason, message, ex.violations, meta)
