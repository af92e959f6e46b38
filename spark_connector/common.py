"""``mtawindows.spark_connector.common``, the former grab-bag of the connector, kept importable:
its names now live by role in :mod:`.options`, :mod:`.errors`, :mod:`.clients`,
:mod:`.streams`, :mod:`.tasks`, :mod:`.arrow`, :mod:`.schemas` and, for per-key stream names,
:mod:`mtawindows.client.routing`."""

from mtawindows.client.routing import key_of_stream, keyed_stream_name

from .arrow import rechunk, sorted_batches, to_stream_table
from .clients import client_for, client_of, owner
from .errors import ConnectorError, explained
from .options import ConnectorOptions, split_endpoints
from .schemas import check_columns, output_struct_type, spark_type_name
from .streams import SCRATCH_MARK, KeyedStreams, is_scratch
from .tasks import CHUNKS_PER_BATCH, TaskChunks

__all__ = [
    "CHUNKS_PER_BATCH",
    "SCRATCH_MARK",
    "ConnectorError",
    "ConnectorOptions",
    "KeyedStreams",
    "TaskChunks",
    "check_columns",
    "client_for",
    "client_of",
    "explained",
    "is_scratch",
    "key_of_stream",
    "keyed_stream_name",
    "output_struct_type",
    "owner",
    "rechunk",
    "sorted_batches",
    "spark_type_name",
    "split_endpoints",
    "to_stream_table",
]
