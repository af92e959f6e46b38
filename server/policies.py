"""``mtawindows.server.policies``, the flat layout's path of :mod:`mtawindows.server.engine.policies` (kept working)."""

import sys

from mtawindows.server.engine import policies as _moved
from mtawindows.server.engine.policies import *  # noqa: F403  (the names, for type checkers)

sys.modules[__name__] = _moved  # the very module: its names, private ones too, stay one object
