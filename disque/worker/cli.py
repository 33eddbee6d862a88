"""``disque-worker package.module:function --queue q [--queue q2] --concurrency N
--cluster host:port,...``: run one function over the jobs of some queues.

An ``async def`` function runs in an ``AsyncioWorker``, any other callable
in a ``ThreadedWorker``. The function gets a ``disque.client.Job`` (queue,
id, body, nacks, additional_deliveries); returning acknowledges the job,
raising NACKs it. SIGTERM or SIGINT stops the worker gracefully.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from disque.client import DEFAULT_SEED, AuthenticationError, ConnectionSecurity
from disque.client.security import PASSWORD_ENV, USER_ENV
from disque.worker.aioworker import AsyncioWorker
from disque.worker.engine import Worker, WorkerOptions
from disque.worker.events import FORMATS, configure, emit
from disque.worker.tasks import StartedOnImport, is_coroutine_handler, load_target
from disque.worker.threaded import ThreadedWorker

CLUSTER_ENV = "DISQUE_CLUSTER"
EXIT_USAGE = 2
EXIT_AUTH = 3


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options; ``WorkerOptions`` holds their defaults."""
    defaults = WorkerOptions()
    parser = argparse.ArgumentParser(prog="disque-worker", description=__doc__.split("\n\n")[1],
                                     epilog="The password ($%s or --password), when set, is sent "
                                            "with AUTH (as the ACL user $%s or --user, when set)."
                                            % (PASSWORD_ENV, USER_ENV))
    parser.add_argument("target", help="the handler, as package.module:function")
    parser.add_argument("--queue", "-q", action="append", required=True,
                        help="a queue to take jobs from (repeatable)")
    parser.add_argument("--cluster", "-c", default=os.environ.get(CLUSTER_ENV, DEFAULT_SEED),
                        help="seed nodes, host:port,host:port (default $%s or %s)"
                             % (CLUSTER_ENV, DEFAULT_SEED))
    parser.add_argument("--concurrency", "-n", type=int, default=defaults.concurrency,
                        help="handlers running at once (default %(default)s)")
    parser.add_argument("--prefetch", type=int, default=None,
                        help="jobs fetched ahead of the running ones (default: concurrency)")
    parser.add_argument("--poll-ms", type=int, default=defaults.poll_ms,
                        help="GETJOB TIMEOUT; a stop is noticed within it (default %(default)s)")
    parser.add_argument("--working-after", type=float, default=defaults.working_after,
                        help="seconds a held job waits for its first WORKING "
                             "(default %(default)s)")
    parser.add_argument("--nack-delay", type=float, default=defaults.nack_delay,
                        help="seconds before a failed job's next delivery, doubled per earlier "
                             "NACK; 0 for a plain NACK (default %(default)s)")
    parser.add_argument("--nack-delay-max", type=float, default=defaults.nack_delay_max,
                        help="cap of --nack-delay's doubling (default %(default)s)")
    parser.add_argument("--grace", type=float, default=defaults.grace,
                        help="seconds running jobs get to finish on SIGTERM (default %(default)s)")
    parser.add_argument("--log-format", choices=FORMATS, default="kv",
                        help="key=value lines or JSON lines (default %(default)s)")
    parser.add_argument("--log-level", default="INFO",
                        help="DEBUG logs every job; INFO the worker's life and failures")
    ConnectionSecurity.add_arguments(parser)
    return parser.parse_args(argv)


def build_worker(args: argparse.Namespace) -> Worker:
    """The worker for the target's kind, with the target registered on every queue."""
    handler = load_target(args.target)
    options = WorkerOptions(concurrency=args.concurrency, prefetch=args.prefetch,
                            poll_ms=args.poll_ms, working_after=args.working_after,
                            nack_delay=args.nack_delay, nack_delay_max=args.nack_delay_max,
                            grace=args.grace,
                            security=ConnectionSecurity.from_args(args, os.environ))
    kind = AsyncioWorker if is_coroutine_handler(handler) else ThreadedWorker
    worker = kind(args.cluster, options)
    for queue in args.queue:
        worker.add_task(queue, handler)
    return worker


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``disque-worker``."""
    args = parse_args(argv)
    configure(args.log_format, args.log_level.upper())
    sys.path.insert(0, os.getcwd())  # targets in the current directory, as python -m finds them
    try:
        worker = build_worker(args)
    except (ImportError, ValueError, TypeError, StartedOnImport) as exc:
        emit(logging.ERROR, "worker.cannot_start", error="%s: %s" % (type(exc).__name__, exc))
        return EXIT_USAGE
    try:
        worker.run()
    except AuthenticationError as exc:
        emit(logging.ERROR, "worker.cannot_start", error="%s: %s" % (type(exc).__name__, exc))
        return EXIT_AUTH
    return 0


if __name__ == "__main__":
    sys.exit(main())
