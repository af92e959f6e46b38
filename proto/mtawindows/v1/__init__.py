"""mtawindows.v1: the wire contract, the ground floor that the server and the client share.

* :mod:`~mtawindows.v1.windows_pb2`, :mod:`~mtawindows.v1.windows_pb2_grpc`: the code protoc
  generates from ``windows.proto`` beside them (the proto package ``mtawindows.v1``, imported
  under its own name as ``grpc_health.v1`` is; regenerate with ``python -m
  mtawindows.v1.generate``);
* :mod:`~mtawindows.v1.types`: the specs and results as checked dataclasses;
* :mod:`~mtawindows.v1.convert`: dataclasses <-> protobuf messages, columns <-> rows;
* :mod:`~mtawindows.v1.reasons`: the ``ErrorInfo`` reasons the server sends and clients match.

Nothing here imports the server or the client.
"""
