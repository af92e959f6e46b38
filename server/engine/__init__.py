"""The engine: monoids, window slide policies and the aggregation algorithms over them
(:mod:`.mta` is the public module of the two MTA algorithms; see its docstring for the map).

Imports only :mod:`mtawindows.server.storage` (the store protocol and level queues) and the
sentinels; knows nothing of streams, Redis keys or gRPC.
"""
