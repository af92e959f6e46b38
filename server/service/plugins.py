"""Monoid plugins: entry points in the group ``mtawindows.monoids``, each a
``factory(field, params) -> monoid`` (``field`` is ``None`` when empty, ``params`` a
``dict[str, str]``); the monoid may carry an ``output_type`` (a FieldType name) for typed
result columns. :func:`~.monoid_catalog.build_aggregation` builds them beside the built-ins."""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import entry_points

from ..engine.monoids import Monoid

__all__ = ["PLUGIN_GROUP", "load_plugin", "plugin_names"]

PLUGIN_GROUP = "mtawindows.monoids"


def plugin_names() -> list[str]:
    return sorted(ep.name for ep in entry_points(group=PLUGIN_GROUP))


def load_plugin(name: str) -> Callable[..., Monoid] | None:
    for ep in entry_points(group=PLUGIN_GROUP):
        if ep.name == name:
            return ep.load()  # type: ignore[no-any-return]
    return None
