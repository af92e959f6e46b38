"""Storage: the :class:`~.protocol.PairStore` protocol the engine writes level pairs through,
the level queues on top of it, the memory and Redis stores, their codecs, the embedded Redis
and the service's stream journal. Imports nothing above it (the engine reaches it, never the
other way round)."""
