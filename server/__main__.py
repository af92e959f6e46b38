"""``python -m mtawindows.server``: run the gRPC server (the flags of ``mtawindows serve``)."""

import sys

from .cli import main

sys.exit(main())
