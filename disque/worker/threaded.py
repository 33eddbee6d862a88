"""``ThreadedWorker``: handlers are plain functions, run on ``concurrency`` threads."""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

from disque.client import Job
from disque.worker.engine import Worker
from disque.worker.tasks import Handler

_WAKE_PERIOD = 0.5  # the main thread wakes this often while it waits for a stop


class ThreadedWorker(Worker):
    """Runs plain-function handlers on a pool of threads; ``run()`` blocks until stopped.

    The threads are daemons: a handler still stuck after the grace period is
    NACKed and left behind, and does not keep the process from exiting."""

    mode = "threaded"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._work: queue.SimpleQueue[tuple[Job, Handler] | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []

    def run(self) -> None:
        """Process jobs until ``stop()``, SIGTERM or SIGINT, then stop gracefully."""
        previous = self._install_signals()
        try:
            if self._begin():
                self._threads = [threading.Thread(target=self._run_handlers, daemon=True,
                                                  name="disque-worker-%d" % i)
                                 for i in range(self.options.concurrency)]
                for thread in self._threads:
                    thread.start()
                while not self._stopping.wait(_WAKE_PERIOD):
                    pass
                self._take_back(self._unstarted())
                self._wait_idle(self.options.grace)
                for _ in self._threads:
                    self._work.put(None)
            self._finish_stop()
        finally:
            self._restore_signals(previous)

    def _submit(self, work: list[tuple[Job, Handler]]) -> None:
        for item in work:
            self._work.put(item)

    def _unstarted(self) -> list[Job]:
        jobs: list[Job] = []
        while True:
            try:
                item = self._work.get_nowait()
            except queue.Empty:
                return jobs
            if item is not None:
                jobs.append(item[0])

    def _run_handlers(self) -> None:
        while True:
            item = self._work.get()
            if item is None:
                return
            job, handler = item
            if self.stopping:
                self._take_back([job])
                continue
            started = time.monotonic()
            try:
                with self._span(job):
                    handler(job)
            except BaseException as exc:  # even SystemExit: the job failed, the thread goes on
                self._finished(job, started, exc)
            else:
                self._finished(job, started, None)
