"""``python -m mtawindows.server``: run the gRPC server (the flags of ``mtawindows serve``)."""

import sys

from .serve_command import main

sys.exit(main())
