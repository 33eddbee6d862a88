"""``DisqueClient``: one connection to the best reachable node, with failover.

Node choice by HELLO, failover on connection errors and -LEAVING, chunked
pipelining, and the job and queue commands (see the package docstring).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Iterable, Iterator, Sequence

import redis

from disque.client.addresses import DEFAULT_SEED, NodeAddress, parse_nodes
from disque.client.arguments import (Headers, addjob_args, addjob_options, encode_arg,
                                     ids_command, pack_commands, with_headers)
from disque.client.errors import (CONNECTION_ERRORS, AuthenticationError, DisqueError,
                                  NoNodeAvailable, ResponseError, is_badid, is_leaving,
                                  is_syntax_error)
from disque.client.replies import Job, job_from_entry, job_info, text
from disque.client.security import ConnectionSecurity
from disque.client.tracing import context_headers

DEFAULT_CHUNK = 500
# add_many: jobs per ADDJOBS (the node takes at most 10,000), and ADDJOBS per round trip.
DEFAULT_BULK_CHUNK = 1000
BULK_PIPELINE = 4
_LINES_READ = 1 << 16
# Jobs per GETJOB when get_job_entries pipelines several.
DEFAULT_GETJOB_COUNT = 1000
# How long a node that failed is skipped when choosing where to go next.
FAILED_NODE_QUARANTINE = 5.0
NACK = "NACK"
DELAY = b"DELAY"
# A well-formed job ID no node makes (node prefix and random part all zeros).
NACK_DELAY_PROBE_ID = "D-00000000-000000000000000000000000-0000"

_SOCKET_DEFAULT = object()  # read with the connection's own socket timeout


class DisqueClient:
    """A connection to the best reachable node of a Disque cluster, with failover."""

    def __init__(self, nodes: str | Sequence[str | NodeAddress | tuple[str, int]] = DEFAULT_SEED,
                 *, password: str | None = None, username: str | None = None,
                 security: ConnectionSecurity | None = None,
                 socket_timeout: float | None = 30.0,
                 connect_timeout: float = 5.0, use_hello: bool = True,
                 max_attempts: int | None = None, propagate_trace: bool = True) -> None:
        """``security``: TLS and the ACL user; ``password`` and ``username`` are its
        shorthand for a plain connection, and go with it only if it names neither.
        ``propagate_trace``: jobs added inside an OpenTelemetry span carry its context
        in a ``traceparent`` header (``disque.client.tracing``; nothing without
        OpenTelemetry installed)."""
        self.seeds = parse_nodes(nodes)
        if security is None:
            security = ConnectionSecurity(user=username, password=password)
        elif password is not None or username is not None:
            if security.password is not None or security.user is not None:
                raise TypeError("give the password and user in security or as keywords, "
                                "not both")
            security = dataclasses.replace(security, user=username, password=password)
        self.security = security
        self.password = security.password
        self.username = security.user  # AUTH <username> <password> (a node's ACL user)
        self._connection_class = redis.SSLConnection if security.uses_tls else redis.Connection
        self._connection_kwargs = security.connection_kwargs()
        self.socket_timeout = socket_timeout
        self.connect_timeout = connect_timeout
        self.use_hello = use_hello
        self.max_attempts = max_attempts
        self.propagate_trace = propagate_trace
        self.known: list[NodeAddress] = []       # from the last HELLO, best first
        self.node: NodeAddress | None = None     # where the connection goes
        self.node_id: str | None = None
        self.failovers = 0
        self._failed: dict[NodeAddress, float] = {}
        self._nack_delay: dict[NodeAddress, bool] = {}   # supports_nack_delay, per node
        self._untraced: set[NodeAddress] = set()  # nodes that refused HEADER (Disque 1.0)
        self._conn: redis.Connection | None = None

    # -- connection management -------------------------------------------

    def __enter__(self) -> "DisqueClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Drop the connection (the next command reconnects)."""
        if self._conn is not None:
            self._conn.disconnect()
            self._conn = None

    def _open(self, node: NodeAddress) -> redis.Connection:
        conn = self._connection_class(host=node.host, port=node.port,
                                      socket_timeout=self.socket_timeout,
                                      socket_connect_timeout=self.connect_timeout,
                                      protocol=2, driver_info=None, **self._connection_kwargs)
        conn.connect()
        return conn

    def _candidates(self) -> list[NodeAddress]:
        """Nodes to try, best first: HELLO's view, then the seeds; recent failures last."""
        now = time.monotonic()
        seen: set[NodeAddress] = set()
        ordered: list[NodeAddress] = []
        for node in [*self.known, *self.seeds]:
            if node not in seen:
                seen.add(node)
                ordered.append(node)
        fresh = [n for n in ordered if now - self._failed.get(n, -1e9) > FAILED_NODE_QUARANTINE]
        stale = [n for n in ordered if n not in fresh]
        return fresh + stale

    def connect(self) -> NodeAddress:
        """Connect to the best node: any reachable one, then the lowest HELLO priority."""
        if self._conn is not None:
            return self.node
        errors: list[str] = []
        for node in self._candidates():
            try:
                conn = self._open(node)
            except AuthenticationError:
                raise  # a wrong password is no reason to try the next node
            except (*CONNECTION_ERRORS, ResponseError) as exc:
                self._failed[node] = time.monotonic()
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
        self.known = self._hello(via)
        self.node_id = next((n.node_id for n in self.known if n == via), self.node_id)
        now = time.monotonic()
        current = next((n for n in self.known if n == via), None)
        for best in self.known:
            if best == via or now - self._failed.get(best, -1e9) <= FAILED_NODE_QUARANTINE:
                continue
            if current is not None and best.priority >= current.priority:
                break
            try:
                conn = self._open(best)
            except (*CONNECTION_ERRORS, ResponseError):
                self._failed[best] = now
                continue
            self._conn.disconnect()
            self._conn, self.node, self.node_id = conn, best, best.node_id
            return
        if current is not None:
            self.node = current

    def _hello(self, via: NodeAddress) -> list[NodeAddress]:
        reply = self._call_once("HELLO", read_timeout=_SOCKET_DEFAULT)
        my_id = text(reply[1])
        nodes: list[NodeAddress] = []
        for entry in reply[2:]:
            node_id, ip, port, priority = (text(x) for x in entry)
            if node_id == my_id:
                # Self may have no address yet (no peer contacted it), and the address
                # we dialled is the one known to work from here.
                ip, port = via.host, str(via.port)
            nodes.append(NodeAddress(ip, int(port), node_id, int(priority)))
        # Stable sort: among equal priorities, the node we are on stays first.
        nodes.sort(key=lambda n: (n.priority, n != via))
        return nodes

    def use_node(self, node: NodeAddress) -> NodeAddress:
        """Talk to ``node`` from now on, for commands only some nodes can serve (a NACK
        or WORKING belongs on the node that delivered the job). A node that failed
        recently or does not answer is not used: the client stays where it is, or
        connects as usual, and the next command fails over as always."""
        if self._conn is not None and self.node == node:
            return node
        now = time.monotonic()
        if now - self._failed.get(node, -1e9) > FAILED_NODE_QUARANTINE:
            try:
                conn = self._open(node)
            except (*CONNECTION_ERRORS, ResponseError):
                self._failed[node] = now
            else:
                self.close()
                self._conn, self.node, self.node_id = conn, node, node.node_id
                return node
        return self.connect()

    def rebalance(self) -> NodeAddress:
        """Ask HELLO again and move to a node with a lower priority than the current one,
        if one answers: a long-lived client leaves a node that started failing or
        leaving before its commands fail there."""
        self.connect()
        self._retrying(lambda: self._switch_to_best(self.node))
        return self.node

    def hello(self) -> list[NodeAddress]:
        """HELLO on the current node: every node it knows, best (lowest priority) first."""
        self.connect()
        return self._retrying(lambda: self._hello(self.node))

    def _drop(self) -> None:
        if self.node is not None:
            self._failed[self.node] = time.monotonic()
        self.close()

    def _attempts(self) -> int:
        if self.max_attempts is not None:
            return self.max_attempts
        return max(2, len(set(self.known) | set(self.seeds)) + 1)

    def _retrying(self, operation):
        last: BaseException | None = None
        for attempt in range(self._attempts()):
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

    # -- raw commands ---------------------------------------------------------

    def _call_once(self, *args: Any, read_timeout: Any = None) -> Any:
        conn = self._conn
        conn.send_command(*[encode_arg(a) for a in args], check_health=False)
        if read_timeout is _SOCKET_DEFAULT:
            return conn.read_response()
        return conn.read_response(timeout=read_timeout)

    def execute(self, *args: Any) -> Any:
        """Run one command, failing over to another node on connection errors and -LEAVING."""
        return self._retrying(lambda: self._call_once(*args, read_timeout=_SOCKET_DEFAULT))

    def _encoded_once(self, data: Sequence[Any], count: int) -> list[Any]:
        conn = self._conn
        conn.send_packed_command(list(data), check_health=False)
        replies: list[Any] = []
        for _ in range(count):
            try:
                replies.append(conn.read_response())
            except ResponseError as exc:
                replies.append(exc)
        return replies

    def pipeline_encoded(self, data: Sequence[Any], count: int) -> list[Any]:
        """Send ``count`` commands RESP-encoded already, as the pieces ``data``
        (bytes, or any buffer: Arrow's are sent without a copy) laid end to
        end, and read their replies; a refused command's is its exception,
        an array's error elements are exceptions in it. For bulk writers
        that encode their commands column-wise. Connection errors move to
        another node and send everything again; replies saying the node is
        leaving are left to the caller."""
        return self._retrying(lambda: self._encoded_once(data, count))

    def _pipeline_once(self, commands: Sequence[tuple]) -> list[Any]:
        conn = self._conn
        conn.send_packed_command(pack_commands(conn, commands), check_health=False)
        replies: list[Any] = []
        for _ in commands:
            try:
                replies.append(conn.read_response())
            except ResponseError as exc:
                replies.append(exc)
        return replies

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
                raise replies[leaving[0]]  # _retrying moves to another node
            return replies

        try:
            return self._retrying(send_todo)
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
        """Send ``count`` RESP-encoded commands whose replies are one line each
        (ADDJOB, ACKJOB, FASTACK: status, error or integer) and return the
        replies as received, ``count`` lines ending in CRLF.

        For bulk writers: checking the replies is two searches (``b"\\n-"``
        finds an error) instead of an object per reply. Connection errors
        move to another node and send everything again; replies saying the
        node is leaving are left to the caller (``pipeline`` resends them)."""
        return self._retrying(lambda: self._lines_once(data, count))

    def pipeline_chunks(self, commands: Iterable[tuple], chunk_size: int = DEFAULT_CHUNK
                        ) -> Iterator[list[Any]]:
        """``pipeline`` over ``commands`` in chunks of ``chunk_size``, yielding each chunk's
        replies."""
        chunk: list[tuple] = []
        for cmd in commands:
            chunk.append(cmd)
            if len(chunk) >= chunk_size:
                yield self.pipeline(chunk)
                chunk = []
        if chunk:
            yield self.pipeline(chunk)

    # -- job commands ----------------------------------------------------------

    def add(self, queue: str | bytes, body: bytes | str, *, timeout_ms: int = 0,
            replicate: int | None = None, delay: int | None = None, retry: int | None = None,
            ttl: int | None = None, maxlen: int | None = None, async_: bool = False,
            priority: int | None = None, maxdeliver: int | None = None,
            deadletter: str | bytes | None = None, backoff: float | None = None,
            maxretry: int | None = None, dedupid: str | bytes | None = None,
            headers: Headers | None = None) -> str:
        """ADDJOB with the job's options as keywords (None: the server's default); the job ID.

        priority, maxdeliver, deadletter, backoff, maxretry, dedupid and headers
        (name -> value, sent as HEADER words) are this server's extensions
        (docs/commands.md "Extensions"): a Disque 1.0 node refuses them with
        ``-ERR syntax error``. Inside an OpenTelemetry span the job also carries
        its context (``traceparent``; see ``propagate_trace``), except on a node
        that refused it: the job is then added without it."""
        def argv(job_headers: Headers | None) -> tuple:
            return addjob_args(
                queue, body, timeout_ms, replicate=replicate, delay=delay, retry=retry, ttl=ttl,
                maxlen=maxlen, async_=async_, priority=priority, maxdeliver=maxdeliver,
                deadletter=deadletter, backoff=backoff, maxretry=maxretry, dedupid=dedupid,
                headers=job_headers)

        traced = self._traced(headers)
        try:
            return text(self.execute(*argv(traced)))
        except ResponseError as exc:
            if traced is headers or not is_syntax_error(exc):
                raise
            self._untraced.add(self.node)
            return text(self.execute(*argv(headers)))

    def _traced(self, headers: Headers | None) -> Headers | None:
        """``headers`` with the current span's context, when there is one to carry
        (``headers`` itself when not)."""
        if not self.propagate_trace or self.node in self._untraced:
            return headers
        return with_headers(headers, context_headers())

    def add_job(self, queue: str | bytes, body: bytes | str, timeout_ms: int = 0,
                **options: Any) -> str:
        """``add`` with the timeout as third positional argument (the first API)."""
        return self.add(queue, body, timeout_ms=timeout_ms, **options)

    def add_jobs(self, jobs: Iterable[tuple[str | bytes, bytes | str]], timeout_ms: int = 0,
                 chunk_size: int = DEFAULT_CHUNK, **options: Any) -> list[str | ResponseError]:
        """Pipelined ADDJOB for (queue, body) pairs: job IDs, or the error of each failed
        job. The trace context goes as in ``add``."""
        jobs = list(jobs)
        headers = options.get("headers")
        traced = self._traced(headers)
        out: list[str | ResponseError] = []
        tail = addjob_options(**{**options, "headers": traced})
        commands = (("ADDJOB", q, b, timeout_ms) + tail for q, b in jobs)
        for replies in self.pipeline_chunks(commands, chunk_size):
            out.extend(r if isinstance(r, ResponseError) else text(r) for r in replies)
        refused = [i for i, r in enumerate(out) if isinstance(r, ResponseError)
                   and is_syntax_error(r)] if traced is not headers else []
        if refused:  # a node without HEADER: those jobs again, without the context
            self._untraced.add(self.node)
            tail = addjob_options(**options)
            again = [("ADDJOB", *jobs[i], timeout_ms) + tail for i in refused]
            for i, reply in zip(refused, self.pipeline(again)):
                out[i] = reply if isinstance(reply, ResponseError) else text(reply)
        return out

    def add_many(self, queue: str | bytes, bodies: Iterable[bytes | str], *, timeout_ms: int = 0,
                 dedupids: Iterable[str | bytes] | None = None,
                 chunk_size: int = DEFAULT_BULK_CHUNK, **options: Any
                 ) -> list[str | ResponseError]:
        """ADDJOBS: one job per body in ``queue``, with the options of ``add``
        (keywords) shared; ``dedupids`` gives each job its own DEDUPID
        (``DEDUPIDS``, one per body). Returns each job's ID, or its error,
        in the order of ``bodies``.

        ``chunk_size`` bodies go in one ADDJOBS (at most 10,000), a few
        ADDJOBS per round trip. Jobs refused because the node is leaving
        go again to another node. A synchronous ADDJOBS (the default)
        answers once every job of it has its replicas: the socket timeout
        must outlast ``timeout_ms``. ADDJOBS is this server's extension
        (docs/commands.md "Bulk add")."""
        bodies = [encode_arg(b) for b in bodies]
        tokens = None if dedupids is None else [encode_arg(t) for t in dedupids]
        if tokens is not None and len(tokens) != len(bodies):
            raise ValueError("add_many: %d dedupids for %d bodies" % (len(tokens), len(bodies)))
        if not 1 <= chunk_size <= 10_000:
            raise ValueError("add_many: chunk_size must be 1 to 10000, not %d" % chunk_size)
        options["headers"] = self._traced(options.get("headers"))
        head = ("ADDJOBS", encode_arg(queue), timeout_ms) + addjob_options(**options)
        replies: list[Any] = [None] * len(bodies)
        todo = list(range(len(bodies)))
        for attempt in range(self._attempts()):
            if attempt:
                self.failovers += 1
                self._drop()  # the node is leaving: the next command goes elsewhere
            chunks = [todo[i:i + chunk_size] for i in range(0, len(todo), chunk_size)]
            commands = [head + (("BODIES", *[bodies[j] for j in chunk]) if tokens is None else
                                ("DEDUPIDS", *[w for j in chunk for w in (tokens[j], bodies[j])]))
                        for chunk in chunks]
            leaving = []
            position = 0
            for answers in self.pipeline_chunks(commands, BULK_PIPELINE):
                for answer in answers:
                    chunk = chunks[position]
                    position += 1
                    got = [answer] * len(chunk) if isinstance(answer, ResponseError) else answer
                    for j, reply in zip(chunk, got):
                        replies[j] = reply
                        if isinstance(reply, ResponseError) and is_leaving(reply):
                            leaving.append(j)
            todo = leaving
            if not todo:
                break
        return [r if isinstance(r, ResponseError) else text(r) for r in replies]

    def get_jobs(self, *queues: str | bytes, count: int = 1, timeout_ms: int | None = None,
                 nohang: bool = False, withcounters: bool = False,
                 withheaders: bool = False) -> list[Job]:
        """GETJOB; an empty list when nothing came (NOHANG or timeout). With
        ``withheaders`` each Job has its ``headers`` (a dict, empty for a job
        without any): this server's extension, refused by a Disque 1.0 node."""
        args: list[Any] = ["GETJOB"]
        if nohang:
            args.append("NOHANG")
        if timeout_ms is not None:
            args += ["TIMEOUT", timeout_ms]
        if count != 1:
            args += ["COUNT", count]
        if withcounters:
            args.append("WITHCOUNTERS")
        if withheaders:
            args.append("WITHHEADERS")
        args += ["FROM", *queues]
        if nohang:
            read_timeout: Any = _SOCKET_DEFAULT
        elif timeout_ms:
            # A blocking GETJOB may legitimately wait longer than the socket timeout.
            read_timeout = timeout_ms / 1000 + (self.socket_timeout or 0)
        else:
            read_timeout = None  # blocks until a job arrives
        reply = self._retrying(lambda: self._call_once(*args, read_timeout=read_timeout))
        return [job_from_entry(entry) for entry in reply or ()]

    def get_job_entries(self, *queues: str | bytes, want: int, count: int = DEFAULT_GETJOB_COUNT
                        ) -> list[list]:
        """Up to ``want`` jobs in one round trip, as raw GETJOB WITHCOUNTERS entries.

        ``ceil(want / count)`` ``GETJOB NOHANG COUNT count WITHCOUNTERS`` go out in one
        pipeline; each entry stays as parsed, ``[queue, id, body, b"nacks", n,
        b"additional-deliveries", m]`` with bytes and ints, for callers that build
        columns from many jobs at once instead of a ``Job`` each."""
        if want <= 0:
            return []
        command = ("GETJOB", "NOHANG", "COUNT", count, "WITHCOUNTERS", "FROM", *queues)
        last = ("GETJOB", "NOHANG", "COUNT", want % count or count, "WITHCOUNTERS", "FROM",
                *queues)
        commands = [command] * (-(-want // count) - 1) + [last]
        entries: list[list] = []
        for reply in self.pipeline(commands):
            if isinstance(reply, ResponseError):
                raise reply
            if reply:
                entries.extend(reply)
        return entries

    def ack_jobs(self, ids: Iterable[str], chunk_size: int = 1000) -> int:
        """ACKJOB in chunks of ``chunk_size`` IDs per command, pipelined; the number acked."""
        return self._multi_id("ACKJOB", ids, chunk_size)

    def fast_ack(self, ids: Iterable[str], chunk_size: int = 1000) -> int:
        """FASTACK in chunks; the number of jobs deleted on the current node."""
        return self._multi_id("FASTACK", ids, chunk_size)

    def nack(self, ids: Iterable[str], chunk_size: int = 1000, delay: int = 0) -> int:
        """NACK in chunks; the number of jobs put back in their queue.

        ``delay`` > 0 asks for ``NACK ... DELAY <seconds>`` (requeue that much later) where
        the node supports it (``supports_nack_delay``); a Disque 1.0 node gets a plain NACK."""
        ids = list(ids)
        if delay > 0 and self.supports_nack_delay():
            try:
                return self._multi_id(NACK, ids, chunk_size, (DELAY, b"%d" % delay))
            except ResponseError as exc:
                if not is_badid(exc):
                    raise
                # A failover landed on a node without the extension: it read DELAY as an ID.
                self._nack_delay[self.node] = False
        return self._multi_id(NACK, ids, chunk_size)

    def supports_nack_delay(self) -> bool:
        """Whether the current node takes ``NACK ... DELAY``, probed once per node.

        The probe NACKs an ID no node ever made, with ``DELAY 0`` (a plain NACK):
        this server answers ``:0``; Disque 1.0 checks every word as a job ID and
        answers ``-BADID``."""
        self.connect()
        known = self._nack_delay.get(self.node)
        if known is not None:
            return known
        try:
            self.execute(NACK, NACK_DELAY_PROBE_ID, DELAY, 0)
            known = True
        except ResponseError as exc:
            if not is_badid(exc):
                raise
            known = False
        self._nack_delay[self.node] = known
        return known

    def del_jobs(self, ids: Iterable[str], chunk_size: int = 1000) -> int:
        """DELJOB (this node only) in chunks; the number deleted."""
        return self._multi_id("DELJOB", ids, chunk_size)

    def _multi_id(self, command: str, ids: Iterable[str], chunk_size: int,
                  tail: tuple[bytes, ...] = ()) -> int:
        ids = list(ids)
        commands = [ids_command(command, [*ids[i:i + chunk_size], *tail])
                    for i in range(0, len(ids), chunk_size)]
        total = 0
        for replies in self.pipeline_chunks(commands, 16):
            for reply in replies:
                if isinstance(reply, ResponseError):
                    raise reply
                total += int(reply)
        return total

    def working(self, job_id: str) -> int:
        """WORKING: postpone the next delivery; returns the job's retry in seconds."""
        return int(self.execute("WORKING", job_id))

    def working_many(self, ids: Sequence[str], chunk_size: int = DEFAULT_CHUNK
                     ) -> dict[str, int | ResponseError]:
        """Pipelined WORKING: each job's retry in seconds, or its error (-NOJOB, -TOOLATE)."""
        out: dict[str, int | ResponseError] = {}
        position = 0
        for replies in self.pipeline_chunks((("WORKING", i) for i in ids), chunk_size):
            for reply in replies:
                out[ids[position]] = reply if isinstance(reply, ResponseError) else int(reply)
                position += 1
        return out

    def show(self, job_id: str) -> dict[str, Any] | None:
        """SHOW as a dict, or None for an unknown job."""
        reply = self.execute("SHOW", job_id)
        return None if reply is None else job_info(reply)

    # -- queue commands ----------------------------------------------------------

    def qlen(self, queue: str | bytes) -> int:
        """QLEN on the current node."""
        return int(self.execute("QLEN", queue))

    def qpeek(self, queue: str | bytes, count: int) -> list[Job]:
        """QPEEK: up to ``count`` jobs from the head (negative: from the tail)."""
        return [job_from_entry(e) for e in self.execute("QPEEK", queue, count) or ()]

    def qscan(self, count: int = 100) -> Iterator[str]:
        """Every queue name on the current node (QSCAN; a name may repeat)."""
        cursor = b"0"
        while True:
            cursor, names = self.execute("QSCAN", cursor, "COUNT", count)
            yield from (text(n) for n in names)
            if cursor in (b"0", "0", 0):
                return

    def jscan(self, queue: str | bytes | None = None, states: Sequence[str] = (),
              count: int = 1000) -> Iterator[dict[str, Any]]:
        """Every job on the current node (JSCAN ... REPLY all), as SHOW-like dicts."""
        args: list[Any] = ["COUNT", count]
        if queue is not None:
            args += ["QUEUE", queue]
        for state in states:
            args += ["STATE", state]
        args += ["REPLY", "all"]
        cursor = b"0"
        while True:
            cursor, jobs = self.execute("JSCAN", cursor, *args)
            yield from (job_info(j) for j in jobs)
            if cursor in (b"0", "0", 0):
                return

