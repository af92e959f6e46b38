"""The documentation's code runs as written: the README and every page of ``docs/`` (issues
20 and 23), every import it shows is canonical, and the output a page shows is what comes.

How the blocks run here:

* **```python blocks are the cells of one notebook per group**: they run in the pages' order
  (:data:`PAGES`) in one namespace, so a block may use what an earlier block defined (the
  cluster page appends to the stream the service page created). Each test runs one group of
  cells in a fresh interpreter (``sys.executable``), every cell compiled under its page's path
  and line numbers: a failure's traceback shows the page's line, and the test names the block
  that failed. A cell belongs to the group of its page (:data:`PAGES`):

  - ``readme``: README.md's taste, against a fresh server;
  - ``start``: docs/getting-started.md, against a fresh server; what it prints must be the
    ```text block the page shows after it ("It prints:");
  - ``engine``: docs/guides/engine.md: no server; the Redis block uses the session's Redis
    (the ``redis_url`` fixture);
  - ``service``: docs/guides/service.md and keyed.md, against a fresh server;
  - ``cluster``: the ``service`` cells, then docs/guides/cluster.md's (it goes on with their
    stream ``cpu`` and producer ``agent-1``), against a real cluster of two servers on one Redis;
  - ``spark``: docs/guides/spark.md on a real local Spark (``local[2]``) and a fresh server,
    marked ``spark`` and ``slow``;
  - ``kit``: docs/guides/testing.md: the block starts its own servers with
    :mod:`mtawindows.testing`, as a user's test would.

  A ```python block on any other page fails :func:`test_every_block_is_run_or_skipped`
  until its page is given a group here: every python block runs.
* **Addresses**: the pages say ``localhost:50051`` (the default port of ``mtawindows serve``)
  for a server, ``host1:50051,host2:50051`` for a cluster's seeds and
  ``redis://localhost:6379/0`` for a Redis; the test replaces those strings in the block text
  with the real servers' addresses (:class:`Addresses`) before it runs a block.
* **```bash blocks**: each command (continuation lines joined) is classified by
  :func:`classify`. Run, in the pages' order, through ``bash -c`` in one temporary directory, with
  ``$MTAWINDOWS_TARGET`` set to a fresh server and this interpreter's ``bin`` first on PATH:
  every ``mtawindows`` client command, and the ``printf`` that writes the file they read.
  ``mtawindows watch`` follows a window until stopped: it runs in the background until it
  prints the result of a batch the test appends, then is stopped. Skipped, each for its
  reason: ``make`` (it builds ``.venv`` and runs the demo or the whole suite: the demo has
  ``tests/spark/test_spark_demo.py``), ``docker`` (no Docker engine here;
  ``tests/project/test_deploy.py`` runs the compose topology as processes) and
  ``mtawindows serve`` (it runs until stopped; the servers here are the same command, started
  by :mod:`mtawindows.testing`), ``pip`` (it installs into the environment: this one has
  the package). A ```text block right after a bash block shows the output of its last
  command: each of its lines (but ``...``) must come, in order. A command of any other kind fails
  :func:`test_every_block_is_run_or_skipped` until it is classified.
* **Imports**: the pages' code imports only from the package faces (:data:`FACES`), and every
  dotted ``mtawindows.`` name in the prose resolves to a module or a module's attribute
  (except the contributors' architecture page, whose layout names files, and the entry-point
  group ``mtawindows.monoids`` and ErrorInfo's domain ``mtawindows.dev``).
* **Generated pages**: docs/reference/configuration.md and errors.md are what
  ``docs/generate.py`` writes from the code now.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import itertools
import json
import os
import queue
import re
import shlex
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from mtawindows.client import WindowClient
from mtawindows.testing import LocalCluster, LocalServer

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
BIN = Path(sys.executable).parent

# every page with code, in reading order -> the group that runs its ```python blocks
PAGES = {
    "README.md": "readme",
    "docs/getting-started.md": "start",
    "docs/guides/service.md": "service",
    "docs/guides/keyed.md": "service",
    "docs/guides/ranges.md": "service",
    "docs/guides/sketches.md": "service",
    "docs/guides/hopping.md": "service",
    "docs/guides/spark.md": "spark",
    "docs/guides/cluster.md": "cluster",
    "docs/guides/engine.md": "engine",
    "docs/guides/testing.md": "kit",
}


# a section of a page whose blocks run in a group of their own (page, heading) -> group
SECTIONS = {("docs/getting-started.md", "## A first result from Spark"): "start-spark"}
# its commands need a cluster of their own: run by test_local_cluster_walkthrough
LOCAL_CLUSTER = ROOT / "docs/guides/local-cluster.md"


def all_pages() -> list[Path]:
    """README.md and every page of docs/, the pages of :data:`PAGES` first in their order."""
    listed = [ROOT / p for p in PAGES]
    rest = sorted(p for p in (ROOT / "docs").rglob("*.md") if p not in listed)
    return listed + rest


# where README code may import from: the package faces, never a module behind them
FACES = {
    "mtawindows.server.engine",
    "mtawindows.server.storage",
    "mtawindows.client",
    "mtawindows.spark_connector",
    "mtawindows.testing",
    "mtawindows.v1.types",
    "mtawindows.v1.convert",
}
# dotted names in the prose that are not Python names
NOT_MODULES = {
    "mtawindows.monoids",  # the entry-point group of monoid plugins
    "mtawindows.dev",  # ErrorInfo's domain
}
PROSE_UNCHECKED = ROOT / "docs/contributing/architecture.md"  # its layout names files


# ----------------------------------------------------------------------------- the README


@dataclass(frozen=True)
class Block:
    lang: str  # the fence's info string: "python", "bash", "" (a diagram)
    line: int  # the page's line of the block's first line (the one after the fence)
    source: str
    heading: str  # the last heading above the block, "## Redis-backed windows"
    path: Path = README

    @property
    def name(self) -> str:
        return str(self.path.relative_to(ROOT))

    def __str__(self) -> str:
        return f"{self.name}:{self.line} (```{self.lang} under {self.heading!r})"


def read_blocks(text: str, path: Path = README) -> list[Block]:
    """The fenced blocks of a Markdown text (the page ``path``), in order."""
    blocks: list[Block] = []
    heading = ""
    lang: str | None = None
    start = 0
    body: list[str] = []
    for n, line in enumerate(text.splitlines(), 1):
        if lang is None:
            if line.startswith("```"):
                lang, start, body = line[3:].strip(), n + 1, []
            elif line.startswith("#"):
                heading = line.strip()
        elif line.startswith("```"):
            blocks.append(Block(lang, start, "\n".join(body) + "\n", heading, path))
            lang = None
        else:
            body.append(line)
    assert lang is None, f"{path.name}:{start - 1}: a ``` fence that never closes"
    return blocks


def page_blocks(path: Path) -> list[Block]:
    return read_blocks(path.read_text(), path)


def every_block() -> list[Block]:
    return [b for page in all_pages() for b in page_blocks(page)]


def group_of(block: Block) -> str | None:
    """The group that runs ``block`` (its section's, else its page's)."""
    return SECTIONS.get((block.name, block.heading), PAGES.get(block.name))


def python_blocks(group: str) -> list[Block]:
    """The python blocks of ``group``, in the pages' order."""
    pages = [ROOT / p for p in PAGES]
    return [
        b
        for page in pages
        for b in page_blocks(page)
        if b.lang == "python" and group_of(b) == group
    ]


@dataclass(frozen=True)
class Command:
    line: int  # the page's line it starts on
    text: str  # continuation lines joined
    page: str = "README.md"


def commands(block: Block) -> list[Command]:
    """A bash block's commands: lines ending in a backslash continue on the next one."""
    out: list[Command] = []
    pending: list[str] = []
    first = 0
    for i, line in enumerate(block.source.splitlines()):
        if not pending:
            first = block.line + i
        if line.rstrip().endswith("\\"):
            pending.append(line.rstrip()[:-1])
            continue
        out.append(Command(first, " ".join([*pending, line]).strip(), block.name))
        pending = []
    if pending:
        out.append(Command(first, " ".join(pending).strip(), block.name))
    return [c for c in out if c.text and not c.text.startswith("#")]


def classify(command: Command) -> tuple[str, str]:
    """("run" | "watch" | "skip" | "unknown", why) for one command of a bash block."""
    words = shlex.split(command.text, comments=True)
    program = Path(words[0]).name
    sub = words[1] if len(words) > 1 else ""
    if program == "make":
        return "skip", "builds .venv, runs the demo or the whole suite (test_spark_demo.py)"
    if program == "docker":
        return "skip", "no Docker engine here (test_deploy.py runs the topology as processes)"
    if program == "mtawindows" and sub == "serve":
        return "skip", "runs until stopped; the servers here are the same command"
    if program == "pip":
        return "skip", "installs into the environment: this one has the package"
    if program == "mtawindows" and sub == "watch":
        return "watch", "follows until stopped: run until it prints a batch's result"
    if program in ("mtawindows", "printf"):
        return "run", ""
    return "unknown", "neither run nor skipped: classify it in test_docs.py"


# ----------------------------------------------------------------------------- running


@dataclass(frozen=True)
class Addresses:
    """What replaces the pages' placeholder addresses in a block's text."""

    server: str = ""  # for "localhost:50051"
    seeds: str = ""  # for "host1:50051,host2:50051"
    redis: str = ""  # for "redis://localhost:6379/0"

    def apply(self, text: str) -> str:
        for placeholder, real in (
            ("host1:50051,host2:50051", self.seeds),
            ("redis://localhost:6379/0", self.redis),
            ("localhost:50051", self.server),
        ):
            if placeholder in text:
                assert real, f"the block needs a real address for {placeholder!r}"
                text = text.replace(placeholder, real)
        return text


# runs the cells in one namespace, each compiled under its page's path and line numbers
DRIVER = """
import json, sys, traceback
namespace = {"__name__": "__main__"}
for path, line, source in json.loads(open(sys.argv[1]).read()):
    try:
        exec(compile("\\n" * (line - 1) + source, path, "exec"), namespace)
    except BaseException:
        traceback.print_exc()
        print(f"{path}:{line}: this ```python block failed", file=sys.stderr)
        sys.exit(1)
"""


def child_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("MTAWINDOWS_REDIS_URL", "MTAWINDOWS_TARGET")
    }
    env["PATH"] = os.pathsep.join([str(BIN), env.get("PATH", "")])
    return {**env, **extra}


def run_cells(blocks: list[Block], addresses: Addresses, cwd: Path, timeout: float) -> str:
    """Run ``blocks`` as one notebook in a fresh interpreter; fail naming the block. Returns
    what they printed."""
    assert blocks, "no block in this group"
    cells = cwd / "cells.json"
    cells.write_text(json.dumps([[str(b.path), b.line, addresses.apply(b.source)] for b in blocks]))
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER, str(cells)],
        cwd=cwd,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, (
        f"blocks {', '.join(str(b) for b in blocks)}:\n{proc.stderr[-6000:]}"
    )
    return proc.stdout


# ----------------------------------------------------------------------------- the tests


def test_every_block_is_run_or_skipped() -> None:
    """Every python block is on a page of a group, every group has a block, and every bash
    command is run or skipped for a named reason."""
    blocks = every_block()
    orphans = [str(b) for b in blocks if b.lang == "python" and group_of(b) is None]
    assert not orphans, f"python blocks on pages of no group (add the page to PAGES): {orphans}"
    for group in {*PAGES.values(), *SECTIONS.values()}:
        assert python_blocks(group), f"group {group!r} has no block"
    unknown = [
        f"{c.page}:{c.line}: {c.text}"
        for b in blocks
        if b.lang == "bash" and b.path != LOCAL_CLUSTER
        for c in commands(b)
        if classify(c)[0] == "unknown"
    ]
    assert not unknown, f"bash commands neither run nor skipped: {unknown}"
    assert any(classify(c)[0] == "run" for b in blocks if b.lang == "bash" for c in commands(b))


def test_docs_import_only_from_the_package_faces() -> None:
    """Every import in a python block is from a face of :data:`FACES` (or not first-party),
    and every name it imports is there."""
    for block in every_block():
        if block.lang != "python":
            continue
        for node in ast.walk(ast.parse(block.source)):
            if isinstance(node, ast.ImportFrom) and node.module:
                modules = [node.module]
                names = [a.name for a in node.names]
            elif isinstance(node, ast.Import):
                modules, names = [a.name for a in node.names], []
            else:
                continue
            for module in modules:
                if module.split(".")[0] != "mtawindows":
                    continue
                assert module in FACES, f"{block}: imports {module!r}, not a package face"
                face = importlib.import_module(module)
                missing = [n for n in names if not hasattr(face, n)]
                assert not missing, f"{block}: {module} has no {missing}"


def resolves(dotted: str) -> bool:
    """``dotted`` names a module, or an attribute of one."""
    parts = dotted.split(".")
    for i in range(len(parts), 1, -1):
        module = ".".join(parts[:i])
        try:
            spec = importlib.util.find_spec(module)
        except ModuleNotFoundError:
            spec = None
        if spec is None:
            continue
        obj: Any = importlib.import_module(module)
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def test_docs_prose_names_resolve() -> None:
    """Every dotted ``mtawindows.*`` name in the pages' prose (outside code blocks; not the
    contributors' architecture page) is a module or a module's attribute."""
    names: set[str] = set()
    for page in all_pages():
        if page == PROSE_UNCHECKED:
            continue
        prose = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
        names |= {m.group(0) for m in re.finditer(r"mtawindows(?:\.[A-Za-z_]\w*)+", prose)}
    assert names
    unresolved = sorted(n for n in names - NOT_MODULES if not resolves(n))
    assert not unresolved, f"names in the docs that are no module or attribute: {unresolved}"


def test_generated_reference_pages_are_current() -> None:
    """docs/reference/configuration.md and errors.md are what docs/generate.py writes now
    (a flag or an error reason changed: run ``python docs/generate.py``)."""
    spec = importlib.util.spec_from_file_location("docs_generate", ROOT / "docs/generate.py")
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    for rel, make in gen.PAGES.items():
        committed = (ROOT / "docs" / rel).read_text()
        assert committed == make(), f"docs/{rel} is stale: run python docs/generate.py"


def shown_output(group: str) -> str | None:
    """The ```text block a page shows right after a python block of ``group``."""
    for page in [ROOT / p for p in PAGES]:
        for before, after in itertools.pairwise(page_blocks(page)):
            if before.lang == "python" and group_of(before) == group and after.lang == "text":
                return after.source
    return None


@pytest.mark.server
@pytest.mark.spark
@pytest.mark.slow
def test_getting_started_spark_result_is_what_it_shows(tmp_path: Path) -> None:
    """Getting started's Spark block on a real local Spark and a fresh server prints the
    table the page shows."""
    with LocalServer(tmp_path / "server") as srv:
        blocks = python_blocks("start-spark")
        out = run_cells(blocks, Addresses(server=srv.target), tmp_path, 480)
    shown = shown_output("start-spark")
    assert shown is not None and out == shown, f"it printed {out!r}, the page shows {shown!r}"


@pytest.mark.server
def test_readme_block_runs(tmp_path: Path) -> None:
    """The README's taste against a fresh server."""
    with LocalServer(tmp_path / "server") as srv:
        run_cells(python_blocks("readme"), Addresses(server=srv.target), tmp_path, timeout=120)


@pytest.mark.server
def test_getting_started_runs_and_prints_what_it_shows(tmp_path: Path) -> None:
    """Getting started's SDK block against a fresh server prints what the page shows."""
    with LocalServer(tmp_path / "server") as srv:
        out = run_cells(python_blocks("start"), Addresses(server=srv.target), tmp_path, 120)
    shown = shown_output("start")
    assert shown is not None, "docs/getting-started.md shows no output after its python block"
    assert out == shown, f"it printed {out!r}, the page shows {shown!r}"


def test_engine_blocks_run(tmp_path: Path, redis_url: str) -> None:
    """docs/guides/engine.md: the engine in process, no server; the Redis block on the
    session's Redis."""
    run_cells(python_blocks("engine"), Addresses(redis=redis_url), tmp_path, timeout=120)


@pytest.mark.server
def test_testing_kit_block_runs(tmp_path: Path) -> None:
    """The testing kit's block: it starts (and kills, and restarts) its own server."""
    run_cells(python_blocks("kit"), Addresses(), tmp_path, timeout=180)


@pytest.mark.server
def test_service_block_runs(tmp_path: Path) -> None:
    """The SDK block against a fresh server."""
    with LocalServer(tmp_path / "server") as srv:
        run_cells(python_blocks("service"), Addresses(server=srv.target), tmp_path, timeout=120)


@pytest.mark.server
def test_cluster_block_runs(tmp_path: Path) -> None:
    """The SDK block against one member of a real two-server cluster, then the cluster block
    with both members as its seeds."""
    with LocalCluster(2, data_dir=tmp_path / "cluster") as cluster:
        addresses = Addresses(server=cluster.targets[0], seeds=cluster.seeds)
        blocks = python_blocks("service") + python_blocks("cluster")
        run_cells(blocks, addresses, tmp_path, timeout=180)


@pytest.mark.server
@pytest.mark.spark
@pytest.mark.slow
def test_spark_block_runs(tmp_path: Path) -> None:
    """The Spark block on a real local Spark: per-row results, a batch push, a streaming push
    of a folder's files (``availableNow``), the pulls."""
    with LocalServer(tmp_path / "server") as srv:
        run_cells(python_blocks("spark"), Addresses(server=srv.target), tmp_path, timeout=480)


def some_row(schema: dict[str, str]) -> dict[str, list[Any]]:
    """One row of a stream with these column types, stamped now (newer than the pages')."""
    values = {"DOUBLE": 0.5, "INT64": 1, "STRING": "x", "BOOL": True}
    now = datetime.now(UTC)
    return {name: [values.get(kind, now)] for name, kind in schema.items()}


def watch(command: Command, target: str, cwd: Path) -> None:
    """Run ``mtawindows watch <stream> <window>`` until it prints the result of a batch this
    appends (a row a time until it does, for at most a minute), then stop it."""
    stream = shlex.split(command.text, comments=True)[2]
    proc = subprocess.Popen(
        ["bash", "-c", f"exec {command.text}"],
        cwd=cwd,
        env=child_env(MTAWINDOWS_TARGET=target),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = proc.stdout, proc.stderr
    assert out is not None and err is not None
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for line in out:
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()
    try:
        with WindowClient(target) as c:
            schema = c.schema(stream)
            deadline = time.monotonic() + 60
            while True:
                c.append(stream, some_row(schema))
                try:
                    printed = lines.get(timeout=0.5)
                    break
                except queue.Empty:
                    assert proc.poll() is None, (
                        f"{command.page}:{command.line}: {command.text} ended: {err.read()}"
                    )
                    assert time.monotonic() < deadline, f"{command.page}:{command.line}: no output"
        assert printed.startswith("batch "), printed  # "batch N  size S  name=value ..."
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def expect_lines(shown: str, printed: str, where: str) -> None:
    """Each line of ``shown`` (but ``...``) comes in ``printed``, in order."""
    lines = printed.splitlines()
    at = 0
    for want in (w.rstrip() for w in shown.splitlines()):
        if want.strip() in ("...", ""):
            continue
        while at < len(lines) and lines[at].rstrip() != want:
            at += 1
        assert at < len(lines), f"{where}: the page shows {want!r}; it printed:\n{printed}"
        at += 1


@pytest.mark.server
def test_cli_commands_run(tmp_path: Path) -> None:
    """The ``mtawindows`` commands of the bash blocks, in the pages' order, against a fresh
    server (see the module docstring for what runs and what is skipped); the output a page
    shows after a block is what its last command printed."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    ran: list[str] = []
    checked = 0
    with LocalServer(tmp_path / "server") as srv:
        addresses = Addresses(server=srv.target, seeds=srv.target)
        for page in all_pages():
            if page == LOCAL_CLUSTER:
                continue
            last: tuple[Command, str] | None = None  # a bash block's last command, its output
            for block in page_blocks(page):
                if block.lang == "text" and last is not None:
                    expect_lines(block.source, last[1], f"{block.name}:{last[0].line}")
                    checked += 1
                last = None
                if block.lang != "bash":
                    continue
                for command in commands(block):
                    kind, _ = classify(command)
                    text = addresses.apply(command.text)
                    if kind == "watch":
                        watch(Command(command.line, text, command.page), srv.target, cwd)
                    elif kind == "run":
                        proc = subprocess.run(
                            ["bash", "-c", text],
                            cwd=cwd,
                            env=child_env(MTAWINDOWS_TARGET=srv.target),
                            capture_output=True,
                            text=True,
                            timeout=120,
                        )
                        assert proc.returncode == 0, (
                            f"{command.page}:{command.line}: {command.text}\n"
                            f"{proc.stdout}{proc.stderr}"
                        )
                        last = (command, proc.stdout)
                    else:
                        last = None
                        continue
                    ran.append(command.text)
    assert any(c.startswith("mtawindows append") for c in ran), ran
    assert checked, "no page shows a command's output"


def free_ports(n: int) -> int:
    """The first of ``n`` consecutive free loopback ports."""
    import socket

    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = probe.getsockname()[1]
        if base + n > 65535:
            continue
        try:
            socks = []
            for i in range(n):
                sk = socket.socket()
                socks.append(sk)
                sk.bind(("127.0.0.1", base + i))
        except OSError:
            continue
        finally:
            for sk in socks:
                sk.close()
        return base
    raise AssertionError("no free consecutive ports")


@pytest.mark.server
@pytest.mark.slow
def test_local_cluster_walkthrough(tmp_path: Path) -> None:
    """docs/guides/local-cluster.md as a user follows it: ``mtawindows serve --workers 3`` (on
    free ports instead of 50051..50053), its banner as shown, then every command of the page
    in order in one shell's environment: the durable window's result, its owner named, kill -9
    of that owner (the page's pid replaced by the owner's from the banner), the same result from another
    member; each ```text block (but the owner's address) is what the command before printed."""
    base = free_ports(3)
    ports = {50051 + i: base + i for i in range(3)}
    members = [f"127.0.0.1:{p}" for p in ports.values()]
    env = child_env(MTAWINDOWS_PORT=str(base))  # no --port in the supervisor's command line
    proc = subprocess.Popen(
        [str(BIN / "mtawindows"), "serve", "--workers", "3", "--data-dir", str(tmp_path / "d")],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        banner = [proc.stdout.readline().rstrip("\n") for _ in range(5)]
        blocks = page_blocks(LOCAL_CLUSTER)
        shown = next(b for b in blocks if b.lang == "text").source.splitlines()
        assert banner[0] == shown[0], banner
        for got, want in zip(banner[1:], shown[1:], strict=True):  # the same lines, values ours
            assert got.split()[0] == want.split()[0], (got, want)
        assert banner[1].count("(pid ") == 3 and all(m in banner[1] for m in members), banner
        assert banner[3] == f'  SDK      WindowClient("{",".join(members)}")', banner
        target = ""
        owner = ""
        last = ""
        cwd = tmp_path / "cwd"
        cwd.mkdir()
        checked = 0
        after_banner = blocks.index(next(b for b in blocks if b.lang == "text")) + 1
        for block in blocks[after_banner:]:
            if block.lang == "text":
                if "stream  owner" in block.source:  # the owner: whichever member placement chose
                    assert owner in members, last
                else:
                    expect_lines(block.source, last, f"{block.name}:{block.line}")
                checked += 1
                continue
            assert block.lang == "bash", block
            for command in commands(block):
                text = command.text
                for page_port, port in ports.items():
                    text = text.replace(f"localhost:{page_port}", f"127.0.0.1:{port}")
                if text.startswith("export MTAWINDOWS_TARGET="):
                    target = text.split("=", 1)[1]
                    continue
                if text.startswith("kill -9"):
                    assert owner, "the page kills the owner before it named one"
                    pid = re.search(re.escape(owner) + r" \(pid (\d+)\)", banner[1])
                    assert pid, (owner, banner[1])
                    text = text.replace("4244", pid.group(1))  # the owner's pid, as the page says
                run = subprocess.run(
                    ["bash", "-c", text],
                    cwd=cwd,
                    env=child_env(MTAWINDOWS_TARGET=target),
                    capture_output=True,
                    text=True,
                    timeout=120,
                )
                assert run.returncode == 0, f"{block.name}:{command.line}: {text}\n{run.stderr}"
                last = run.stdout
                if text.startswith("mtawindows cluster"):
                    owner = last.splitlines()[-1].split()[1]  # "orders  <its owner>"
        assert checked == 3, checked
        assert proc.poll() is None, "the supervisor stopped"
    finally:
        proc.terminate()
        proc.wait(timeout=60)
