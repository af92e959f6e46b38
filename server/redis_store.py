"""``mtawindows.server.redis_store``, the flat layout's path of :mod:`mtawindows.server.storage.redis_store` (kept working)."""

import sys

from mtawindows.server.storage import redis_store as _moved
from mtawindows.server.storage.redis_store import *  # noqa: F403  (the names, for type checkers)

sys.modules[__name__] = _moved  # the very module: its names, private ones too, stay one object
