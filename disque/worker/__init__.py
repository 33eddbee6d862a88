"""Workers for Disque queues: register a function per queue, and the worker
fetches jobs in batches, runs the functions, acknowledges what succeeds,
NACKs what fails, keeps long jobs from being redelivered (WORKING), follows
the cluster across node failures, and stops gracefully on SIGTERM.

```python
from disque.worker import ThreadedWorker

worker = ThreadedWorker("127.0.0.1:7711,127.0.0.1:7712", concurrency=8)

@worker.task("emails")
def send(job):          # job: disque.client.Job (queue, id, body, nacks, ...)
    print("sending", job.body.decode())   # return: ACKJOB; raise: NACK (with DELAY)

if __name__ == "__main__":  # not on import: disque-worker refuses that
    worker.run()            # until SIGTERM / SIGINT / worker.stop()
```

``AsyncioWorker`` is the same for ``async def`` handlers (``run()``, or
``await worker.serve()`` in a running loop). ``disque-worker`` (``cli``) runs
one function from the command line. docs/worker.md has the details.

Modules: ``engine`` (fetching, settling, stopping: the ``Worker`` base and
``WorkerOptions``), ``threaded`` and ``aioworker`` (where handlers run),
``settler`` (ACK/NACK/WORKING connection), ``leases`` (when WORKING is due),
``backoff`` (NACK delays, reconnect waits), ``tasks`` (queue → handler), ``stats``,
``events`` (structured log lines: ``disque-worker``'s format, also where the
application set up no logging), ``cli``.
"""

from __future__ import annotations

from disque.worker.aioworker import AsyncioWorker
from disque.worker.engine import Worker, WorkerOptions
from disque.worker.stats import WorkerStats
from disque.worker.threaded import ThreadedWorker

__all__ = ["AsyncioWorker", "ThreadedWorker", "Worker", "WorkerOptions", "WorkerStats"]
