"""The verdict of a chaos run (chaos.history): what counts as lost, as a
duplicate and why, and when a delivery after an ACK is a violation."""

from __future__ import annotations

from chaos.history import (ACK_FAILED, ACK_GRACE_S, ACKED, FORGOT, NACKED, SETTLE_S, Delivery,
                           History, Produced)


def _added(history: History, body: bytes, repl: int = 2, outcome: str = "ok") -> Produced:
    record = Produced(body, b"q", repl, "n0", 0.0, outcome, b"D-" + body)
    history.sent(record)
    return record


def _got(history: History, body: bytes, at: float, action: str = ACKED,
         ack_done_at: float | None = None) -> None:
    if action == ACKED and ack_done_at is None:
        ack_done_at = at + 0.01
    history.delivered(Delivery(body, b"D-" + body, "n1", at, action, ack_done_at))


def test_lost_counts_only_acknowledged_replicated_jobs():
    history = History()
    _added(history, b"kept")
    _added(history, b"lost")
    _added(history, b"single", repl=1)
    _added(history, b"noreply", outcome="unknown")
    _added(history, b"refused", outcome="error")
    _got(history, b"kept", 1.0)
    verdict = history.judge()
    assert [r.body for r in verdict.lost] == [b"lost"]
    assert verdict.lost_repl1 == 1 and verdict.add_unknown == 1 and verdict.add_errors == 1
    assert verdict.acknowledged == 3 and verdict.acknowledged_protected == 2
    assert verdict.failed


def test_duplicates_are_explained_by_the_delivery_before():
    history = History()
    for body, action in ((b"a", NACKED), (b"b", FORGOT), (b"c", ACK_FAILED)):
        _added(history, body)
        _got(history, body, 1.0, action)
        _got(history, body, 8.0)
    _added(history, b"d")
    _got(history, b"d", 1.0, ACKED, ack_done_at=9.0)  # the ACK came back after the redelivery
    _got(history, b"d", 6.0)
    verdict = history.judge()
    assert verdict.duplicates == 4 and not verdict.failed
    assert verdict.duplicate_reasons == {"NACKed": 1, "worker forgot it (RETRY)": 1,
                                         "its ACKJOB failed": 1,
                                         "came again before its ACK (RETRY, another copy)": 1}


def test_delivery_after_ack_is_a_violation_only_on_a_calm_cluster():
    history = History()
    _added(history, b"calm")
    _got(history, b"calm", 100.0)
    _got(history, b"calm", 100.0 + ACK_GRACE_S + 1)
    _added(history, b"faulty")
    _got(history, b"faulty", 200.0)
    _got(history, b"faulty", 210.0)
    fault = history.fault("kill", ("n2",), 205.0)
    fault.end = 206.0
    _added(history, b"grace")
    _got(history, b"grace", 300.0)
    _got(history, b"grace", 300.0 + ACK_GRACE_S / 2)  # the SETACK was still on its way
    verdict = history.judge()
    assert len(verdict.after_ack_violations) == 1
    assert "D-calm" in verdict.after_ack_violations[0]
    assert verdict.after_ack_explained == 1
    # A fault that ended less than SETTLE_S before the ACK also explains it.
    assert not history.calm(206.0 + SETTLE_S - 1, 220.0) and history.calm(206.0 + SETTLE_S + 1,
                                                                          220.0)


def test_unknown_bodies_fail():
    history = History()
    history.delivered(Delivery(b"stranger", b"D-x", "n0", 1.0))
    verdict = history.judge()
    assert verdict.unknown_bodies == [b"stranger"] and verdict.failed
