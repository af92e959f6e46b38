"""mtawindows.client: the Python SDK and CLI of the mtawindows gRPC service.

``WindowClient`` / ``AsyncWindowClient`` talk to ``mtawindows serve``; the specs and results are
the dataclasses of :mod:`mtawindows.client.types`; errors are the typed exceptions of
:mod:`mtawindows.client.errors`.
"""

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
from .types import (
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
