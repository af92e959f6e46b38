"""``mtawindows.server.codecs``, the flat layout's path of :mod:`mtawindows.server.storage.codecs` (kept working)."""

import sys

from mtawindows.server.storage import codecs as _moved
from mtawindows.server.storage.codecs import *  # noqa: F403  (the names, for type checkers)

sys.modules[__name__] = _moved  # the very module: its names, private ones too, stay one object
