"""Generated protobuf and gRPC code of ``proto/mtawindows/v1/windows.proto`` (do not edit;
regenerate with ``python -m mtawindows.client.proto.generate``)."""
