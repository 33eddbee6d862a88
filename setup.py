"""Build hook beside pyproject.toml: the optional compiled core.

pyproject.toml holds the metadata; this file adds the accelerator. The
core (the modules ``make typecheck`` checks, [tool.mypy] ``files``) is
compiled by mypyc into extension modules that Python loads instead of the
``.py`` files, the way msgpack and PyYAML ship theirs. DISQUE_PURE_PYTHON=1
skips it, and any failure to build (no C compiler, no Python headers, no
mypyc) leaves the pure-Python package with a warning, never a failed
install. A build removes the extension modules of the previous one first
and, when it succeeds, writes the manifest ``disque/build.py`` checks on
import, so compiled code older than its sources never runs.
"""

from __future__ import annotations

import glob
import importlib.machinery
import importlib.util
import json
import os
import tomllib

from setuptools import Distribution, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))
PACKAGE = "disque"

# Core modules left interpreted, and why. Everything else in the core is compiled.
INTERPRETED = {
    # Native classes cannot be subclassed by interpreted code: these three are.
    "disque/context/clients.py": "ClientState is extended by the connection adapter and the simulator",
    "disque/state/host.py": "Host is extended by the server and the simulator",
    "disque/cluster/transport.py": "BusTransport is extended by the cluster bus and test transports",
}
# The shared library holding every compiled module, beside the package (mypyc
# derives the modules' __file__ and __path__ from its place: it must be top level).
GROUP_NAME = "disque_core"
SHARED_LIBRARY = GROUP_NAME + "__mypyc"  # mypyc's name for the group's library
C_SOURCE_DIR = os.path.join("build", "mypyc")


def _load_build_module():
    """disque/build.py on its own: importing the package would select a core."""
    spec = importlib.util.spec_from_file_location("disque_build", os.path.join(ROOT, PACKAGE,
                                                                               "build.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


core = _load_build_module()


def core_sources() -> list[str]:
    """The core's .py files, relative to ROOT: [tool.mypy] ``files``, the one list."""
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        mypy = tomllib.load(f)["tool"]["mypy"]
    sources = set()
    for entry in mypy["files"]:
        if entry.endswith(".py"):
            sources.add(entry)
        else:
            sources.update(os.path.relpath(p, ROOT) for p in
                           glob.glob(os.path.join(ROOT, entry, "**", "*.py"), recursive=True))
    return sorted(sources)


def compiled_sources() -> list[str]:
    """The core minus INTERPRETED; it must hold the module build.py probes."""
    compiled = [s for s in core_sources() if s not in INTERPRETED]
    probe = core.PROBE_MODULE.replace(".", "/") + ".py"
    if probe not in compiled:
        raise RuntimeError("%s must be compiled: INFO reads the build from it" % probe)
    return compiled


def remove_compiled(package_dir: str) -> None:
    """Delete the extension modules and manifest of an earlier build."""
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        for path in glob.glob(os.path.join(package_dir, "**", "*" + suffix), recursive=True):
            os.remove(path)
        shared = os.path.join(os.path.dirname(package_dir), SHARED_LIBRARY + suffix)
        if os.path.exists(shared):
            os.remove(shared)
    manifest = os.path.join(package_dir, core.MANIFEST_NAME)
    if os.path.exists(manifest):
        os.remove(manifest)


def write_manifest(package_dir: str) -> None:
    """Record the digest of every core source the compiled modules were built from."""
    sources = {}
    for path in core_sources():
        name = os.path.relpath(path, PACKAGE)
        sources[name] = core.source_digest(os.path.join(ROOT, path))
    with open(os.path.join(package_dir, core.MANIFEST_NAME), "w") as f:
        json.dump({"library": SHARED_LIBRARY, "sources": sources}, f, indent=1,
                  sort_keys=True)
        f.write("\n")


class CoreDistribution(Distribution):
    """build_ext always runs: it also removes a previous build's modules."""

    def has_ext_modules(self) -> bool:
        return True


class OptionalCompiledCore(build_ext):
    """build_ext for the mypyc core, falling back to pure Python on any failure."""

    def finalize_options(self) -> None:
        self.distribution.ext_modules = self._core_extensions()
        super().finalize_options()

    def _core_extensions(self) -> list:
        if core.pure_requested():
            self.announce("%s is set: installing the pure-Python core" % core.PURE_ENV, 2)
            return []
        try:
            from mypyc.build import mypycify
            return mypycify(compiled_sources(), opt_level="3", group_name=GROUP_NAME,
                            target_dir=C_SOURCE_DIR)
        except SystemExit:  # mypyc exits after printing its errors
            self._fall_back("mypyc could not translate the core (errors above)")
        except Exception as exc:
            self._fall_back("mypyc could not translate the core (%s)" % (exc,))
        return []

    def _package_dir(self) -> str:
        if self.inplace:
            return self.get_finalized_command("build_py").get_package_dir(PACKAGE)
        return os.path.join(self.build_lib, PACKAGE)

    def run(self) -> None:
        package_dir = self._package_dir()
        os.makedirs(package_dir, exist_ok=True)
        remove_compiled(package_dir)
        if not self.extensions:
            return
        try:
            super().run()
        except (Exception, SystemExit) as exc:  # CompileError, missing Python.h, ...
            remove_compiled(package_dir)
            self.extensions = []
            self._fall_back("the C build failed (%s)" % (exc,))
            return
        write_manifest(package_dir)

    def _fall_back(self, why: str) -> None:
        self.warn("disque: %s; installing the pure-Python core" % why)


setup(distclass=CoreDistribution, cmdclass={"build_ext": OptionalCompiledCore})
