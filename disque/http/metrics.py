"""Prometheus collectors: the node's counters read at scrape time.

The core keeps plain ints where things happen (``state.counters``, the bus
dispatch table, ``Replication``, ``Federation``, the AOF writer); nothing
here runs until Prometheus asks for /metrics, and then each collector
reads those ints and builds its families in one pass. The registry is the
node's own (never prometheus_client's global one, which would mix in the
process collectors of whatever imported it). Every series is listed in
docs/metrics.md.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import (CollectorRegistry, CounterMetricFamily, GaugeMetricFamily,
                                    HistogramMetricFamily, InfoMetricFamily, Metric)

from disque import __version__
from disque.build import core_build
from disque.aof.writer import STATE_OFF
from disque.cluster.membership import FAIL, HANDSHAKE, LEAVING, PFAIL
from disque.jobs.job import STATE_NAMES
from disque.process.serverinfo import rss_bytes
from disque.context.stats import LatencyHistogram

if TYPE_CHECKING:
    from disque.http.observed import ObservedNode, ObservedServer
    from disque.queues.queue import Queue

PREFIX = "disque_"
MS = 1e-3
US = 1e-6
NS = 1e-9

# The job counters of state.counters: attribute, series name (before
# _total), help text.
JOB_COUNTERS = (
    ("added", "jobs_added", "Jobs created by ADDJOB on this node."),
    ("delivered", "jobs_delivered", "Jobs handed to this node's consumers (GETJOB)."),
    ("acked", "jobs_acked", "Jobs acknowledged by this node's clients (ACKJOB, FASTACK)."),
    ("nacked", "jobs_nacked", "NACKs done here (a NACK ... DELAY when it falls due)."),
    ("requeued", "jobs_requeued", "Jobs queued again here when their retry period ran out."),
    ("expired", "jobs_expired", "Jobs deleted here at the end of their TTL."),
    ("evicted", "jobs_evicted", "Jobs dropped here under memory pressure."),
    ("dead_lettered", "jobs_dead_lettered",
     "Jobs moved here to their dead-letter queue after MAXDELIVER deliveries."),
)

# A cluster node's state for the series: the first flag it has wins.
NODE_STATES = ((FAIL, "fail"), (PFAIL, "pfail"), (HANDSHAKE, "handshake"), (LEAVING, "leaving"))
NODE_STATE_UP = "up"
ALL_NODE_STATES = tuple(name for _, name in NODE_STATES) + (NODE_STATE_UP,)


def _name(suffix: str) -> str:
    return PREFIX + suffix


def _counter(suffix: str, documentation: str, value: int) -> CounterMetricFamily:
    return CounterMetricFamily(_name(suffix), documentation, value=value)


def _int_field(fields: list[tuple[str, object]], name: str) -> int:
    """An INFO field of the process's (0 when it has none)."""
    for key, value in fields:
        if key == name and isinstance(value, int):
            return value
    return 0


def _gauge(suffix: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(_name(suffix), documentation, value=value)


def histogram(suffix: str, documentation: str, source: LatencyHistogram,
              unit: float) -> HistogramMetricFamily:
    """A Prometheus histogram (in seconds) from the core's bucket counts
    kept in ``unit`` seconds: the buckets become cumulative here."""
    buckets = []
    cumulative = 0
    counts = source.counts
    for bound, count in zip(source.bounds, counts):
        cumulative += count
        buckets.append(("%g" % (bound * unit), cumulative))
    buckets.append(("+Inf", cumulative + counts[-1]))
    return HistogramMetricFamily(_name(suffix), documentation, buckets=buckets,
                                 sum_value=source.total * unit)


def node_state(flags: int) -> str:
    """One of ALL_NODE_STATES for a cluster node's flags."""
    for flag, name in NODE_STATES:
        if flags & flag:
            return name
    return NODE_STATE_UP


class JobsCollector:
    """What happened to jobs here, and the jobs held now by state."""

    def __init__(self, node: ObservedNode) -> None:
        self.node = node

    def collect(self) -> Iterator[Metric]:
        node = self.node
        counters = node.state.counters
        for attr, suffix, documentation in JOB_COUNTERS:
            yield _counter(suffix, documentation, getattr(counters, attr))
        federation = node.state.federation
        yield _counter("jobs_imported", "Jobs queued here from other nodes (federation, "
                       "YOURJOBS).", federation.jobs_imported)
        yield _counter("jobs_exported", "Jobs this node gave to other nodes asking for "
                       "them (federation, NEEDJOBS).", federation.jobs_exported)
        held = GaugeMetricFamily(_name("jobs"), "Jobs registered on this node, by state.",
                                 labels=["state"])
        for state, count in enumerate(node.state.jobs.count_states()):
            held.add_metric([STATE_NAMES[state].decode()], count)
        yield held
        yield _gauge("memory_used_bytes", "The dataset's estimated size (INFO used_memory).",
                     node.state.used_memory)
        yield _gauge("memory_max_bytes", "maxmemory.", node.state.config.maxmemory)
        yield _counter("commands_processed", "Commands executed.",
                       node.state.stats.commands_processed)


class QueuesCollector:
    """The number of queues, and per-queue series for the longest
    ``metrics-max-queues`` of them (the rest are left out, so the number
    of series stays bounded whatever the number of queues)."""

    def __init__(self, node: ObservedNode) -> None:
        self.node = node

    def collect(self) -> Iterator[Metric]:
        node = self.node
        queues = node.state.queues.by_name
        yield _gauge("queues", "Queues on this node.", len(queues))
        limit = node.state.config.metrics_max_queues
        shown: list[Queue] = heapq.nlargest(limit, queues.values(), key=len) if limit else []
        labels = ["queue"]
        length = GaugeMetricFamily(_name("queue_length"), "Jobs queued in the queue.",
                                   labels=labels)
        added = CounterMetricFamily(_name("queue_jobs_added"),
                                    "Jobs put in the queue here (new, requeued or imported).",
                                    labels=labels)
        delivered = CounterMetricFamily(_name("queue_jobs_delivered"),
                                        "Jobs taken from the queue here (to consumers or "
                                        "other nodes).", labels=labels)
        oldest = GaugeMetricFamily(_name("queue_oldest_job_age_seconds"),
                                   "Age of the job at the head of the queue (its oldest job "
                                   "when its jobs share one priority).", labels=labels)
        now_ns = node.state.now * 1_000_000  # job ctimes are ms * 10^6 (JobRegistry.new_ctime)
        for queue in shown:
            label = [queue.name.decode("utf-8", "backslashreplace")]
            length.add_metric(label, len(queue.jobs))
            added.add_metric(label, queue.jobs_in)
            delivered.add_metric(label, queue.jobs_out)
            head = queue.jobs.first()
            oldest.add_metric(label, max(0, now_ns - head.ctime) * NS if head is not None else 0)
        yield length
        yield added
        yield delivered
        yield oldest
        yield _gauge("queues_exported", "Queues with per-queue series in this scrape "
                     "(at most metrics-max-queues).", len(shown))


class BusCollector:
    """Cluster bus messages by type, and the cluster's nodes by state."""

    def __init__(self, node: ObservedNode) -> None:
        self.node = node

    def collect(self) -> Iterator[Metric]:
        node = self.node
        received = CounterMetricFamily(_name("bus_messages_received"),
                                       "Bus messages received, by type.", labels=["type"])
        for kind, route in sorted(node.bus_routes.items()):
            received.add_metric([kind], route.received)
        yield received
        sent = CounterMetricFamily(_name("bus_messages_sent"), "Bus messages sent, by type.",
                                   labels=["type"])
        for kind, count in node.state.outbox.sent.items():
            sent.add_metric([kind], count)
        yield sent
        states = dict.fromkeys(ALL_NODE_STATES, 0)
        for member in node.state.membership.nodes.values():
            states[node_state(member.flags)] += 1
        nodes = GaugeMetricFamily(_name("cluster_nodes"), "Nodes this node knows (itself "
                                  "included), by state as it sees them.", labels=["state"])
        for state, count in states.items():
            nodes.add_metric([state], count)
        yield nodes
        yield _gauge("cluster_reachable_nodes", "Other nodes this node can replicate to.",
                     len(node.state.membership.reachable))


class ReplicationCollector:
    """Synchronous ADDJOBs waiting for their replicas."""

    def __init__(self, node: ObservedNode) -> None:
        self.node = node

    def collect(self) -> Iterator[Metric]:
        replication = self.node.state.replication
        yield _counter("replication_waits", "Synchronous ADDJOBs that waited for replicas.",
                       replication.waits)
        yield _counter("replication_wait_failures", "Waits for replicas that failed (timeout, "
                       "disconnection, LEAVING).", replication.wait_failures)
        # One entry per waiting job: an ADDJOBS's jobs share their producer.
        yield _gauge("replication_waiting_producers", "Producers waiting for replicas now.",
                     len(set(self.node.state.blocked.producers.values())))
        yield histogram("replication_wait_seconds", "Time from a synchronous ADDJOB to enough "
                        "replicas (successful waits).", replication.wait_latency, MS)


class ScheduleCollector:
    """Periodic jobs (docs/schedules.md): the schedules known and their ticks."""

    def __init__(self, node: ObservedNode) -> None:
        self.node = node

    def collect(self) -> Iterator[Metric]:
        schedules = self.node.state.schedules
        yield _gauge("schedules", "Live schedules this node knows (SCHEDULE LIST).",
                     schedules.live_count())
        yield _counter("schedule_ticks_fired", "Ticks whose job this node made.",
                       schedules.fired)
        yield _counter("schedule_ticks_refused", "Ticks whose job this node did not make: "
                       "ADDJOB refused or the owner unknown (retried), the owner over its "
                       "quota (skipped).", schedules.refused)
        yield _counter("schedule_ticks_over_quota", "Ticks skipped because the schedule's "
                       "owner was over its quota here.", schedules.over_quota)
        yield _counter("schedule_ticks_skipped", "Ticks older than the catch-up window, "
                       "never fired.", schedules.skipped)


class ProcessCollector:
    """What the process around the node knows: clients, RSS, the network,
    the AOF, the build."""

    def __init__(self, server: ObservedServer) -> None:
        self.server = server

    def collect(self) -> Iterator[Metric]:
        server = self.server
        node = server.node
        info = InfoMetricFamily(_name("build"), "Version and core build of this node.")
        info.add_metric([], {"version": __version__, "core_build": core_build(),
                             "node_id": node.state.id.decode()})
        yield info
        yield _gauge("start_time_seconds", "When the process started (unix time).",
                     server.start_time)
        yield _gauge("connected_clients", "Client connections open.", len(server.clients))
        yield _gauge("blocked_clients", "Clients blocked in GETJOB or a synchronous ADDJOB.",
                     len(node.state.blocked))
        yield _counter("connections_received", "Client connections accepted.",
                       server.connections_received)
        yield _counter("rejected_connections", "Client connections refused (maxclients).",
                       server.rejected_connections)
        yield _counter("net_input_bytes", "Bytes read from clients.", server.net_input_bytes)
        yield _counter("net_output_bytes", "Bytes written to clients.", server.net_output_bytes)
        yield _gauge("memory_rss_bytes", "Resident set size of the process.", rss_bytes())
        limits = server.info_fields("limits")
        yield _gauge("clients_reply_memory_bytes", "What replies not yet sent hold, all clients "
                     "together (bounded by maxmemory-clients).",
                     _int_field(limits, "clients_reply_memory"))
        yield _counter("client_memory_limit_closed", "Clients closed by maxmemory-clients: "
                       "theirs held the most.", _int_field(limits, "client_memory_limit_closed"))
        yield from self._aof()

    def _aof(self) -> Iterator[Metric]:
        writer = self.server.aof_writer
        if writer is None:
            return
        enabled = writer.state != STATE_OFF
        yield _gauge("aof_enabled", "1 while appendonly is on.", int(enabled))
        yield _gauge("aof_size_bytes", "Size of the AOF.", writer.current_size if enabled else 0)
        yield _gauge("aof_base_size_bytes", "Size of the AOF at the last rewrite or startup.",
                     writer.base_size if enabled else 0)
        yield _gauge("aof_rewrite_in_progress", "1 while the AOF is rewritten.",
                     int(writer.rewrite_task is not None))
        yield _gauge("aof_last_rewrite_ok", "0 if the last rewrite failed.",
                     int(writer.last_bgrewrite_ok))
        yield _gauge("aof_last_rewrite_duration_seconds", "Duration of the last rewrite "
                     "(-1: none yet).", writer.last_rewrite_seconds)
        yield _gauge("aof_last_write_ok", "0 while writing the AOF fails.",
                     int(writer.write_error is None))
        yield _counter("aof_delayed_fsyncs", "everysec fsyncs postponed because the previous "
                       "one had not finished.", writer.delayed_fsync)
        yield histogram("aof_fsync_seconds", "Duration of the AOF's fsyncs.",
                        writer.fsync_latency, US)


def node_registry(node: ObservedNode) -> CollectorRegistry:
    """A registry of the collectors that read the node alone."""
    registry = CollectorRegistry(auto_describe=False)
    for collector in (JobsCollector(node), QueuesCollector(node), BusCollector(node),
                      ReplicationCollector(node), ScheduleCollector(node)):
        registry.register(collector)
    return registry


def server_registry(server: ObservedServer) -> CollectorRegistry:
    """Every collector of a running node: what /metrics serves."""
    registry = node_registry(server.node)
    registry.register(ProcessCollector(server))
    return registry
