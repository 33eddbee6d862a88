"""``FailoverConnection``: one redis-py connection to the best reachable node.

The node is chosen by HELLO (``nodechoice``); a connection error or a
``-LEAVING`` reply moves the connection to another node and runs the
operation again there. Commands go one at a time (``execute``) or many in
one write (``pipeline``, ``pipeline_encoded``, ``pipeline_lines``).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence, TypeVar

import redis

from disque.client.addresses import NodeAddress
from disque.client.arguments import encode_arg, pack_commands
from disque.client.errors import (CONNECTION_ERRORS, AuthenticationError, DisqueError,
                                  NoNodeAvailable, ResponseError, is_leaving)
from disque.client.nodechoice import NodeChoice, hello_nodes
from disque.client.security import ConnectionSecurity

SOCKET_DEFAULT = object()  # read with the connection's own socket timeout
_LINES_READ = 1 << 16

Result = TypeVar("Result")


def _read_replies(conn: redis.Connection, count: int) -> list[Any]:
    """``count`` replies; a refused command's is its exception."""
    replies: list[Any] = []
    for _ in range(count):
        try:
            replies.append(conn.read_response())
        except ResponseError as exc:
            replies.append(exc)
    return replies


class FailoverConnection:
    """A connection to the best reachable node of a Disque cluster, moved to
    another node when the current one stops answering or is leaving."""

    def __init__(self, seeds: list[NodeAddress], security: ConnectionSecurity, *,
                 socket_timeout: float | None, connect_timeout: float, use_hello: bool,
                 max_attempts: int | None) -> None:
        self.nodes = NodeChoice(seeds)
        self.connection_class = redis.SSLConnection if security.uses_tls else redis.Connection
        self.connection_kwargs = security.connection_kwargs()
        self.socket_timeout = socket_timeout
        self.connect_timeout = connect_timeout
        self.use_hello = use_hello
        self.max_attempts = max_attempts
        self.node: NodeAddress | None = None     # where the connection goes
        self.node_id: str | None = None
        self.failovers = 0
        self._conn: redis.Connection | None = None

    # -- choosing the node -------------------------------------------------

    def close(self) -> None:
        """Drop the connection (the next command reconnects)."""
        if self._conn is not None:
            self._conn.disconnect()
            self._conn = None

    def _open(self, node: NodeAddress) -> redis.Connection:
        conn = self.connection_class(host=node.host, port=node.port,
                                     socket_timeout=self.socket_timeout,
                                     socket_connect_timeout=self.connect_timeout,
                                     protocol=2, driver_info=None, **self.connection_kwargs)
        conn.connect()
        return conn

    def connect(self) -> NodeAddress:
        """Connect to the best node: any reachable one, then the lowest HELLO priority."""
        if self._conn is not None:
            return self.node
        errors: list[str] = []
        for node in self.nodes.candidates():
            try:
                conn = self._open(node)
            except AuthenticationError:
                raise  # a wrong password is no reason to try the next node
            except (*CONNECTION_ERRORS, ResponseError) as exc:
                self.nodes.failed(node)
                errors.append("%s: %s" % (node, exc))
                continue
            self._conn, self.node = conn, node
            if self.use_hello:
                try:
                    self._switch_to_best(node)
                except AuthenticationError:
                    self.close()
                    raise
                except CONNECTION_ERRORS as exc:
                    self._drop()
                    errors.append("%s: %s" % (node, exc))
                    continue
            return self.node
        raise NoNodeAvailable("no Disque node reachable (%s)" % "; ".join(errors))

    def _switch_to_best(self, via: NodeAddress) -> None:
        """Ask ``via`` for HELLO and move to the best node it reports, if reachable."""
        known = self.nodes.known = self._hello(via)
        self.node_id = next((n.node_id for n in known if n == via), self.node_id)
        current = next((n for n in known if n == via), None)
        for best in known:
            if best == via or self.nodes.quarantined(best):
                continue
            if current is not None and best.priority >= current.priority:
                break
            try:
                conn = self._open(best)
            except (*CONNECTION_ERRORS, ResponseError):
                self.nodes.failed(best)
                continue
            self._conn.disconnect()
            self._conn, self.node, self.node_id = conn, best, best.node_id
            return
        if current is not None:
            self.node = current

    def _hello(self, via: NodeAddress) -> list[NodeAddress]:
        return hello_nodes(self._call_once("HELLO", read_timeout=SOCKET_DEFAULT), via)

    def use_node(self, node: NodeAddress) -> NodeAddress:
        """Talk to ``node`` from now on, unless it failed recently or does not
        answer: then stay, or connect as usual."""
        if self._conn is not None and self.node == node:
            return node
        if not self.nodes.quarantined(node):
            try:
                conn = self._open(node)
            except (*CONNECTION_ERRORS, ResponseError):
                self.nodes.failed(node)
            else:
                self.close()
                self._conn, self.node, self.node_id = conn, node, node.node_id
                return node
        return self.connect()

    def rebalance(self) -> NodeAddress:
        """Ask HELLO again and move to a node with a lower priority than the current one."""
        self.connect()
        self.retrying(lambda: self._switch_to_best(self.node))
        return self.node

    def hello(self) -> list[NodeAddress]:
        """HELLO on the current node: every node it knows, best (lowest priority) first."""
        self.connect()
        return self.retrying(lambda: self._hello(self.node))

    # -- failing over --------------------------------------------------------

    def _drop(self) -> None:
        if self.node is not None:
            self.nodes.failed(self.node)
        self.close()

    def fail_over(self) -> None:
        """Count a failover and leave the current node: the next command goes elsewhere."""
        self.failovers += 1
        self._drop()

    def attempts(self) -> int:
        """How many nodes an operation is tried on before it fails."""
        if self.max_attempts is not None:
            return self.max_attempts
        return max(2, self.nodes.count() + 1)

    def retrying(self, operation: Callable[[], Result]) -> Result:
        """Run ``operation`` on the current node, again on another one after a
        connection error or ``-LEAVING``, up to ``attempts()`` times."""
        last: BaseException | None = None
        for attempt in range(self.attempts()):
            if attempt:
                self.failovers += 1
            try:
                self.connect()
                return operation()
            except AuthenticationError:
                raise  # another node would refuse us too
            except CONNECTION_ERRORS as exc:
                last = exc
                self._drop()
            except ResponseError as exc:
                if not is_leaving(exc):
                    raise
                last = exc
                self._drop()
        raise DisqueError("command failed on every node tried: %s" % last) from last

    # -- sending ------------------------------------------------------------------

    def _call_once(self, *args: Any, read_timeout: Any = None) -> Any:
        conn = self._conn
        conn.send_command(*[encode_arg(a) for a in args], check_health=False)
        if read_timeout is SOCKET_DEFAULT:
            return conn.read_response()
        return conn.read_response(timeout=read_timeout)

    def execute(self, *args: Any, read_timeout: Any = SOCKET_DEFAULT) -> Any:
        """Run one command, failing over to another node on connection errors and
        -LEAVING; ``read_timeout`` in seconds (None: wait for the reply)."""
        return self.retrying(lambda: self._call_once(*args, read_timeout=read_timeout))

    def _encoded_once(self, data: Sequence[Any], count: int) -> list[Any]:
        conn = self._conn
        conn.send_packed_command(list(data), check_health=False)
        return _read_replies(conn, count)

    def pipeline_encoded(self, data: Sequence[Any], count: int) -> list[Any]:
        """``count`` commands RESP-encoded already, as the pieces ``data`` laid
        end to end, sent again elsewhere on a connection error; their replies."""
        return self.retrying(lambda: self._encoded_once(data, count))

    def _pipeline_once(self, commands: Sequence[tuple]) -> list[Any]:
        conn = self._conn
        conn.send_packed_command(pack_commands(conn, commands), check_health=False)
        return _read_replies(conn, len(commands))

    def pipeline(self, commands: Sequence[tuple]) -> list[Any]:
        """Send ``commands`` in one write and read every reply; errors come back as exceptions.

        On a connection error the whole chunk is sent again to another node; commands
        answered with -LEAVING are sent again to another node."""
        replies: list[Any] = [None] * len(commands)
        todo = list(range(len(commands)))

        def send_todo() -> list[Any]:
            nonlocal todo
            got = self._pipeline_once([commands[i] for i in todo])
            leaving = []
            for i, reply in zip(todo, got):
                replies[i] = reply
                if isinstance(reply, ResponseError) and is_leaving(reply):
                    leaving.append(i)
            todo = leaving
            if leaving:
                raise replies[leaving[0]]  # retrying moves to another node
            return replies

        try:
            return self.retrying(send_todo)
        except DisqueError:
            # Out of nodes while some commands still got -LEAVING: those replies stand.
            if todo and all(isinstance(replies[i], ResponseError) for i in todo):
                return replies
            raise

    def _lines_once(self, data: bytes | memoryview, count: int) -> bytes:
        conn = self._conn
        conn.send_packed_command([data], check_health=False)
        # The replies come straight off the socket: redis-py's parser holds
        # nothing between complete replies, and the server sends only replies.
        sock = conn._sock
        received = bytearray()
        lines = 0
        while lines < count:
            chunk = sock.recv(_LINES_READ)
            if not chunk:
                raise ConnectionError("connection closed by the server")
            lines += chunk.count(b"\n")
            received += chunk
        if lines > count or not received.endswith(b"\r\n"):
            conn.disconnect()
            raise DisqueError("%d reply lines to %d commands: not one-line replies" % (lines, count))
        return bytes(received)

    def pipeline_lines(self, data: bytes | memoryview, count: int) -> bytes:
        """``count`` RESP-encoded commands with one-line replies, sent again
        elsewhere on a connection error; the replies as received."""
        return self.retrying(lambda: self._lines_once(data, count))
