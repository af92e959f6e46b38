"""The streams the connector works with: a keyed stream's key field against option
``key_column`` (or ``key_col``), and ``sliding_aggregate``'s per-task scratch streams (one keyed
stream per task attempt, holding all the keys of its partition)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from mtawindows.client import Field, StreamSpec

from .connector_errors import ConnectorError
from .schemas import spark_type_name

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

# batch sliding_aggregate's per-task scratch streams are named <stream><mark><run>.<stage>...
SCRATCH_MARK = "~scratch."

# Spark type of a key column -> the stream field type that holds it
_KEY_TYPES = {
    "string": "STRING",
    "long": "INT64",
    "integer": "INT64",
    "short": "INT64",
    "byte": "INT64",
}


def scratch_name(stream: str, run_id: str, stage: int, partition: int, attempt: int) -> str:
    """The scratch stream of one task attempt of ``sliding_aggregate`` run ``run_id``."""
    return f"{stream}{SCRATCH_MARK}{run_id}.{stage}.{partition}.{attempt}"


def check_key(spec: StreamSpec, key_column: str, option: str = "key_column") -> None:
    """A stream written or read with ``key_column`` must be keyed by that very column; a keyed
    stream read or computed without one is refused too (its windows are per key)."""
    if not key_column:
        return
    if not spec.key:
        msg = (
            f"option {option!r}: stream {spec.name!r} is not keyed, so it cannot take "
            f"{option} {key_column!r}; create it keyed by that field, e.g. StreamSpec(..., "
            f"fields=(..., Field({key_column!r}, 'STRING')), key={key_column!r})"
        )
        raise ConnectorError(msg)
    if spec.key != key_column:
        msg = (
            f"option {option!r}: stream {spec.name!r} is keyed by field {spec.key!r}, not by "
            f"{option} {key_column!r}; use {option} {spec.key!r} or another stream"
        )
        raise ConnectorError(msg)


def keyed_spec(spec: StreamSpec, key_col: str, schema: StructType) -> StreamSpec:
    """``spec`` keyed by DataFrame column ``key_col`` (a string or integer column): the spec of
    ``sliding_aggregate``'s scratch streams (the key field added when the stream lacks it)."""
    if spec.key == key_col:
        return spec
    dtype = {f.name: spark_type_name(f.dataType) for f in schema.fields}[key_col]
    kind = _KEY_TYPES.get(dtype)
    if kind is None:
        msg = f"key_col: column {key_col!r} is {dtype}; a key must be a string or an integer column (cast it)"
        raise ConnectorError(msg)
    fields = spec.fields
    have = {f.name: str(f.type) for f in fields}
    if key_col in have and have[key_col] not in ("STRING", "INT64"):
        msg = f"key_col: field {key_col!r} of stream {spec.name!r} is {have[key_col]}; a key must be a STRING or INT64 field"
        raise ConnectorError(msg)
    if key_col not in have:
        fields = (*fields, Field(key_col, kind))
    return replace(spec, fields=fields, key=key_col)


__all__ = ["SCRATCH_MARK", "check_key", "keyed_spec", "scratch_name"]
