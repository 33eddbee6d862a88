"""``disque-server``'s entry point: the server's modules load with the
cyclic garbage collector off, as under ``python -m disque.server``.

A console script imports its function's module before calling it, so
``disque.server:main`` would load everything with the collector on (about
6 ms of an 85 ms start, bench.startup). The server sets the collector's
schedule once it runs (process/gctuning.py).
"""

from __future__ import annotations

import gc


def main() -> int:
    """Run the server (``disque.server.main``)."""
    gc.disable()
    from disque.server import main as serve  # the server's modules load here, GC off
    return serve()
