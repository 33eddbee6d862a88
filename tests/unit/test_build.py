"""disque/build.py: the manifest check that keeps stale compiled modules from
loading, and the finder that loads .py files instead of extension modules."""

from __future__ import annotations

import importlib.machinery
import json
import os

from disque.build import (MANIFEST_NAME, PURE_ENV, SourceOnlyFinder, build_is_current,
                          source_digest, source_stat, stale_sources)

EXTENSION = importlib.machinery.EXTENSION_SUFFIXES[0]


def write_tree(root, sources: dict[str, str], stats: bool = False) -> dict:
    """A package directory holding ``sources`` and the manifest of a build of
    them (with their sizes and times, as setup.py writes it, if ``stats``)."""
    digests = {}
    recorded = {}
    for name, text in sources.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        digests[name] = source_digest(str(path))
        recorded[name] = source_stat(str(path))
    manifest = {"library": "lib", "sources": digests}
    if stats:
        manifest["stats"] = recorded
    (root / MANIFEST_NAME).write_text(json.dumps(manifest))
    return manifest


def test_sources_unchanged_since_the_build_are_not_stale(tmp_path):
    manifest = write_tree(tmp_path, {"node.py": "A = 1\n", "jobs/job.py": "B = 2\n"})
    assert stale_sources(manifest, str(tmp_path)) == []


def test_an_edited_or_missing_source_is_stale(tmp_path):
    manifest = write_tree(tmp_path, {"node.py": "A = 1\n", "jobs/job.py": "B = 2\n",
                                     "memory.py": "C = 3\n"})
    (tmp_path / "jobs" / "job.py").write_text("B = 3\n")
    (tmp_path / "memory.py").unlink()
    assert sorted(stale_sources(manifest, str(tmp_path))) == ["jobs/job.py", "memory.py"]


def test_a_source_of_the_recorded_size_and_time_is_not_read(tmp_path):
    # Python's own check of its bytecode cache: same size, same time (to the
    # nanosecond) is taken as unchanged. Only a deliberate copy of the time
    # onto other bytes of the same size gets past it, as here.
    manifest = write_tree(tmp_path, {"node.py": "A = 1\n"}, stats=True)
    path = tmp_path / "node.py"
    recorded = path.stat().st_mtime_ns
    path.write_text("A = 2\n")
    os.utime(path, ns=(recorded, recorded))
    assert stale_sources(manifest, str(tmp_path)) == []


def test_a_source_whose_time_changed_is_hashed(tmp_path):
    manifest = write_tree(tmp_path, {"node.py": "A = 1\n", "jobs/job.py": "B = 2\n"},
                          stats=True)
    later = (tmp_path / "node.py").stat().st_mtime_ns + 10**9
    os.utime(tmp_path / "node.py", ns=(later, later))  # touched, same bytes: still the build's
    (tmp_path / "jobs" / "job.py").write_text("B = 3\n")  # same size, new time and bytes
    os.utime(tmp_path / "jobs" / "job.py", ns=(later, later))
    assert stale_sources(manifest, str(tmp_path)) == ["jobs/job.py"]


def test_build_is_current_follows_the_requested_mode(tmp_path, monkeypatch):
    monkeypatch.delenv(PURE_ENV, raising=False)
    assert not build_is_current(str(tmp_path))  # no compiled build yet
    write_tree(tmp_path, {"node.py": "A = 1\n"})
    assert build_is_current(str(tmp_path))
    monkeypatch.setenv(PURE_ENV, "1")
    assert not build_is_current(str(tmp_path))  # a pure install must remove it
    (tmp_path / MANIFEST_NAME).unlink()
    assert build_is_current(str(tmp_path))
    monkeypatch.setenv(PURE_ENV, "0")
    assert not build_is_current(str(tmp_path))


def test_the_pure_finder_loads_the_py_file_beside_an_extension_module(tmp_path):
    (tmp_path / "mod.py").write_text("")
    (tmp_path / ("mod" + EXTENSION)).write_bytes(b"not a shared object")
    spec = SourceOnlyFinder.find_spec("disque.mod", [str(tmp_path)])
    assert isinstance(spec.loader, importlib.machinery.SourceFileLoader)
    assert spec.origin == str(tmp_path / "mod.py")


def test_the_pure_finder_loads_a_package_init_from_source(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / ("__init__" + EXTENSION)).write_bytes(b"not a shared object")
    spec = SourceOnlyFinder.find_spec("disque.pkg", [str(tmp_path)])
    assert spec.origin == str(package / "__init__.py")
    assert spec.submodule_search_locations == [str(package)]


def test_the_pure_finder_leaves_other_modules_and_namespace_dirs_alone(tmp_path):
    (tmp_path / "mod.py").write_text("")
    (tmp_path / "space").mkdir()  # a namespace package: no __init__
    assert SourceOnlyFinder.find_spec("other.mod", [str(tmp_path)]) is None
    assert SourceOnlyFinder.find_spec("disque.space", [str(tmp_path)]) is None
    assert SourceOnlyFinder.find_spec("disque", None) is None
