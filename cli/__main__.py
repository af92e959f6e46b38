"""``python -m mtawindows.cli``: the ``mtawindows`` command."""

import sys

from . import main

sys.exit(main())
