"""Parts of a node built one by one, with no Node around them.

Each test builds the part under test with real collaborators below it
and records what leaves: bus messages (``RecordingTransport``) and
persistence events (``RecordingJournal``).
"""

from __future__ import annotations

import random

from disque.cluster.federation import Interest
from disque.cluster.lifecycle import JobLifecycle
from disque.cluster.membership import ClusterNode, Membership
from disque.cluster.outbox import Outbox
from disque.cluster.transport import BusTransport, Link
from disque.jobs.dedup import DedupIndex
from disque.jobs.job import Job
from disque.jobs.registry import JobRegistry
from disque.jobs.timers import TimerWheel
from disque.context.memory import MemoryAccount
from disque.queues.blocking import BlockedClients
from disque.queues.queueset import QueueSet
from disque.context.runtime import Runtime

START_MS = 1_700_000_000_000
OWN_ID = b"a" * 40
PEER_A = b"b" * 40
PEER_B = b"c" * 40
LINK = Link(None, "127.0.0.1", "127.0.0.1")


class RecordingTransport(BusTransport):
    """Every message sent, as (node id, message); links as asked."""

    def __init__(self) -> None:
        self.sent: list[tuple[bytes, dict]] = []
        self.replies: list[tuple[Link, dict]] = []
        self.connects: list[tuple[bytes, str, int]] = []
        self.closed: list[bytes] = []

    def send(self, node_id: bytes, msg: dict) -> None:
        self.sent.append((node_id, msg))

    def reply(self, link: Link, msg: dict) -> None:
        self.replies.append((link, msg))

    def connect(self, node_id: bytes, ip: str, port: int) -> None:
        self.connects.append((node_id, ip, port))

    def close(self, node_id: bytes) -> None:
        self.closed.append(node_id)

    def of_type(self, kind: str) -> list[tuple[bytes, dict]]:
        return [(dest, msg) for dest, msg in self.sent if msg["type"] == kind]


class RecordingJournal:
    """Persistence events in order: ("stored", job id) or ("removed", job id, reason)."""

    def __init__(self) -> None:
        self.events: list[tuple] = []

    def job_stored(self, job: Job) -> None:
        self.events.append(("stored", job.id))

    def job_removed(self, job: Job, reason: bytes) -> None:
        self.events.append(("removed", job.id, reason))


class Parts:
    """The lower parts of one node, wired as the node wires them."""

    def __init__(self, maxmemory: int = 0, seed: int = 1) -> None:
        self.runtime = Runtime(OWN_ID, random.Random(seed), START_MS)
        self.memory = MemoryAccount(maxmemory)
        self.membership = Membership(OWN_ID, 7711)
        self.transport = RecordingTransport()
        self.outbox = Outbox(self.runtime, self.membership, self.transport, 7711)
        self.registry = JobRegistry(self.memory)
        self.queues = QueueSet(self.runtime, self.memory)
        self.timers = TimerWheel()
        self.blocked = BlockedClients(self.runtime, self.queues)
        self.interest = Interest()
        self.journal = RecordingJournal()
        self.dedup = DedupIndex()
        self.lifecycle = JobLifecycle(self.runtime, self.registry, self.queues, self.timers,
                                      self.blocked, self.membership, self.outbox, self.journal,
                                      self.interest, self.dedup)

    def add_peer(self, node_id: bytes, link: bool = True) -> ClusterNode:
        peer = ClusterNode(node_id, "127.0.0.1", 7712, 0, self.runtime.now)
        peer.link = link
        self.membership.add(peer)
        self.membership.update_reachable()
        return peer

    def add_new(self, job: Job) -> None:
        """What ADDJOB does with a job created here: hold it, queue it."""
        self.registry.add_new(job)
        self.lifecycle.queue_job(job)

    def advance(self, ms: int) -> int:
        self.runtime.now += ms
        return self.runtime.now


def make_job(parts: Parts, queue: bytes = b"q", body: bytes = b"body", retry: int = 300,
             ttl: int = 86400, repl: int = 1, delivered: tuple[bytes, ...] = (OWN_ID,),
             tag: int = 0) -> Job:
    """A job as ADDJOB would create it here (ID made up, but valid)."""
    now = parts.runtime.now
    job_id = b"D-%08x-%024d-%04x" % (tag, parts.registry.last_ctime, 0x05a1)
    job = Job(job_id, queue, body, repl, parts.registry.new_ctime(now), now // 1000 + ttl,
              0, retry)
    job.qtime = now + retry * 1000
    job.delivered = delivered
    return job
