"""The streams the connector makes from a template stream: per-key streams (``<stream>:<key>``,
each on the server the cluster places it on) and ``sliding_aggregate``'s per-task scratch
streams."""

from __future__ import annotations

import threading
from contextlib import suppress
from dataclasses import replace
from typing import ClassVar

from mtawindows.client import AlreadyExistsError, StreamSpec, WindowClient, WindowInfo

from .clients import client_for, client_of
from .options import ConnectorOptions

# batch sliding_aggregate's per-task scratch streams end with this, then the run and task ids
SCRATCH_MARK = "~scratch."


def is_scratch(name: str) -> bool:
    """Whether ``name`` is one of ``sliding_aggregate``'s scratch streams (never read back)."""
    return SCRATCH_MARK in name


def scratch_suffix(run_id: str, stage: int, partition: int, attempt: int) -> str:
    """The end of the scratch streams' names of one task attempt of run ``run_id``."""
    return f"{SCRATCH_MARK}{run_id}.{stage}.{partition}.{attempt}"


class KeyedStreams:
    """Creates per-key streams from the template stream on first use, once per process; the
    cluster places each (the client sends its creation to the member placement picks)."""

    _known: ClassVar[set[tuple[str, str]]] = set()
    _lock = threading.Lock()

    def __init__(self, opts: ConnectorOptions) -> None:
        self.opts = opts
        self.template = opts.stream
        self._spec: StreamSpec | None = None
        self._windows: list[WindowInfo] | None = None

    def _load(self) -> tuple[StreamSpec, list[WindowInfo]]:
        if self._spec is None or self._windows is None:
            primary = client_for(self.opts)
            self._spec = primary.get_stream(self.template).spec
            self._windows = primary.list_windows(self.template)
        return self._spec, self._windows

    def ensure(self, name: str, *, known: bool = True) -> WindowClient:
        """Make sure stream ``name`` exists with every window of the template; returns the
        client to call it with."""
        client = client_of(self.opts, name)
        marker = (client.target, name)
        if known and marker in self._known:
            return client
        spec, windows = self._load()
        with suppress(AlreadyExistsError):
            client.create_stream(replace(spec, name=name))
        have = set(client.get_stream(name).windows)
        for w in windows:
            if w.spec.name in have:
                continue
            with suppress(AlreadyExistsError):
                client.create_window(replace(w.spec, stream=name))
        with self._lock:
            self._known.add(marker)
        return client


__all__ = ["SCRATCH_MARK", "KeyedStreams", "is_scratch", "scratch_suffix"]
