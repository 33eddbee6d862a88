"""Running a disque.worker in a test: on a thread, always stopped."""

from __future__ import annotations

import contextlib
import threading

from disque.worker import Worker


@contextlib.contextmanager
def running(worker: Worker):
    """``worker.run()`` on a thread, stopped (and checked to stop) on the way out."""
    thread = threading.Thread(target=worker.run, name="test-worker", daemon=True)
    thread.start()
    try:
        yield worker
    finally:
        worker.stop()
        thread.join(30)
        assert not thread.is_alive(), "the worker did not stop within 30 s"
