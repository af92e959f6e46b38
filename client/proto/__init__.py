"""``mtawindows.client.proto``, the former home of the generated code (kept working): the
modules are :mod:`mtawindows.v1.windows_pb2` and :mod:`mtawindows.v1.windows_pb2_grpc`."""

import sys

from mtawindows.v1 import windows_pb2, windows_pb2_grpc

sys.modules[__name__ + ".windows_pb2"] = windows_pb2
sys.modules[__name__ + ".windows_pb2_grpc"] = windows_pb2_grpc

__all__ = ["windows_pb2", "windows_pb2_grpc"]
