"""``mtawindows.server.fanout``, the flat layout's path of :mod:`mtawindows.server.service.fanout` (kept working)."""

import sys

from mtawindows.server.service import fanout as _moved
from mtawindows.server.service.fanout import *  # noqa: F403  (the names, for type checkers)

sys.modules[__name__] = _moved  # the very module: its names, private ones too, stay one object
