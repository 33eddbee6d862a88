"""What a section returns: named values with units, references and targets.

A measurement compares either its own value or its ratio to a reference
measured in the same run against a target; ``to_dict`` is the JSON shape
of one entry in the report.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Literal

if TYPE_CHECKING:
    from bench.servers import Servers
    from bench.settings import Settings


@dataclass(frozen=True)
class Target:
    """A pass/fail threshold on a measurement's ``value`` or its ``ratio`` to the reference."""

    on: Literal["value", "ratio"]
    op: Literal[">=", "<="]
    threshold: float

    def check(self, observed: float) -> bool:
        """True when ``observed`` meets the threshold."""
        return observed >= self.threshold if self.op == ">=" else observed <= self.threshold

    def to_dict(self) -> dict[str, Any]:
        """JSON shape: ``{"on": "ratio", "op": ">=", "value": 0.6}``."""
        return {"on": self.on, "op": self.op, "value": self.threshold}


@dataclass(frozen=True)
class Reference:
    """The same workload against the reference server, measured in the same run."""

    name: str
    value: float
    samples: list[float] = field(default_factory=list)


@dataclass
class Measurement:
    """One reported number (a median when there are several samples)."""

    name: str
    description: str
    value: float
    unit: str
    samples: list[float] = field(default_factory=list)
    reference: Reference | None = None
    target: Target | None = None
    details: dict[str, Any] = field(default_factory=dict)
    section: str = ""  # the section that measured it, set by the run

    @property
    def ratio(self) -> float | None:
        """value / reference value, or None without a (non-zero) reference."""
        if self.reference is None or not self.reference.value:
            return None
        return self.value / self.reference.value

    @property
    def passed(self) -> bool | None:
        """Whether the target is met; None when there is no target."""
        if self.target is None:
            return None
        observed = self.ratio if self.target.on == "ratio" else self.value
        return observed is not None and self.target.check(observed)

    def to_dict(self) -> dict[str, Any]:
        """The JSON entry for this measurement (floats rounded for reading)."""
        out: dict[str, Any] = {"name": self.name, "description": self.description,
                               "value": _round(self.value), "unit": self.unit}
        if self.section:
            out["section"] = self.section
        if self.samples:
            out["samples"] = [_round(s) for s in self.samples]
        if self.reference is not None:
            out["reference"] = {"name": self.reference.name,
                                "value": _round(self.reference.value)}
            if self.reference.samples:
                out["reference"]["samples"] = [_round(s) for s in self.reference.samples]
            out["ratio"] = None if self.ratio is None else round(self.ratio, 3)
        if self.target is not None:
            out["target"] = self.target.to_dict()
            out["pass"] = self.passed
        if self.details:
            out["details"] = self.details
        return out


class SectionSkipped(Exception):
    """A section that cannot run on this machine (what it needs is absent):
    the report lists it with the reason instead of figures."""


# A section: runs against the run's servers and returns what it measured.
Section = Callable[["Servers", "Settings"], list["Measurement"]]


def median(samples: list[float]) -> float:
    """Median of the samples (the middle one of three shrugs off a single noisy run)."""
    return statistics.median(samples)


def _round(x: float) -> float:
    """Three decimals are plenty for rates, milliseconds and bytes."""
    return round(float(x), 3)
