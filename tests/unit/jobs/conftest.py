"""Fixtures shared by the command and job-engine tests: a node with a fake clock."""

import pytest

from tests.unit.helpers import Cmd, make_node


@pytest.fixture
def node():
    """A lone node at a fixed time (see tests/unit/helpers.py)."""
    return make_node()


@pytest.fixture
def cmd(node):
    """Calls commands on ``node`` and decodes the replies."""
    return Cmd(node)
