"""How the CLI prints what the service answers: short summaries for people by default, JSON
with ``--json`` (for scripts), timestamps as RFC 3339 text unless ``--raw`` (int nanoseconds
since the epoch, as on the wire).

One word per idea everywhere: a window result's ``batch`` is the stream's count of applied
batches when it was computed (the ``sequence`` of :class:`~mtawindows.v1.types.WindowResult`,
not a producer's sequence), the word ``watch`` prints too.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any

from mtawindows.v1.convert import rfc3339

__all__ = ["Presenter", "plain", "rfc3339"]

# fields that hold a timestamp: int nanoseconds since the epoch (0: none yet)
_NS_FIELDS = {"timestamp", "newest_timestamp"}
_MS_FIELDS = {"last_append_ms"}


def _duration(td: timedelta) -> str:
    s = td.total_seconds()
    for unit, n in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if s >= n and s % n == 0:
            return f"{int(s // n)}{unit}"
    return f"{s:g}s"


def plain(obj: Any) -> Any:
    """Dataclasses as dicts, durations as seconds: what JSON holds."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Mapping):
        return {str(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [plain(v) for v in obj]
    if isinstance(obj, timedelta):
        return obj.total_seconds()
    if isinstance(obj, str | int | float | bool) or obj is None:
        return obj
    return str(obj)


# a result's fields as the CLI names them: its batch, and the rows that batch evicted (not the
# window's running total, which ``windows get`` shows as "rows out")
_RESULT_NAMES = {"sequence": "batch", "evicted": "batch_evicted"}


class Presenter:
    """Prints for people (``json_out=False``) or as JSON, timestamps as text unless ``raw``.
    The methods' ``time_outputs``: names of window outputs that are timestamps (TIMESTAMP
    outputs), printed as timestamps too."""

    def __init__(self, *, json_out: bool = False, raw: bool = False) -> None:
        self.json = json_out
        self.raw = raw
        self.boundary_rows = False  # a hopping window's boundaries are row counts

    # -- the values
    def when(self, ns: int) -> Any:
        if self.raw:
            return ns
        return rfc3339(ns) if ns else None

    def timed(self, d: Any, time_outputs: Iterable[str] = ()) -> Any:
        """``d`` (plain) with its timestamps as text (unless raw); a result's ``sequence``
        named ``batch``."""
        if isinstance(d, list):
            return [self.timed(v, time_outputs) for v in d]
        if not isinstance(d, dict):
            return d
        out: dict[str, Any] = {}
        outs = set(time_outputs)
        for k, v in d.items():
            if k in _NS_FIELDS and isinstance(v, int) and not isinstance(v, bool):
                v = self.when(v)
            elif k == "boundary" and "window" in d and v and not self.boundary_rows:
                v = self.when(v)  # a hopping window's result: a time boundary
            elif k in _MS_FIELDS and isinstance(v, int) and not isinstance(v, bool):
                v = v if self.raw else (rfc3339(v * 1_000_000) if v else None)
            elif k == "values" and isinstance(v, dict) and outs:
                v = {n: self._timed_output(n, x, outs) for n, x in v.items()}
            else:
                v = self.timed(v, time_outputs)
            if "window" in d and k in _RESULT_NAMES:  # a result: one word for the batch
                k = _RESULT_NAMES[k]
            out[k] = v
        return out

    def emit(self, obj: Any, text: str | None = None, time_outputs: Iterable[str] = ()) -> None:
        """JSON of ``obj`` (``--json``), else ``text``."""
        if self.json or text is None:
            data = self.timed(plain(obj), time_outputs)
            print(json.dumps(data, indent=None if isinstance(data, list) else 2))
        else:
            print(text)

    # -- summaries
    def value(self, v: Any) -> str:
        if isinstance(v, float):
            return repr(v)
        if isinstance(v, dict | list):
            return json.dumps(plain(v))
        return str(v)

    def _timed_output(self, name: str, v: Any, outs: set[str]) -> Any:
        """One output's value with its timestamps as text (unless raw): the output itself
        when ``outs`` names it, a struct's parts named ``output.part``."""
        if name in outs and isinstance(v, int) and not isinstance(v, bool):
            return self.when(v)
        if isinstance(v, dict):
            return {
                p: self.when(x)
                if f"{name}.{p}" in outs and isinstance(x, int) and not isinstance(x, bool)
                else self.timed(x)
                for p, x in v.items()
            }
        return self.timed(v)

    def output(self, name: str, v: Any, time_outputs: set[str]) -> str:
        """One output's value as text: a timestamp output's int as a timestamp, and a
        struct's timestamp parts."""
        if name in time_outputs and isinstance(v, int):
            return str(self.when(v))
        return self.value(self._timed_output(name, v, time_outputs))

    def values(self, values: Mapping[str, Any], time_outputs: Iterable[str] = ()) -> list[str]:
        outs = set(time_outputs)
        width = max((len(n) for n in values), default=0)
        return [f"  {n:<{width}}  {self.output(n, v, outs)}" for n, v in sorted(values.items())]

    def stream(self, info: Any, head: str = "stream") -> str:
        spec = info.spec
        fields = ", ".join(
            [f"{spec.timestamp_field} TIMESTAMP"] + [f"{f.name} {f.type}" for f in spec.fields]
        )
        lines = [f"{head} {spec.name}: {fields}"]
        extra = [f"late rows {spec.late_policy}"]
        if getattr(spec, "ts_unit", "ns") != "ns":
            extra.append(f"plain-number timestamps in {spec.ts_unit}")
        if not getattr(spec, "wall_clock", True):
            extra.append("timestamps are not dates")
        if spec.allowed_lateness:
            extra.append(f"reordered up to {_duration(spec.allowed_lateness)}")
        if spec.key:
            groups = spec.key_groups or 256
            extra.append(f"keyed by {spec.key} ({groups} key groups)")
            if spec.key_ttl:
                extra.append(f"a key leaves after {_duration(spec.key_ttl)} without rows")
        lines.append("  " + "; ".join(extra))
        lines.append(f"  windows: {', '.join(info.windows) or '(none)'}")
        newest = self.when(info.newest_timestamp) if info.newest_timestamp else "none yet"
        counts = (
            f"  rows {info.rows_appended:,} (late {info.rows_late:,}), batches "
            f"{info.batches_appended:,} (duplicates {info.batches_duplicate:,}), newest row "
            f"{newest}"
        )
        lines.append(counts)
        if spec.key:
            lines.append(f"  keys {info.keys:,} (expired {info.keys_expired:,})")
        return "\n".join(lines)

    def window(self, info: Any, head: str = "window", key: str = "") -> str:
        """A window's summary; ``key``: its stream's key field (a keyed stream)."""
        spec = info.spec
        aggs = ", ".join(
            f"{a.name}={a.monoid}" + (f"({a.field})" if a.field else "") for a in spec.aggregations
        )
        p = spec.policy
        policy = {
            "count": f"the last {p.size:,} rows",
            "time_range": f"a time range of {_duration(p.range)}",
            "bounded_sum": f"a sum of {p.field} up to {p.bound:g}",
            "max_sub_window": f"max sub-window over {p.field}",
            "cel": f"cel: {p.cel}",
        }.get(p.kind, p.kind)
        storage = spec.storage.kind + (", durable" if spec.storage.durable else "")
        every = ""
        if isinstance(spec.slide, timedelta):
            every = f"every {_duration(spec.slide)} (event time), "
        elif spec.slide:
            every = f"every {spec.slide:,} rows, "
        lines = [
            f"{head} {spec.stream}/{spec.name}: {aggs}",
            f"  {every}over {policy}; {spec.algorithm}, {storage}",
        ]
        st = info.stats
        if key:
            lines.append(
                f"  one instance per key of {key!r}: sizes and counts are per key (mtawindows "
                f"keys get {spec.stream} KEY, or query --key KEY)"
            )
        elif st:
            lines.append(
                f"  size {st.get('size', 0):,}, rows in {st.get('inserted', 0):,}, rows out "
                f"{st.get('evicted', 0):,}, late rows {st.get('late_rows', 0):,}"
            )
        if info.path:
            lines.append(f"  per-row results: {info.path}")
        if info.storage:
            lines.append(f"  state: {info.storage}")
        if info.plan:
            lines.append(f"  plan: {info.plan}")
        return "\n".join(lines)

    def result(self, stream: str, r: Any, time_outputs: Iterable[str] = ()) -> str:
        key = f" key {r.key}" if r.key else ""
        newest = self.when(r.timestamp) if r.timestamp else "none"
        head = (
            f"{stream}/{r.window}{key}: {r.size:,} rows after batch {r.sequence} "
            f"(newest row {newest})"
        )
        if r.boundary:  # a hopping window's: its last closed boundary's
            rows = "1 row" if r.size == 1 else f"{r.size:,} rows"
            head = f"{stream}/{r.window}{key}: {rows} before {self.boundary(r)}"

        return "\n".join([head, *self.values(r.values, time_outputs)])

    def result_line(self, batch: int, r: Any, time_outputs: Iterable[str] = ()) -> str:
        outs = set(time_outputs)
        vals = " ".join(f"{n}={self.output(n, v, outs)}" for n, v in sorted(r.values.items()))
        key = f"key {r.key}  " if r.key else ""
        at = f"  (newest row {self.when(r.timestamp)})" if r.timestamp else ""
        if r.boundary:
            return f"{self.boundary(r)}  {key}size {r.size}  {vals}"
        return f"batch {batch}  {key}size {r.size}  {vals}{at}"

    def boundary(self, r: Any) -> str:
        """A hopping window's boundary: a time or, for a slide in rows (``boundary_rows``,
        set from the window's definition), a row count."""
        if self.boundary_rows:
            return f"row {r.boundary:,}"
        return f"boundary {self.when(r.boundary)}"

    def table(self, header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
        rows = [[str(c) for c in row] for row in rows]
        widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(header)]
        fmt = "  ".join(f"{{:<{w}}}" for w in widths)
        return "\n".join(fmt.format(*r).rstrip() for r in [list(header), *rows])
