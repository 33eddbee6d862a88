"""A second "machine" for tests of what a node lets in from beyond loopback:
a network namespace joined to this one by a veth pair (needs root and
iproute2's ``ip``; the ``namespace`` fixture skips, saying why, without them)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

TIMEOUT = 10.0


class Namespace:
    """A network namespace joined to this one by a veth pair: the host end
    is ``host_ip``, the namespace's end ``peer_ip`` (not loopback to the node)."""

    def __init__(self) -> None:
        tag = "%d" % (os.getpid() % 100000)
        self.name = "dq-ns-" + tag
        self.host_link = "dqa%sh" % tag
        subnet = 200 + os.getpid() % 50
        self.host_ip = "10.200.%d.1" % subnet
        self.peer_ip = "10.200.%d.2" % subnet
        added = subprocess.run(["ip", "netns", "add", self.name], capture_output=True,
                               text=True, timeout=TIMEOUT)
        if added.returncode != 0:  # root without CAP_SYS_ADMIN (a container)
            pytest.skip("cannot make a network namespace: %s" % added.stderr.strip())
        try:
            self._run("ip", "link", "add", self.host_link, "type", "veth", "peer", "name",
                      "dqa%sn" % tag)
            self._run("ip", "link", "set", "dqa%sn" % tag, "netns", self.name)
            self._run("ip", "addr", "add", self.host_ip + "/24", "dev", self.host_link)
            self._run("ip", "link", "set", self.host_link, "up")
            self.exec("ip", "addr", "add", self.peer_ip + "/24", "dev", "dqa%sn" % tag)
            self.exec("ip", "link", "set", "dqa%sn" % tag, "up")
            self.exec("ip", "link", "set", "lo", "up")
        except BaseException:
            self.close()
            raise

    @property
    def prefix(self) -> tuple[str, ...]:
        """Prepended to a command to run it inside the namespace."""
        return ("ip", "netns", "exec", self.name)

    @staticmethod
    def _run(*args: str) -> None:
        subprocess.run(args, check=True, capture_output=True, timeout=TIMEOUT)

    def exec(self, *args: str) -> None:
        self._run(*self.prefix, *args)

    def close(self) -> None:
        subprocess.run(["ip", "link", "del", self.host_link], capture_output=True,
                       timeout=TIMEOUT)
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True, timeout=TIMEOUT)


@pytest.fixture
def namespace():
    """A fresh namespace, removed after the test."""
    if os.geteuid() != 0:
        pytest.skip("a network namespace needs root: what a node lets in from another "
                    "host is checked from loopback only (the unit tests have the decisions)")
    if shutil.which("ip") is None:
        pytest.skip("iproute2's ip is not installed")
    ns = Namespace()
    try:
        yield ns
    finally:
        ns.close()
