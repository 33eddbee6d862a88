"""Knobs of a run: the full sizes the benchmark's figures are measured at,
and smaller ``--quick`` ones that only check the harness."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Settings:
    """Sizes shared by all sections."""

    clients: int = 50  # redis-benchmark -c
    requests: int = 200_000  # redis-benchmark -n
    repeats: int = 3  # redis-benchmark samples per server; the median is reported
    body_bytes: int = 64
    cycle_duration: float = 10.0  # seconds measured per produce/consume run
    cycle_warmup: float = 1.0
    cycle_rate: float = 5_000.0  # jobs/s offered in the fixed-rate run
    memory_jobs: int = 1_000_000
    quick: bool = False

    @classmethod
    def for_quick_run(cls) -> "Settings":
        """About a tenth of the work: for checking the harness, not for numbers."""
        return cls(requests=20_000, cycle_duration=2.0, cycle_warmup=0.5,
                   memory_jobs=100_000, quick=True)
