"""Cluster bus message types and field names (spec: cluster-bus.md §1, §5).

A message is a dict; ``disque.cluster.bus`` frames it with msgpack. The
node core builds and reads these dicts and never sees bytes on a socket.
"""

from __future__ import annotations

PROTOCOL_VERSION = 1

PING = "PING"
PONG = "PONG"
MEET = "MEET"
FAIL = "FAIL"
REPLJOB = "REPLJOB"
GOTJOB = "GOTJOB"
ENQUEUE = "ENQUEUE"
QUEUED = "QUEUED"
WORKING = "WORKING"
WILLQUEUE = "WILLQUEUE"
SETACK = "SETACK"
GOTACK = "GOTACK"
DELJOB = "DELJOB"
NEEDJOBS = "NEEDJOBS"
YOURJOBS = "YOURJOBS"
PAUSE = "PAUSE"

ALL_TYPES = frozenset((PING, PONG, MEET, FAIL, REPLJOB, GOTJOB, ENQUEUE, QUEUED, WORKING,
                       WILLQUEUE, SETACK, GOTACK, DELJOB, NEEDJOBS, YOURJOBS, PAUSE))

# Header keys.
VERSION = "v"
TYPE = "type"
SENDER = "sender"
PORT = "port"
FLAGS = "flags"
MFLAGS = "mflags"

# Per-message flags.
MFLAG_NOREPLY = 1
MFLAG_INCR_NACKS = 2
MFLAG_INCR_DELIV = 4

# Body keys.
ID = "id"
JOB = "job"
JOBS = "jobs"
DELAY = "delay"
MAY_HAVE = "may_have"
KNOWN = "known"
NODE = "node"
QUEUE = "queue"
COUNT = "count"
PAUSE_STATE = "pause"
GOSSIP = "gossip"


def job_message(kind: str, job_id: bytes, mflags: int = 0) -> dict:
    """A message about one job ID (QUEUED, WORKING, WILLQUEUE, GOTJOB, DELJOB)."""
    if mflags:
        return {TYPE: kind, ID: job_id, MFLAGS: mflags}
    return {TYPE: kind, ID: job_id}
