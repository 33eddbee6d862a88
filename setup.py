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
import sys
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor

from setuptools import Distribution, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))
PACKAGE = "disque"

# Core modules left interpreted, and why. Everything else in the core is compiled.
INTERPRETED = {
    # Native classes cannot be subclassed by interpreted code: these two are.
    "disque/state/host.py": "Host is extended by the server and the simulator",
    "disque/cluster/transport.py": "BusTransport is extended by the cluster bus and test transports",
}
# The shared library holding every compiled module, beside the package (mypyc
# derives the modules' __file__ and __path__ from its place: it must be top level).
GROUP_NAME = "disque_core"
SHARED_LIBRARY = GROUP_NAME + "__mypyc"  # mypyc's name for the group's library
C_SOURCE_DIR = os.path.join("build", "mypyc")
# One C file per module (mypyc's multi_file) instead of one ~30 MB file, so the
# C compiler, which takes most of the build, runs on every core at once.
# DISQUE_BUILD_JOBS (or build_ext -j N) sets how many compilers run; the
# default is one per CPU this process may use.
JOBS_ENV = "DISQUE_BUILD_JOBS"


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
    """Record the digest, size and time of every core source the compiled
    modules were built from (the time first: a source edited while it is
    read is hashed again at the next start)."""
    sources = {}
    stats = {}
    for path in core_sources():
        name = os.path.relpath(path, PACKAGE)
        stats[name] = core.source_stat(os.path.join(ROOT, path))
        sources[name] = core.source_digest(os.path.join(ROOT, path))
    with open(os.path.join(package_dir, core.MANIFEST_NAME), "w") as f:
        json.dump({"library": SHARED_LIBRARY, "sources": sources, "stats": stats}, f,
                  indent=1, sort_keys=True)
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
        # build_ext builds the extensions (the library and each module's
        # small shim) on this many threads; the library's C files share them.
        self.parallel = _jobs(self.parallel)

    def _core_extensions(self) -> list:
        if self._tree_is_current():
            # An editable reinstall (an extra added: make install EXTRAS=...)
            # keeps the core the tree holds instead of rebuilding it.
            self.announce("the tree holds the current %s core: keeping it" % (
                "pure-Python" if core.pure_requested() else "compiled"), 2)
            return []
        if core.pure_requested():
            self.announce("%s is set: installing the pure-Python core" % core.PURE_ENV, 2)
            return []
        try:
            from mypyc.build import mypycify
            sources = compiled_sources()
            _progress("translating %d core modules to C with mypyc" % len(sources))
            started = time.monotonic()
            extensions = mypycify(sources, opt_level="3", group_name=GROUP_NAME,
                                  target_dir=C_SOURCE_DIR, multi_file=True)
            _progress("translated in %.0f s" % (time.monotonic() - started))
            return extensions
        except SystemExit:  # mypyc exits after printing its errors
            self._fall_back("mypyc could not translate the core (errors above)")
        except Exception as exc:
            self._fall_back("mypyc could not translate the core (%s)" % (exc,))
        return []

    def _tree_is_current(self) -> bool:
        """An in-place build (editable install, build_ext --inplace) whose tree
        already holds what it would build: disque/build.py's check."""
        in_place = self.inplace or getattr(self, "editable_mode", False)
        return in_place and core.build_is_current(os.path.join(ROOT, PACKAGE))

    def _package_dir(self) -> str:
        if self.inplace:
            return self.get_finalized_command("build_py").get_package_dir(PACKAGE)
        return os.path.join(self.build_lib, PACKAGE)

    def run(self) -> None:
        if not self.extensions and self._tree_is_current():
            return
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

    def build_extensions(self) -> None:
        """Compile the library's C files in parallel, biggest first (distutils
        compiles one extension's files in turn); each shim is one small file."""
        jobs = self.parallel
        serial_compile = self.compiler.compile
        compile_one = self.compiler._compile

        def compile_all(sources, output_dir=None, macros=None, include_dirs=None, debug=0,
                        extra_preargs=None, extra_postargs=None, depends=None):
            if len(sources) == 1:   # a module's shim
                return serial_compile(sources, output_dir, macros, include_dirs, debug,
                                      extra_preargs, extra_postargs, depends)
            started = time.monotonic()
            macros, objects, extra_postargs, pp_opts, build = self.compiler._setup_compile(
                output_dir, macros, include_dirs, sources, depends, extra_postargs)
            cc_args = self.compiler._get_cc_args(pp_opts, debug, extra_preargs)
            _progress("compiling %d C files, %d at a time (set with %s=N)"
                      % (len(build), jobs, JOBS_ENV))
            done = []

            def one(obj: str) -> None:
                src, suffix = build[obj]
                compile_one(obj, src, suffix, cc_args, extra_postargs, pp_opts)
                done.append(obj)
                _progress("[%d/%d] %s" % (len(done), len(build), os.path.basename(src)))

            ordered = sorted(build, key=lambda obj: -os.path.getsize(build[obj][0]))
            with ThreadPoolExecutor(jobs) as pool:
                for future in [pool.submit(one, obj) for obj in ordered]:
                    future.result()   # the first compile error fails the build
            _progress("compiled in %.0f s; linking" % (time.monotonic() - started))
            return objects

        self.compiler.compile = compile_all
        started = time.monotonic()
        super().build_extensions()
        _progress("built in %.0f s" % (time.monotonic() - started))

    def _fall_back(self, why: str) -> None:
        self.warn("disque: %s; installing the pure-Python core" % why)


def _jobs(requested) -> int:
    """How many C compilers to run at once: -j, then DISQUE_BUILD_JOBS, then the CPUs."""
    if requested not in (None, False, True, 0):
        return max(1, int(requested))
    if os.environ.get(JOBS_ENV, "").isdigit() and int(os.environ[JOBS_ENV]) > 0:
        return int(os.environ[JOBS_ENV])
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def _progress(text: str) -> None:
    """One line of progress on stderr; build_ext --quiet hides announce()'s."""
    sys.stderr.write("disque: compiled core: %s\n" % text)
    sys.stderr.flush()


setup(distclass=CoreDistribution, cmdclass={"build_ext": OptionalCompiledCore})
