"""Fuzz target ``bus``: the cluster bus frame decoder (disque/net/bus.py
``BusConnection.data_received``: length prefix, msgpack decode) and what
the node does with the decoded messages (disque/cluster/messages.py's
checks, then the handlers of ``Node.receive_frame``).

An input is what a peer sends on a link of a node that knows that peer.
Its first byte picks the form of the rest (bit 0) and the link (bits 1-2):

- raw (bit 0 clear): the bytes of the TCP stream, delivered in reads of a
  size the first byte also picks;
- structured (bit 0 set): choices (``ByteRandom``) that build frames of
  msgpack messages: a header that is mostly valid, then messages of every
  type with fields of the right or wrong types, job payloads included, so
  the handlers behind the checks are reached;

- a plain inbound link (no cluster secret);
- an inbound link of a node with a cluster secret: the stream is what a
  stranger sends before and instead of the handshake
  (disque/net/busauth.py);
- the same, from a peer that knows the secret: the handshake is played
  properly, then every frame is sent with its MAC, so the frames reach
  the decoder behind the MAC check;
- an outbound link of a node with a secret, the stream being what the
  other end answers.

A frame the bus cannot decode closes the link (a defined outcome); an
exception escaping ``data_received``, or one the bus caught and logged
around the handlers, is a crash, as is a node whose bookkeeping is then
inconsistent. ``python -m fuzz.bus --runs N``.
"""

from __future__ import annotations

import struct
import sys

from fuzz.common import ByteRandom, Target, main

_LENGTH = struct.Struct(">I")
JOB_IDS = [b"D-a1b2c3d4-AAAAAAAAAAAAAAAAAAAAAAAA-05a1", b"D-a1b2c3d4-AAAAAAAAAAAAAAAAAAAAAAAB-0000",
           b"D-feedbeef-////////////////////////-ffff", b"D-x", b"X" * 40]
QUEUES = [b"q", b"", b"a" * 300, b"q\r\n"]
MAX_MESSAGES = 8
# The link an input arrives on (bits 1-2 of its first byte).
PLAIN, STRANGER, AUTHENTICATED, OUTBOUND = range(4)


class FakeTransport:
    """What the connection writes, and whether it was closed."""

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.aborted = False

    def get_extra_info(self, name: str, default=None):
        return {"peername": ("127.0.0.2", 40000), "sockname": ("127.0.0.1", 17711)}.get(
            name, default)

    def write(self, data: bytes) -> None:
        self.written.append(bytes(data))

    def abort(self) -> None:
        self.aborted = True

    def close(self) -> None:
        self.aborted = True

    def get_write_buffer_size(self) -> int:
        return 0


class FakeLoop:
    """The event loop calls the bus makes; nothing ever runs later."""

    class Handle:
        def cancel(self) -> None:
            pass

    def call_soon(self, callback, *args):
        return self.Handle()

    def call_later(self, delay, callback, *args):
        return self.Handle()

    def create_future(self):
        import asyncio

        return asyncio.Future(loop=self)  # type: ignore[arg-type]

    def get_debug(self) -> bool:
        return False


def _value(rng: ByteRandom, depth: int = 0) -> object:
    """A msgpack value of any type, occasionally nested."""
    kind = rng.randrange(12 if depth < 2 else 9)
    if kind == 0:
        return rng.choice([0, 1, 2, -1, 65535, 65536, 1 << 31, (1 << 63) - 1, -(1 << 63),
                           (1 << 64) - 1])
    if kind == 1:
        return rng.randrange(1 << 16)
    if kind == 2:
        return rng.choice(JOB_IDS)
    if kind == 3:
        return rng.choice(QUEUES)
    if kind == 4:
        return rng.randbytes(rng.randrange(48))
    if kind == 5:
        return rng.choice(["", "127.0.0.1", "::1", "x" * 40, "PING", "queued"])
    if kind == 6:
        return rng.choice([None, True, False, 1.5, float("nan")])
    if kind == 7:
        return b"%040x" % rng.getrandbits(160)
    if kind == 8:
        return rng.choice([b"none", b"in", b"out", b"all", b"bcast", b"state"])
    if kind == 9:
        return [_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    if kind == 10:
        return {rng.choice([0, -1, b"id", b"", None, 1.5]) if rng.random() < 0.2
                else rng.choice(FIELDS): _value(rng, depth + 1) for _ in range(rng.randrange(4))}
    return _job_payload(rng)


def _job_payload(rng: ByteRandom) -> list:
    """A job in its bus form, fields mostly of the right types."""
    payload: list = [rng.choice(JOB_IDS[:3]), rng.choice(QUEUES), rng.randbytes(rng.randrange(8)),
                     rng.randrange(4), 1_700_000_000_000_000_000 + rng.randrange(1 << 20),
                     rng.choice([1, 60, 3600, 0, (1 << 63) - 1]), rng.randrange(3),
                     rng.choice([0, 1, 30]), rng.randrange(3), rng.randrange(3),
                     rng.randrange(8), [b"feedbeef" + b"1" * 32]]
    if rng.random() < 0.2:
        payload.append({rng.choice(["pri", "maxdeliver", "dedupid", "deadletter", "x"]):
                        _value(rng, 2)})
    if rng.random() < 0.15:
        payload[rng.randrange(len(payload))] = _value(rng, 2)
    return payload


FIELDS: list = []  # message keys, filled by build() from disque.cluster.messages


def _batch(rng: ByteRandom) -> list:
    """A bus format 2 batch: a type's code (messages.BATCH_CODES) and flags,
    then each message's fields, mostly of the right types."""
    code = rng.choice([1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 10, -1, "1", None])
    batch: list = [code, rng.choice([0, 0, 1, 2, 4, -1, 1 << 40, b"0"])]
    for _ in range(rng.randrange(5)):
        batch.append(_job_payload(rng) if code == 1 else rng.choice(JOB_IDS))
        if code in (3, 8):
            batch.append(rng.choice([0, 1, 2, -1, 1 << 40]))
        elif code == 7:
            batch.append(rng.randrange(4))
            batch.append(rng.choice([None, [b"feedbeef" + b"1" * 32], [], _value(rng)]))
        if rng.random() < 0.1:
            batch.append(_value(rng))
    return batch


def _message(rng: ByteRandom, types: list[str], schemas: dict) -> object:
    roll = rng.random()
    if roll < 0.05:
        return _value(rng)
    if roll < 0.2:
        return _batch(rng)
    kind = rng.choice(types)
    msg: dict = {"type": kind}
    for key, what in schemas.get(kind, {}).items():
        if rng.random() < 0.1:
            continue
        if rng.random() < 0.15:
            msg[key] = _value(rng)
        elif what is int:
            msg[key] = rng.choice([0, 1, 2, 5, -1, 1 << 40])
        elif what is bytes:
            msg[key] = rng.choice(QUEUES + [b"none", b"in", b"out", b"all"])
        elif what is list:
            msg[key] = (_job_payload(rng) if key == "job" else
                        [_job_payload(rng) for _ in range(rng.randrange(3))] if key == "jobs"
                        else [_gossip(rng) for _ in range(rng.randrange(3))])
        elif what == "node id":
            msg[key] = rng.choice([b"feedbeef" + b"1" * 32, b"a1b2c3d4" + b"0" * 32,
                                   b"%040x" % rng.getrandbits(160)])
        else:
            msg[key] = rng.choice(JOB_IDS)
    for _ in range(rng.randrange(3)):
        msg[rng.choice(FIELDS)] = _value(rng)
    return msg


def _gossip(rng: ByteRandom) -> object:
    if rng.random() < 0.1:
        return _value(rng)
    return {"id": rng.choice([b"feedbeef" + b"1" * 32, b"%040x" % rng.getrandbits(160)]),
            "ip": rng.choice(["127.0.0.1", "", "::1", "300.1.1.1", "10.0.0.%d" % rng.randrange(3)]),
            "port": rng.choice([7711, 7712, 0, 70000]), "ping": rng.randrange(3),
            "pong": rng.randrange(3), "flags": rng.randrange(64)}


def _seeds() -> list[bytes]:
    hello = b"\xffDQB\x01" + bytes(32) + b"\x01" + bytes(32)
    return [b"\x01" + bytes(range(256)), b"\x03" + bytes(i * 7 % 256 for i in range(400)),
            b"\x00" + _LENGTH.pack(1) + b"\x90", b"\x08" + _LENGTH.pack(3) + b"\x92\x80\x80",
            b"\x05" * 200, b"\x00" + _LENGTH.pack(1 << 31), b"\x02" + hello,
            b"\x06" + b"\xffDQB\x01" + bytes(32) + b"\xffDQB\x01\x00" + bytes(32),
            b"\x05" + bytes(range(0, 256, 3)), b"\x07" + bytes(range(1, 256, 5))]


def build() -> Target:
    """The cluster bus frame decoder, and the node behind it, as a fuzz target."""
    import msgpack

    from disque.cluster import messages as m
    from disque.net.bus import BusConnection, ClusterBus
    from disque.net.busauth import Handshake, load_keys
    from fuzz.common import Crash, trap_errors
    from tests.unit.helpers import PEER_ID, add_peer, make_node
    from tests.unit.test_node_fuzz import check_node

    trap = trap_errors()
    keys = load_keys(b"a fuzzed cluster's secret", b"", "")
    FIELDS[:] = sorted({key for schema in m.BODY_SCHEMAS.values() for key in schema}
                       | {m.MFLAGS, m.MOVES, m.ORIGIN, m.REASON, m.NACKS, m.ADELIV, m.RETRY,
                          m.HOLDERS, m.SENDER, m.VERSION})
    types = sorted(m.ALL_TYPES) + ["NOSUCH"]
    pack = msgpack.Packer(use_bin_type=True).pack
    loop = FakeLoop()

    def header(rng: ByteRandom) -> object:
        head = {m.VERSION: m.PROTOCOL_VERSION, m.SENDER: PEER_ID, m.PORT: 7712, m.FLAGS: 0}
        if rng.random() < 0.1:
            head[rng.choice([m.VERSION, m.SENDER, m.PORT, m.FLAGS, m.BPORT])] = _value(rng)
        return head

    def structured(rng: ByteRandom) -> list[bytes]:
        frames = []
        while not rng.exhausted and len(frames) < 3:
            msgs = [header(rng)] + [_message(rng, types, m.BODY_SCHEMAS)
                                    for _ in range(rng.randrange(1, MAX_MESSAGES))]
            packed = pack(msgs)
            frames.append(_LENGTH.pack(len(packed)) + packed)
        return frames

    def frames_of(raw: bytes) -> list[bytes]:
        """Raw bytes cut where their length prefixes say (the rest as one piece)."""
        frames, pos = [], 0
        while len(raw) - pos >= 4:
            end = pos + 4 + _LENGTH.unpack_from(raw, pos)[0]
            if end > len(raw):
                break
            frames.append(raw[pos:end])
            pos = end
        return frames + ([raw[pos:]] if pos < len(raw) else [])

    def authenticate(conn: BusConnection, transport: FakeTransport):
        """Play the peer that knows the secret; its session."""
        peer = Handshake(keys, initiator=True)
        _, hello = peer.feed(bytearray(b"".join(transport.written)))
        transport.written.clear()
        conn.data_received(hello)
        peer.feed(bytearray(b"".join(transport.written)))
        if peer.session is None or conn.session is None:
            raise Crash("the handshake with the secret failed")
        return peer.session

    def one_input(data: bytes) -> None:
        if not data:
            return
        mode = data[0]
        link = (mode >> 1) & 3
        frames = structured(ByteRandom(data[1:])) if mode & 1 else frames_of(data[1:])
        node = make_node(seed=mode)
        add_peer(node)
        bus = ClusterBus(node, loop)  # type: ignore[arg-type]
        if link != PLAIN:
            bus.keys = keys
        conn = BusConnection(bus, PEER_ID if link == OUTBOUND else None)
        transport = FakeTransport()
        conn.connection_made(transport)  # type: ignore[arg-type]
        if link == AUTHENTICATED:
            session = authenticate(conn, transport)
            frames = [frame + session.seal(frame) for frame in frames]
        stream = b"".join(frames)
        step = 1 + (mode >> 3) * 7
        for start in range(0, len(stream), step):
            conn.data_received(stream[start:start + step])
            if transport.aborted:
                break
        trap.check()
        try:
            check_node(node, [])
        except AssertionError as exc:
            raise Crash("node inconsistent after bus input") from exc

    return Target("bus", one_input, _seeds, max_len=2048)


if __name__ == "__main__":
    sys.exit(main(build))
