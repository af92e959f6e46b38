"""A stream's state beside its windows (:class:`StreamState`: counters, newest timestamps,
producers' last sequences, the reorder buffer, the lsn) and its saved JSON form."""

from __future__ import annotations

import heapq
import json
from dataclasses import dataclass, field
from typing import Any

from ..engine.ledger import Ledger

# After an unclean stop the last saved state may be behind by the batches of one flush
# interval; result sequences then jump ahead by this much so they never repeat.
SEQUENCE_GAP_AFTER_CRASH = 1 << 32


@dataclass
class StreamState:
    newest: int | None = None  # newest timestamp released to the windows
    seen: int | None = None  # newest timestamp received (reorder buffer)
    rows_appended: int = 0
    rows_late: int = 0
    batches_appended: int = 0
    sequence: int = 0  # orders results; jumps ahead after an unclean stop
    batches_duplicate: int = 0
    producers: Ledger = field(default_factory=Ledger)  # idempotency: last sequence per producer
    buffer: list[tuple[int, int, dict[str, Any]]] = field(default_factory=list)  # heap
    arrivals: int = 0  # tie-breaker of the heap: arrival order
    lsn: int = 0  # appends applied: the journal's sequence number of the last one
    # loaded after an unclean stop without a journal (never saved): result numbers jump
    unclean: bool = field(default=False, compare=False)


def state_json(st: StreamState, *, clean: bool = False) -> str:
    """The saved form of ``st``; ``clean``: written by a final flush (a clean stop)."""
    return json.dumps(
        {
            "newest": st.newest,
            "seen": st.seen,
            "rows_appended": st.rows_appended,
            "rows_late": st.rows_late,
            "batches_appended": st.batches_appended,
            "sequence": st.sequence,
            "batches_duplicate": st.batches_duplicate,
            "producers": st.producers.snapshot(),
            "buffer": [[t, a, r] for t, a, r in st.buffer],
            "arrivals": st.arrivals,
            "lsn": st.lsn,
            "clean": clean,
        }
    )


def state_from_json(blob: bytes | str, *, journaled: bool = False) -> StreamState:
    """A saved state. After an unclean stop of a stream without a journal, result sequences
    jump ahead (the state may be behind what readers saw); a journal replays it exactly."""
    d = json.loads(blob)
    clean = d.pop("clean", True)
    st = StreamState(**{k: v for k, v in d.items() if k not in ("buffer", "producers")})
    st.producers = Ledger(d.get("producers"))
    if "sequence" not in d:
        st.sequence = st.batches_appended
    if not clean and not journaled:
        st.sequence += SEQUENCE_GAP_AFTER_CRASH
        st.unclean = True
    st.buffer = [(t, a, r) for t, a, r in d.get("buffer", [])]
    heapq.heapify(st.buffer)
    return st
