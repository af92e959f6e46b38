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
    for sub in ("server", "client", "spark_connector"):
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
