"""What the clients of a chaos run saw, and the verdict on it.

Every job body is unique, so each delivery names the ADDJOB it came from.
Times are ``time.monotonic()`` of the driver. The verdict:

* **lost**: jobs whose ADDJOB with REPLICATE >= 2 returned an ID to the
  producer and that no consumer ever received. Must be 0: every node runs
  with its AOF, a killed node restarts with its jobs, and the run ends
  with every node up and the network whole (docs/testing.md says why the
  AOF's records are on disk before the reply even with ``appendfsync
  no``: a SIGKILL does not lose the page cache).
* **duplicates**: deliveries beyond the first of a job, each explained by
  what happened to the delivery before it: the worker NACKed it, forgot
  it (a crashed worker: the job comes back after RETRY), its ACKJOB
  failed, or it was not acknowledged yet when the job came again (the
  RETRY timer of another copy, a node paused or cut off while holding
  it, a node restarted from its AOF requeues what it held). At-least-once
  delivery allows all of them.
* **delivered after its ACK**: a delivery received more than
  ``ACK_GRACE_S`` after an ACKJOB of the same job was acknowledged. Allowed
  only when a fault overlapped the time in between (a node that held a
  copy was killed, paused or cut off and did not hear of the ACK: it
  requeues its copy, as Disque's at-least-once design says); with the
  cluster calm from ``SETTLE_S`` before the ACK to the delivery it is a
  violation.
* **unknown bodies**: a delivery of a body no producer sent. Must be 0.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

ACK_GRACE_S = 1.0  # SETACK travel time on a calm network, with margin
SETTLE_S = 5.0  # after a fault ends, links and failure flags are back well within this

# What a consumer did with a delivery.
ACKED = "acked"
ACK_FAILED = "ack-failed"
NACKED = "nacked"
FORGOT = "forgot"


@dataclass
class Produced:
    body: bytes
    queue: bytes
    repl: int
    node: str
    sent_at: float
    outcome: str = "pending"  # "ok" (an ID came back), "error", "unknown" (no reply)
    job_id: bytes | None = None
    error: str = ""


@dataclass
class Delivery:
    body: bytes
    job_id: bytes
    node: str
    at: float
    action: str = ""
    ack_done_at: float | None = None  # the ACKJOB's reply came back (integer)


@dataclass
class Fault:
    kind: str
    nodes: tuple[str, ...]
    start: float
    end: float | None = None


@dataclass
class Verdict:
    produced: int = 0
    acknowledged: int = 0
    acknowledged_protected: int = 0
    add_errors: int = 0
    add_unknown: int = 0
    delivered_jobs: int = 0
    deliveries: int = 0
    duplicates: int = 0
    duplicate_reasons: dict[str, int] = field(default_factory=dict)
    lost: list[Produced] = field(default_factory=list)
    lost_repl1: int = 0
    unknown_delivered: int = 0
    after_ack_explained: int = 0
    after_ack_violations: list[str] = field(default_factory=list)
    unknown_bodies: list[bytes] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return bool(self.lost or self.after_ack_violations or self.unknown_bodies)


class History:
    """Thread-safe record of one run."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.produced: dict[bytes, Produced] = {}
        self.deliveries: list[Delivery] = []
        self.faults: list[Fault] = []

    def sent(self, record: Produced) -> None:
        with self.lock:
            self.produced[record.body] = record

    def delivered(self, delivery: Delivery) -> None:
        with self.lock:
            self.deliveries.append(delivery)

    def fault(self, kind: str, nodes: tuple[str, ...], start: float) -> Fault:
        fault = Fault(kind, nodes, start)
        with self.lock:
            self.faults.append(fault)
        return fault

    def calm(self, start: float, end: float) -> bool:
        """No fault was active from ``start - SETTLE_S`` to ``end``."""
        for fault in self.faults:
            fault_end = fault.end if fault.end is not None else float("inf")
            if fault.start <= end and fault_end >= start - SETTLE_S:
                return False
        return True

    def judge(self) -> Verdict:
        verdict = Verdict()
        by_body: dict[bytes, list[Delivery]] = {}
        for delivery in sorted(self.deliveries, key=lambda d: d.at):
            if delivery.body not in self.produced:
                verdict.unknown_bodies.append(delivery.body)
                continue
            by_body.setdefault(delivery.body, []).append(delivery)
        reasons = verdict.duplicate_reasons
        for record in self.produced.values():
            verdict.produced += 1
            got = by_body.get(record.body, [])
            if record.outcome == "ok":
                verdict.acknowledged += 1
                if record.repl >= 2:
                    verdict.acknowledged_protected += 1
                    if not got:
                        verdict.lost.append(record)
                elif not got:
                    verdict.lost_repl1 += 1
            elif record.outcome == "error":
                verdict.add_errors += 1
            else:
                verdict.add_unknown += 1
                if got:
                    verdict.unknown_delivered += 1
            if got:
                verdict.delivered_jobs += 1
            verdict.deliveries += len(got)
            acks = sorted(d.ack_done_at for d in got if d.ack_done_at is not None)
            for previous, delivery in zip(got, got[1:]):
                verdict.duplicates += 1
                acked_before = [a for a in acks if a + ACK_GRACE_S < delivery.at]
                if acked_before:
                    if self.calm(acked_before[0], delivery.at):
                        verdict.after_ack_violations.append(
                            "%s (%s) delivered by %s %.1f s after its ACK was acknowledged, "
                            "with no fault since %.0f s before the ACK" % (
                                delivery.job_id.decode(errors="replace"), record.body.decode(),
                                delivery.node, delivery.at - acked_before[0], SETTLE_S))
                    else:
                        verdict.after_ack_explained += 1
                    reason = "after its ACK, a fault in between"
                elif previous.action == NACKED:
                    reason = "NACKed"
                elif previous.action == FORGOT:
                    reason = "worker forgot it (RETRY)"
                elif previous.action == ACK_FAILED:
                    reason = "its ACKJOB failed"
                else:
                    reason = "came again before its ACK (RETRY, another copy)"
                reasons[reason] = reasons.get(reason, 0) + 1
        return verdict
