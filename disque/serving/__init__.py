"""Serving a client connection without I/O: the requests it read run on the
node, and their replies go to its transport (``net/connection`` is the
asyncio protocol around it)."""
