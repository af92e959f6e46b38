"""The service: streams, their windows and what users register on them (catalog of monoids
and policies, CEL expressions, input limits, the result fan-out).

``mtawindows.server.service`` was one module in the flat layout; its public names stay here.
"""

from .registry import FINAL, NONE, PER_ROW, Deferred, Limits, Registry, ServiceError, Stream, Window

__all__ = [
    "FINAL",
    "NONE",
    "PER_ROW",
    "Deferred",
    "Limits",
    "Registry",
    "ServiceError",
    "Stream",
    "Window",
]
