"""Test support for unit tests of the sans-I/O node: a fake clock, a node
factory, a fake peer, and a command runner that decodes replies.

Every test drives time explicitly: change the clock, then call
``node.run_timers()`` / ``node.cron()``. Nothing here sleeps or opens sockets.
"""

from __future__ import annotations

import random

import hiredis

from disque.context.clients import ClientState
from disque.cluster import messages as m
from disque.cluster.membership import ClusterNode
from disque.cluster.transport import Link
from disque.config import Config
from disque.context.memory import BASE_MEMORY, job_cost, queue_cost
from disque.node import Node

START_MS = 1_700_000_000_000  # a round second, so etime arithmetic is easy to read
NODE_ID = b"a1b2c3d4" + b"0" * 32
PEER_ID = b"feedbeef" + b"1" * 32


class FakeClock:
    """Unix milliseconds that only move when a test says so."""

    def __init__(self, now: int = START_MS) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> int:
        """Move forward by ``ms`` and return the new time."""
        self.now += ms
        return self.now


class MessageLog(list):
    """The cluster bus as a list of ``(node_id, message)`` pairs.

    Works both as the ``outbox`` callable and as a bus transport object
    (``send``), so tests do not depend on how the node is wired to the bus.
    """

    def __init__(self) -> None:
        super().__init__()
        self.replies: list[dict] = []  # answered on the link a message came by

    def __call__(self, node_id: bytes, msg: dict) -> None:
        self.append((node_id, msg))

    def send(self, node_id: bytes, msg: dict) -> None:
        self.append((node_id, msg))

    def connect(self, *args, **kwargs) -> None:
        pass

    def reply(self, link: Link, msg: dict) -> None:
        self.replies.append(msg)

    def close(self, *args, **kwargs) -> None:
        pass

    def rename(self, *args, **kwargs) -> None:
        pass

    def of_type(self, kind: str) -> list:
        """Messages whose type is ``kind``."""
        return [(dest, msg) for dest, msg in self if msg.get("type") == kind]


def make_node(seed: int = 1, now: int = START_MS, config: Config | None = None,
              node_id: bytes = NODE_ID, **settings) -> Node:
    """A fresh node with a FakeClock (``node.clock``) and a MessageLog
    (``node.outbox.transport``). ``settings`` override Config attributes."""
    config = config if config is not None else Config()
    settings.setdefault("enable_debug_command", "yes")  # tests flush with DEBUG FLUSHALL
    for name, value in settings.items():
        setattr(config, name, value)
    clock = FakeClock(now)
    log = MessageLog()
    node = Node(config, node_id, clock=clock, rng=random.Random(seed), bus=log)
    if "maxmemory" in settings:
        node.state.update_memory_limits()
    return node


def add_peer(node: Node, peer_id: bytes = PEER_ID, link: bool = True) -> ClusterNode:
    """Make ``node`` believe in a second, reachable node whose messages land
    in ``node.outbox.transport``."""
    peer = ClusterNode(peer_id, "127.0.0.1", 7712, 0, node.state.clock())
    peer.link = link
    node.state.membership.add(peer)
    node.state.membership.update_reachable()
    return peer


PEER_LINK = Link(None, "127.0.0.1", "127.0.0.1")


def deliver(node: Node, sender: bytes, msg: dict) -> None:
    """A bus message from ``sender`` reaches ``node`` through its dispatcher,
    in a frame of its own behind ``sender``'s header."""
    header = {m.VERSION: m.PROTOCOL_VERSION, m.SENDER: sender, m.PORT: 7712, m.FLAGS: 0}
    node.receive_frame(PEER_LINK, [header, msg])


def decode(raw: bytes):
    """Parse exactly one RESP value; fail if the bytes hold less or more."""
    reader = hiredis.Reader()
    reader.feed(raw)
    value = reader.gets()
    assert value is not False, "incomplete reply %r" % (raw,)
    assert reader.gets() is False, "more than one reply in %r" % (raw,)
    return value


def to_bytes(arg) -> bytes:
    """Command argument as bytes (str is UTF-8, int is decimal)."""
    if isinstance(arg, bytes):
        return arg
    if isinstance(arg, int):
        return str(arg).encode()
    return arg.encode()


class Cmd:
    """Runs commands against a node as one client."""

    def __init__(self, node: Node, client: ClientState | None = None) -> None:
        self.node = node
        self.client = client if client is not None else ClientState(1, "127.0.0.1:50000")

    def raw(self, *args) -> bytes | None:
        """The encoded reply, or None when the client blocked."""
        return self.node.call(self.client, [to_bytes(a) for a in args])

    def __call__(self, *args):
        """The decoded reply (errors come back as hiredis.ReplyError values)."""
        raw = self.raw(*args)
        assert raw is not None, "client blocked on %r" % (args,)
        return decode(raw)

    def ok(self, *args):
        """The decoded reply, which must not be an error."""
        value = self(*args)
        assert not isinstance(value, hiredis.ReplyError), "%r -> %r" % (args, value)
        return value

    def error(self, *args) -> str:
        """The error text of a reply that must be an error."""
        value = self(*args)
        assert isinstance(value, hiredis.ReplyError), "%r -> %r" % (args, value)
        return str(value)

    def addjob(self, queue="q", body="body", *options) -> bytes:
        """ADDJOB with timeout 0; returns the new job ID."""
        raw = self.raw("ADDJOB", queue, body, 0, *options)
        assert raw is not None and raw.startswith(b"+D-"), raw
        return raw[1:-2]

    def show(self, job_id: bytes) -> dict | None:
        """SHOW as a dict (None for an unknown job)."""
        value = self.ok("SHOW", job_id)
        if value is None:
            return None
        return {value[i].decode(): value[i + 1] for i in range(0, len(value), 2)}

    def sent(self) -> list:
        """Decoded replies delivered outside the request flow (unblocking)."""
        return [decode(raw) for raw in self.client.sent]


def info_field(node: Node, name: str) -> str:
    """One field of INFO (all sections)."""
    text = Cmd(node).ok("INFO", "all").decode()
    for line in text.split("\r\n"):
        key, sep, value = line.partition(":")
        if sep and key == name:
            return value
    raise KeyError(name)


def advance(node: Node, ms: int, step: int = 0, cron: bool = False) -> None:
    """Advance the clock by ``ms``, firing timers every ``step`` ms (or once at
    the end), and the cron too when asked."""
    clock = node.state.clock
    target = clock.now + ms
    step = step or ms or 1
    while clock.now < target:
        clock.now = min(target, clock.now + step)
        if cron:
            node.cron()
        node.run_timers()
    if ms == 0:
        node.run_timers()


def expected_memory(node: Node) -> int:
    """used_memory recomputed from the dataset (spec: jobs-and-ids.md §8)."""
    return (BASE_MEMORY + sum(job_cost(j) for j in node.state.jobs.values())
            + sum(queue_cost(name) for name in node.state.queues))
