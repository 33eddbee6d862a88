"""Which build of the core a server runs (disque/build.py, docs/operations.md):
``--version`` and INFO say it, DISQUE_PURE_PYTHON forces the .py files, and
a compiled core older than its sources is never loaded."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from disque.build import (COMPILED, PURE, PURE_ENV, PURE_FORCED, PURE_STALE, core_build,
                          read_manifest, stale_sources)
from tests.support.process import REPO, DisqueProcess

MANIFEST = read_manifest()
needs_current_compiled_core = pytest.mark.skipif(
    MANIFEST is None or bool(stale_sources(MANIFEST)),
    reason="no compiled core matching its sources in this tree (make install builds it)")


def version(tree: Path = REPO, **env: str) -> subprocess.CompletedProcess:
    """``disque-server --version`` on the package of ``tree``."""
    return subprocess.run([sys.executable, "-m", "disque.server", "--version"],
                          capture_output=True, text=True, timeout=20, cwd=tree,
                          env=dict(os.environ, PYTHONPATH=str(tree), **env))


def core_of(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, result.stderr
    line = result.stdout.strip()
    assert line.startswith("Disque server v=1.0-rc1 "), line
    return line.rpartition(" core=")[2]


def test_version_names_the_build_this_run_loaded():
    assert core_of(version()) == core_build()


def test_pure_python_can_be_forced_at_run_time():
    expected = PURE if MANIFEST is None else PURE_FORCED
    assert core_of(version(**{PURE_ENV: "1"})) == expected


@needs_current_compiled_core
def test_a_current_compiled_core_is_loaded():
    assert core_of(version(**{PURE_ENV: "0"})) == COMPILED


@pytest.mark.parametrize("pure", [False, True])
def test_info_build_section_names_the_build(tmp_path, pure):
    env = {PURE_ENV: "1" if pure else "0"}
    expected = core_of(version(**env))
    node = DisqueProcess(tmp_path / "node", env=env).start()
    try:
        info = node.raw(b"INFO build\r\n").decode()
        assert info.endswith("# Build\r\ncore_build:%s\r\n\r\n" % expected), info
        # Not in the original's sections: INFO and INFO all keep their bytes.
        assert b"core_build" not in node.raw(b"INFO all\r\n")
        assert (expected == COMPILED) == (not pure and MANIFEST is not None)
    finally:
        assert node.stop() == 0


@needs_current_compiled_core
def test_a_compiled_core_older_than_its_sources_is_not_loaded(tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(REPO / "disque", tree / "disque",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for library in REPO.glob(MANIFEST["library"] + ".*"):
        shutil.copy2(library, tree)
    env = {PURE_ENV: "0"}
    assert core_of(version(tree, **env)) == COMPILED
    job_module = tree / "disque" / "jobs" / "job.py"
    job_module.write_text(job_module.read_text() + "\n# edited after the build\n")
    result = version(tree, **env)
    assert core_of(result) == PURE_STALE
    assert "compiled core is older than jobs/job.py" in result.stderr
