"""Relaying a call through another member (the wire contract's part of it, shared by the
servers and the SDK): a client that cannot reach a stream's owner sends the call to another
member with header :data:`FORWARD`; that member sends it on to the owner marked
:data:`FORWARDED` (never sent on twice) and answers with trailing metadata :data:`SERVED_BY`.
Only the unary calls about one stream (:data:`FORWARDABLE`) are relayed."""

from __future__ import annotations

__all__ = ["FORWARD", "FORWARDABLE", "FORWARDED", "SERVED_BY"]

FORWARD = "mtawindows-forward"  # from a client: send this call on to the stream's owner ("1")
FORWARDED = "mtawindows-forwarded"  # on a relayed call: the member that sent it on
SERVED_BY = "mtawindows-served-by"  # trailing metadata of a relayed answer: the owner
# the unary calls about one stream (never Subscribe, ListStreams, GetClusterMap)
FORWARDABLE = frozenset(
    {
        "CreateStream",
        "DeleteStream",
        "GetStream",
        "CreateWindow",
        "DeleteWindow",
        "GetWindow",
        "ListWindows",
        "Append",
        "Query",
        "ReadResults",
        "ListKeys",
        "GetKey",
        "DeleteKey",
        "Compute",
    }
)
