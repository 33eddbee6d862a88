"""``DisqueClient``: the job and queue commands, sent through a ``FailoverConnection``.

Where a command goes (node choice by HELLO, failover on connection errors
and -LEAVING) is ``failover``'s; this module says what is sent: ADDJOB's
options and trace context, chunked pipelining of bulk commands, and the
replies as Python values (see the package docstring).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Iterator, Sequence

from disque.client.addresses import DEFAULT_SEED, NodeAddress, parse_nodes
from disque.client.arguments import (Headers, addjob_args, addjob_options, encode_arg,
                                     ids_command, with_headers)
from disque.client.errors import ResponseError, is_badid, is_leaving, is_syntax_error
from disque.client.failover import SOCKET_DEFAULT, FailoverConnection
from disque.client.replies import Job, job_from_entry, job_info, text
from disque.client.security import ConnectionSecurity
from disque.client.tracing import context_headers

DEFAULT_CHUNK = 500
# add_many: jobs per ADDJOBS (the node takes at most 10,000), and ADDJOBS per round trip.
DEFAULT_BULK_CHUNK = 1000
BULK_PIPELINE = 4
# Jobs per GETJOB when get_job_entries pipelines several.
DEFAULT_GETJOB_COUNT = 1000
NACK = "NACK"
DELAY = b"DELAY"
REASON = b"REASON"
# The longest NACK REASON a node takes, in bytes (docs/commands.md NACK).
NACK_REASON_LIMIT = 1024
# A well-formed job ID no node makes (node prefix and random part all zeros).
NACK_PROBE_ID = "D-00000000-000000000000000000000000-0000"
# What the probe of each NACK option sends after the ID: a plain NACK, in effect.
_NACK_PROBES = {DELAY: b"0", REASON: b"probe"}


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
        self.connection = FailoverConnection(
            parse_nodes(nodes), security, socket_timeout=socket_timeout,
            connect_timeout=connect_timeout, use_hello=use_hello, max_attempts=max_attempts)
        self.propagate_trace = propagate_trace
        # supports_nack_delay and supports_nack_reason, per node and option word.
        self._nack_options: dict[tuple[NodeAddress | None, bytes], bool] = {}
        self._untraced: set[NodeAddress] = set()  # nodes that refused HEADER (Disque 1.0)

    # -- the connection ----------------------------------------------------

    @property
    def seeds(self) -> list[NodeAddress]:
        """The nodes given to the constructor."""
        return self.connection.nodes.seeds

    @property
    def known(self) -> list[NodeAddress]:
        """The nodes the last HELLO reported, best first."""
        return self.connection.nodes.known

    @property
    def node(self) -> NodeAddress | None:
        """Where the connection goes (None before the first command)."""
        return self.connection.node

    @property
    def node_id(self) -> str | None:
        """The ID of the node the connection goes to, once HELLO told it."""
        return self.connection.node_id

    @property
    def failovers(self) -> int:
        """How many times an operation moved to another node."""
        return self.connection.failovers

    def __enter__(self) -> "DisqueClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Drop the connection (the next command reconnects)."""
        self.connection.close()

    def connect(self) -> NodeAddress:
        """Connect to the best node: any reachable one, then the lowest HELLO priority."""
        return self.connection.connect()

    def use_node(self, node: NodeAddress) -> NodeAddress:
        """Talk to ``node`` from now on, for commands only some nodes can serve (a NACK
        or WORKING belongs on the node that delivered the job). A node that failed
        recently or does not answer is not used: the client stays where it is, or
        connects as usual, and the next command fails over as always."""
        return self.connection.use_node(node)

    def rebalance(self) -> NodeAddress:
        """Ask HELLO again and move to a node with a lower priority than the current one,
        if one answers: a long-lived client leaves a node that started failing or
        leaving before its commands fail there."""
        return self.connection.rebalance()

    def hello(self) -> list[NodeAddress]:
        """HELLO on the current node: every node it knows, best (lowest priority) first."""
        return self.connection.hello()

    # -- raw commands ---------------------------------------------------------

    def execute(self, *args: Any) -> Any:
        """Run one command, failing over to another node on connection errors and -LEAVING."""
        return self.connection.execute(*args)

    def pipeline_encoded(self, data: Sequence[Any], count: int) -> list[Any]:
        """Send ``count`` commands RESP-encoded already, as the pieces ``data``
        (bytes, or any buffer: Arrow's are sent without a copy) laid end to
        end, and read their replies; a refused command's is its exception,
        an array's error elements are exceptions in it. For bulk writers
        that encode their commands column-wise. Connection errors move to
        another node and send everything again; replies saying the node is
        leaving are left to the caller."""
        return self.connection.pipeline_encoded(data, count)

    def pipeline(self, commands: Sequence[tuple]) -> list[Any]:
        """Send ``commands`` in one write and read every reply; errors come back as exceptions.

        On a connection error the whole chunk is sent again to another node; commands
        answered with -LEAVING are sent again to another node."""
        return self.connection.pipeline(commands)

    def pipeline_lines(self, data: bytes | memoryview, count: int) -> bytes:
        """Send ``count`` RESP-encoded commands whose replies are one line each
        (ADDJOB, ACKJOB, FASTACK: status, error or integer) and return the
        replies as received, ``count`` lines ending in CRLF.

        For bulk writers: checking the replies is two searches (``b"\\n-"``
        finds an error) instead of an object per reply. Connection errors
        move to another node and send everything again; replies saying the
        node is leaving are left to the caller (``pipeline`` resends them)."""
        return self.connection.pipeline_lines(data, count)

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
        for attempt in range(self.connection.attempts()):
            if attempt:
                self.connection.fail_over()  # the node is leaving: the next command goes elsewhere
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
            read_timeout: Any = SOCKET_DEFAULT
        elif timeout_ms:
            # A blocking GETJOB may legitimately wait longer than the socket timeout.
            read_timeout = timeout_ms / 1000 + (self.connection.socket_timeout or 0)
        else:
            read_timeout = None  # blocks until a job arrives
        reply = self.connection.execute(*args, read_timeout=read_timeout)
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

    def nack(self, ids: Iterable[str], chunk_size: int = 1000, delay: int = 0,
             reason: str | bytes | None = None) -> int:
        """NACK in chunks; the number of jobs put back in their queue.

        ``delay`` > 0 asks for ``NACK ... DELAY <seconds>`` (requeue that much later) and
        ``reason`` (1 to ``NACK_REASON_LIMIT`` bytes, why the jobs failed: SHOW's
        ``nack-reason``) for ``NACK ... REASON <text>``, each where the node supports it
        (``supports_nack_delay``, ``supports_nack_reason``); a Disque 1.0 node gets a
        plain NACK."""
        ids = list(ids)
        tail: tuple[bytes, ...] = ()
        if delay > 0 and self.supports_nack_delay():
            tail = (DELAY, b"%d" % delay)
        if reason is not None and self.supports_nack_reason():
            tail += (REASON, encode_arg(reason))
        if tail:
            try:
                return self._multi_id(NACK, ids, chunk_size, tail)
            except ResponseError as exc:
                if not is_badid(exc):
                    raise
                # A failover landed on a node without the extensions: it read them as IDs.
                for word in _NACK_PROBES:
                    self._nack_options[(self.node, word)] = False
        return self._multi_id(NACK, ids, chunk_size)

    def supports_nack_delay(self) -> bool:
        """Whether the current node takes ``NACK ... DELAY`` (probed once per node)."""
        return self._supports_nack_option(DELAY)

    def supports_nack_reason(self) -> bool:
        """Whether the current node takes ``NACK ... REASON`` (probed once per node)."""
        return self._supports_nack_option(REASON)

    def _supports_nack_option(self, word: bytes) -> bool:
        """Whether the current node takes NACK's option ``word``, probed once per node.

        The probe NACKs an ID no node ever made, with the option (``DELAY 0``,
        ``REASON probe``: a plain NACK): this server answers ``:0``; Disque 1.0
        checks every word as a job ID and answers ``-BADID``."""
        self.connect()
        key = (self.node, word)
        known = self._nack_options.get(key)
        if known is not None:
            return known
        try:
            self.execute(NACK, NACK_PROBE_ID, word, _NACK_PROBES[word])
            known = True
        except ResponseError as exc:
            if not is_badid(exc):
                raise
            known = False
        self._nack_options[key] = known
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

