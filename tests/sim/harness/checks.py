"""Internal consistency of one node's state (checked between events).

These are the data-structure invariants every handler must preserve
whatever arrives: a queued job is in its queue and nowhere else, every
registered job has a timer, blocked clients and the queues they wait on
agree, the memory estimate matches the dataset, the node table is sane.
"""

from __future__ import annotations

from disque.context.clients import Block
from disque.cluster.membership import HANDSHAKE, MYSELF
from disque.jobs.job import ACKED, ACTIVE, QUEUED, WAIT_REPL
from disque.context.memory import BASE_MEMORY, job_cost, queue_cost

from tests.sim.harness.clients import SimFailure

_STATES = (WAIT_REPL, ACTIVE, QUEUED, ACKED)


def node_problems(node) -> list[str]:
    """Every broken invariant of ``node`` (empty when consistent)."""
    problems: list[str] = []
    add = problems.append
    jobs = node.state.jobs
    queues = node.state.queues
    memory = BASE_MEMORY
    for job_id, job in jobs.items():
        where = job_id.decode("latin-1")
        memory += job_cost(job)
        if job.id != job_id:
            add("%s registered under another ID" % where)
        if job.state not in _STATES:
            add("%s has state %r" % (where, job.state))
        if job.seq < 0:
            add("%s registered but not in the scan index" % where)
        if not job.awakeme:
            add("%s has no timer" % where)
        if len(set(job.delivered)) != len(job.delivered):
            add("%s has duplicated nodes-delivered %r" % (where, job.delivered))
        if job.queue is None and job.state != ACKED:
            # (A dummy ACK may learn holders from a late REPLJOB: C merges them too.)
            add("%s: dummy ACK in state %r" % (where, job.state))
        if job.state == QUEUED:
            queue = queues.get(job.queue)
            if queue is None:
                add("%s queued but its queue %r does not exist" % (where, job.queue))
            elif job not in queue.jobs:
                add("%s queued but not in queue %r" % (where, job.queue))
        elif job.queue in queues and job in queues[job.queue].jobs:
            add("%s in state %r but linked in its queue" % (where, job.state))
        if job.state == WAIT_REPL:
            client = node.state.blocked.producers.get(job_id)
            if client is None:
                add("%s waits for replication but no producer waits for it" % where)
            if job.confirmed is None:
                add("%s waits for replication without a confirmed set" % where)
        if job.state == ACKED and job not in node.state.jobs.evictable:
            add("%s acked but not evictable" % where)
    for name, queue in queues.items():
        memory += queue_cost(name)
        if queue.name != name:
            add("queue %r registered as %r" % (queue.name, name))
        count = 0
        for job in queue.jobs.iter_from_head():
            count += 1
            if jobs.get(job.id) is not job:
                add("queue %r holds unregistered job %s" % (name, job.id.decode("latin-1")))
            elif job.state != QUEUED:
                add("queue %r holds %s in state %r" % (name, job.id.decode("latin-1"),
                                                          job.state))
            if job.queue != name:
                add("queue %r holds a job of queue %r" % (name, job.queue))
            if count > len(jobs) + 1:
                add("queue %r skiplist loops" % name)
                break
        if count != len(queue.jobs):
            add("queue %r length %d but %d linked" % (name, len(queue.jobs), count))
        for client in queue.blocked or ():
            block = client.blocked
            if block is None or block.kind != Block.GETJOB or queue not in block.queues:
                add("queue %r lists a client that is not blocked on it" % name)
    if memory != node.state.used_memory:
        add("used_memory %d but the dataset costs %d" % (node.used_memory, memory))
    for client in node.state.blocked.clients:
        block = client.blocked
        if block is None:
            add("client %d in blocked_clients but not blocked" % client.id)
            continue
        if block.kind == Block.GETJOB:
            for queue in block.queues:
                if queues.get(queue.name) is not queue:
                    add("client %d blocked on destroyed queue %r" % (client.id, queue.name))
                elif not queue.blocked or client not in queue.blocked:
                    add("client %d blocked on %r but not listed there" % (client.id, queue.name))
        elif node.state.blocked.producers.get(block.job_id) is not client:
            add("ADDJOB client %d not registered as waiting for its job" % client.id)
    for job_id, client in node.state.blocked.producers.items():
        if client not in node.state.blocked.clients:
            add("replication waiter for %s is not blocked" % job_id.decode("latin-1"))
        job = jobs.get(job_id)
        if job is None or job.state != WAIT_REPL:
            add("producer waits for %s which is %r" % (job_id.decode("latin-1"), job))
    membership = node.state.membership
    if membership.nodes.get(node.state.id) is not membership.myself:
        add("myself missing from the node table")
    if not membership.myself.flags & MYSELF:
        add("myself lost its MYSELF flag")
    for node_id, entry in membership.nodes.items():
        if entry.id != node_id:
            add("node table entry %r registered as %r" % (entry.id, node_id))
        if node_id != node.state.id and entry.flags & MYSELF:
            add("a second node has the MYSELF flag")
    size = sum(1 for n in membership.nodes.values() if not n.flags & HANDSHAKE)
    if size != membership.size:
        add("cluster size %d but %d non-handshake nodes" % (membership.size, size))
    return problems


def check_node(node, label: str = "") -> None:
    """Raise SimFailure listing every broken invariant of ``node``."""
    problems = node_problems(node)
    if problems:
        raise SimFailure("%s inconsistent state:\n  %s" % (label or node.state.id[:8].decode(),
                                                             "\n  ".join(problems[:20])))


def check_cluster(sim) -> None:
    """``check_node`` on every live node of ``sim``."""
    for sn in sim.nodes:
        if sn.node is not None:
            check_node(sn.node, sn.name)
