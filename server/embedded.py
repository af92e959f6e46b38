"""``mtawindows.server.embedded``, the flat layout's path of :mod:`mtawindows.server.storage.embedded` (kept working)."""

import sys

from mtawindows.server.storage import embedded as _moved
from mtawindows.server.storage.embedded import *  # noqa: F403  (the names, for type checkers)

sys.modules[__name__] = _moved  # the very module: its names, private ones too, stay one object
