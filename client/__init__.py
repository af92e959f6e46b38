"""mtawindows.client: Python SDK for the mtawindows gRPC service (issue 4)."""
