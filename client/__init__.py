"""mtawindows.client: the Python SDK and CLI of the mtawindows gRPC service.

``WindowClient`` / ``AsyncWindowClient`` talk to ``mtawindows serve``: one server, or a cluster
of them given by seed addresses (``"a:50051,b:50051"``), each call sent to the server that owns
its stream (:mod:`mtawindows.client.cluster_map`: :class:`ClusterMap`, ``client.owner(stream)``).
The specs and results are the dataclasses of :mod:`mtawindows.v1.types` (a keyed stream's keys:
:class:`KeyInfo`, a page of them :class:`KeyPage`); errors are the typed exceptions of
:mod:`mtawindows.client.errors`; :class:`Router` (:mod:`mtawindows.client.routing`) is a
fixed hash over a list of independent servers, for code that shards by hand.
"""

from mtawindows.v1.types import (
    Aggregation,
    AppendResult,
    Field,
    FieldType,
    KeyInfo,
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
from .calls import KeyPage
from .cluster_map import ClusterMap, ClusterMember
from .errors import (
    AlreadyExistsError,
    DeadlineExceededError,
    FailedPreconditionError,
    InternalError,
    InvalidArgumentError,
    MessageTooLargeError,
    MtaWindowsError,
    NotFoundError,
    NotOwnerError,
    OutOfOrderError,
    RedirectLoopError,
    ResourceExhaustedError,
    StreamMovingError,
    UnauthenticatedError,
    UnavailableError,
    Violation,
)
from .routing import Router, split_targets, stable_hash

__all__ = [
    "Aggregation",
    "AlreadyExistsError",
    "AppendResult",
    "AsyncWindowClient",
    "BatchWriter",
    "ClusterMap",
    "ClusterMember",
    "DeadlineExceededError",
    "FailedPreconditionError",
    "Field",
    "FieldType",
    "InternalError",
    "InvalidArgumentError",
    "KeyInfo",
    "KeyPage",
    "MessageTooLargeError",
    "MtaWindowsError",
    "NotFoundError",
    "NotOwnerError",
    "OutOfOrderError",
    "OutputSpec",
    "Policy",
    "RedirectLoopError",
    "ResourceExhaustedError",
    "Router",
    "Storage",
    "StreamInfo",
    "StreamMovingError",
    "StreamSpec",
    "UnauthenticatedError",
    "UnavailableError",
    "Violation",
    "WindowClient",
    "WindowInfo",
    "WindowResult",
    "WindowSpec",
    "split_targets",
    "stable_hash",
]
