"""``mtawindows.server.validate``, the flat layout's path of :mod:`mtawindows.server.engine.validate` (kept working)."""

import sys

from mtawindows.server.engine import validate as _moved
from mtawindows.server.engine.validate import *  # noqa: F403  (the names, for type checkers)

sys.modules[__name__] = _moved  # the very module: its names, private ones too, stay one object
