"""Which build of the core runs: compiled by mypyc, or pure Python.

``setup.py`` compiles the core with mypyc where a C compiler is present and
writes a manifest beside the package: the SHA-256 of every core source the
compiled modules were built from, with its size and modification time. When
``disque`` is imported, ``select_core`` lets Python load the extension
modules only if that manifest matches the sources next to them. A source
whose size and modification time (in nanoseconds) are those recorded is
taken as unchanged, as Python takes its bytecode cache, without reading it:
hashing every source cost each start more than a millisecond. Any other is
hashed and compared. Otherwise (a source edited since the build, no
manifest, or DISQUE_PURE_PYTHON set in the environment) a finder makes
every ``disque.*`` import load its ``.py`` file, so stale compiled code can
never run and both builds can be tested from one tree. INFO and
``disque-server --version`` report what was loaded (``core_build``).

Adapter-level module: it reads files and the environment, imports nothing
from disque, and is never compiled itself.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import sys
import warnings
from collections.abc import Sequence
from types import ModuleType

PURE_ENV = "DISQUE_PURE_PYTHON"
MANIFEST_NAME = "compiled-core.json"
COMPILER = "mypyc"
# The module whose file tells which build was loaded: compiled in every
# compiled build (setup.py refuses a module list without it).
PROBE_MODULE = "disque.node"

COMPILED = "compiled-" + COMPILER
PURE = "pure"
PURE_FORCED = "pure-forced"  # compiled modules present, DISQUE_PURE_PYTHON set
PURE_STALE = "pure-stale"  # compiled modules present, sources changed since

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_PREFIX = "disque."

_pure_reason = PURE  # set once by select_core


def pure_requested() -> bool:
    """DISQUE_PURE_PYTHON is set to something other than empty or 0."""
    return os.environ.get(PURE_ENV, "") not in ("", "0")


def source_digest(path: str) -> str:
    """The SHA-256 of one file, as the manifest records it."""
    import hashlib  # only when a source's size or time changed: OpenSSL's digests load slowly
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def source_stat(path: str) -> list[int]:
    """The size and modification time (ns) of one file, as the manifest records them."""
    st = os.stat(path)
    return [st.st_size, st.st_mtime_ns]


def read_manifest(package_dir: str = PACKAGE_DIR) -> dict | None:
    """The manifest of the compiled build in ``package_dir``, None without one."""
    try:
        with open(os.path.join(package_dir, MANIFEST_NAME)) as f:
            manifest = json.load(f)
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) else None


def stale_sources(manifest: dict, package_dir: str = PACKAGE_DIR) -> list[str]:
    """The sources (relative to the package) that differ from the compiled build:
    those whose recorded size and time differ are hashed to tell."""
    stats = manifest.get("stats", {})
    stale = []
    for name, digest in manifest.get("sources", {}).items():
        path = os.path.join(package_dir, name)
        try:
            if source_stat(path) != stats.get(name) and source_digest(path) != digest:
                stale.append(name)
        except OSError:
            stale.append(name)
    return stale


class SourceOnlyFinder:
    """Finds ``disque.*`` modules as ``.py`` files, never as extension modules.

    First on ``sys.meta_path`` in a pure run; namespace directories are left
    to the normal path finder (they hold no code of their own).
    """

    @classmethod
    def find_spec(cls, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith(_PREFIX) or path is None:
            return None
        for entry in path:
            finder = importlib.machinery.FileFinder(
                entry, (importlib.machinery.SourceFileLoader,
                        importlib.machinery.SOURCE_SUFFIXES))
            spec = finder.find_spec(fullname, target)
            if spec is not None and spec.loader is not None:
                return spec
        return None


def load_library(name: str, package_dir: str = PACKAGE_DIR) -> bool:
    """Load the compiled modules' shared library from beside the package.

    It is a top-level module, which an editable install does not map (only
    the package is): loading it here by path serves every install.
    """
    if name in sys.modules:
        return True
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = os.path.join(os.path.dirname(package_dir), name + suffix)
        if os.path.exists(path):
            loader = importlib.machinery.ExtensionFileLoader(name, path)
            spec = importlib.machinery.ModuleSpec(name, loader, origin=path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            loader.exec_module(module)
            return True
    return False


def select_core() -> None:
    """Decide once, before any core module is imported, which build loads."""
    global _pure_reason
    if any(finder is SourceOnlyFinder for finder in sys.meta_path):
        return
    manifest = read_manifest()
    if manifest is not None and not pure_requested():
        stale = stale_sources(manifest)
        if not stale and load_library(manifest.get("library", "")):
            return
        _pure_reason = PURE_STALE
        why = ("is older than " + ", ".join(sorted(stale)) if stale
               else "misses its shared library")
        warnings.warn("disque: the compiled core %s; running pure Python (make install "
                      "rebuilds it)" % why, RuntimeWarning, stacklevel=2)
    elif manifest is not None:
        _pure_reason = PURE_FORCED
    sys.meta_path.insert(0, SourceOnlyFinder)


def is_compiled(module: ModuleType) -> bool:
    """``module`` was loaded from an extension module."""
    origin = getattr(module, "__file__", None) or ""
    return origin.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))


def core_build() -> str:
    """``compiled-mypyc``, or ``pure`` / ``pure-forced`` / ``pure-stale``: what
    the running process loaded, read from the probe module's file."""
    module = sys.modules.get(PROBE_MODULE)
    if module is None:
        module = __import__(PROBE_MODULE, fromlist=["_"])
    return COMPILED if is_compiled(module) else _pure_reason


def build_is_current(package_dir: str = PACKAGE_DIR) -> bool:
    """The tree holds what an install would build now: no compiled core under
    DISQUE_PURE_PYTHON, otherwise a compiled core that matches its sources."""
    manifest = read_manifest(package_dir)
    if pure_requested():
        return manifest is None
    return manifest is not None and not stale_sources(manifest, package_dir)


if __name__ == "__main__":
    # make install runs ``python disque/build.py`` (not -m: importing the
    # package would select a core) and rebuilds when this exits 1.
    sys.exit(0 if build_is_current() else 1)
