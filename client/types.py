"""``mtawindows.client.types``, the flat layout's path of :mod:`mtawindows.v1.types` (kept working)."""

import sys

from mtawindows.v1 import types as _moved
from mtawindows.v1.types import *  # noqa: F403  (the names, for type checkers)

sys.modules[__name__] = _moved  # the very module: its names, private ones too, stay one object
