"""Cluster-wide tables kept alike on every node, record by record
(docs/schedules.md, "Every node knows every schedule").

A table of versioned records keyed by name (the schedules; any table
whose records merge by last writer can join) sends each change itself, one
record per bus message. What a node missed (it was down, cut off, new, or
a message was lost) is found by comparing digests: the table keeps one
fingerprint per bucket of its keys (its records' fingerprints XORed), a
node sends its digest (TABLESYNC), and the receiver answers with the
records of the buckets that differ, a bounded number of bytes per cron
pass, then TABLEDONE. So no message carries a whole table, and nodes that
agree exchange only their digests.

A peer whose TABLEDONE answered this node's digest since their link came
up is *synced*: it has told this node everything the node lacked. The
table decides what that allows (schedules: which nodes may fire).
"""

from __future__ import annotations

from typing import Final, Protocol

from disque.cluster import messages as m
from disque.cluster.membership import HANDSHAKE, Membership
from disque.cluster.outbox import Outbox
from disque.cluster.transport import Link
from disque.context.log import logger
from disque.context.runtime import Runtime

SYNC_INTERVAL_MS: Final = 5000  # digests to unsynced peers and one synced peer this often
BYTES_PER_PASS: Final = 1 << 20  # of records answering one peer's digest, per cron pass
_PRINT_BYTES: Final = 8  # a fingerprint's size, and a bucket's in a digest


def fingerprint(data: bytes) -> int:
    """A 64-bit hash of ``data`` (a record's identity, a key's bucket)."""
    import hashlib  # loaded with the first record, not by every start
    return int.from_bytes(hashlib.blake2b(data, digest_size=_PRINT_BYTES).digest(), "little")


class BucketDigest:
    """One fingerprint per bucket: the XOR of the fingerprints of the
    records the table files there, kept by the table as they change."""

    __slots__ = ("sums",)

    def __init__(self, buckets: int) -> None:
        self.sums = [0] * buckets

    def toggle(self, bucket: int, print_: int) -> None:
        """Add a record's fingerprint to ``bucket``, or take it out (XOR)."""
        self.sums[bucket] ^= print_

    def packed(self) -> bytes:
        """The digest as TABLESYNC carries it."""
        return b"".join([value.to_bytes(_PRINT_BYTES, "little") for value in self.sums])

    def differing(self, other: bytes) -> list[int] | None:
        """The buckets where ``other`` (a peer's packed digest) differs from
        this one; None when it is not a digest of this table's shape."""
        sums = self.sums
        if len(other) != len(sums) * _PRINT_BYTES:
            return None
        return [i for i in range(len(sums))
                if int.from_bytes(other[i * _PRINT_BYTES:(i + 1) * _PRINT_BYTES], "little")
                != sums[i]]


class SyncedTable(Protocol):
    """A table that ``TableSync`` keeps alike across the cluster."""

    digest: BucketDigest

    def in_use(self) -> bool:
        """The table holds a record it may send (one that does not sends no
        message)."""

    def shared(self) -> bool:
        """The table may cross the bus now: when not, digests of it are not
        answered and what was owed is dropped (the users' table: only over
        an authenticated bus)."""

    def bucket_messages(self, bucket: int) -> list[tuple[dict, int]]:
        """The bus messages that carry the records filed in ``bucket``, each
        with its size in bytes (about), as they are now."""


class _Answer:
    """What this node still owes a peer that sent its digest: the records
    of the buckets that differ, then TABLEDONE, on the link it came by."""

    __slots__ = ("name", "table", "link", "buckets", "messages")

    def __init__(self, name: bytes, table: SyncedTable, link: Link, buckets: list[int]) -> None:
        self.name = name
        self.table = table
        self.link = link
        self.buckets = buckets[::-1]  # popped from the end: lowest first
        self.messages: list[tuple[dict, int]] = []  # the bucket being sent, popped


class TableSync:
    """The cluster-wide tables of this node, how they are compared with
    each peer's and repaired, and which peers are synced."""

    def __init__(self, runtime: Runtime, membership: Membership, outbox: Outbox) -> None:
        self.runtime = runtime
        self.membership = membership
        self.outbox = outbox
        self.tables: dict[bytes, SyncedTable] = {}
        self.synced: dict[bytes, dict[bytes, None]] = {}  # table -> peers synced
        # table -> peers asked (a digest sent) whose TABLEDONE has not come:
        # an ask from one of them needs no digest back, its answer is coming.
        self.asked: dict[bytes, dict[bytes, None]] = {}
        self.answers: dict[bytes, dict[bytes, _Answer]] = {}  # peer -> table -> answer
        self.next_round = 0

    def register(self, name: bytes, table: SyncedTable) -> None:
        """Keep ``table`` alike across the cluster under ``name``."""
        self.tables[name] = table
        self.synced[name] = {}
        self.asked[name] = {}

    # ------------------------------------------------------------ links

    def link_up(self, node_id: bytes) -> None:
        """A link came up: send the peer the digest of each table holding
        something (a table nobody uses costs the bus nothing), asking for
        its own. A node in handshake is asked by the next round, once known."""
        node = self.membership.nodes.get(node_id)
        if node is None or node.flags & HANDSHAKE:
            return
        for name, table in self.tables.items():
            if table.in_use():
                self._send_digest(name, table, node_id)

    def link_down(self, node_id: bytes) -> None:
        """A link went down: the peer is synced again once it answers anew."""
        for name in self.tables:
            self.synced[name].pop(node_id, None)
            self.asked[name].pop(node_id, None)
        self.answers.pop(node_id, None)

    def _digest_message(self, name: bytes, table: SyncedTable, ask: int) -> dict:
        return {m.TYPE: m.TABLESYNC, m.TABLE: name, m.DIGEST: table.digest.packed(), m.ASK: ask}

    def _send_digest(self, name: bytes, table: SyncedTable, node_id: bytes) -> None:
        self.asked[name][node_id] = None
        self.outbox.send_to(node_id, self._digest_message(name, table, 1))

    # -------------------------------------------------------------- bus

    def on_sync(self, sender: bytes, msg: dict, link: Link) -> None:
        """TABLESYNC: a peer's digest. Answer with the buckets that differ
        (some now, the rest in the next cron passes), and with our digest
        when it asks and no answer of its own is on its way."""
        name = msg[m.TABLE]
        table = self.tables.get(name)
        if table is None or not table.shared():
            return  # a table this version does not keep, or keeps to itself now
        buckets = table.digest.differing(msg[m.DIGEST])
        if buckets is None:
            logger.warning("Bad table digest from %s", sender.decode("latin-1"))
            return
        if msg[m.ASK] and sender not in self.asked[name]:
            self.asked[name][sender] = None
            self.outbox.reply(link, self._digest_message(name, table, 0))
        answer = _Answer(name, table, link, buckets)
        self.answers.setdefault(sender, {})[name] = answer
        if self._send(answer, BYTES_PER_PASS) >= 0:
            self._answered(sender, name)

    def on_done(self, sender: bytes, msg: dict, link: Link) -> None:
        """TABLEDONE: the peer answered our digest in full."""
        name = msg[m.TABLE]
        synced = self.synced.get(name)
        if synced is not None:
            synced[sender] = None
            self.asked[name].pop(sender, None)

    def _send(self, answer: _Answer, budget: int) -> int:
        """Send what ``budget`` bytes allow of ``answer`` (at least one
        record while the budget is positive); the budget left once all of
        it, TABLEDONE included, is sent, or -1 while some is left for the
        next pass."""
        outbox = self.outbox
        while True:
            messages = answer.messages
            if not messages:
                if not answer.buckets:
                    outbox.reply(answer.link, {m.TYPE: m.TABLEDONE, m.TABLE: answer.name})
                    return max(budget, 0)
                messages = answer.messages = answer.table.bucket_messages(answer.buckets.pop())
                continue
            if budget <= 0:
                return -1
            msg, size = messages.pop()
            outbox.reply(answer.link, msg)
            budget -= size

    def _answered(self, peer: bytes, name: bytes) -> None:
        owed = self.answers.get(peer)
        if owed is not None:
            owed.pop(name, None)
            if not owed:
                del self.answers[peer]

    # ------------------------------------------------------------- time

    def cron(self) -> None:
        """Each cron pass: the answers owed, a bounded part per peer; every
        ``SYNC_INTERVAL_MS``, a digest to each linked peer not synced (a
        link that came up during a handshake, a lost answer) and to one
        synced peer (what a lost message left behind)."""
        if self.answers:
            for peer, owed in list(self.answers.items()):
                budget = BYTES_PER_PASS
                for name, answer in list(owed.items()):
                    if not answer.table.shared():
                        self._answered(peer, name)
                        continue
                    budget = self._send(answer, budget)
                    if budget < 0:
                        break
                    self._answered(peer, name)
        now = self.runtime.now
        if now < self.next_round:
            return
        # Tables not in use send nothing and are looked at once a round (an
        # idle node's pass stays a comparison); a table's new record starts
        # the rounds at the next pass (``wake``).
        self.next_round = now + SYNC_INTERVAL_MS
        for name, table in self.tables.items():
            if table.in_use():
                self._round(name, table)

    def wake(self) -> None:
        """A table filed a record under a new key: a round at the next pass."""
        self.next_round = 0

    def _round(self, name: bytes, table: SyncedTable) -> None:
        synced = self.synced[name]
        counted = []
        for node in self.membership.others():
            if not node.link or node.flags & HANDSHAKE:
                continue
            if node.id in synced:
                counted.append(node.id)
            else:
                self._send_digest(name, table, node.id)
        if counted:
            self._send_digest(name, table, self.runtime.rng.choice(counted))
