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


@pytest.mark.slow
@pytest.mark.server
def test_the_wheel_installs_and_serves(tmp_path: Path) -> None:
    """``make dist``'s wheel (``pip wheel .``) installed into a fresh virtualenv, away from the
    checkout: the commands it installs run, the server serves, the SDK appends and reads, and
    every module comes from the installed wheel (the dependencies from this environment)."""
    import os
    import sysconfig
    import time

    root = Path(__file__).resolve().parents[2]
    dist = tmp_path / "dist"
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
    subprocess.run([*build, "-w", str(dist), str(root)], check=True, timeout=300)
    (wheel,) = dist.glob("mtawindows-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    py, bin_dir = venv / "bin" / "python", venv / "bin"
    install = [str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)]
    subprocess.run(install, check=True, timeout=300)
    site = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    # the dependencies: this environment's packages, after the venv's own (a path, not a
    # site dir: its .pth files, such as the checkout's editable install, are not read)
    Path(site, "_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MTAWINDOWS_")}
    env["PATH"] = os.pathsep.join([str(bin_dir), env.get("PATH", "")])
    work = tmp_path / "work"
    work.mkdir()
    help_ = subprocess.run(
        [str(bin_dir / "mtawindows"), "--help"], env=env, cwd=work, capture_output=True, text=True
    )
    assert help_.returncode == 0 and "serve" in help_.stdout, help_.stderr
    where = subprocess.run(
        [str(py), "-c", "import mtawindows.server, mtawindows.v1; print(mtawindows.server.__file__);"
         "print(mtawindows.v1.__file__)"],
        env=env, cwd=work, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert all(w.startswith(site) for w in where), where
    port_file = work / "port"
    server = subprocess.Popen(
        [str(bin_dir / "mtawindows"), "serve", "--port", "0", "--port-file", str(port_file),
         "--data-dir", str(work / "data")],
        env=env, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not port_file.exists() or not port_file.read_text():
            assert server.poll() is None, "the installed server exited"
            assert time.monotonic() < deadline, "the installed server never served"
            time.sleep(0.1)
        target = f"127.0.0.1:{port_file.read_text()}"
        code = (
            "from mtawindows.client import *\n"
            f"c = WindowClient({target!r})\n"
            "c.create_stream(StreamSpec('s', (Field('v', 'DOUBLE'),), wall_clock=False))\n"
            "c.create_window(WindowSpec('s', 'w', (Aggregation('m', 'max', 'v'),), Policy.count(2)))\n"
            "c.append('s', {'ts': [1, 2, 3], 'v': [5.0, 1.0, 2.0]})\n"
            "print(c.query('s', 'w').values['m'])\n"
        )
        got = subprocess.run(
            [str(py), "-c", code], env=env, cwd=work, capture_output=True, text=True, timeout=60
        )
        assert got.returncode == 0, got.stderr
        assert got.stdout.strip() == "2.0"
    finally:
        server.terminate()
        server.wait(timeout=60)
