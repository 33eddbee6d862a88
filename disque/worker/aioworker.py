"""``AsyncioWorker``: handlers are ``async def``, run as tasks on an event loop.

At most ``concurrency`` handlers run at once, on the loop that runs
``serve()`` (``run()`` makes one with ``asyncio.run``). The worker's own
connections are blocking redis-py ones (``disque.client``) on two threads of
their own, so the loop only runs handlers: a slow GETJOB never stalls it.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from disque.client import Job
from disque.worker.engine import STOP_SIGNALS, Worker
from disque.worker.tasks import Handler


class AsyncioWorker(Worker):
    """Runs coroutine handlers; ``await serve()`` in a running loop or ``run()``."""

    coroutines = True
    mode = "asyncio"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._loop: asyncio.AbstractEventLoop | None = None  # serve()'s, once it runs
        # Neither binds to a loop before its first use (Python 3.10+).
        self._work: asyncio.Queue[tuple[Job, Handler] | None] = asyncio.Queue()
        self._wake = asyncio.Event()

    def run(self) -> None:
        """``serve()`` on a new event loop; SIGTERM and SIGINT stop it gracefully (when
        called from the main thread)."""
        asyncio.run(self._serve_with_signals())

    async def _serve_with_signals(self) -> None:
        loop = asyncio.get_running_loop()
        # Python delivers signals to the main thread only.
        signals = STOP_SIGNALS if threading.current_thread() is threading.main_thread() else ()
        for sig in signals:
            loop.add_signal_handler(sig, self.stop)
        try:
            await self.serve()
        finally:
            for sig in signals:
                loop.remove_signal_handler(sig)

    async def serve(self) -> None:
        """Process jobs until ``stop()``, then stop gracefully (signals are the caller's)."""
        loop = self._loop = asyncio.get_running_loop()
        if self.stopping:
            self._wake.set()
        if await loop.run_in_executor(None, self._begin):
            runners = [loop.create_task(self._run_handlers())
                       for _ in range(self.options.concurrency)]
            await self._wake.wait()
            self._take_back(self._unstarted())
            for _ in runners:
                self._work.put_nowait(None)
            _, running = await asyncio.wait(runners, timeout=self.options.grace)
            for task in running:
                task.cancel()  # its job is NACKed by _finish_stop
            await asyncio.gather(*running, return_exceptions=True)
        await loop.run_in_executor(None, self._finish_stop)

    def stop(self) -> None:
        """Ask the worker to stop gracefully; callable from any thread."""
        super().stop()
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._wake.set)

    def _submit(self, work: list[tuple[Job, Handler]]) -> None:
        loop = self._loop
        assert loop is not None, "the fetcher starts from serve(), which sets the loop"
        loop.call_soon_threadsafe(self._enqueue, work)

    def _enqueue(self, work: list[tuple[Job, Handler]]) -> None:
        if self.stopping:
            self._take_back([job for job, _ in work])
            return
        for item in work:
            self._work.put_nowait(item)

    def _unstarted(self) -> list[Job]:
        jobs: list[Job] = []
        while not self._work.empty():
            item = self._work.get_nowait()
            if item is not None:
                jobs.append(item[0])
        return jobs

    async def _run_handlers(self) -> None:
        while True:
            item = await self._work.get()
            if item is None:
                return
            job, handler = item
            if self.stopping:
                self._take_back([job])
                continue
            started = time.monotonic()
            try:
                with self._span(job):
                    await handler(job)
            except asyncio.CancelledError as exc:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise  # the grace period is over: _finish_stop NACKs the job
                self._finished(job, started, exc)  # the handler's own cancellation: a failure
            except Exception as exc:  # the job failed: NACK it, and go on with the next
                self._finished(job, started, exc)
            else:
                self._finished(job, started, None)
