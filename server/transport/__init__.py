"""The gRPC transport: requests into service calls, and what ends a call into its status.

* :mod:`.decode`: request bytes and messages into what the service takes (columns, specs);
* :mod:`.status`: the one mapping of errors to ``google.rpc.Status`` (and the error-id log);
* :mod:`.tokens`, :mod:`.auth`: the bearer tokens and the interceptor that checks them;
* :mod:`.servicer`: the WindowService handlers, each behind its guard;
* :mod:`.app`: the server's start-up, supervision of the embedded Redis and graceful stop;
* :mod:`.metrics`: Prometheus metrics and JSON-lines logging.

    from mtawindows.server.transport import ServeConfig, serve
"""

from .app import SERVICE_NAME, ServeConfig, Server, serve
from .servicer import WindowServicer, add_servicer

__all__ = ["SERVICE_NAME", "ServeConfig", "Server", "WindowServicer", "add_servicer", "serve"]
