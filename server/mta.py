"""``mtawindows.server.mta``, the flat layout's path of :mod:`mtawindows.server.engine.mta` (kept working)."""

import sys

from mtawindows.server.engine import mta as _moved
from mtawindows.server.engine.mta import *  # noqa: F403  (the names, for type checkers)

sys.modules[__name__] = _moved  # the very module: its names, private ones too, stay one object
