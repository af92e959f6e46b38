"""``mtawindows.client.proto.generate``, the former path of :mod:`mtawindows.v1.generate`
(kept working, ``python -m`` too)."""

import sys

from mtawindows.v1 import generate as _moved

if __name__ == "__main__":
    sys.exit(_moved.main())
sys.modules[__name__] = _moved
