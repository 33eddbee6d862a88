"""INFO (spec: commands.md INFO): sections in a fixed order, ``key:value`` lines.

Node-level values come from the node; process-level ones (pid, RSS, CPU,
network counters, AOF state) from the host. A field neither provides is
reported as 0 so the keys clients look for always exist.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Final

from disque.protocol import errors
from disque.state.command import unique_commands
from disque.context.memory import format_human
from disque.protocol.resp import bulk

if TYPE_CHECKING:
    from disque.context.clients import ClientState
    from disque.state.nodestate import NodeState

SECTIONS: Final = (
           ("Server", ("disque_version", "disque_git_sha1", "disque_git_dirty", "disque_build_id", "os",
                       "arch_bits", "multiplexing_api", "gcc_version", "process_id", "run_id",
                       "tcp_port", "uptime_in_seconds", "uptime_in_days", "hz", "executable",
                       "config_file")),
           ("Clients", ("connected_clients", "client_longest_output_list", "client_biggest_input_buf",
                        "blocked_clients")),
           ("Memory", ("used_memory", "used_memory_human", "used_memory_rss", "used_memory_peak",
                       "used_memory_peak_human", "mem_fragmentation_ratio", "mem_allocator")),
           ("Jobs", ("registered_jobs",)),
           ("Queues", ("registered_queues",)),
           ("Persistence", None),  # the host lists its own fields: they depend on the AOF state
           ("Stats", ("total_connections_received", "total_commands_processed",
                      "instantaneous_ops_per_sec", "total_net_input_bytes", "total_net_output_bytes",
                      "instantaneous_input_kbps", "instantaneous_output_kbps", "rejected_connections",
                      "latest_fork_usec")),
           ("CPU", ("used_cpu_sys", "used_cpu_user", "used_cpu_sys_children", "used_cpu_user_children")),
       )
# Not in the original, so only given when asked for by name: INFO and INFO all
# stay byte for byte what a Disque 1.0 client expects.
EXTRA_SECTIONS: Final = (
           ("Build", ("core_build",)),  # which build of the core the process loaded
           ("Security", ("protected_mode", "acl_users", "acl_users_scope",
                         "acl_user_records_refused", "acl_access_denied_auth",
                         "acl_access_denied_cmd", "acl_access_denied_queue",
                         "protected_mode_denied_connections",
                         "cross_protocol_closed_connections",
                         "tls_client_handshake_failures")),  # docs/security.md
           ("Limits", ("client_query_buffer_limit_closed", "unauthenticated_buffer_limit_closed",
                       "client_request_timeout_closed", "output_buffer_limit_closed_normal",
                       "output_buffer_limit_closed_monitor", "client_memory_limit_closed",
                       "clients_reply_memory", "maxmemory_clients",
                       "maxclients_rejected_connections",
                       "getjob_max_queues_refused",
                       "addjob_quota_refused")),  # docs/security.md "Limits", rate-limits.md
           ("Bus", None),  # the cluster bus's security and refusals (docs/security.md)
           ("Schedules", ("schedules", "schedule_ticks_fired", "schedule_ticks_refused",
                          "schedule_ticks_over_quota", "schedule_ticks_skipped")),  # schedules.md
       )
_SECTION_NAMES: Final = {name.lower() for name, _ in SECTIONS}
_EXTRA_SECTION_NAMES: Final = {name.lower(): (name, keys) for name, keys in EXTRA_SECTIONS}
_COMMANDSTATS: Final = "commandstats"


def _node_fields(node: NodeState, section: str, host: dict) -> dict:
    if section == "server":
        return {"hz": node.config.hz, "tcp_port": node.config.port}
    if section == "clients":
        return {"blocked_clients": len(node.blocked)}
    if section == "memory":
        peak = node.memory.update_peak()
        used = node.memory.used
        rss = host.get("used_memory_rss", 0)  # the process's, as the OS sees it
        return {"used_memory": used,
                "mem_fragmentation_ratio": "%.2f" % (rss / used if used else 0),
                "used_memory_human": format_human(node.memory.used),
                "used_memory_peak": peak,
                "used_memory_peak_human": format_human(peak)}
    if section == "jobs":
        return {"registered_jobs": len(node.jobs)}
    if section == "queues":
        return {"registered_queues": len(node.queues)}
    if section == "security":
        access = node.access_stats
        return {"protected_mode": "yes" if node.config.protected_mode else "no",
                "acl_users": len(node.config.users),
                # cluster: users changed here reach every node (a cluster secret
                # is set); node: they stay here.
                "acl_users_scope": "cluster" if node.user_table.shared() else "node",
                "acl_user_records_refused": node.user_table.refused,
                "acl_access_denied_auth": access.auth_failures,
                "acl_access_denied_cmd": access.denied_commands,
                "acl_access_denied_queue": access.denied_queues,
                "protected_mode_denied_connections": access.protected_mode_denied,
                "cross_protocol_closed_connections": access.cross_protocol}
    if section == "limits":
        return {"getjob_max_queues_refused": node.stats.getjob_queues_refused,
                "addjob_quota_refused": node.stats.quota_refused}
    if section == "schedules":
        schedules = node.schedules
        return {"schedules": schedules.live_count(),
                "schedule_ticks_fired": schedules.fired,
                "schedule_ticks_refused": schedules.refused,
                "schedule_ticks_over_quota": schedules.over_quota,
                "schedule_ticks_skipped": schedules.skipped}
    if section == "stats":
        return {"total_commands_processed": node.stats.commands_processed,
                "instantaneous_ops_per_sec": node.stats.ops_per_sec()}
    return {}


def _section_text(node: NodeState, title: str, keys: Iterable[str] | None) -> str:
    section = title.lower()
    host_fields = node.host.info_fields(section)
    values = dict(host_fields)
    values.update(_node_fields(node, section, values))
    if keys is None:
        keys = [k for k, _ in host_fields]
    lines = ["# %s\r\n" % title]
    lines.extend("%s:%s\r\n" % (key, values.get(key, 0)) for key in keys)
    return "".join(lines)


def _commandstats_text(node: NodeState) -> str:
    lines = ["# Commandstats\r\n"]
    for cmd in unique_commands(node.commands):
        if cmd.calls:
            lines.append("cmdstat_%s:calls=%d,usec=%d,usec_per_call=%.2f\r\n"
                         % (cmd.name, cmd.calls, cmd.usec, cmd.usec / cmd.calls))
    return "".join(lines)


def info(node: NodeState, client: ClientState, argv: list[bytes]) -> bytes:
    """INFO [section]."""
    if len(argv) > 2:
        return errors.SYNTAX
    wanted = argv[1].decode("latin-1").lower() if len(argv) == 2 else "default"
    parts = []
    if wanted in ("default", "all") or wanted in _SECTION_NAMES:
        for title, keys in SECTIONS:
            if wanted in ("default", "all") or wanted == title.lower():
                parts.append(_section_text(node, title, keys))
    if wanted in ("all", _COMMANDSTATS):
        parts.append(_commandstats_text(node))
    extra = _EXTRA_SECTION_NAMES.get(wanted)
    if extra is not None:
        parts.append(_section_text(node, *extra))
    return bulk("\r\n".join(parts).encode())


TABLE: Final = (
           ("info", -1, "rl", info),
       )
