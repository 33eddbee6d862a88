"""The AOF's format version (docs/aof-format.md, "The format marker"): a
file of a later version's format is refused with what to do, by the
server's loader and by disque-check-aof, and nothing of it is loaded."""

from __future__ import annotations

import logging

import pytest

from disque.aof.check import main as check_aof
from disque.aof.loader import AofLoader, AofLoadError
from disque.jobs.records import unsupported_format
from tests.support.aof import loadjob_record
from tests.unit.helpers import Cmd, make_node

LATER_MARKER = b"*2\r\n$9\r\nAOFFORMAT\r\n$1\r\n3\r\n"
LATER = ('unsupported AOF format 3: the file was written by a later version, and this one reads '
         'format 2 and the files before it. Start the version that wrote it (docs/operations.md, '
         '"Upgrading a cluster")')


def test_a_later_format_is_named_as_such() -> None:
    assert unsupported_format([b"3"]) == LATER
    assert unsupported_format([b"12"]).startswith("unsupported AOF format 12: the file was "
                                                  "written by a later version")


@pytest.mark.parametrize("words, text", [
    ([b"1"], "unsupported AOF format b'1'"),
    ([b"x3"], "unsupported AOF format b'x3'"),
    ([b"3", b"4"], "unsupported AOF format b'3 4'"),
    ([b"9" * 40], "unsupported AOF format b'%s'" % ("9" * 20)),
    ([], "unsupported AOF format b''"),
])
def test_other_markers_are_only_unsupported(words, text) -> None:
    assert unsupported_format(words) == text


def later_file(tmp_path):
    """A file a later version began, holding a job this version could read."""
    source = make_node(seed=7)
    job_id = Cmd(source).addjob("q", "body", "RETRY", 3)
    path = tmp_path / "disque.aof"
    path.write_bytes(LATER_MARKER + loadjob_record(source.state.jobs[job_id], source.state.now))
    return path


def test_the_loader_refuses_a_later_format_and_loads_nothing(tmp_path) -> None:
    node = make_node(seed=8)
    loader = AofLoader(node.state, str(later_file(tmp_path)), enqueue_once=False,
                       truncate_allowed=True, logger=logging.getLogger("test"))
    try:
        with pytest.raises(AofLoadError) as refused:
            loader.run(1 << 30)
    finally:
        loader.close()
    message = str(refused.value)
    assert message.startswith("Bad file format reading the append only file at offset 0")
    assert message.endswith(": " + LATER)
    assert len(node.state.jobs) == 0


def test_check_aof_names_a_later_format_and_never_cuts_it(tmp_path, capsys) -> None:
    path = later_file(tmp_path)
    data = path.read_bytes()
    assert check_aof(["--fix", "--yes", str(path)]) == 1
    out = capsys.readouterr().out
    assert LATER in out and path.read_bytes() == data
