"""The layout promises: the sub-packages of the implicit namespace `mtawindows` (all of them in
the distribution), and no generic top-level `server` or `client` module installed."""

from __future__ import annotations

import importlib
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

import mtawindows


def test_mtawindows_is_an_implicit_namespace_package() -> None:
    assert getattr(mtawindows, "__file__", None) is None
    for sub in ("server", "client", "spark_connector", "cli", "testing"):
        importlib.import_module(f"mtawindows.{sub}")


@pytest.mark.parametrize("name", ["server", "client", "spark_connector", "proto"])
def test_no_generic_top_level_modules(name: str, tmp_path: Path) -> None:
    """What the installed distribution provides, seen from a fresh interpreter elsewhere."""
    code = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({name!r}) is not None)"
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, check=False)
    assert done.returncode == 0, f"a top-level module {name!r} is importable"


def test_public_engine_api_names() -> None:
    from mtawindows.server.engine.amta import AmortizedMTA
    from mtawindows.server.engine.lmta import LogMTA
    from mtawindows.server.engine.naive import NaiveWindow

    for cls in (AmortizedMTA, LogMTA, NaiveWindow):
        for attr in ("insert", "enforce", "query", "push", "extend", "__len__"):
            assert callable(getattr(cls, attr)), (cls, attr)


def test_the_testing_kit_ships_typed_with_its_pytest_plugin() -> None:
    """``mtawindows.testing`` is installed (``py.typed`` beside it), its pytest plugin is the
    ``pytest11`` entry point ``mtawindows``, and every name it exports resolves."""
    from importlib.metadata import entry_points

    import mtawindows.testing as kit

    assert (Path(kit.__file__).parent / "py.typed").is_file()
    (ep,) = [e for e in entry_points(group="pytest11") if e.name == "mtawindows"]
    assert ep.value == "mtawindows.testing.pytest_plugin"
    assert all(getattr(kit, name) is not None for name in kit.__all__)
    assert sorted(kit.__all__) == sorted(kit._LAZY)


def test_the_testing_kit_needs_no_pytest() -> None:
    """Its context managers are for any test runner: importing the kit, and using it up to a
    started and stopped server, loads no pytest; the plugin module alone imports it."""
    code = (
        "import sys\n"
        "from mtawindows.testing import LocalCluster, LocalServer, RedisCluster, free_port\n"
        "import mtawindows.testing.server, mtawindows.testing.cluster\n"
        "import mtawindows.testing.redis_cluster, mtawindows.testing.shared_redis\n"
        "print('pytest' in sys.modules, '_pytest' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    ).stdout.strip()
    assert out == "False False"


def test_every_package_folder_is_in_the_distribution() -> None:
    """setuptools takes an explicit package list (the folders map onto ``mtawindows.*`` by
    package-dir): a sub-package missing from it would be missing from every install."""
    import tomllib

    root = Path(__file__).resolve().parents[2]
    tool = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(tool["packages"])
    found = set()
    for package, folder in tool["package-dir"].items():
        for init in (root / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(root / folder).parts
            found.add(".".join((package, *rel)))
    assert found == listed
