"""How long to wait: before a failed job is delivered again, and between reconnect attempts."""

from __future__ import annotations


def nack_delay(nacks: int | None, base: float, cap: float) -> int:
    """Seconds a failed job waits before its next delivery: ``base`` doubled for each
    earlier NACK, at most ``cap``; whole seconds, as ``NACK ... DELAY`` takes them.
    0 (``base`` 0) asks for a plain NACK."""
    if base <= 0:
        return 0
    exponent = min(nacks or 0, 32)  # 2**32 seconds is past any cap
    return max(1, int(min(base * (1 << exponent), cap)))


class Backoff:
    """Waits between attempts that keep failing: ``first`` doubled up to ``cap``,
    back to ``first`` after a success."""

    def __init__(self, first: float = 0.1, cap: float = 2.0) -> None:
        self.first = first
        self.cap = cap
        self.current = first

    def next(self) -> float:
        """The wait before the next attempt (and double the one after)."""
        wait = self.current
        self.current = min(self.current * 2, self.cap)
        return wait

    def reset(self) -> None:
        """An attempt succeeded: the next failure waits ``first`` again."""
        self.current = self.first
