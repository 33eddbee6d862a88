"""Write AOF files exactly as docs/aof-format.md describes them, for tests.

Deliberately independent of the server's AOF writer: this follows the
document byte by byte, so the reader is tested against the format, not
against one implementation of it.
"""

from __future__ import annotations

import struct

import msgpack

ACTIVE, QUEUED = 1, 2


def _bulk(value: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(value), value)


def _request(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(_bulk(a) for a in args)


def job_id(n: int, ttl_odd: bool = True) -> bytes:
    """A well-formed 40-byte job ID (D-<8>-<24>-<4>) numbered ``n``."""
    middle = ("%024d" % n).encode()
    return b"D-dcb833cf-" + middle + (b"-05a1" if ttl_odd else b"-05a0")


def node_id(n: int) -> bytes:
    """A 40-character node ID."""
    return ("%040x" % (0xABCDEF0000 + n)).encode()


def loadjob(jid: bytes, queue: bytes, body: bytes, ctime_ms: int, record_ms: int, *,
            tie: int = 0, repl: int = 1, ttl: int = 86400, delay: int = 0, retry: int = 300,
            nacks: int = 0, deliveries: int = 0, flags: int = 1,
            nodes: tuple[bytes, ...] = (), state: int = QUEUED, legacy: bool = False) -> bytes:
    """``LOADJOB <payload> <record ms>``: the packed payload of the table, or with
    ``legacy`` the 13-element msgpack array that earlier versions wrote."""
    nodes = nodes or (node_id(0),)
    ctime, etime = ctime_ms * 1_000_000 + tie, ctime_ms // 1000 + ttl
    if legacy:
        payload = msgpack.packb([jid, queue, body, repl, ctime, etime, delay, retry, nacks,
                                 deliveries, flags, list(nodes), state], use_bin_type=True)
    else:
        payload = struct.pack("<BBBHQQQQQQIIH40s", 1, state, flags, repl, ctime, etime, delay,
                              retry, nacks, deliveries, len(queue), len(body), len(nodes), jid)
        payload += queue + body + b"".join(nodes)
    return _request(b"LOADJOB", payload, b"%d" % record_ms)


def deljob(jid: bytes, record_ms: int, queue: bytes, nacks: int, deliveries: int,
           reason: bytes) -> bytes:
    """``DELJOB <id> <ms> <queue> <nacks> <additional deliveries> <reason>``."""
    return _request(b"DELJOB", jid, b"%d" % record_ms, queue, b"%d" % nacks,
                    b"%d" % deliveries, reason)


def bare_deljob(jid: bytes) -> bytes:
    """The original server's two-element ``DELJOB <id>``."""
    return _request(b"DELJOB", jid)
