"""The transport's names in one place, as ``mtawindows.server.transport.grpc_server`` had them
before it was split (and ``mtawindows.server.grpc_server`` still has them): kept working.

The code lives in :mod:`.decode`, :mod:`.status`, :mod:`.tokens`, :mod:`.auth`,
:mod:`.servicer` and :mod:`.app`.
"""

from mtawindows.v1.reasons import DOMAIN, Reason

from .app import SERVICE_NAME, ServeConfig, Server, default_data_dir, serve
from .auth import BEARER, TokenAuth
from .decode import Malformed, arrow_columns, columns_of
from .servicer import NEEDS_STORE, WindowServicer, add_servicer
from .status import (
    STATUS_DESCRIPTION_CHARS,
    STATUS_FIELD_CHARS,
    STATUS_MESSAGE_CHARS,
    STATUS_METADATA_BYTES,
    STATUS_VALUE_CHARS,
    STATUS_VIOLATION_BYTES,
    internal_status,
    loggable,
    rich_status,
    store_unavailable_refusal,
)
from .tokens import TOKEN, check_tokens, load_tokens

__all__ = [
    "BEARER",
    "DOMAIN",
    "NEEDS_STORE",
    "SERVICE_NAME",
    "STATUS_DESCRIPTION_CHARS",
    "STATUS_FIELD_CHARS",
    "STATUS_MESSAGE_CHARS",
    "STATUS_METADATA_BYTES",
    "STATUS_VALUE_CHARS",
    "STATUS_VIOLATION_BYTES",
    "TOKEN",
    "Malformed",
    "Reason",
    "ServeConfig",
    "Server",
    "TokenAuth",
    "WindowServicer",
    "add_servicer",
    "arrow_columns",
    "check_tokens",
    "columns_of",
    "default_data_dir",
    "internal_status",
    "load_tokens",
    "loggable",
    "rich_status",
    "serve",
    "store_unavailable_refusal",
]
