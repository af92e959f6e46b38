"""Moved to the testing kit: :mod:`mtawindows.testing` (``LocalServer``, ``free_port``).

Only ``tests/transport/test_contract.py`` (being written beside this change) still imports
these names; delete this module once it imports ``mtawindows.testing`` instead.
"""

from __future__ import annotations

from pathlib import Path

from mtawindows.testing import LocalServer, free_port, mtawindows_command

ServerProcess = LocalServer
BIN = Path(mtawindows_command()[0])

__all__ = ["BIN", "ServerProcess", "free_port"]
