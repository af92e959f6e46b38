"""The architecture, checked from the sources: imports point one way and nothing loops.

Every ``import`` / ``from ... import`` in the six packages counts, at module level or inside a
function, under ``TYPE_CHECKING`` or not (a lazy import is still a dependency). The rules:

* ``mtawindows.v1`` (the wire contract) imports no other first-party package;
* the server never imports the client, the connector or the command; the client never imports
  the server; the connector imports the client and the contract only; the testing kit
  (``mtawindows.testing``) imports the contract, the client and the server, and no package
  imports it;
* inside the server, layers import downwards only:
  transport -> service -> engine -> storage -> sentinels (the CLI on top), and every server
  module sits in a layer;
* no cycle among the modules, and none among the layers;
* one name per module: no module replaces itself (or another) in ``sys.modules``, so the
  name a module is imported by is the name it has.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {
    "mtawindows.v1": ROOT / "proto" / "mtawindows" / "v1",
    "mtawindows.server": ROOT / "server",
    "mtawindows.client": ROOT / "client",
    "mtawindows.spark_connector": ROOT / "spark_connector",
    "mtawindows.cli": ROOT / "cli",
    "mtawindows.testing": ROOT / "testing",
}
# which first-party packages each package may import (besides itself)
ALLOWED = {
    "mtawindows.v1": set(),
    "mtawindows.server": {"mtawindows.v1"},
    "mtawindows.client": {"mtawindows.v1"},
    "mtawindows.spark_connector": {"mtawindows.v1", "mtawindows.client"},
    "mtawindows.cli": {"mtawindows.v1", "mtawindows.client", "mtawindows.server"},
    # the testing kit runs servers and talks to them; nothing imports it (tests and users do)
    "mtawindows.testing": {"mtawindows.v1", "mtawindows.client", "mtawindows.server"},
}
# the server's layers, bottom first; a module may import its own layer and the ones below
SERVER_LAYERS = ["sentinels", "storage", "engine", "service", "transport", "cli"]
SERVER_TOP = {"serve_command", "__main__", "demo", "workers"}  # entry points sit on every layer


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
    """The layer of a server module; None for the package itself and for a module outside
    every layer (which :func:`test_every_server_module_sits_in_a_layer` refuses)."""
    parts = module.split(".")
    if len(parts) < 3:
        return None
    head = parts[2]
    if head in SERVER_TOP:
        return "cli"
    return head if head in SERVER_LAYERS else None


def test_every_server_module_sits_in_a_layer() -> None:
    loose = [
        m
        for m in MODULES
        if package_of(m) == "mtawindows.server"
        and m != "mtawindows.server"
        and server_layer(m) is None
    ]
    assert not loose, f"server modules outside every layer: {loose}"


def test_the_walk_sees_the_layers() -> None:
    # the checks below are only as good as the walk: it must see known edges
    assert "mtawindows.v1.windows_pb2" in {t for t, _ in GRAPH["mtawindows.v1.convert"]}
    catalog = GRAPH["mtawindows.server.service.monoid_catalog"]
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


def test_no_package_imports_the_testing_kit() -> None:
    bad = [
        f"{m}:{line} imports {t}"
        for m, edges in GRAPH.items()
        if package_of(m) != "mtawindows.testing"
        for t, line in edges
        if package_of(t) == "mtawindows.testing"
    ]
    assert not bad, "\n".join(bad)
    assert all("mtawindows.testing" not in allowed for allowed in ALLOWED.values())


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
            theirs = server_layer(t)
            if mine is not None and theirs is not None and rank[theirs] > rank[mine]:
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
        for t, _ in edges:
            if group(t) != group(m):
                g.setdefault(group(m), set()).add(group(t))
    found = _cycles(g)
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_cycle_finder_finds_cycles() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_replaces_itself_in_sys_modules() -> None:
    # an alias module swaps another module in under its own name (``sys.modules[__name__] =
    # other``): the source may not do it, and after importing everything each name is its own
    swaps = [
        f"{name}:{node.lineno}"
        for name, path in MODULES.items()
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Subscript) and ast.unparse(target.value) == "sys.modules"
    ]
    assert not swaps, f"modules that write sys.modules: {swaps}"
    code = (
        "import importlib, sys\n"
        f"names = {sorted(m for m in MODULES if not m.endswith('__main__'))!r}\n"
        "for n in names:\n"
        "    try:\n"
        "        importlib.import_module(n)\n"
        "    except ImportError as e:\n"
        "        if 'pyspark' not in str(e) and 'pandas' not in str(e):\n"
        "            raise\n"
        "print(sorted(k for k, m in sys.modules.items()\n"
        "             if k.startswith('mtawindows') and getattr(m, '__name__', k) != k))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    ).stdout.strip()
    assert out == "[]", f"modules known under a name not their own: {out}"


def test_the_old_flat_paths_are_gone() -> None:
    for old in (
        "mtawindows.server.mta",
        "mtawindows.server.monoids",
        "mtawindows.server.store",
        "mtawindows.server.grpc_server",
        "mtawindows.client.types",
        "mtawindows.client.sdk",
        "mtawindows.client.proto",
    ):
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(old)


def test_the_package_faces() -> None:
    from mtawindows.client import AsyncWindowClient, StreamSpec, WindowClient
    from mtawindows.server.engine import AmortizedMTA, LogMTA, Max, TimeRangePolicy, check_laws
    from mtawindows.server.engine.amta import AmortizedMTA as A
    from mtawindows.server.storage import MemoryStore, RedisStore, reopen_store
    from mtawindows.server.storage.redis_store import RedisStore as R

    assert (AmortizedMTA, RedisStore) == (A, R)
    assert all((AsyncWindowClient, StreamSpec, WindowClient, LogMTA, Max, TimeRangePolicy))
    assert all((check_laws, MemoryStore, reopen_store))


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
