"""Acknowledgement propagation and garbage collection: SETACK, GOTACK, DELJOB.

spec: cluster-bus.md §6.6. The GC attempt itself is
``JobLifecycle.gc_attempt`` because the job timer drives it.
"""

from __future__ import annotations

from disque.cluster import messages as m
from disque.cluster.lifecycle import JobLifecycle
from disque.cluster.membership import Membership
from disque.cluster.outbox import Outbox
from disque.cluster.replication import Replication
from disque.cluster.transport import Link
from disque.jobs.job import ACKED, WAIT_REPL, Job
from disque.jobs.registry import JobRegistry
from disque.context.runtime import Runtime


class AckPropagation:
    """Receivers of the ACK messages."""

    def __init__(self, runtime: Runtime, registry: JobRegistry, lifecycle: JobLifecycle,
                 replication: Replication, membership: Membership, outbox: Outbox) -> None:
        self.runtime = runtime
        self.registry = registry
        self.lifecycle = lifecycle
        self.replication = replication
        self.membership = membership
        self.outbox = outbox

    def on_setack(self, sender: bytes, msg: dict, link: Link) -> None:
        """Another node acked a job: ack it here and confirm (§6.6)."""
        job_id = msg[m.ID]
        may_have = msg.get(m.MAY_HAVE, 0)
        job = self.registry.by_id.get(job_id)
        if job is not None and job.state == WAIT_REPL:
            self.replication.replication_achieved(job)
            job = self.registry.by_id.get(job_id)
        if job is not None:
            self.lifecycle.ack_job(job)
        if job is None or not self._knows_more_holders(job, msg, may_have):
            self.outbox.send_to(sender, {m.TYPE: m.GOTACK, m.ID: job_id,
                                         m.KNOWN: int(job is not None)})
            return
        if may_have == 0:
            self.outbox.send_to(sender, {m.TYPE: m.GOTACK, m.ID: job_id, m.KNOWN: 1})
        self.lifecycle.gc_attempt(job)  # this node knows more holders: it takes over the GC

    def _knows_more_holders(self, job: Job, msg: dict, may_have: int) -> bool:
        """This copy lists a holder the SETACK sender does not know about.

        C compares list sizes (|D| > may_have); two lists of equal size can
        differ, typically after NEEDJOBS handed the job to different nodes,
        and the unknown holder would never hear of the ACK and redeliver
        the job. When the sender lists its holders (HOLDERS, our
        extension), compare memberships instead, and adopt the sender's
        holders: the node taking over the GC then knows a superset, so two
        half-informed nodes never wait for each other's GOTACK.
        """
        holders = msg.get(m.HOLDERS)
        if type(holders) is not list:
            return len(job.delivered) > may_have
        if all(node_id in holders for node_id in job.delivered):
            return False
        known = self.membership.nodes
        job.merge_delivered([n for n in holders if type(n) is bytes and n in known])
        return True

    def on_gotack(self, sender: bytes, msg: dict, link: Link) -> None:
        """A node confirmed it holds the ACK (§6.6)."""
        job = self.registry.by_id.get(msg[m.ID])
        if job is None or job.state != ACKED:
            return
        known = bool(msg.get(m.KNOWN))
        dummy = not job.delivered
        if dummy and known:
            self.lifecycle.delete_job(job)  # a real holder will finish the GC
            return
        if known or sender in job.delivered:
            job.add_delivered(sender)
            if job.confirmed is not None:
                job.confirmed.add(sender)
        if dummy:
            if job.confirmed is None:
                job.confirmed = {self.runtime.node_id}
            job.confirmed.add(sender)
            if len(job.confirmed) >= len(self.membership.nodes):
                self.lifecycle.delete_job(job)  # nobody knows this job
            return
        if job.confirmed is not None and job.confirmed.issuperset(job.delivered):
            self.outbox.send_to_holders(job, m.job_message(m.DELJOB, job.id))
            self.lifecycle.delete_job(job)

    def on_deljob(self, sender: bytes, msg: dict, link: Link) -> None:
        """Forget a job whatever its state (GC completion, FASTACK, failed ADDJOB)."""
        job = self.registry.by_id.get(msg[m.ID])
        if job is not None:
            if job.state != ACKED:
                # Not the GC of an acked job: its ADDJOB failed (or a FASTACK), and
                # its DEDUPID must not name it here any more (docs/dedup.md).
                self.lifecycle.dedup.forget_job(job)
            self.lifecycle.delete_job(job)
