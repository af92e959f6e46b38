"""The options of format ``"mtawindows"`` and of :func:`sliding_aggregate`: parsed, checked,
and named in every error (Spark passes the keys lower-cased; several spellings are accepted)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

from mtawindows.client.commands import parse_duration
from mtawindows.client.routing import split_targets

from .connector_errors import ConnectorError

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off", ""}


@dataclass(frozen=True)
class ConnectorOptions:
    """The options of format ``"mtawindows"`` (case-insensitive keys, as Spark passes them).

    endpoint           host:port of ``mtawindows serve`` (required); or several, comma-separated:
                       seeds of one cluster (servers sharing a Redis). The connector's clients
                       learn the members from them and send each stream's calls to its owner;
                       the cluster places every stream, per-key streams included
    stream             the stream to write to / read from (required)
    timestamp_column   the DataFrame column holding each row's time (default: the stream's
                       timestamp field)
    key_column         the stream is keyed by this column (its key field): writes send rows
                       of many keys per Append; a stream not keyed by it is refused
    keys               batch reads of a keyed stream: only these keys (comma-separated)
    key_prefix         batch reads of a keyed stream: only the keys starting with this
    window             read: only this window (default all)
    range / count      batch reads: each window's result over its newest rows only, a
                       query-time range ("5m", "30s", "1h", as the CLI's --range) or the newest
                       N rows (windows of AMTA, LMTA, FLATFAT, BINT, FLATFIT; not both)
    token / tls        bearer token; "true" (system roots) or a CA file path
    batch_rows         rows per Append (default 10000)
    sort               "true": buffer each partition and send it sorted by (key, timestamp);
                       streaming DataFrames need it (Spark cannot sort them), batch ones can
                       sortWithinPartitions instead (default "false")
    write_id           batch writes: the idempotency id; the same id re-run applies nothing twice
                       (default a new id per write)
    starting_offsets   stream reads: "latest" (default: results from now on) or "earliest" (the
                       results the server still keeps)
    max_results_per_trigger  stream reads: a cap per micro-batch (default none)
    timeout            seconds per call (default 60)
    """

    endpoint: str
    stream: str
    timestamp_column: str = ""
    key_column: str = ""
    keys: tuple[str, ...] | None = None
    key_prefix: str = ""
    window: str = ""
    range: timedelta | None = None
    count: int = 0
    token: str | None = None
    tls: bool | str | None = None
    batch_rows: int = 10_000
    sort: bool = False
    write_id: str = ""
    starting_offsets: str = "latest"
    max_results_per_trigger: int = 0
    timeout: float = 60.0

    @property
    def endpoints(self) -> tuple[str, ...]:
        """The seeds: ``endpoint`` split at commas (any servers of the cluster)."""
        return split_endpoints(self.endpoint)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ConnectorOptions:
        opts: dict[str, str] = {}
        for k, v in options.items():
            raw = str(k)
            canon = _ALIASES.get(raw.lower().replace("_", "").replace("-", ""))
            if canon is None:
                msg = f"option {raw!r}: unknown option of format 'mtawindows'; the options are {sorted(set(_ALIASES.values()) - _SPARK_OWN)}"
                raise ConnectorError(msg)
            opts[canon] = str(v)
        endpoint = opts.get("endpoint", "").strip()
        if not endpoint:
            msg = "option 'endpoint': required, e.g. .option('endpoint', 'localhost:50051')"
            raise ConnectorError(msg)
        split_endpoints(endpoint)  # names a bad list here, on the driver
        stream = opts.get("stream", "")
        if not stream:
            msg = "option 'stream': required, the name of an mtawindows stream"
            raise ConnectorError(msg)
        tls_raw = opts.get("tls", "")
        tls: bool | str | None
        if tls_raw.lower() in _TRUE:
            tls = True
        elif tls_raw.lower() in _FALSE:
            tls = None
        else:
            tls = tls_raw
        range_, count = _suffix(opts)
        starting = opts.get("starting_offsets", "latest").lower()
        if starting not in ("latest", "earliest"):
            msg = f"option 'starting_offsets': expected 'latest' or 'earliest', got {starting!r}"
            raise ConnectorError(msg)
        return cls(
            endpoint=endpoint,
            stream=stream,
            timestamp_column=opts.get("timestamp_column", ""),
            key_column=opts.get("key_column", ""),
            keys=_keys(opts),
            key_prefix=opts.get("key_prefix", ""),
            window=opts.get("window", ""),
            range=range_,
            count=count,
            token=opts.get("token") or None,
            tls=tls,
            batch_rows=_positive_int(opts, "batch_rows", 10_000),
            sort=_flag(opts, "sort"),
            write_id=opts.get("write_id", ""),
            starting_offsets=starting,
            max_results_per_trigger=_positive_int(opts, "max_results_per_trigger", 0, zero=True),
            timeout=float(_positive_int(opts, "timeout", 60)),
        )


# canonical option names by their spelling without case, "_" or "-" (Spark lower-cases keys);
# the camelCase and short forms users write for other sources are accepted too
_ALIASES: dict[str, str] = {
    "endpoint": "endpoint",
    "target": "endpoint",
    "stream": "stream",
    "path": "stream",  # DataFrameWriter.save(name) / load(name)
    "timestampcolumn": "timestamp_column",
    "timestampcol": "timestamp_column",
    "tscol": "timestamp_column",
    "tscolumn": "timestamp_column",
    "keycolumn": "key_column",
    "keycol": "key_column",
    "keys": "keys",
    "key": "keys",
    "keyprefix": "key_prefix",
    "window": "window",
    "range": "range",
    "count": "count",
    "token": "token",
    "tls": "tls",
    "batchrows": "batch_rows",
    "batchsize": "batch_rows",
    "sort": "sort",
    "writeid": "write_id",
    "startingoffsets": "starting_offsets",
    "maxresultspertrigger": "max_results_per_trigger",
    "timeout": "timeout",
    "checkpointlocation": "checkpointlocation",  # Spark's own
}
_SPARK_OWN = {"checkpointlocation"}


def _flag(opts: Mapping[str, str], name: str) -> bool:
    raw = opts.get(name, "").lower()
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    msg = f"option {name!r}: expected true or false, got {raw!r}"
    raise ConnectorError(msg)


def _suffix(opts: Mapping[str, str]) -> tuple[timedelta | None, int]:
    """Options ``range`` (a duration, parsed as the CLI's ``--range``) and ``count`` (rows
    >= 1): a query-time range of batch reads; not both."""
    raw = opts.get("range", "").strip()
    range_ = None
    if raw:
        try:
            range_ = parse_duration(raw)
        except argparse.ArgumentTypeError as ex:
            msg = f"option 'range': {ex}"
            raise ConnectorError(msg) from None
    count = _positive_int(opts, "count", 0)
    if range_ is not None and count:
        msg = f"option 'range': expected range or count, not both; got range={raw!r}, count={count}"
        raise ConnectorError(msg)
    return range_, count


def _keys(opts: Mapping[str, str]) -> tuple[str, ...] | None:
    """Option ``keys``: the keys a read is limited to (None: every key)."""
    raw = opts.get("keys")
    if raw is None:
        return None
    keys = tuple(dict.fromkeys(k.strip() for k in raw.split(",") if k.strip()))
    if not keys:
        msg = f"option 'keys': expected comma-separated keys, got {raw!r}"
        raise ConnectorError(msg)
    return keys


def _positive_int(opts: Mapping[str, str], name: str, default: int, *, zero: bool = False) -> int:
    raw = opts.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0 or (value == 0 and not zero):
        msg = f"option {name!r}: expected a whole number {'>= 0' if zero else '> 0'}, got {raw!r}"
        raise ConnectorError(msg)
    return value


def split_endpoints(raw: str) -> tuple[str, ...]:
    """``"host:port"`` or ``"a:1,b:2"`` as a tuple of distinct, non-empty seeds; a
    :class:`ConnectorError` naming option ``endpoint`` otherwise."""
    try:
        return split_targets(raw)
    except ValueError as ex:
        msg = f"option 'endpoint': {ex}"
        raise ConnectorError(msg) from None


__all__ = ["ConnectorOptions", "split_endpoints"]
