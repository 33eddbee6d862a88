"""Simulated client connections and the replies they collect."""

from __future__ import annotations

import hiredis

from disque.context.clients import ClientState


class SimFailure(AssertionError):
    """An invariant of the simulation was violated."""


class MalformedReply(SimFailure):
    """A node sent bytes that are not exactly one RESP value."""


def parse_reply(raw: bytes):
    """Exactly one RESP value (errors come back as hiredis.ReplyError)."""
    if not isinstance(raw, (bytes, bytearray)):
        raise MalformedReply("reply is %r, not bytes" % (type(raw).__name__,))
    reader = hiredis.Reader()
    try:
        reader.feed(raw)
        value = reader.gets()
        if value is False:
            raise MalformedReply("incomplete reply %r" % (raw[:200],))
        if reader.gets() is not False:
            raise MalformedReply("more than one value in reply %r" % (raw[:200],))
    except hiredis.ProtocolError as exc:
        raise MalformedReply("unparsable reply %r: %s" % (raw[:200], exc)) from None
    return value


def is_error(value) -> bool:
    return isinstance(value, hiredis.ReplyError)


def to_bytes(arg) -> bytes:
    """A command argument as bytes (str is UTF-8, int is decimal)."""
    if isinstance(arg, bytes):
        return arg
    if isinstance(arg, int):
        return str(arg).encode()
    return str(arg).encode()


class Request:
    """One command sent by a simulated client and what came back."""

    __slots__ = ("node", "argv", "issued_at", "done_at", "raw", "value", "lost", "blocked",
                 "callbacks", "client")

    def __init__(self, node_index: int, argv: list[bytes], issued_at: float, client) -> None:
        self.node = node_index
        self.argv = argv
        self.issued_at = issued_at
        self.done_at: float | None = None
        self.raw: bytes | None = None
        self.value = None
        self.lost = False  # the connection died (node crash) before a reply
        self.blocked = False  # the reply did not come at once
        self.callbacks: list = []
        self.client = client

    @property
    def done(self) -> bool:
        return self.done_at is not None

    @property
    def error(self) -> bool:
        """The command completed with an error reply."""
        return self.done and not self.lost and is_error(self.value)

    @property
    def ok(self) -> bool:
        """The command completed with a non-error reply."""
        return self.done and not self.lost and not is_error(self.value)

    def __repr__(self) -> str:
        args = b" ".join(a[:24] for a in self.argv[:6]).decode("latin-1")
        if not self.done:
            state = "pending"
        elif self.lost:
            state = "lost"
        else:
            state = repr(self.value)[:80]
        return "<Request n%d %s: %s>" % (self.node, args, state)


class SimClient(ClientState):
    """A client connection to one node incarnation; one command at a time."""

    __slots__ = ("sim", "simnode", "incarnation", "request")

    def __init__(self, sim, simnode, client_id: int) -> None:
        super().__init__(client_id, "10.9.0.1:%d" % (10000 + client_id % 50000),
                         int(sim.loop.now))
        self.sim = sim
        self.simnode = simnode
        self.incarnation = simnode.incarnation
        self.request: Request | None = None

    def send(self, data: bytes) -> None:
        request = self.request
        if request is None:
            raise SimFailure("node %s sent %r to an idle client" % (self.simnode.name, data[:80]))
        self.sim.complete(request, bytes(data))

    def __hash__(self) -> int:
        return self.id

    def __eq__(self, other) -> bool:
        return self is other
