"""One entry of the command table (spec: commands.md §0): a command's
name, arity and flags, its handler, and its call statistics.

Handlers take ``(node, client, argv)``, ``node`` being the node's
``NodeState``, and return the encoded reply, or None when the client
blocked. A handler for a pipelined run of a command takes
``(node, client, commands, start, out)`` (see ``Node.call_run``).
"""

from __future__ import annotations

from typing import Callable, Final

from disque.protocol import errors

FLAG_WORDS: Final = (("w", b"write"), ("r", b"readonly"), ("m", b"denyoom"), ("a", b"admin"),
                     ("l", b"loading"), ("F", b"fast"))


class Command:
    """One entry of the command table, with its call statistics."""

    __slots__ = ("name", "lname", "arity", "flags", "handler", "calls", "usec", "write",
                 "denyoom", "loading_ok", "monitored", "fast", "is_auth", "is_ping",
                 "arity_error", "min_args", "max_args", "run_handler", "acl_keys",
                 "redacts")

    def __init__(self, name: str, arity: int, flags: str,
                 handler: Callable[..., bytes | None]) -> None:
        self.name = name
        self.lname = name.encode()
        self.arity = arity
        self.flags = flags
        self.handler = handler
        self.calls = 0
        self.usec = 0
        self.write = "w" in flags
        self.denyoom = "m" in flags
        self.loading_ok = "l" in flags
        self.monitored = "a" not in flags
        self.fast = "F" in flags
        self.is_auth = name in ("auth", "hello")  # HELLO may carry AUTH
        self.is_ping = name == "ping"
        # MONITOR and the slow log hide some of its words (commands.access.redact)
        self.redacts = name in ("auth", "hello", "acl", "config")
        self.arity_error = errors.wrong_arity(name)
        # arity N > 0: exactly N words; -N: at least N (spec: commands.md §0)
        self.min_args = arity if arity > 0 else -arity
        self.max_args = arity if arity > 0 else 1 << 30
        # (node, client, commands, start, out) -> index after the commands it executed
        self.run_handler: Callable[..., int] | None = None
        self.acl_keys = 0  # where its queues or job IDs are (commands.access.KEY_SPECS)

    def flag_words(self) -> list[bytes]:
        """COMMAND's flag list, in the spec's order."""
        return [word for letter, word in FLAG_WORDS if letter in self.flags]


def unique_commands(table: dict[bytes, Command]) -> list[Command]:
    """Each command once (the table holds lower- and upper-case keys)."""
    return list({id(c): c for c in table.values()}.values())
