"""``mtawindows.server.grpc_server``, the flat layout's path of :mod:`mtawindows.server.transport.grpc_server` (kept working)."""

import sys

from mtawindows.server.transport import grpc_server as _moved
from mtawindows.server.transport.grpc_server import *  # noqa: F403  (the names, for type checkers)

sys.modules[__name__] = _moved  # the very module: its names, private ones too, stay one object
