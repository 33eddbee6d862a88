"""No import circle among the modules of the packages beside the node.

A module of ``disque/client``, ``disque/tools`` or ``disque/worker`` never
imports a module that imports it back, directly or through others, and a
package's ``__init__`` counts as a module: ``from disque.client import
tracing`` inside a module that ``disque/client/__init__.py`` imports reads
a package that is only half initialised. Every import counts, inside
functions and under ``if TYPE_CHECKING:`` too, since an annotation-only
import is the first to become a run-time one.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("disque/client", "disque/tools", "disque/worker")


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(source: str, known: set[str]) -> set[str]:
    """The modules of ``known`` that ``source`` imports anywhere in it."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            found.add(node.module)
            # ``from disque.client import tracing`` imports the package and a module
            found.update(node.module + "." + alias.name for alias in node.names)
    return found & known


def import_graph(root: Path, packages: tuple[str, ...]) -> dict[str, set[str]]:
    """Each module of ``packages`` (paths under ``root``) and the modules of them it imports."""
    paths = {module_name(root, path): path for package in packages
             for path in sorted((root / package).rglob("*.py"))}
    known = set(paths)
    return {name: imported_modules(path.read_text(), known) - {name}
            for name, path in paths.items()}


def first_circle(graph: dict[str, set[str]]) -> list[str] | None:
    """A circle of imports (its first module repeated at the end), or None."""
    state: dict[str, str] = {}
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = "open"
        path.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == "open":
                return path[path.index(target):] + [target]
            if target not in state:
                circle = visit(target)
                if circle is not None:
                    return circle
        path.pop()
        state[module] = "done"
        return None

    for module in sorted(graph):
        if module not in state:
            circle = visit(module)
            if circle is not None:
                return circle
    return None


def test_no_import_circle_beside_the_node():
    circle = first_circle(import_graph(ROOT, PACKAGES))
    assert circle is None, "import circle: " + " -> ".join(circle)


def write_package(root: Path, name: str, modules: dict[str, str]) -> None:
    (root / name).mkdir()
    for module, source in modules.items():
        (root / name / (module + ".py")).write_text(source)


def test_the_check_sees_a_circle_through_the_package_init(tmp_path):
    """A module importing a sibling through its package, and an annotation-only
    import answered from inside a function, each close a circle; importing
    the sibling module itself does not."""
    write_package(tmp_path, "viainit", {"__init__": "from viainit.client import Client\n",
                                        "client": "from viainit import tracing\n",
                                        "tracing": ""})
    write_package(tmp_path, "typeonly", {"__init__": "",
                                         "a": "from typing import TYPE_CHECKING\n"
                                              "if TYPE_CHECKING:\n    from typeonly.b import B\n",
                                         "b": "def f():\n    import typeonly.a\n"})
    write_package(tmp_path, "direct", {"__init__": "from direct.client import Client\n",
                                       "client": "from direct.tracing import context\n",
                                       "tracing": ""})
    assert first_circle(import_graph(tmp_path, ("viainit",))) == [
        "viainit", "viainit.client", "viainit"]
    assert first_circle(import_graph(tmp_path, ("typeonly",))) == [
        "typeonly.a", "typeonly.b", "typeonly.a"]
    assert first_circle(import_graph(tmp_path, ("direct",))) is None
