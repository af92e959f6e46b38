"""The architecture, checked from the sources: imports point one way and nothing loops.

Every ``import`` / ``from ... import`` in the five packages counts, at module level or inside a
function, under ``TYPE_CHECKING`` or not (a lazy import is still a dependency). The rules:

* ``mtawindows.v1`` (the wire contract) imports no other first-party package;
* the server never imports the client, the connector or the command; the client never imports
  the server; the connector imports the client and the contract only;
* inside the server, layers import downwards only:
  transport -> service -> engine -> storage -> sentinels (the CLI on top; the flat layout's
  compatibility modules may re-export any layer, and no layer may import them);
* no cycle among the modules, and none among the layers.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {
    "mtawindows.v1": ROOT / "proto" / "mtawindows" / "v1",
    "mtawindows.server": ROOT / "server",
    "mtawindows.client": ROOT / "client",
    "mtawindows.spark_connector": ROOT / "spark_connector",
    "mtawindows.cli": ROOT / "cli",
}
# which first-party packages each package may import (besides itself)
ALLOWED = {
    "mtawindows.v1": set(),
    "mtawindows.server": {"mtawindows.v1"},
    "mtawindows.client": {"mtawindows.v1"},
    "mtawindows.spark_connector": {"mtawindows.v1", "mtawindows.client"},
    "mtawindows.cli": {"mtawindows.v1", "mtawindows.client", "mtawindows.server"},
}
# the server's layers, bottom first; a module may import its own layer and the ones below
SERVER_LAYERS = ["sentinels", "storage", "engine", "service", "transport", "cli"]
SERVER_TOP = {"cli", "__main__", "demo", "workers"}  # entry points sit on every layer


def modules() -> dict[str, Path]:
    out = {}
    for pkg, folder in PACKAGES.items():
        for path in sorted(folder.rglob("*.py")):
            rel = path.relative_to(folder).with_suffix("").parts
            if rel[-1] == "__init__":
                rel = rel[:-1]
            out[".".join((pkg, *rel))] = path
    return out


MODULES = modules()


def imports_of(name: str, path: Path) -> Iterator[tuple[str, int]]:
    """First-party modules ``name`` imports, with the line: ``from a import b`` counts as
    ``a.b`` when that is a module, else as ``a``."""
    is_pkg = path.name == "__init__.py"
    here = name.split(".") if is_pkg else name.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            for a in node.names:
                sub = f"{mod}.{a.name}"
                yield (sub if sub in MODULES else mod), node.lineno


def first_party(target: str) -> str | None:
    """The known module ``target`` names (or the closest known package above it)."""
    while target:
        if target in MODULES:
            return target
        target = target.rpartition(".")[0]
    return None


def graph() -> dict[str, set[tuple[str, int]]]:
    g: dict[str, set[tuple[str, int]]] = {m: set() for m in MODULES}
    for name, path in MODULES.items():
        for target, line in imports_of(name, path):
            if target.startswith("mtawindows"):
                found = first_party(target)
                assert found is not None, f"{name}:{line} imports {target}, which does not exist"
                if found != name:
                    g[name].add((found, line))
    return g


GRAPH = graph()


def package_of(module: str) -> str:
    return next(p for p in PACKAGES if module == p or module.startswith(p + "."))


def server_layer(module: str) -> str | None:
    """The layer of a server module; None for the package itself and the compatibility
    modules of the flat layout (top-level modules that are not a layer)."""
    parts = module.split(".")
    if len(parts) < 3:
        return None
    head = parts[2]
    if head in SERVER_TOP:
        return "cli"
    return head if head in SERVER_LAYERS else None


def is_compat(module: str) -> bool:
    return package_of(module) == "mtawindows.server" and server_layer(module) is None


def test_the_walk_sees_the_layers() -> None:
    # the checks below are only as good as the walk: it must see known edges
    assert "mtawindows.v1.windows_pb2" in {t for t, _ in GRAPH["mtawindows.v1.convert"]}
    catalog = GRAPH["mtawindows.server.service.catalog"]
    assert any(t.startswith("mtawindows.server.engine") for t, _ in catalog)
    assert any(t.startswith("mtawindows.client") for t, _ in GRAPH["mtawindows.cli"])
    assert len(MODULES) > 50


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_packages_import_only_what_is_below_them(package: str) -> None:
    bad = [
        f"{m}:{line} imports {t}"
        for m, edges in GRAPH.items()
        if package_of(m) == package
        for t, line in edges
        if package_of(t) != package and package_of(t) not in ALLOWED[package]
    ]
    assert not bad, "\n".join(bad)


def test_server_layers_import_downwards_only() -> None:
    rank = {layer: i for i, layer in enumerate(SERVER_LAYERS)}
    bad = []
    for m, edges in GRAPH.items():
        if package_of(m) != "mtawindows.server":
            continue
        mine = server_layer(m)
        for t, line in edges:
            if package_of(t) != "mtawindows.server" or t == "mtawindows.server":
                continue
            if is_compat(t) and not is_compat(m):
                bad.append(f"{m}:{line} imports the compatibility module {t}")
            elif mine is not None and not is_compat(t):
                theirs = server_layer(t)
                assert theirs is not None
                if rank[theirs] > rank[mine]:
                    bad.append(f"{m}:{line} ({mine}) imports {t} ({theirs}), a layer above")
    assert not bad, "\n".join(bad)


def _cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_between_modules() -> None:
    g = {m: {t for t, _ in edges} for m, edges in GRAPH.items()}
    found = _cycles(g)
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_no_cycle_between_server_layers_or_packages() -> None:
    def group(m: str) -> str:
        layer = server_layer(m) if package_of(m) == "mtawindows.server" else None
        return f"{package_of(m)}.{layer}" if layer else package_of(m)

    g: dict[str, set[str]] = {}
    for m, edges in GRAPH.items():
        if is_compat(m):
            continue  # re-exports on purpose; nothing imports them (checked above)
        for t, _ in edges:
            if group(t) != group(m):
                g.setdefault(group(m), set()).add(group(t))
    found = _cycles(g)
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_cycle_finder_finds_cycles() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


# the flat layout's module paths (README, users, earlier tests) and where each moved
MOVED = {
    "mtawindows.server.monoids": "mtawindows.server.engine.monoids",
    "mtawindows.server.policies": "mtawindows.server.engine.policies",
    "mtawindows.server.laws": "mtawindows.server.engine.laws",
    "mtawindows.server.naive": "mtawindows.server.engine.naive",
    "mtawindows.server.baselines": "mtawindows.server.engine.baselines",
    "mtawindows.server.validate": "mtawindows.server.engine.validate",
    "mtawindows.server.mta": "mtawindows.server.engine.mta",
    "mtawindows.server.redis_store": "mtawindows.server.storage.redis_store",
    "mtawindows.server.codecs": "mtawindows.server.storage.codecs",
    "mtawindows.server.embedded": "mtawindows.server.storage.embedded",
    "mtawindows.server.journal": "mtawindows.server.storage.journal",
    "mtawindows.server.catalog": "mtawindows.server.service.catalog",
    "mtawindows.server.cel": "mtawindows.server.service.cel",
    "mtawindows.server.inputs": "mtawindows.server.service.inputs",
    "mtawindows.server.fanout": "mtawindows.server.service.fanout",
    "mtawindows.server.grpc_server": "mtawindows.server.transport.grpc_server",
    "mtawindows.server.metrics": "mtawindows.server.transport.metrics",
    "mtawindows.client.types": "mtawindows.v1.types",
    "mtawindows.client.convert": "mtawindows.v1.convert",
    "mtawindows.client.proto.windows_pb2": "mtawindows.v1.windows_pb2",
    "mtawindows.client.proto.windows_pb2_grpc": "mtawindows.v1.windows_pb2_grpc",
}


@pytest.mark.parametrize("old", sorted(MOVED))
def test_the_flat_layout_paths_are_the_moved_modules(old: str) -> None:
    assert importlib.import_module(old) is importlib.import_module(MOVED[old])


def test_the_names_users_import_from_old_paths() -> None:
    from mtawindows.server.engine.amta import AmortizedMTA
    from mtawindows.server.engine.lmta import LogMTA
    from mtawindows.server.mta import AmortizedMTA as A
    from mtawindows.server.mta import LogMTA as L
    from mtawindows.server.mta import WindowCorruptedError  # noqa: F401
    from mtawindows.server.sentinels import EMPTY as E
    from mtawindows.server.service import Deferred, Limits, Registry, ServiceError, Stream, Window
    from mtawindows.server.storage.memory import MemoryStore
    from mtawindows.server.storage.redis_store import RedisStore
    from mtawindows.server.store import EMPTY, TieredLevel
    from mtawindows.server.store import MemoryStore as M
    from mtawindows.server.store import RedisStore as R

    assert (AmortizedMTA, LogMTA, MemoryStore, RedisStore, E) == (A, L, M, R, EMPTY)
    assert all((TieredLevel, Deferred, Limits, Registry, ServiceError, Stream, Window))


def test_importing_the_server_loads_no_client_and_the_client_no_server() -> None:
    code = (
        "import importlib, pkgutil, sys\n"
        "import mtawindows.{top} as p\n"
        "for m in pkgutil.walk_packages(p.__path__, p.__name__ + '.'):\n"
        "    if not m.name.endswith('__main__'):\n"
        "        importlib.import_module(m.name)\n"
        "bad = sorted(n for n in sys.modules if n in {forbidden!r}\n"
        "             or n.startswith(tuple(f + '.' for f in {forbidden!r})))\n"
        "print(len([n for n in sys.modules if n.startswith(p.__name__)]), bad)\n"
    )
    for top, forbidden in (
        ("server", ("mtawindows.client", "mtawindows.spark_connector", "mtawindows.cli")),
        ("client", ("mtawindows.server", "mtawindows.spark_connector", "mtawindows.cli")),
        ("v1", ("mtawindows.server", "mtawindows.client", "mtawindows.spark_connector")),
    ):
        out = subprocess.run(
            [sys.executable, "-c", code.format(top=top, forbidden=forbidden)],
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        ).stdout.split(" ", 1)
        assert int(out[0]) > 3, (top, out)
        assert out[1].strip() == "[]", (top, out[1])


def test_the_engine_sees_storage_only_through_its_protocol() -> None:
    allowed = {"mtawindows.server.storage", "mtawindows.server.storage.protocol"}
    bad = [
        f"{m}:{line} imports {t}"
        for m, edges in GRAPH.items()
        if server_layer(m) == "engine"
        for t, line in edges
        if server_layer(t) == "storage" and t not in allowed
    ]
    assert not bad, "\n".join(bad)
