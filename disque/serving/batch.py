"""The replies of one loop turn, written together.

Like Redis's "write before sleep", a client's replies are not written at
once: they are collected while the loop runs the callbacks of every
readable socket, then one ``OutputBatch.flush`` per loop turn writes the
AOF once (spec: persistence.md, a record is written before the reply that
acknowledges it leaves the process) and gives each client's output to its
transport in one ``write``. With many unpipelined clients that halves the
kernel time per request: the peer gets a burst of replies instead of a
wake-up for each one.
"""

from __future__ import annotations

from typing import Callable, Protocol


class TurnLoop(Protocol):
    """What the batch asks of the event loop."""

    def call_soon(self, callback: Callable[[], None]) -> object:
        """Run ``callback`` once the callbacks of this loop turn have run."""


class BatchedClient(Protocol):
    """A connection with replies in the batch (``serving/output.ClientOutput``)."""

    @property
    def output(self) -> list[bytes] | None:
        """Its replies collected this turn (None: none, or already written)."""

    def write_output(self) -> None:
        """Hand its collected replies to its transport."""


class ResumedClient(Protocol):
    """A connection unblocked in the turn (``serving/commands.ClientCommands``)."""

    def resume_pending(self) -> None:
        """Run the commands it read while blocked."""


class OutputBatch:
    """The replies of one loop turn: the AOF is written once, then every
    client's collected output, one transport write per client. Also the
    clients unblocked in the turn, whose next commands run together
    (``run_resumed``) once the input that unblocked them was handled."""

    __slots__ = ("loop", "before_write", "clients", "resumed")

    def __init__(self, loop: TurnLoop, before_write: Callable[[], None]) -> None:
        self.loop = loop
        self.before_write = before_write  # writes pending AOF records
        self.clients: list[BatchedClient] = []
        self.resumed: list[ResumedClient] = []

    def resume(self, client: ResumedClient) -> None:
        """``client`` was unblocked with commands waiting: run them soon."""
        resumed = self.resumed
        if not resumed:
            self.loop.call_soon(self.run_resumed)
        resumed.append(client)

    def run_resumed(self) -> None:
        """Run the waiting commands of the clients unblocked so far, in the
        order they were unblocked. The server calls it after a read of bus
        frames too, so that a pipeline's next synchronous ADDJOB sends its
        REPLJOBs in the same loop turn as the GOTJOBs that released the
        previous one."""
        while self.resumed:
            resumed, self.resumed = self.resumed, []
            for client in resumed:
                client.resume_pending()

    def add(self, client: BatchedClient) -> None:
        """``client`` has its first reply of this turn."""
        clients = self.clients
        if not clients:
            self.loop.call_soon(self.flush)
        clients.append(client)

    def flush(self) -> None:
        """Write what every client collected (a client written meanwhile, by
        ``_flush_now`` or gone, has no output left)."""
        clients = self.clients
        if not clients:
            return
        self.clients = []
        self.before_write()  # spec: persistence.md, the AOF is written before the replies
        for client in clients:
            if client.output is not None:
                client.write_output()
