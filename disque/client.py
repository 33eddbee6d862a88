"""A Disque client for several nodes, built on redis-py connections.

The client talks to one node at a time. It picks that node with HELLO
(lowest priority first, spec: commands.md §3 HELLO), and moves to another
node when the current one stops answering or replies ``-LEAVING``. Bulk
operations (ADDJOB, ACKJOB, WORKING) are pipelined in chunks: one write and
one read burst per chunk instead of one round trip per job.

Retrying after a connection error re-sends commands whose effect is unknown,
so a job can be added twice: producers get at-least-once, like the queue.

Not thread-safe: give each thread its own client.

Needs the ``client`` extra (redis-py), which the server itself does without.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, NamedTuple, Sequence

try:
    import redis
except ImportError as exc:  # the server does not need redis-py; only this client does
    raise ImportError("disque.client needs redis-py: pip install 'disque-server[client]'"
                      ) from exc

try:  # redis-py packs with hiredis too; calling it directly skips per-argument checks
    from hiredis import pack_command as _hiredis_pack
except ImportError:  # pragma: no cover - hiredis is a dependency
    _hiredis_pack = None
from redis.exceptions import AuthenticationError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

DEFAULT_PORT = 7711
DEFAULT_SEED = "127.0.0.1:7711"
DEFAULT_CHUNK = 500
LEAVING_PREFIX = "LEAVING"
# ADDJOB on a leaving node that cannot replicate elsewhere (spec: commands.md ADDJOB step 6).
NOREPL_LEAVING_TEXT = "I'm leaving the cluster"
# HELLO priority of a failing or leaving node (spec: commands.md §3 HELLO).
PRIORITY_FAILING = 10
# How long a node that failed is skipped when choosing where to go next.
FAILED_NODE_QUARANTINE = 5.0

_CONNECTION_ERRORS = (RedisConnectionError, RedisTimeoutError, OSError)
_SOCKET_DEFAULT = object()  # read with the connection's own socket timeout


class DisqueError(Exception):
    """A command failed on every node the client could reach."""


class NoNodeAvailable(DisqueError):
    """No configured or discovered node accepted a connection."""


class Job(NamedTuple):
    """A job as GETJOB / QPEEK return it; counters are None without WITHCOUNTERS."""

    queue: str
    id: str
    body: bytes
    nacks: int | None = None
    additional_deliveries: int | None = None


@dataclass(frozen=True)
class NodeAddress:
    """Where a node listens, and what HELLO told us about it."""

    host: str
    port: int
    node_id: str | None = field(default=None, compare=False)
    priority: int = field(default=1, compare=False)

    @classmethod
    def parse(cls, text: str) -> "NodeAddress":
        """``host:port``, ``host`` (port 7711), or ``[v6addr]:port``."""
        text = text.strip()
        if not text:
            raise ValueError("empty node address")
        if text.startswith("["):
            host, _, rest = text[1:].partition("]")
            port = rest.lstrip(":") or DEFAULT_PORT
        elif text.count(":") == 1:
            host, port = text.split(":")
        else:
            host, port = text, DEFAULT_PORT
        return cls(host, int(port))

    def __str__(self) -> str:
        return "%s:%d" % (self.host, self.port)


def parse_nodes(nodes: str | Sequence[str | NodeAddress | tuple[str, int]]) -> list[NodeAddress]:
    """Seed nodes from ``"h1:p1,h2:p2"``, a list of such strings, or (host, port) pairs."""
    if isinstance(nodes, str):
        nodes = [part for part in nodes.split(",") if part.strip()]
    out: list[NodeAddress] = []
    for node in nodes:
        if isinstance(node, NodeAddress):
            out.append(node)
        elif isinstance(node, tuple):
            out.append(NodeAddress(node[0], int(node[1])))
        else:
            out.append(NodeAddress.parse(node))
    if not out:
        raise ValueError("no Disque node given")
    return out


def _arg(value: Any) -> Any:
    # Queue names are binary-safe: strings we decoded with surrogateescape go back unchanged.
    if isinstance(value, str):
        return value.encode("utf-8", "surrogateescape")
    return value


def _text(value: bytes | str) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    return value


def _pack(conn: redis.Connection, commands: Sequence[tuple]) -> list[bytes]:
    """The RESP encoding of ``commands``, ready for send_packed_command."""
    if _hiredis_pack is not None:
        try:
            return [b"".join([_hiredis_pack(cmd) for cmd in commands])]
        except UnicodeEncodeError:
            pass  # a surrogate-escaped queue name: encode it ourselves below
    return conn.pack_commands([tuple(_arg(a) for a in cmd) for cmd in commands])


def _is_leaving(error: BaseException) -> bool:
    text = str(error)
    return text.startswith(LEAVING_PREFIX) or NOREPL_LEAVING_TEXT in text


def _job_from_entry(entry: list) -> Job:
    if len(entry) >= 7:
        return Job(_text(entry[0]), _text(entry[1]), entry[2], int(entry[4]), int(entry[6]))
    return Job(_text(entry[0]), _text(entry[1]), entry[2])


def job_info(flat: list) -> dict[str, Any]:
    """SHOW / JSCAN REPLY all: the 30-element key/value array as a dict with str keys."""
    info: dict[str, Any] = {}
    for i in range(0, len(flat) - 1, 2):
        key = _text(flat[i])
        value = flat[i + 1]
        if key in ("id", "queue", "state") and value is not None:
            value = _text(value)
        elif key in ("nodes-delivered", "nodes-confirmed"):
            value = [_text(v) for v in value]
        info[key] = value
    return info


def addjob_args(queue: str | bytes, body: bytes | str, timeout_ms: int = 0, *,
                replicate: int | None = None, delay: int | None = None,
                retry: int | None = None, ttl: int | None = None,
                maxlen: int | None = None, async_: bool = False) -> tuple:
    """The argv of one ADDJOB (spec: commands.md ADDJOB)."""
    return ("ADDJOB", _arg(queue), _arg(body), timeout_ms) + addjob_options(
        replicate=replicate, delay=delay, retry=retry, ttl=ttl, maxlen=maxlen, async_=async_)


def addjob_options(*, replicate: int | None = None, delay: int | None = None,
                   retry: int | None = None, ttl: int | None = None,
                   maxlen: int | None = None, async_: bool = False) -> tuple:
    """The option words that follow ``ADDJOB queue body timeout``."""
    opts: list[Any] = []
    for word, value in (("REPLICATE", replicate), ("DELAY", delay), ("RETRY", retry),
                        ("TTL", ttl), ("MAXLEN", maxlen)):
        if value is not None:
            opts += [word, int(value)]
    if async_:
        opts.append("ASYNC")
    return tuple(opts)


class DisqueClient:
    """A connection to the best reachable node of a Disque cluster, with failover."""

    def __init__(self, nodes: str | Sequence[str | NodeAddress | tuple[str, int]] = DEFAULT_SEED,
                 *, password: str | None = None, socket_timeout: float | None = 30.0,
                 connect_timeout: float = 5.0, use_hello: bool = True,
                 max_attempts: int | None = None) -> None:
        self.seeds = parse_nodes(nodes)
        self.password = password
        self.socket_timeout = socket_timeout
        self.connect_timeout = connect_timeout
        self.use_hello = use_hello
        self.max_attempts = max_attempts
        self.known: list[NodeAddress] = []       # from the last HELLO, best first
        self.node: NodeAddress | None = None     # where the connection goes
        self.node_id: str | None = None
        self.failovers = 0
        self._failed: dict[NodeAddress, float] = {}
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
        conn = redis.Connection(host=node.host, port=node.port, password=self.password,
                                socket_timeout=self.socket_timeout,
                                socket_connect_timeout=self.connect_timeout,
                                protocol=2, driver_info=None)
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
            except (*_CONNECTION_ERRORS, ResponseError) as exc:
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
                except _CONNECTION_ERRORS as exc:
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
            except (*_CONNECTION_ERRORS, ResponseError):
                self._failed[best] = now
                continue
            self._conn.disconnect()
            self._conn, self.node, self.node_id = conn, best, best.node_id
            return
        if current is not None:
            self.node = current

    def _hello(self, via: NodeAddress) -> list[NodeAddress]:
        reply = self._call_once("HELLO", read_timeout=_SOCKET_DEFAULT)
        my_id = _text(reply[1])
        nodes: list[NodeAddress] = []
        for entry in reply[2:]:
            node_id, ip, port, priority = (_text(x) for x in entry)
            if node_id == my_id:
                # Self may have no address yet (no peer contacted it), and the address
                # we dialled is the one known to work from here.
                ip, port = via.host, str(via.port)
            nodes.append(NodeAddress(ip, int(port), node_id, int(priority)))
        # Stable sort: among equal priorities, the node we are on stays first.
        nodes.sort(key=lambda n: (n.priority, n != via))
        return nodes

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
            except _CONNECTION_ERRORS as exc:
                last = exc
                self._drop()
            except ResponseError as exc:
                if not _is_leaving(exc):
                    raise
                last = exc
                self._drop()
        raise DisqueError("command failed on every node tried: %s" % last) from last

    # -- raw commands ---------------------------------------------------------

    def _call_once(self, *args: Any, read_timeout: Any = None) -> Any:
        conn = self._conn
        conn.send_command(*[_arg(a) for a in args], check_health=False)
        if read_timeout is _SOCKET_DEFAULT:
            return conn.read_response()
        return conn.read_response(timeout=read_timeout)

    def execute(self, *args: Any) -> Any:
        """Run one command, failing over to another node on connection errors and -LEAVING."""
        return self._retrying(lambda: self._call_once(*args, read_timeout=_SOCKET_DEFAULT))

    def _pipeline_once(self, commands: Sequence[tuple]) -> list[Any]:
        conn = self._conn
        conn.send_packed_command(_pack(conn, commands), check_health=False)
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
                if isinstance(reply, ResponseError) and _is_leaving(reply):
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

    def add_job(self, queue: str | bytes, body: bytes | str, timeout_ms: int = 0,
                **options: Any) -> str:
        """ADDJOB; options are replicate, delay, retry, ttl, maxlen, async_. Returns the job ID."""
        return _text(self.execute(*addjob_args(queue, body, timeout_ms, **options)))

    def add_jobs(self, jobs: Iterable[tuple[str | bytes, bytes | str]], timeout_ms: int = 0,
                 chunk_size: int = DEFAULT_CHUNK, **options: Any) -> list[str | ResponseError]:
        """Pipelined ADDJOB for (queue, body) pairs: job IDs, or the error of each failed job."""
        tail = addjob_options(**options)
        out: list[str | ResponseError] = []
        commands = (("ADDJOB", q, b, timeout_ms) + tail for q, b in jobs)
        for replies in self.pipeline_chunks(commands, chunk_size):
            out.extend(r if isinstance(r, ResponseError) else _text(r) for r in replies)
        return out

    def get_jobs(self, *queues: str | bytes, count: int = 1, timeout_ms: int | None = None,
                 nohang: bool = False, withcounters: bool = False) -> list[Job]:
        """GETJOB; an empty list when nothing came (NOHANG or timeout)."""
        args: list[Any] = ["GETJOB"]
        if nohang:
            args.append("NOHANG")
        if timeout_ms is not None:
            args += ["TIMEOUT", timeout_ms]
        if count != 1:
            args += ["COUNT", count]
        if withcounters:
            args.append("WITHCOUNTERS")
        args += ["FROM", *queues]
        if nohang:
            read_timeout: Any = _SOCKET_DEFAULT
        elif timeout_ms:
            # A blocking GETJOB may legitimately wait longer than the socket timeout.
            read_timeout = timeout_ms / 1000 + (self.socket_timeout or 0)
        else:
            read_timeout = None  # blocks until a job arrives
        reply = self._retrying(lambda: self._call_once(*args, read_timeout=read_timeout))
        return [_job_from_entry(entry) for entry in reply or ()]

    def ack_jobs(self, ids: Iterable[str], chunk_size: int = 1000) -> int:
        """ACKJOB in chunks of ``chunk_size`` IDs per command, pipelined; the number acked."""
        return self._multi_id("ACKJOB", ids, chunk_size)

    def fast_ack(self, ids: Iterable[str], chunk_size: int = 1000) -> int:
        """FASTACK in chunks; the number of jobs deleted on the current node."""
        return self._multi_id("FASTACK", ids, chunk_size)

    def nack(self, ids: Iterable[str], chunk_size: int = 1000) -> int:
        """NACK in chunks; the number of jobs put back in their queue."""
        return self._multi_id("NACK", ids, chunk_size)

    def del_jobs(self, ids: Iterable[str], chunk_size: int = 1000) -> int:
        """DELJOB (this node only) in chunks; the number deleted."""
        return self._multi_id("DELJOB", ids, chunk_size)

    def _multi_id(self, command: str, ids: Iterable[str], chunk_size: int) -> int:
        ids = list(ids)
        commands = [(command, *ids[i:i + chunk_size]) for i in range(0, len(ids), chunk_size)]
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
        return [_job_from_entry(e) for e in self.execute("QPEEK", queue, count) or ()]

    def qscan(self, count: int = 100) -> Iterator[str]:
        """Every queue name on the current node (QSCAN; a name may repeat)."""
        cursor = b"0"
        while True:
            cursor, names = self.execute("QSCAN", cursor, "COUNT", count)
            yield from (_text(n) for n in names)
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

