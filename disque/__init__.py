"""Disque: a distributed in-memory job queue speaking RESP."""

__version__ = "1.0-rc1"
