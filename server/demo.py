"""``mtawindows.server.demo``, the flat layout's path of :mod:`mtawindows.server.engine.demo` (kept working)."""

import sys

from mtawindows.server.engine import demo as _moved
from mtawindows.server.engine.demo import *  # noqa: F403  (the names, for type checkers)

sys.modules[__name__] = _moved  # the very module: its names, private ones too, stay one object

if __name__ == "__main__":  # python -m mtawindows.server.demo
    sys.exit(_moved.main())
