"""mtawindows.client: the Python SDK and CLI of the mtawindows gRPC service.

``WindowClient`` / ``AsyncWindowClient`` talk to ``mtawindows serve``; the specs and results are
the dataclasses of :mod:`mtawindows.client.types`; errors are the typed exceptions of
:mod:`mtawindows.client.errors`.
"""

from mtawindows.v1 import convert as convert  # former homes, kept importable from here
from mtawindows.v1 import types as types
from mtawindows.v1.types import (
    Aggregation,
    AppendResult,
    Field,
    FieldType,
    OutputSpec,
    Policy,
    Storage,
    StreamInfo,
    StreamSpec,
    WindowInfo,
    WindowResult,
    WindowSpec,
)

from .errors import (
    AlreadyExistsError,
    DeadlineExceededError,
    FailedPreconditionError,
    InternalError,
    InvalidArgumentError,
    MtaWindowsError,
    NotFoundError,
    OutOfOrderError,
    ResourceExhaustedError,
    UnauthenticatedError,
    UnavailableError,
    Violation,
)
from .sdk import AsyncWindowClient, BatchWriter, WindowClient

__all__ = [
    "Aggregation",
    "AlreadyExistsError",
    "AppendResult",
    "AsyncWindowClient",
    "BatchWriter",
    "DeadlineExceededError",
    "FailedPreconditionError",
    "Field",
    "FieldType",
    "InternalError",
    "InvalidArgumentError",
    "MtaWindowsError",
    "NotFoundError",
    "OutOfOrderError",
    "OutputSpec",
    "Policy",
    "ResourceExhaustedError",
    "Storage",
    "StreamInfo",
    "StreamSpec",
    "UnauthenticatedError",
    "UnavailableError",
    "Violation",
    "WindowClient",
    "WindowInfo",
    "WindowResult",
    "WindowSpec",
]
