"""``mtawindows.server.journal``, the flat layout's path of :mod:`mtawindows.server.storage.journal` (kept working)."""

import sys

from mtawindows.server.storage import journal as _moved
from mtawindows.server.storage.journal import *  # noqa: F403  (the names, for type checkers)

sys.modules[__name__] = _moved  # the very module: its names, private ones too, stay one object
