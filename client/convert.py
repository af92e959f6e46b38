"""``mtawindows.client.convert``, the flat layout's path of :mod:`mtawindows.v1.convert` (kept working)."""

import sys

from mtawindows.v1 import convert as _moved
from mtawindows.v1.convert import *  # noqa: F403  (the names, for type checkers)

sys.modules[__name__] = _moved  # the very module: its names, private ones too, stay one object
