"""Hostile bus traffic: random, mutated and garbage messages.

``MessageFuzzer.inject(i)`` hands node ``i`` one message as the real bus
would (a decoded msgpack value plus the Link it came on): plausible
messages about real jobs and nodes, the same with one field broken, or
plain garbage, from known, unknown and impossible senders, on inbound
connections, on the node's real outbound links or on links that do not
match the sender. The node must never raise, and its state must stay
consistent (``checks.node_problems``).
"""

from __future__ import annotations

import random

import msgpack

from disque.cluster import messages as m
from disque.cluster.membership import FAIL, HANDSHAKE, LEAVING, MYSELF, NOADDR, PFAIL
from disque.cluster.transport import Link
from disque.jobs.codec import to_bus

_JOB_TYPES = (m.GOTJOB, m.QUEUED, m.WORKING, m.WILLQUEUE, m.DELJOB)
_ALL = sorted(m.ALL_TYPES)
_EXTREME_INTS = (0, 1, -1, 2, 255, 65535, 65536, 2**31, 2**32 + 7, 2**63 - 1, -2**63, 2**64 - 1)


class MessageFuzzer:
    """Builds and delivers hostile messages inside a Sim."""

    def __init__(self, sim, rng: random.Random) -> None:
        self.sim = sim
        self.rng = rng
        self.injected = 0
        self.kinds: dict[str, int] = {}

    # -------------------------------------------------------------- values

    def random_value(self, depth: int = 0):
        rng = self.rng
        roll = rng.randrange(12 if depth < 2 else 8)
        if roll == 0:
            return rng.choice(_EXTREME_INTS)
        if roll == 1:
            return rng.randint(-1000, 1000)
        if roll == 2:
            return rng.random() * rng.choice((1, 1e12, -5))
        if roll == 3:
            return rng.choice(("", "PING", "x" * 40, "10.0.0.1", "ü"))
        if roll == 4:
            return rng.randbytes(rng.choice((0, 1, 8, 40, 41)))
        if roll == 5:
            return rng.choice((True, False, None))
        if roll == 6:
            return self.job_id()
        if roll == 7:
            return self.node_id()
        if roll in (8, 9):
            return [self.random_value(depth + 1) for _ in range(rng.randrange(4))]
        return {self.random_key(): self.random_value(depth + 1) for _ in range(rng.randrange(4))}

    def random_key(self):
        rng = self.rng
        keys = ["v", "type", "sender", "port", "flags", "mflags", "id", "job", "jobs", "gossip",
                "node", "queue", "count", "pause", "may_have", "known", "delay", "bport"]
        roll = rng.random()
        if roll < 0.8:
            return rng.choice(keys)
        if roll < 0.9:
            return rng.choice(keys).encode()
        return rng.randint(-3, 3)

    def node_id(self) -> bytes:
        """A node ID: a cluster member's, a random one, or a malformed one."""
        rng = self.rng
        roll = rng.random()
        if roll < 0.6:
            return rng.choice(self.sim.nodes).node_id
        if roll < 0.85:
            return b"%040x" % rng.getrandbits(160)
        return rng.choice((b"", b"x" * 39, b"y" * 41, b"\xff" * 40))

    def job_id(self) -> bytes:
        """A job ID: one held somewhere, a well-formed unknown one, or a malformed one."""
        rng = self.rng
        held = self._held_jobs()
        roll = rng.random()
        if held and roll < 0.6:
            return rng.choice(held).id
        if roll < 0.85:
            ttl = rng.choice((b"05a1", b"05a0", b"0000", b"ffff", b"zzzz"))
            return b"D-" + rng.choice(self.sim.nodes).node_id[:8] + b"-" + \
                rng.randbytes(18).hex()[:24].encode() + b"-" + ttl
        return rng.choice((b"D-short", b"X" * 40, b"D-" + b"a" * 38, b""))

    def _held_jobs(self) -> list:
        jobs = []
        for sn in self.sim.nodes:
            if sn.node is not None:
                jobs.extend(list(sn.node.state.jobs.values())[:50])
        return jobs

    def job_payload(self):
        """A serialised job: a real one, a real one with a broken field, or garbage."""
        rng = self.rng
        held = [j for j in self._held_jobs() if j.body is not None]
        roll = rng.random()
        if held and roll < 0.75:
            payload = to_bus(rng.choice(held), int(self.sim.now))
            if roll < 0.35:
                return payload
            field = rng.randrange(len(payload) + 1)
            if field == len(payload):
                return payload[:rng.randrange(len(payload))]
            payload[field] = self.random_value(1)
            return payload
        if roll < 0.9:
            return [self.job_id(), b"q%d" % rng.randrange(3), b"body", rng.randint(1, 3),
                    rng.choice(_EXTREME_INTS), rng.choice((1, 100, 2**40)), 0,
                    rng.choice((0, 1, 5)), 0, 0, rng.randrange(8),
                    [self.node_id() for _ in range(rng.randrange(4))]]
        return self.random_value()

    def gossip_entry(self):
        rng = self.rng
        if rng.random() < 0.1:
            return self.random_value(1)
        target = rng.choice(self.sim.nodes)
        entry = {
            m.G_ID: self.node_id(),
            m.G_PING: rng.choice((0, int(self.sim.now))),
            m.G_PONG: rng.choice((0, int(self.sim.now))),
            m.G_IP: rng.choice((target.ip, target.ip, "10.0.0.99", "", "::1", "not an ip",
                                "1.2.3.4\nmyself")),
            m.G_PORT: rng.choice((target.port, target.port, 0, -1, 55536, 70000)),
            m.G_FLAGS: rng.choice((0, 0, PFAIL, FAIL, PFAIL | FAIL, MYSELF, HANDSHAKE, NOADDR,
                                   LEAVING, 0xFFFF, -1)),
        }
        if rng.random() < 0.1:
            entry[m.G_BPORT] = rng.choice((0, 17711, 70000, -5))
        if rng.random() < 0.15:
            entry[self.random_key()] = self.random_value(1)
        return entry

    # ------------------------------------------------------------ messages

    def message(self, receiver) -> object:
        rng = self.rng
        roll = rng.random()
        if roll < 0.05:
            return self.random_value()  # not even a map
        kind = rng.choice(_ALL)
        msg = {m.VERSION: 1, m.TYPE: kind, m.SENDER: self.node_id(),
               m.PORT: rng.choice((rng.choice(self.sim.nodes).port, 0, 65535)),
               m.FLAGS: rng.choice((0, 0, LEAVING, MYSELF | LEAVING))}
        if rng.random() < 0.2:
            msg[m.MFLAGS] = rng.choice((0, m.MFLAG_NOREPLY, m.MFLAG_INCR_NACKS,
                                        m.MFLAG_INCR_DELIV, 7, 2**40))
        if kind in (m.PING, m.PONG, m.MEET):
            msg[m.GOSSIP] = [self.gossip_entry() for _ in range(rng.randrange(5))]
        elif kind == m.FAIL:
            msg[m.NODE] = self.node_id()
        elif kind == m.REPLJOB:
            msg[m.JOB] = self.job_payload()
        elif kind in _JOB_TYPES:
            msg[m.ID] = self.job_id()
        elif kind == m.ENQUEUE:
            msg[m.ID] = self.job_id()
            msg[m.DELAY] = rng.choice((0, 0, 1, 5, -3, 2**40))
        elif kind == m.SETACK:
            msg[m.ID] = self.job_id()
            msg[m.MAY_HAVE] = rng.choice((0, 1, 3, 99, -1))
        elif kind == m.GOTACK:
            msg[m.ID] = self.job_id()
            msg[m.KNOWN] = rng.choice((0, 1, 2, -1))
        elif kind == m.NEEDJOBS:
            msg[m.QUEUE] = rng.choice((b"q0", b"q1", b"q2", b"other", b""))
            msg[m.COUNT] = rng.choice((1, 5, 100, 0, -5, 10**6))
        elif kind == m.YOURJOBS:
            msg[m.JOBS] = [self.job_payload() for _ in range(rng.randrange(4))]
        elif kind == m.PAUSE:
            msg[m.QUEUE] = rng.choice((b"q0", b"q1", b"new"))
            msg[m.PAUSE_STATE] = rng.choice((b"none", b"in", b"out", b"all", b"bogus", b""))
        if roll < 0.35:
            self._break(msg)
        return msg

    def _break(self, msg: dict) -> None:
        """Make one field wrong: missing, another type, or an unknown type/version."""
        rng = self.rng
        key = rng.choice(sorted(msg, key=str))
        roll = rng.random()
        if roll < 0.3:
            del msg[key]
        elif roll < 0.8:
            msg[key] = self.random_value(1)
        elif roll < 0.9:
            msg[m.TYPE] = rng.choice(("NOPE", "ping", b"PING", 7, None))
        else:
            msg[m.VERSION] = rng.choice((0, 2, "1", None))

    def noise(self, receiver) -> object:
        """A message every node must ignore entirely (beyond answering a PING):
        not a map, wrong version, unknown type, or a job message from a sender
        that is not in the cluster."""
        rng = self.rng
        roll = rng.random()
        if roll < 0.2:
            return self.random_value()
        msg = self.message(receiver)
        if not isinstance(msg, dict):
            return msg
        if roll < 0.4:
            msg[m.VERSION] = rng.choice((0, 2, None))
        elif roll < 0.6:
            msg[m.TYPE] = rng.choice(("NOPE", "ping", "", 7))
        else:
            msg[m.SENDER] = b"%040x" % rng.getrandbits(160)
            if msg.get(m.TYPE) in (m.MEET, m.FAIL):
                msg[m.TYPE] = m.PING
        return msg

    def link_for(self, receiver) -> Link:
        """An inbound connection, one of the receiver's real outbound links, or a fake one."""
        rng = self.rng
        roll = rng.random()
        if roll < 0.5:
            return Link(None, rng.choice(("10.0.0.1", "10.0.0.2", "10.0.0.77", "")),
                        receiver.ip, None)
        bus = receiver.bus
        if roll < 0.8 and bus is not None and bus.outbound:
            node_id = rng.choice(sorted(bus.outbound))
            return bus.outbound[node_id].src_link
        # A link the transport could have opened: to any node of the table but
        # self (possibly a handshake node), whatever the peer then says.
        peers = sorted(n for n in receiver.node.state.membership.nodes if n != receiver.node.state.id)
        if not peers:
            return Link(None, "10.0.0.77", receiver.ip, None)
        return Link(rng.choice(peers), rng.choice(("10.0.0.2", "10.0.0.88")), receiver.ip, None)

    def inject(self, index: int, noise: bool = False) -> None:
        """Deliver one hostile message to node ``index`` (if it is up); with
        ``noise``, only a message that must be ignored."""
        receiver = self.sim.nodes[index]
        if receiver.node is None:
            return
        msg = self.noise(receiver) if noise else self.message(receiver)
        try:
            wire = msgpack.packb(msg, use_bin_type=True)
        except (OverflowError, TypeError, ValueError):
            return  # not representable on the wire: the bus could never deliver it
        decoded = msgpack.unpackb(wire, raw=False, strict_map_key=False)
        self.injected += 1
        kind = decoded.get("type") if isinstance(decoded, dict) else None
        label = kind if isinstance(kind, str) else "garbage"
        self.kinds[label] = self.kinds.get(label, 0) + 1
        link = self.link_for(receiver) if not noise else Link(None, "10.0.0.77", receiver.ip,
                                                               None)
        self.sim.trace("fuzz -> %s %r" % (receiver.name, decoded))
        receiver.node.receive_bus(link, decoded)
        self.sim.poke(receiver)
