"""The gRPC transport: turns requests into service calls and service errors into
``google.rpc.Status``; start-up, auth and metrics."""
