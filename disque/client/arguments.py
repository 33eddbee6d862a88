"""Command arguments on their way out: argument encoding, pipelined packing, ADDJOB's argv."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import redis

try:  # redis-py packs with hiredis too; calling it directly skips per-argument checks
    from hiredis import pack_command as _hiredis_pack
except ImportError:  # pragma: no cover - hiredis is a dependency
    _hiredis_pack = None


def encode_arg(value: Any) -> Any:
    """One command argument, with str encoded so that binary-safe names round-trip."""
    # Queue names are binary-safe: strings we decoded with surrogateescape go back unchanged.
    if isinstance(value, str):
        return value.encode("utf-8", "surrogateescape")
    return value


def pack_commands(conn: redis.Connection, commands: Sequence[tuple | bytes]) -> list[bytes]:
    """The RESP encoding of ``commands``, ready for send_packed_command; a command given as
    ``bytes`` is RESP already (``AddJobEncoder``) and goes as it is."""
    if all(isinstance(cmd, bytes) for cmd in commands):
        return [b"".join(commands)]
    if _hiredis_pack is not None:
        try:
            return [b"".join([cmd if isinstance(cmd, bytes) else _hiredis_pack(cmd)
                              for cmd in commands])]
        except UnicodeEncodeError:
            pass  # a surrogate-escaped queue name: encode it ourselves below
    return [b"".join([cmd if isinstance(cmd, bytes) else
                      b"".join(conn.pack_command(*[encode_arg(a) for a in cmd]))
                      for cmd in commands])]


# ADDJOB's integer options, in the order they are written (spec: commands.md ADDJOB;
# PRIORITY and MAXDELIVER are this server's extensions, docs/commands.md "Extensions").
_INT_OPTIONS = (("replicate", "REPLICATE"), ("delay", "DELAY"), ("retry", "RETRY"),
                ("ttl", "TTL"), ("maxlen", "MAXLEN"), ("priority", "PRIORITY"),
                ("maxdeliver", "MAXDELIVER"), ("maxretry", "MAXRETRY"))
_ASYNC = "ASYNC"
_DEADLETTER = "DEADLETTER"
_BACKOFF = "BACKOFF"
_DEDUPID = "DEDUPID"
_HEADER = "HEADER"

# A job's headers as the client methods take them: name -> value.
Headers = Mapping[str | bytes, str | bytes]


def addjob_args(queue: str | bytes, body: bytes | str, timeout_ms: int = 0, **options: Any
                ) -> tuple:
    """The argv of one ADDJOB (spec: commands.md ADDJOB); ``options`` as ``addjob_options``."""
    return ("ADDJOB", encode_arg(queue), encode_arg(body), timeout_ms) + addjob_options(**options)


def addjob_options(*, replicate: int | None = None, delay: int | None = None,
                   retry: int | None = None, ttl: int | None = None,
                   maxlen: int | None = None, async_: bool = False,
                   priority: int | None = None, maxdeliver: int | None = None,
                   deadletter: str | bytes | None = None, backoff: float | None = None,
                   maxretry: int | None = None, dedupid: str | bytes | None = None,
                   headers: Headers | None = None) -> tuple:
    """The option words that follow ``ADDJOB queue body timeout``; an option left at None
    is not sent, so a job without extensions is a Disque 1.0 ADDJOB. ``headers``
    become ``HEADER name value`` words, in the mapping's order."""
    given = {"replicate": replicate, "delay": delay, "retry": retry, "ttl": ttl,
             "maxlen": maxlen, "priority": priority, "maxdeliver": maxdeliver,
             "maxretry": maxretry}
    opts: list[Any] = []
    for name, word in _INT_OPTIONS:
        value = given[name]
        if value is not None:
            opts += [word, int(value)]
    if deadletter is not None:
        opts += [_DEADLETTER, encode_arg(deadletter)]
    if backoff is not None:
        opts += [_BACKOFF, repr(float(backoff))]
    if dedupid is not None:
        opts += [_DEDUPID, encode_arg(dedupid)]
    if headers:
        for name, value in headers.items():
            opts += [_HEADER, encode_arg(name), encode_arg(value)]
    if async_:
        opts.append(_ASYNC)
    return tuple(opts)


def ids_command(command: str, ids: Sequence[str | bytes]) -> bytes:
    """``command id id ...`` RESP-encoded (ACKJOB, FASTACK, NACK, DELJOB). Job IDs all have
    one length, so the IDs are joined in one call instead of packed one by one."""
    words = [i if isinstance(i, bytes) else encode_arg(i) for i in ids]
    head = b"*%d\r\n%s" % (len(words) + 1, _bulk(command))
    lengths = set(map(len, words))
    if len(lengths) == 1:
        separator = b"\r\n$%d\r\n" % lengths.pop()
        return b"".join((head, separator[2:], separator.join(words), b"\r\n"))
    return head + b"".join([b"$%d\r\n%s\r\n" % (len(w), w) for w in words])


def _bulk(word: Any) -> bytes:
    """One RESP bulk string."""
    data = encode_arg(word) if isinstance(word, str) else (
        word if isinstance(word, bytes) else str(word).encode())
    return b"$%d\r\n%s\r\n" % (len(data), data)


class AddJobEncoder:
    """RESP-encoded ADDJOBs of many bodies sharing the timeout and options.

    Everything around the body is encoded once (per queue), so a job costs one
    bytes formatting: a fifth of packing the argv word by word. A command is
    ``prefix(queue) + b"$%d\\r\\n" % len(body) + body + tail``, which
    bulk encoders (the Spark sink) also build column-wise."""

    def __init__(self, words: tuple) -> None:
        """``words``: what follows ``ADDJOB queue body`` (the timeout, then the options)."""
        self.head = b"*%d\r\n%s" % (3 + len(words), _bulk("ADDJOB"))
        self.tail = b"\r\n" + b"".join(_bulk(w) for w in words)
        self._queues: dict[str | bytes, bytes] = {}

    def prefix(self, queue: str | bytes) -> bytes:
        """Everything before the body's bulk header."""
        prefix = self._queues.get(queue)
        if prefix is None:
            prefix = self._queues[queue] = self.head + _bulk(queue)
        return prefix

    def encode(self, queue: str | bytes, bodies: Sequence[bytes]) -> list[bytes]:
        """ADDJOB ``queue`` body ... for every body."""
        prefix, tail = self.prefix(queue), self.tail
        return [b"%s$%d\r\n%s%s" % (prefix, len(body), body, tail) for body in bodies]

    def encode_each(self, queues: Sequence[str | bytes], bodies: Sequence[bytes]) -> list[bytes]:
        """ADDJOB queue body ... for every (queue, body) pair."""
        prefix, tail = self.prefix, self.tail
        return [b"%s$%d\r\n%s%s" % (prefix(queue), len(body), body, tail)
                for queue, body in zip(queues, bodies)]


class AddJobsEncoder:
    """The RESP head of ADDJOBS commands sharing the timeout and options.

    An ADDJOBS is ``head(queue, rows)`` followed by each row's words: its
    body as a bulk string (``$<length>\r\n<body>\r\n``), after its DEDUPID's
    with ``dedupids``. Bulk encoders (the Spark sink) build the rows' words
    column-wise and send them after the head without joining."""

    def __init__(self, words: tuple, dedupids: bool = False) -> None:
        """``words``: what follows ``ADDJOBS queue`` before the jobs (the timeout,
        then the options)."""
        self.words = b"".join(_bulk(w) for w in words)
        self.fixed = 3 + len(words)  # ADDJOBS, the queue, the words, BODIES or DEDUPIDS
        self.per_row = 2 if dedupids else 1
        self.keyword = _bulk("DEDUPIDS" if dedupids else "BODIES")
        self._queues: dict[str | bytes, bytes] = {}

    def head(self, queue: str | bytes, rows: int) -> bytes:
        """Everything before the first row's words."""
        name = self._queues.get(queue)
        if name is None:
            name = self._queues[queue] = _bulk(queue)
        return b"*%d\r\n$7\r\nADDJOBS\r\n%s%s%s" % (self.fixed + self.per_row * rows, name,
                                                   self.words, self.keyword)


def with_headers(headers: Headers | None, carried: Mapping[str, str]) -> Headers | None:
    """``headers`` with ``carried`` (trace context) added, where ``headers``
    does not name them already: the caller's own values win."""
    if not carried:
        return headers
    if not headers:
        return carried
    given = {encode_arg(name) for name in headers}
    merged: dict[str | bytes, str | bytes] = dict(headers)
    for name, value in carried.items():
        if encode_arg(name) not in given:
            merged[name] = value
    return merged
