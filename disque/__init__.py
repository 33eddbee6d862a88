"""Disque: a distributed in-memory job queue speaking RESP."""

from disque.build import select_core

__version__ = "1.0-rc1"

# Before any core module loads: the compiled core if it matches its sources.
select_core()
