"""This process's client of the cluster, and which server holds a stream.

Nothing holds a gRPC channel at import or in an object that Spark pickles: :func:`client_for`
opens one cluster-aware :class:`~mtawindows.client.WindowClient` per set of seeds (option
``endpoint``) in each process (a module-level cache; Spark reuses its Python workers) the first
time a task asks, on the driver and on the executors alike. That client sends each call to the
server that owns its stream (it learns the members from the seeds and follows the cluster's
redirects), so every stream, the keyed ones and the scratch ones alike, goes through the same
client.
"""

from __future__ import annotations

import threading

from mtawindows.client import WindowClient

from .options import ConnectorOptions, split_endpoints

_clients: dict[tuple[tuple[str, ...], str | None, str, float], WindowClient] = {}
_clients_lock = threading.Lock()


def client_for(opts: ConnectorOptions, endpoint: str | None = None) -> WindowClient:
    """This process's client of the cluster of ``opts.endpoint`` (or of ``endpoint``, seeds
    too), reused by tasks: one channel per server it calls."""
    seeds = opts.endpoints if endpoint is None else split_endpoints(endpoint)
    key = (seeds, opts.token, repr(opts.tls), opts.timeout)
    with _clients_lock:
        c = _clients.get(key)
        if c is None:
            c = _clients[key] = WindowClient(
                seeds, token=opts.token, tls=opts.tls, timeout=opts.timeout
            )
        return c


__all__ = ["client_for"]
