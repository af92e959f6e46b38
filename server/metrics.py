"""``mtawindows.server.metrics``, the flat layout's path of :mod:`mtawindows.server.transport.metrics` (kept working)."""

import sys

from mtawindows.server.transport import metrics as _moved
from mtawindows.server.transport.metrics import *  # noqa: F403  (the names, for type checkers)

sys.modules[__name__] = _moved  # the very module: its names, private ones too, stay one object
