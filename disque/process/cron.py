"""When the node's time-driven work runs: one timer handle that fires at
the node's next due time (job timers, blocked clients' deadlines, rate
limits), and the periodic pass, ``hz`` times a second, that survives a
bug in any one run of it."""

from __future__ import annotations

import asyncio
import time
from typing import Callable, Protocol

from disque.context.log import logger
from disque.jobs.timers import NEVER

TIMER_SLACK_MS = 1


class TimedNode(Protocol):
    """What the schedule drives of the node (``disque.node.Node``)."""

    def next_timer(self) -> int:
        """The ms at which ``run_timers`` next has work (NEVER when idle)."""

    def run_timers(self) -> None:
        """Fire due job timers and blocked clients' timeouts."""


class ServerCron:
    """The node's timer and the server's periodic pass (``tick``)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, node: TimedNode,
                 hz: Callable[[], int], tick: Callable[[], None]) -> None:
        self.loop = loop
        self.node = node
        self.hz = hz
        self.tick = tick
        self.timer_handle: asyncio.TimerHandle | None = None
        self.timer_at = NEVER
        self.cron_handle: asyncio.TimerHandle | None = None

    def arm_timer(self) -> None:
        """Make sure the single timer handle fires at the node's next due time."""
        due = self.node.next_timer()
        if due >= self.timer_at:
            return
        handle = self.timer_handle
        if handle is not None:
            handle.cancel()
        self.timer_at = due
        delay = max(0.0, (due - time.time_ns() // 1_000_000 + TIMER_SLACK_MS) / 1000)
        self.timer_handle = self.loop.call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        self.timer_handle = None
        self.timer_at = NEVER
        self.node.run_timers()
        self.arm_timer()

    def schedule(self) -> None:
        """Run the periodic pass 1/hz from now (again after hz changed)."""
        if self.cron_handle is not None:
            self.cron_handle.cancel()
        self.cron_handle = self.loop.call_later(1 / self.hz(), self._cron)

    def _cron(self) -> None:
        self.cron_handle = None
        try:
            self.tick()
        except Exception:  # the cron must survive any bug in one pass
            logger.exception("Error in server cron")
        self.schedule()
        self.arm_timer()
