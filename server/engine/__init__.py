"""The engine: monoids, window slide policies and the aggregation algorithms over them.

Imports only :mod:`mtawindows.server.storage` (the store protocol and level queues) and the
sentinels; knows nothing of streams, Redis keys or gRPC.
"""
