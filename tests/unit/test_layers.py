"""The package layers (docs/architecture.md, "Layers"): imports only run
downward, no package cycles, and the sans-I/O core imports no adapter and
no I/O module.

The core is one list, ``[tool.mypy] files`` in pyproject.toml, which the
build compiles and mypy checks; this test holds the layers, the modules on
disk and the layer table of docs/architecture.md to it. Imports inside
functions count like any other; imports under ``if TYPE_CHECKING:`` are
annotations, not dependencies, and are left out.
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "disque"
ARCHITECTURE = ROOT / "docs" / "architecture.md"

# Lowest first. A module may import its own layer and the layers below.
# A prefix names a package (or module) and everything in it; the longest
# matching prefix decides.
CORE_LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("protocol", ("disque.protocol",)),
    ("context", ("disque.context",)),
    ("jobs", ("disque.jobs",)),
    ("settings", ("disque.config",)),
    ("queues", ("disque.queues",)),
    ("cluster", ("disque.cluster",)),
    ("state", ("disque.state",)),
    ("command interface", ("disque.commands.command", "disque.commands.access",
                           "disque.commands.args")),
    ("commands", ("disque.commands",)),
    ("node", ("disque.node",)),
]
# Below everything: the package itself and the build selector it runs first.
BOOT = ("disque", "disque.build")
ADAPTERS = ("disque.launch", "disque.server", "disque.net", "disque.process", "disque.aof",
            "disque.http", "disque.spark", "disque.client", "disque.worker", "disque.tools")
LAYERS: list[tuple[str, tuple[str, ...]]] = [("boot", BOOT), *CORE_LAYERS,
                                             ("adapters", ADAPTERS)]
# The core reads time and randomness only through what the node is given,
# and does no I/O: none of these may be imported there.
IO_MODULES = ("asyncio", "socket", "selectors", "os", "time", "threading", "subprocess",
              "signal", "uvloop", "ssl")


def core_list() -> list[str]:
    """The core's modules as [tool.mypy] ``files`` names them (paths)."""
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["tool"]["mypy"]["files"]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


CORE = tuple(entry.removesuffix(".py").replace("/", ".") for entry in core_list())


def _in(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def layer_of(name: str) -> int:
    """The layer of a module: the longest matching prefix decides."""
    best, best_len = -1, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (name == prefix or name.startswith(prefix + ".")) and len(prefix) > best_len:
                best, best_len = index, len(prefix)
    if best < 0:
        raise AssertionError("module %s is in no layer: add it to LAYERS" % name)
    return best


def runtime_imports(path: Path) -> set[str]:
    """Modules imported when ``path`` runs (not under ``if TYPE_CHECKING``),
    inside functions too."""
    tree = ast.parse(path.read_text(), str(path))
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if (isinstance(node, ast.If) and isinstance(node.test, ast.Name)
                and node.test.id == "TYPE_CHECKING"):
            skipped.update(id(child) for stmt in node.body for child in ast.walk(stmt))
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                raise AssertionError("%s: relative import (line %d); name the module"
                                     % (path, node.lineno))
            assert node.module is not None
            found.add(node.module)
            # ``from disque.cluster import messages`` imports a module
            found.update(node.module + "." + alias.name for alias in node.names
                         if (ROOT / (node.module + "." + alias.name)
                             .replace(".", "/")).with_suffix(".py").exists())
    return found


MODULES = {module_name(p): runtime_imports(p) for p in sorted(PACKAGE.rglob("*.py"))}


def test_every_module_has_a_layer():
    for name in MODULES:
        layer_of(name)


def test_the_core_list_is_the_core_layers():
    """A module is in a core layer exactly when the core list holds it."""
    for name in MODULES:
        listed = _in(name, CORE)
        in_core_layer = LAYERS[layer_of(name)][0] in dict(CORE_LAYERS)
        assert listed == in_core_layer, (
            "%s: %s [tool.mypy] files but %s a core layer"
            % (name, "in" if listed else "not in", "in" if in_core_layer else "not in"))


def test_the_architecture_doc_names_the_same_core():
    """docs/architecture.md's layer table lists the core list's packages and
    the adapters, no more and no fewer."""
    text = ARCHITECTURE.read_text()
    table = text[text.index("## Layers"):]
    table = table[:table.index("\n## ", 1)]
    named = set(re.findall(r"`disque/([a-z_/]+?)(?:/|\.py)?`", table)) - {"build", "__init__"}
    core = {entry.removeprefix("disque/").removesuffix(".py") for entry in core_list()}
    adapters = {prefix.removeprefix("disque.").replace(".", "/") for prefix in ADAPTERS}
    assert named == core | adapters, (
        "architecture.md names %s; missing %s" % (sorted(named - core - adapters),
                                                  sorted((core | adapters) - named)))


@pytest.mark.parametrize("name", sorted(MODULES))
def test_imports_run_downward(name):
    own = layer_of(name)
    upward = sorted(target for target in MODULES[name]
                    if target.startswith("disque") and layer_of(target) > own)
    assert not upward, "%s (%s) imports a higher layer: %s" % (name, LAYERS[own][0], upward)


def package_of(name: str) -> str:
    parts = name.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else name


def test_no_cycles_between_packages():
    graph: dict[str, set[str]] = {}
    for name, targets in MODULES.items():
        source = package_of(name)
        for target in targets:
            if target.startswith("disque.") and package_of(target) != source:
                graph.setdefault(source, set()).add(package_of(target))
    # Depth-first search for a back edge.
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(package: str) -> None:
        state[package] = 1
        path.append(package)
        for nxt in sorted(graph.get(package, ())):
            if state.get(nxt) == 1:
                cycle = path[path.index(nxt):] + [nxt]
                raise AssertionError("package cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt)
        path.pop()
        state[package] = 2

    for package in sorted(graph):
        if package not in state:
            visit(package)


@pytest.mark.parametrize("name", sorted(n for n in MODULES if _in(n, CORE)))
def test_the_core_imports_no_adapter_and_no_io(name):
    bad = sorted(t for t in MODULES[name]
                 if _in(t, ADAPTERS) or t.split(".")[0] in IO_MODULES)
    assert not bad, "core module %s imports %s" % (name, bad)


def test_the_check_sees_an_upward_import(tmp_path):
    """The walker finds a plain import and one inside a function, skips a
    TYPE_CHECKING one."""
    source = tmp_path / "m.py"
    source.write_text("from typing import TYPE_CHECKING\nimport disque.server\n"
                      "def f():\n    from disque.net import bus\n"
                      "if TYPE_CHECKING:\n    from disque.node import Node\n")
    found = runtime_imports(source)
    assert {"disque.server", "disque.net"} <= found and "disque.node" not in found
    assert layer_of("disque.server") > layer_of("disque.jobs.registry")
    assert layer_of("disque.commands.access") < layer_of("disque.commands.addjob")
