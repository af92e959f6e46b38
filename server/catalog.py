"""``mtawindows.server.catalog``, the flat layout's path of :mod:`mtawindows.server.service.catalog` (kept working)."""

import sys

from mtawindows.server.service import catalog as _moved
from mtawindows.server.service.catalog import *  # noqa: F403  (the names, for type checkers)

sys.modules[__name__] = _moved  # the very module: its names, private ones too, stay one object
