"""What the node core knows about a client connection (no I/O here).

The server's connection class extends ClientState and overrides ``send``,
``resume`` and ``close``; tests use ClientState itself and read
``client.sent``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, Protocol

from mypy_extensions import mypyc_attr

if TYPE_CHECKING:
    from disque.config.users import User


class ReplyStream(Protocol):
    """The rest of a command's work and reply, done in steps: a reply too
    long to build at once (QPEEK or GETJOB of many jobs, SHOW of a large
    body) or a command naming many jobs (QPURGE, ACKJOB, ...). Each step
    does a bounded part, so the connection can let other clients in between
    steps and stop while its peer does not read."""

    def step(self, out: list[bytes]) -> bool:
        """Do the next part, appending the reply's next bytes to ``out``;
        True once the reply is complete."""

    def pending_bytes(self) -> int:
        """About how many bytes of the reply are still to come: the client
        holds them (maxmemory-clients counts them as the client's memory)."""


class ReplyBatch:
    """An ADDJOBS reply, gathered in the order of its jobs: each job's reply,
    or a placeholder while that job waits for its replicas (``waiting``)."""

    __slots__ = ("replies", "waiting")

    def __init__(self) -> None:
        self.replies: list[bytes] = []
        self.waiting: dict[bytes, int] = {}  # job ID -> its position in ``replies``

    def reply(self, unanswered: bytes) -> bytes:
        """The array of the jobs' replies; a job still waiting answers ``unanswered``."""
        replies = self.replies
        for position in self.waiting.values():
            replies[position] = unanswered
        return b"*%d\r\n" % len(replies) + b"".join(replies)


class Block:
    """Why and until when a client is blocked (GETJOB or synchronous ADDJOB)."""

    __slots__ = ("kind", "queues", "deadline", "count", "withcounters", "withheaders", "job_id",
                 "last_repl", "batch")

    GETJOB: Final = 1
    ADDJOB: Final = 2

    def __init__(self, kind: int, deadline: int) -> None:
        self.kind = kind
        self.deadline = deadline  # unix ms, 0 = never
        self.queues: list = []
        self.count = 1
        self.withcounters = False
        self.withheaders = False
        self.job_id: bytes | None = None
        self.last_repl = 0  # ms when a replication target was last added
        self.batch: ReplyBatch | None = None  # an ADDJOBS's jobs (job_id is then None)


# Extended by the connection's core (``serving/output.ClientOutput``, itself
# extended by the asyncio protocol) and by the simulator's clients.
@mypyc_attr(allow_interpreted_subclasses=True)
class ClientState:
    """Per-connection state used by command handlers."""

    __slots__ = ("id", "addr", "name", "authenticated", "blocked", "monitor",
                 "close_after_reply", "last_cmd", "ctime", "atime", "sent", "reply_mode",
                 "user", "local", "protocol", "tls", "stream", "streams_replies")

    def __init__(self, client_id: int = 0, addr: str = "", now_ms: int = 0) -> None:
        self.id = client_id
        self.addr = addr
        self.name = b""
        self.authenticated = False
        self.blocked: Block | None = None
        self.monitor = False
        self.close_after_reply = False
        self.last_cmd = b"NULL"
        self.ctime = now_ms
        self.atime = now_ms
        self.sent: list[bytes] = []
        self.reply_mode = 0  # CLIENT REPLY: 0 on, 1 off, 2 skip next
        self.user: User | None = None  # None: the default user (AUTH user password sets it)
        # From loopback or the unix socket (the connection says): protected
        # mode, enable-debug-command local and enable-protected-configs local.
        self.local = False
        self.protocol = 2  # HELLO 3 makes it 3: CONFIG GET then answers a map
        self.tls = False  # came through tls-port: HELLO gives it the nodes' TLS ports
        self.stream: ReplyStream | None = None  # the command's reply still to come, in steps
        # The connection runs ``stream`` in later loop turns (``Node.stream_step``);
        # for other clients (tests, the dashboard) a handler completes it at once.
        self.streams_replies = False

    def reply_in_steps(self, head: bytes, stream: ReplyStream) -> bytes:
        """Answer ``head`` now and the rest through ``stream``: in later steps
        when the connection runs them, else at once (the same bytes)."""
        if self.streams_replies:
            self.stream = stream
            return head
        out = [head]
        while not stream.step(out):
            pass
        return b"".join(out)

    def send(self, data: bytes) -> None:
        """Deliver a reply outside the request/response flow (unblocking, MONITOR)."""
        self.sent.append(data)

    def resume(self) -> None:
        """The client was unblocked: continue with its buffered commands."""

    def unblocked(self, reply: bytes | None) -> None:
        """Unblocked with ``reply`` (None: none): ``send`` it, then ``resume``
        (one call: a connection does both in one)."""
        if reply is not None:
            self.send(reply)
        self.resume()

    def close(self) -> None:
        """Close the connection as soon as pending output is written."""
        self.close_after_reply = True
