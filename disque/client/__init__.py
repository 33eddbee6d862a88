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

The modules: ``addresses`` (NodeAddress, seed lists), ``errors`` (the client's
errors, which failures move to another node), ``replies`` (Job, job_info),
``arguments`` (argument encoding, ADDJOB's argv, ``AddJobEncoder`` and
``AddJobsEncoder`` for ADDJOBs and ADDJOBS encoded in bulk), ``security``
(``ConnectionSecurity``: TLS and the ACL user, shared with ``disque-worker``
and the Spark connector),
``tracing`` (W3C trace context in job headers, when OpenTelemetry is
installed), ``nodechoice`` (seeds, HELLO's view, lately failed nodes),
``failover`` (``FailoverConnection``: the connection, failover, pipelining),
``disqueclient`` (the DisqueClient class: the job and queue commands).
This package only re-exports them; they import one another, never it.
"""

from __future__ import annotations

try:
    import redis  # noqa: F401
except ImportError as exc:  # the server does not need redis-py; only this client does
    raise ImportError("disque.client needs redis-py: pip install 'disque-server[client]'"
                      ) from exc

from disque.client.addresses import (DEFAULT_PORT, DEFAULT_SEED, PRIORITY_FAILING, NodeAddress,
                                     parse_nodes)
from disque.client.arguments import (AddJobEncoder, AddJobsEncoder, addjob_args,
                                     addjob_options)
from disque.client.disqueclient import (DEFAULT_BULK_CHUNK, DEFAULT_CHUNK, DEFAULT_GETJOB_COUNT,
                                       DisqueClient)
from disque.client.errors import (LEAVING_PREFIX, NOREPL_LEAVING_TEXT, AuthenticationError,
                                  DisqueError, NoNodeAvailable, ResponseError)
from disque.client.nodechoice import FAILED_NODE_QUARANTINE
from disque.client.replies import Job, job_info
from disque.client.security import ConnectionSecurity

__all__ = [
    "DEFAULT_BULK_CHUNK", "DEFAULT_CHUNK", "DEFAULT_GETJOB_COUNT", "DEFAULT_PORT", "DEFAULT_SEED",
    "FAILED_NODE_QUARANTINE", "LEAVING_PREFIX", "NOREPL_LEAVING_TEXT", "PRIORITY_FAILING",
    "AddJobEncoder", "AddJobsEncoder", "AuthenticationError", "ConnectionSecurity",
    "DisqueClient", "DisqueError", "Job", "NoNodeAvailable", "NodeAddress", "ResponseError",
    "addjob_args", "addjob_options", "job_info", "parse_nodes",
]
