"""mtawindows.client: the Python SDK and CLI of the mtawindows gRPC service.

``WindowClient`` / ``AsyncWindowClient`` talk to ``mtawindows serve``; the specs and results are
the dataclasses of :mod:`mtawindows.v1.types`; errors are the typed exceptions of
:mod:`mtawindows.client.errors`; :class:`Router` (:mod:`mtawindows.client.routing`) says which of
several servers holds a stream or a key's stream.
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

from .aio import AsyncWindowClient
from .batch_writer import BatchWriter
from .blocking import WindowClient
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
from .routing import Router, key_of_stream, keyed_stream_name

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
    "Router",
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
    "key_of_stream",
    "keyed_stream_name",
]
