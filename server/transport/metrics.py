"""Prometheus metrics of the service (prometheus-client) and JSON-lines logging."""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

LATENCY_BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.002,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    10.0,
)


class Metrics:
    """The server's metrics, in their own registry (tests start several servers per process)."""

    def __init__(
        self,
        windows: Callable[[], Iterator[tuple[str, str, dict[str, int]]]],
        keys: Callable[[], tuple[list[tuple[str, dict[str, int]]], dict[str, int]]] | None = None,
    ) -> None:
        self.registry = CollectorRegistry()
        self.rows = Counter(
            "mtawindows_append_rows",
            "Rows appended (applied to the windows)",
            ["stream"],
            registry=self.registry,
        )
        self.late = Counter(
            "mtawindows_late_rows", "Rows dropped as late", ["stream"], registry=self.registry
        )
        self.batches = Counter(
            "mtawindows_append_batches",
            "Append calls by outcome",
            ["stream", "outcome"],
            registry=self.registry,
        )
        self.deferred = Counter(
            "mtawindows_append_deferred",
            "Small appends tried on the event loop that met Redis and finished on a worker thread",
            ["stream"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "mtawindows_rpc_latency_seconds",
            "Server-side latency per RPC method",
            ["method"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.errors = Counter(
            "mtawindows_rpc_errors",
            "RPCs that ended in an error, by status code and reason",
            ["method", "code", "reason"],
            registry=self.registry,
        )
        self.forwarded = Counter(
            "mtawindows_forwarded_calls",
            "Calls sent on to their stream's owner for a client that cannot reach it, by "
            "outcome (answered, refused: the owner's error, unreachable)",
            ["method", "outcome"],
            registry=self.registry,
        )
        self.registry.register(_WindowCollector(windows))
        if keys is not None:
            self.registry.register(_KeyCollector(keys))


class _KeyCollector(Collector):
    """Keyed streams, read at scrape time: keys, hot keys, slab keys, dirty keys, groups held per
    stream; the key cache's bytes, evictions and loads."""

    def __init__(
        self, keys: Callable[[], tuple[list[tuple[str, dict[str, int]]], dict[str, int]]]
    ) -> None:
        self.keys = keys

    def collect(self) -> Iterator[Any]:
        per_stream: dict[str, Any] = {
            "keys": GaugeMetricFamily("mtawindows_keys", "Keys held", labels=["stream"]),
            "hot_keys": GaugeMetricFamily(
                "mtawindows_hot_keys", "Keys whose state is in memory", labels=["stream"]
            ),
            "slab_keys": GaugeMetricFamily(
                "mtawindows_slab_keys",
                "Small keys held in columns (the slab: no object per key)",
                labels=["stream"],
            ),
            "dirty_keys": GaugeMetricFamily(
                "mtawindows_dirty_keys", "Keys changed since the last flush", labels=["stream"]
            ),
            "groups": GaugeMetricFamily(
                "mtawindows_key_groups_owned", "Key groups this server holds", labels=["stream"]
            ),
            "expired": CounterMetricFamily(
                "mtawindows_keys_expired", "Keys dropped by key_ttl", labels=["stream"]
            ),
        }
        streams, cache = self.keys()
        for stream, stats in streams:
            for name, fam in per_stream.items():
                fam.add_metric([stream], stats.get(name, 0))
        yield from per_stream.values()
        yield GaugeMetricFamily(
            "mtawindows_key_cache_bytes",
            "Estimated memory of the keys in memory (--key-cache-mb bounds it)",
            value=cache.get("used", 0),
        )
        yield CounterMetricFamily(
            "mtawindows_key_cache_evictions",
            "Keys written back to Redis and dropped from memory",
            value=cache.get("evictions", 0),
        )
        yield CounterMetricFamily(
            "mtawindows_key_cache_loads", "Cold keys loaded from Redis", value=cache.get("loads", 0)
        )


class _WindowCollector(Collector):
    """Window statistics read at scrape time (size, evictions, store round trips, misses)."""

    def __init__(self, windows: Callable[[], Iterator[tuple[str, str, dict[str, int]]]]) -> None:
        self.windows = windows

    def collect(self) -> Iterator[Any]:
        labels = ["stream", "window"]
        size = GaugeMetricFamily("mtawindows_window_size", "Rows in the window", labels=labels)
        levels = GaugeMetricFamily("mtawindows_window_levels", "MTA levels", labels=labels)
        counters = {
            "evicted": CounterMetricFamily(
                "mtawindows_window_evictions", "Rows evicted", labels=labels
            ),
            "store_round_trips": CounterMetricFamily(
                "mtawindows_store_round_trips", "Redis round trips", labels=labels
            ),
            "cache_misses": CounterMetricFamily(
                "mtawindows_store_cache_misses",
                "Head-cache misses (synchronous reads)",
                labels=labels,
            ),
            "policy_errors": CounterMetricFamily(
                "mtawindows_policy_errors", "CEL policy evaluations that failed", labels=labels
            ),
        }
        for stream, window, stats in self.windows():
            size.add_metric([stream, window], stats.get("size", 0))
            levels.add_metric([stream, window], stats.get("levels", 0))
            for key, fam in counters.items():
                fam.add_metric([stream, window], stats.get(key, 0))
        yield size
        yield levels
        yield from counters.values()


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message and any ``extra=`` fields."""

    _SKIP = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message"}

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for k, v in record.__dict__.items():
            if k not in self._SKIP and not k.startswith("_"):
                out[k] = v if isinstance(v, str | int | float | bool | None) else str(v)
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out)


def setup_logging(level: str = "info", fmt: str = "json") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    root = logging.getLogger("mtawindows")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False
