"""A stream's durability: its flush (the windows' checkpoints and the stream's state), journaling
switched on and off with its durable windows, and its recovery from Redis.

The order of the writes, and why a crash between any two of them loses nothing acknowledged, is
in :mod:`mtawindows.server.storage.journal`. Every function here runs under the stream's lock.
"""

from __future__ import annotations

import logging
from typing import Any

from ..storage.protocol import StoreError
from .hosted_window import HostedWindow
from .refusals import store_unavailable
from .state import SEQUENCE_GAP_AFTER_CRASH, StreamState, state_from_json, state_json
from .stream import Stream

log = logging.getLogger("mtawindows.service")

__all__ = ["flush", "journal_if_durable", "recover", "window_meta"]


def journal_if_durable(s: Stream) -> None:
    """Start or stop journaling when the stream gains its first durable window or loses
    its last. Either way every window is checkpointed with its lsn and the state saved at
    the same lsn first, so the journal starts (or ends) exactly there."""
    durable = any(w.spec.storage.durable for w in s.windows.values())
    if durable == (s.journal is not None):
        return
    flush(s, wait=True)
    if durable:
        s.journal = s.state_store
        s.journal.first = s.state.lsn + 1
    else:
        s.journal = None
        s.state_store.drop_journal()


def window_meta(s: Stream, w: HostedWindow, state: str) -> dict[str, Any]:
    """What a window's checkpoint carries: its lsn, the rows its last batch evicted (results
    report them after a restart too), and without a journal to replay the
    stream's state (``state``, its JSON), since recovery then takes the newest saved."""
    meta: dict[str, Any] = {"lsn": w.lsn, "evicted": w.evicted}
    members = s.members_of(w)
    if members:  # the windows sharing its rows: their last batch's evictions (lsn: its)
        meta["members"] = {m: s.windows[m].evicted for m in members}
    if w.hopper is not None:  # the open slice, the last boundary: the rest is the engine's
        meta["hop"] = w.hopper.state()
    if s.journal is None:
        meta["state"] = state
    return meta


def flush(s: Stream, *, wait: bool = True, final: bool = False) -> None:
    """Checkpoint every Redis window of ``s`` and save the stream's state.
    ``wait=False`` (the periodic flush) only queues the windows' checkpoints behind their
    pending writes, so appends to the stream are not held up by the round trips; with a
    journal, the state they reach is saved (and the journal trimmed) by the next flush,
    once they committed."""
    with s.lock:
        _flush(s, wait=wait, final=final)


def _flush(s: Stream, *, wait: bool, final: bool) -> None:
    s.ensure_current()
    pending = s.pending_state
    if pending is not None and s.journal is not None:
        lsn, blob, futures = pending
        if all(f.done() for f in futures):
            s.pending_state = None
            failed = any(f.cancelled() or f.exception() is not None for f in futures)
            if not failed and blob != s.saved_state:
                try:
                    s.journal.commit_state(blob, lsn)
                except StoreError:
                    s.stale = True
                    s.saved_state = None
                    raise
                s.saved_state = blob
    futures = []
    blob = state_json(s.state, clean=final)
    try:
        for w in s.hosted().values():
            if w.engine.store is not None:
                futures.append(w.engine.flush(wait=wait, meta=window_meta(s, w, blob)))
        if s.journal is None:
            if blob != s.saved_state:  # an idle stream's state is in Redis already
                s.state_store.save_state(blob)
                s.saved_state = blob
        elif wait:
            s.pending_state = None
            if blob != s.saved_state:  # (the journal was trimmed to it then too)
                s.journal.commit_state(blob, s.state.lsn)
                s.saved_state = blob
        else:
            s.pending_state = (s.state.lsn, blob, futures)
    except StoreError:
        s.saved_state = None
        if s.journal is not None:
            s.stale = True
        raise


def recover(s: Stream, *, reload: bool = True) -> None:
    """Rebuild ``s`` from Redis: each Redis window from its checkpoint, the stream's state,
    then the journal's entries after that state (see journal.py). ``reload=False``: the
    windows were just opened (start-up)."""
    with s.lock:
        s.saved_state = None  # what Redis holds is read again below; the next flush saves
        try:
            if reload:
                for w in s.hosted().values():
                    if w.engine.store is not None:
                        w.engine.reload()
            blob = s.state_store.load_state()
            journaled = s.journal is not None
            state = state_from_json(blob, journaled=journaled) if blob else StreamState()
            metas = {
                n: (w.engine.store.checkpoint_meta or {})
                for n, w in s.hosted().items()
                if w.engine.store is not None
            }
            for n, w in s.windows.items():  # a window sharing another's rows: its lsn
                host = getattr(w.engine, "host", None)
                if host is not None and host.store is not None:
                    meta = host.store.checkpoint_meta or {}
                    evicted = (meta.get("members") or {}).get(n, 0)
                    metas[n] = {"lsn": meta.get("lsn", state.lsn), "evicted": evicted}
            if not journaled:  # the newest state that reached Redis (never go back)
                for meta in metas.values():
                    if "state" in meta:
                        other = state_from_json(meta["state"])
                        if other.lsn > state.lsn:
                            state = other
            live = s.state.lsn
            s.state = state
            s.pending_state = None
            entries = s.journal.entries() if s.journal is not None else []
            if s.journal is not None:
                s.journal.first = entries[0].lsn if entries else state.lsn + 1
            end = max(state.lsn, entries[-1].lsn) if entries else state.lsn
            for n, w in s.hosted().items():
                if n in metas:
                    w.lsn = int(metas[n].get("lsn", state.lsn))
                    w.evicted = int(metas[n].get("evicted", 0))  # its last batch's
                    if w.hopper is not None:
                        w.hopper.restore(metas[n].get("hop"))
                        if state.unclean:
                            # its boundaries after the checkpoint are lost with their rows:
                            # the new ones are numbered past every number readers saw
                            w.hopper.closed += SEQUENCE_GAP_AFTER_CRASH
                elif not reload:
                    w.lsn = end  # in memory: empty after a restart, joins after the journal
            for e in entries:
                if e.lsn > state.lsn:
                    s.replay(e)
            for w in s.windows.values():
                w.sequence = s.state.sequence if w.hopper is None else w.hopper.closed
                w.timestamp = s.state.newest or 0
            if reload and s.state.lsn < live:  # pragma: no cover - a journal shorter than acked
                log.error("stream %s recovered at lsn %d < %d", s.spec.name, s.state.lsn, live)
        except StoreError as ex:
            s.stale = True
            raise store_unavailable(s.spec.name, ex) from None
        s.stale = False
