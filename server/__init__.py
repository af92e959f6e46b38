"""mtawindows.server: the window service, in four layers that import downwards only.

* :mod:`~mtawindows.server.transport`: gRPC (servicer, request decoding, auth, errors as
  ``google.rpc.Status``, start-up, metrics);
* :mod:`~mtawindows.server.service`: streams and their windows (registry, catalogs of monoids
  and policies, CEL, input limits, result fan-out);
* :mod:`~mtawindows.server.engine`: monoids, slide policies and the aggregation algorithms
  (Log MTA, Amortized MTA), with the naive oracle and the baselines;
* :mod:`~mtawindows.server.storage`: where level pairs live (the store protocol, memory and
  Redis stores, codecs, the embedded Redis, the stream journal).

:mod:`~mtawindows.server.sentinels` is shared by all four. ``python -m mtawindows.server`` runs
the server (:mod:`~mtawindows.server.serve_command`).
"""
