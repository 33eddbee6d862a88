"""The package layers (docs/architecture.md, "Layers"): imports only run
downward, no cycle between packages or between modules, and the sans-I/O
core imports no adapter and no I/O module.

The core is one list, ``[tool.mypy] files`` in pyproject.toml, which the
build compiles and mypy checks; this test holds the layers, the modules on
disk and the layer table of docs/architecture.md to it. Every import
counts: inside functions, and under ``if TYPE_CHECKING:`` too (a type a
module names is a dependency a reader follows, and a circle of them is a
circle all the same).
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
    ("settings", ("disque.config",)),
    ("context", ("disque.context",)),
    ("jobs", ("disque.jobs",)),
    ("queues", ("disque.queues",)),
    ("cluster", ("disque.cluster",)),
    ("state", ("disque.state",)),
    ("command interface", ("disque.commands.access", "disque.commands.args")),
    ("commands", ("disque.commands",)),
    ("node", ("disque.node",)),
    ("serving", ("disque.serving",)),
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


def imports_of(path: Path) -> set[str]:
    """Modules ``path`` imports: at the top, inside functions and under
    ``if TYPE_CHECKING``."""
    tree = ast.parse(path.read_text(), str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                raise AssertionError("%s: relative import (line %d); name the module"
                                     % (path, node.lineno))
            assert node.module is not None
            # ``from disque.cluster import messages`` imports a module, not a
            # name of the package's __init__
            modules = {node.module + "." + alias.name for alias in node.names
                       if (ROOT / (node.module + "." + alias.name)
                           .replace(".", "/")).with_suffix(".py").exists()}
            found.update(modules)
            if len(modules) < len(node.names):
                found.add(node.module)
    return found


MODULES = {module_name(p): imports_of(p) for p in sorted(PACKAGE.rglob("*.py"))}


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


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of ``graph`` (its nodes in order, the first repeated last), or None."""
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(vertex: str) -> list[str] | None:
        state[vertex] = 1
        path.append(vertex)
        for nxt in sorted(graph.get(vertex, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle is not None:
                    return cycle
        path.pop()
        state[vertex] = 2
        return None

    for vertex in sorted(graph):
        if vertex not in state:
            cycle = visit(vertex)
            if cycle is not None:
                return cycle
    return None


def test_no_cycles_between_packages():
    graph: dict[str, set[str]] = {}
    for name, targets in MODULES.items():
        source = package_of(name)
        for target in targets:
            if target.startswith("disque.") and package_of(target) != source:
                graph.setdefault(source, set()).add(package_of(target))
    cycle = find_cycle(graph)
    assert cycle is None, "package cycle: " + " -> ".join(cycle or [])


def test_no_cycles_between_modules():
    """Inside a package too, modules import each other one way. A package's
    ``__init__`` is a module here: a module that imports a name from its
    package's ``__init__``, which imports that module, closes a circle
    (``from disque.cluster import messages`` names a module, not the
    ``__init__``)."""
    graph = {name: {t for t in targets if t in MODULES and t != name}
             for name, targets in MODULES.items()}
    cycle = find_cycle(graph)
    assert cycle is None, "module cycle: " + " -> ".join(cycle or [])


def test_find_cycle_sees_a_loop_and_passes_a_tree():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}}) is None


@pytest.mark.parametrize("name", sorted(n for n in MODULES if _in(n, CORE)))
def test_the_core_imports_no_adapter_and_no_io(name):
    bad = sorted(t for t in MODULES[name]
                 if _in(t, ADAPTERS) or t.split(".")[0] in IO_MODULES)
    assert not bad, "core module %s imports %s" % (name, bad)


def test_the_check_sees_an_upward_import(tmp_path):
    """The walker finds a plain import, one inside a function and a
    TYPE_CHECKING one."""
    source = tmp_path / "m.py"
    source.write_text("from typing import TYPE_CHECKING\nimport disque.server\n"
                      "def f():\n    from disque.net import bus\n"
                      "if TYPE_CHECKING:\n    from disque.node import Node\n")
    found = imports_of(source)
    assert {"disque.server", "disque.net.bus", "disque.node"} <= found
    assert layer_of("disque.server") > layer_of("disque.jobs.registry")
    assert layer_of("disque.commands.access") < layer_of("disque.commands.addjob")
