"""Command statistics, the slow log and the latency monitor.

spec: commands.md INFO (Stats, Commandstats), SLOWLOG, LATENCY.
"""

from __future__ import annotations

from collections import deque
from typing import Final

from disque.context.log import LogThrottle


SLOWLOG_MAX_ARGS: Final = 32
SLOWLOG_MAX_ARG_LEN: Final = 128
LATENCY_HISTORY: Final = 160
# Upper bounds (ms) of the buckets of a synchronous ADDJOB's wait for its replicas.
REPLICATION_WAIT_BUCKETS_MS: Final = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000,
                                      10000)
# A peer repeating a refused request is logged at most this often.
SECURITY_LOG_INTERVAL_MS: Final = 1000
# Cross-protocol attempts are logged at most this often (Redis logs them once a minute).
CROSS_PROTOCOL_LOG_INTERVAL_MS: Final = 60_000


class AccessStats:
    """INFO security's counters, and the throttles of their log lines."""

    __slots__ = ("auth_failures", "denied_commands", "denied_queues", "protected_mode_denied",
                 "cross_protocol", "auth_log", "cross_protocol_log")

    def __init__(self) -> None:
        self.auth_failures = 0
        self.denied_commands = 0
        self.denied_queues = 0
        self.protected_mode_denied = 0
        self.cross_protocol = 0  # connections closed for sending HTTP (POST, Host:)
        self.auth_log = LogThrottle(SECURITY_LOG_INTERVAL_MS)
        self.cross_protocol_log = LogThrottle(CROSS_PROTOCOL_LOG_INTERVAL_MS)


class SlowlogEntry:
    """One slow command."""

    __slots__ = ("id", "time", "duration", "argv")

    def __init__(self, entry_id: int, when: int, duration: int, argv: list[bytes]) -> None:
        self.id = entry_id
        self.time = when
        self.duration = duration
        self.argv = argv


def _trim_argv(argv: list[bytes]) -> list[bytes]:
    kept = []
    for i, arg in enumerate(argv[:SLOWLOG_MAX_ARGS]):
        if i == SLOWLOG_MAX_ARGS - 1 and len(argv) > SLOWLOG_MAX_ARGS:
            kept.append(b"... (%d more arguments)" % (len(argv) - SLOWLOG_MAX_ARGS + 1))
            break
        if len(arg) > SLOWLOG_MAX_ARG_LEN:
            arg = arg[:SLOWLOG_MAX_ARG_LEN] + b"... (%d more bytes)" % (len(arg) - SLOWLOG_MAX_ARG_LEN)
        kept.append(arg)
    return kept


class JobCounters:
    """What happened to jobs on this node since it started: plain ints the
    job paths increment (no allocation on the path), read at scrape time by
    the metrics collectors and the dashboard. Monotonic: CONFIG RESETSTAT
    leaves them, as Prometheus expects of a counter.

    ``added`` counts the jobs ADDJOB created here, ``delivered`` the jobs
    handed to this node's consumers, ``acked`` those its clients ACKJOBed or
    FASTACKed, ``nacked`` its NACKs (a NACK ... DELAY when it falls due),
    ``requeued`` retry timeouts that queued a job again, ``expired`` and
    ``evicted`` jobs dropped at their TTL or under memory pressure,
    ``dead_lettered`` jobs moved to their dead-letter queue here.
    """

    def __init__(self) -> None:
        self.added = 0
        self.delivered = 0
        self.acked = 0
        self.nacked = 0
        self.requeued = 0
        self.expired = 0
        self.evicted = 0
        self.dead_lettered = 0


class LatencyHistogram:
    """Durations counted in fixed buckets, as ints, in one integer unit
    (ms for replication waits, µs for AOF fsyncs): an observation is a few
    comparisons and increments; the metrics collector turns the counts into
    a Prometheus histogram at scrape time."""

    def __init__(self, bounds: tuple[int, ...]) -> None:
        self.bounds = bounds
        # counts[i]: observations in (bounds[i-1], bounds[i]]; the last one
        # counts those above the largest bound.
        self.counts = [0] * (len(bounds) + 1)
        self.count = 0
        self.total = 0

    def observe(self, duration: int) -> None:
        """Count one duration."""
        bounds = self.bounds
        n = len(bounds)
        i = 0
        while i < n and duration > bounds[i]:
            i += 1
        self.counts[i] += 1
        self.count += 1
        self.total += duration


class Stats:
    """Counters kept by the node; the server adds network counters."""

    def __init__(self) -> None:
        self.commands_processed = 0
        self.slowlog: deque[SlowlogEntry] = deque()
        self.slowlog_next_id = 0
        self._slowlog_threshold_us = 10000
        self.slowlog_max_len = 128
        self._latency_threshold_ms = 0
        # Commands this slow may go to the slow log / latency monitor (inf: none).
        self.notice_us: float = 10000.0
        self.latency: dict[str, deque[tuple[int, int]]] = {}  # event -> (unix s, ms) samples
        self.latency_max: dict[str, int] = {}
        self.ops_samples: deque[tuple[int, int]] = deque(maxlen=16)  # (ms, commands)
        self.getjob_queues_refused = 0  # GETJOBs naming more than getjob-max-queues (INFO limits)
        self.quota_refused = 0  # ADDJOBs refused for their user's quota (INFO limits)

    @property
    def slowlog_threshold_us(self) -> int:
        """slowlog-log-slower-than (negative: disabled)."""
        return self._slowlog_threshold_us

    @slowlog_threshold_us.setter
    def slowlog_threshold_us(self, value: int) -> None:
        self._slowlog_threshold_us = value
        self._update_notice()

    @property
    def latency_threshold_ms(self) -> int:
        """latency-monitor-threshold (0: disabled)."""
        return self._latency_threshold_ms

    @latency_threshold_ms.setter
    def latency_threshold_ms(self, value: int) -> None:
        self._latency_threshold_ms = value
        self._update_notice()

    def _update_notice(self) -> None:
        # One comparison per command on the hot path instead of two tests.
        limits = [self._slowlog_threshold_us] if self._slowlog_threshold_us >= 0 else []
        if self._latency_threshold_ms > 0:
            limits.append(self._latency_threshold_ms * 1000)
        self.notice_us = min(limits) if limits else float("inf")

    def command_slow(self, fast: bool, argv: list[bytes], usec: int, now_ms: int) -> None:
        """Slow log and latency monitor for a command that may deserve them
        (``fast``: a command flagged fast, which the latency monitor names apart)."""
        threshold = self.slowlog_threshold_us
        if threshold >= 0 and usec >= threshold:
            self.log_slow(argv, usec, now_ms)
        if self.latency_threshold_ms and usec >= self.latency_threshold_ms * 1000:
            self.add_latency("fast-command" if fast else "command", usec // 1000, now_ms)

    def log_slow(self, argv: list[bytes], usec: int, now_ms: int) -> None:
        """Add a slow log entry, keeping at most slowlog-max-len."""
        self.slowlog.appendleft(SlowlogEntry(self.slowlog_next_id, now_ms // 1000, usec,
                                             _trim_argv(argv)))
        self.slowlog_next_id += 1
        while len(self.slowlog) > max(self.slowlog_max_len, 0):
            self.slowlog.pop()

    def add_latency(self, event: str, ms: int, now_ms: int) -> None:
        """Record a latency sample for ``event`` (one per second kept)."""
        samples = self.latency.get(event)
        if samples is None:
            samples = self.latency[event] = deque(maxlen=LATENCY_HISTORY)
        when = now_ms // 1000
        if samples and samples[-1][0] == when:
            if ms > samples[-1][1]:
                samples[-1] = (when, ms)
        else:
            samples.append((when, ms))
        self.latency_max[event] = max(self.latency_max.get(event, 0), ms)

    def sample_ops(self, now_ms: int) -> None:
        """Cron: remember the command counter for instantaneous_ops_per_sec."""
        self.ops_samples.append((now_ms, self.commands_processed))

    def ops_per_sec(self) -> int:
        """Commands per second over the recent samples."""
        if len(self.ops_samples) < 2:
            return 0
        (t0, c0), (t1, c1) = self.ops_samples[0], self.ops_samples[-1]
        return int((c1 - c0) * 1000 / (t1 - t0)) if t1 > t0 else 0

    def reset(self) -> None:
        """CONFIG RESETSTAT."""
        self.commands_processed = 0
        self.ops_samples.clear()
