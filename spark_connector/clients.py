"""This process's clients, one per server, and which server holds a stream.

Nothing holds a gRPC channel at import or in an object that Spark pickles: :func:`client_for`
opens one per server in each process (a module-level cache; Spark reuses its Python workers)
the first time a task asks, on the driver and on the executors alike.
"""

from __future__ import annotations

import threading

from mtawindows.client import WindowClient

from .options import ConnectorOptions

_clients: dict[tuple[str, str | None, str], WindowClient] = {}
_clients_lock = threading.Lock()


def owner(opts: ConnectorOptions, stream: str) -> str:
    """The endpoint that holds ``stream``: the first one for the template stream (and with a
    single server), else the one a hash of the stream's name picks (the same in every
    process, so a key's stream always lands on the same server): ``opts.router.owner``."""
    return opts.router.owner(stream)


def client_for(opts: ConnectorOptions, endpoint: str | None = None) -> WindowClient:
    """This process's client of ``endpoint`` (default: the first of ``opts.endpoint``), one
    channel per server, reused by tasks."""
    target = endpoint or opts.endpoints[0]
    key = (target, opts.token, repr(opts.tls))
    with _clients_lock:
        c = _clients.get(key)
        if c is None:
            c = _clients[key] = WindowClient(
                target, token=opts.token, tls=opts.tls, timeout=opts.timeout
            )
        return c


def client_of(opts: ConnectorOptions, stream: str) -> WindowClient:
    """The client of the server that holds ``stream`` (see :func:`owner`)."""
    return client_for(opts, owner(opts, stream))


__all__ = ["client_for", "client_of", "owner"]
