"""The command table: name → handler, arity and flags (spec: commands.md §0).

Each family of commands lives in its own module and lists its entries in a
``TABLE``; a module's ``RUN_HANDLERS`` name the commands that also have a
handler for a pipelined run of them (see ``Node.call_run``), its
``MAX_ARGS`` the commands that take more words than their arity says.
"""

from __future__ import annotations

from disque.commands import (acl, addjob, admin, cluster, deadletter, info, jobs, monitor, queues,
                             schedule)
from disque.commands.access import KEY_SPECS, KEYS_NONE
from disque.state.command import Command


def build_command_table() -> dict[bytes, Command]:
    """A fresh table (each node keeps its own call statistics)."""
    table: dict[bytes, Command] = {}
    for module in (addjob, jobs, queues, admin, info, monitor, cluster, deadletter, acl,
                   schedule):
        run_handlers = getattr(module, "RUN_HANDLERS", {})
        max_args = getattr(module, "MAX_ARGS", {})
        for name, arity, flags, handler in module.TABLE:
            cmd = Command(name, arity, flags, handler)
            cmd.run_handler = run_handlers.get(name)
            cmd.max_args = max_args.get(name, cmd.max_args)
            cmd.acl_keys = KEY_SPECS.get(name, KEYS_NONE)
            table[name.encode()] = cmd
            table[name.upper().encode()] = cmd
    return table
