"""The package layers (docs/architecture.md): imports only run downward, no
package cycles, and the sans-I/O core imports no adapter and no I/O module.

Imports under ``if TYPE_CHECKING:`` are annotations, not dependencies, and
are left out.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "disque"

# Lowest first. A module may import its own layer and the layers below.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("primitives", ("disque", "disque.resp", "disque.argsplit", "disque.errors", "disque.log",
                    "disque.scanindex", "disque.clients", "disque.runtime", "disque.stats",
                    "disque.memory", "disque.jobs.job", "disque.jobs.ids", "disque.jobs.codec",
                    "disque.jobs.replies", "disque.jobs.timers", "disque.jobs.journal",
                    "disque.jobs", "disque.queues.skiplist", "disque.queues.queue",
                    "disque.build")),
    ("settings", ("disque.config",)),
    ("registry and queues", ("disque.jobs.registry", "disque.queues")),
    ("cluster parts", ("disque.cluster", "disque.eviction", "disque.host")),
    ("commands", ("disque.commands",)),
    ("node", ("disque.node",)),
    ("adapters", ("disque.server", "disque.connection", "disque.cluster.bus",
                  "disque.cluster.busauth", "disque.aof",
                  "disque.spark", "disque.client", "disque.cli", "disque.serverinfo",
                  "disque.gctuning", "disque.osprocess", "disque.http", "disque.worker",
                  "disque.launcher", "disque.tls")),
]

ADAPTERS = ("disque.server", "disque.connection", "disque.cluster.bus", "disque.cluster.busauth",
            "disque.aof",
            "disque.spark", "disque.client", "disque.cli", "disque.serverinfo",
            "disque.gctuning", "disque.osprocess", "disque.http", "disque.worker",
            "disque.launcher", "disque.tls")
# The core reads time and randomness only through what the node is given,
# and does no I/O: none of these may be imported there.
IO_MODULES = ("asyncio", "socket", "selectors", "os", "time", "threading", "subprocess",
              "signal", "uvloop")
# disque.build reads the compiled core's manifest when the package is imported.
NOT_CORE = ADAPTERS + ("disque.build", "disque.config", "disque.log")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


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
    """Modules imported when ``path`` runs (not under ``if TYPE_CHECKING``)."""
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
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            # ``from disque.cluster import messages`` imports a module
            found.update(node.module + "." + alias.name for alias in node.names
                         if (PACKAGE.parent / (node.module + "." + alias.name)
                             .replace(".", "/")).with_suffix(".py").exists())
    return found


MODULES = {module_name(p): runtime_imports(p) for p in sorted(PACKAGE.rglob("*.py"))}


def test_every_module_has_a_layer():
    for name in MODULES:
        layer_of(name)


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


@pytest.mark.parametrize("name", sorted(n for n in MODULES if not _in(n, NOT_CORE)))
def test_the_core_imports_no_adapter_and_no_io(name):
    bad = sorted(t for t in MODULES[name]
                 if _in(t, ADAPTERS) or t.split(".")[0] in IO_MODULES)
    assert not bad, "core module %s imports %s" % (name, bad)


def test_the_check_sees_an_upward_import(tmp_path):
    """The walker finds a plain import, skips a TYPE_CHECKING one."""
    source = tmp_path / "m.py"
    source.write_text("from typing import TYPE_CHECKING\nimport disque.server\n"
                      "if TYPE_CHECKING:\n    from disque.node import Node\n")
    found = runtime_imports(source)
    assert "disque.server" in found and "disque.node" not in found
    assert layer_of("disque.server") > layer_of("disque.jobs.registry")
