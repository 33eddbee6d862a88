"""ADDJOB (spec: commands.md §0 and §1 ADDJOB, jobs-and-ids.md §1, §5, §6,
reference-transcripts.md §1.2 and §1.4)."""

from __future__ import annotations

import pytest

from disque.cluster import messages as m
from disque.cluster.membership import FAIL, HANDSHAKE, LEAVING, PFAIL
from disque.jobs.job import WAIT_REPL
from tests.unit.helpers import (
    NODE_ID,
    PEER_ID,
    START_MS,
    Cmd,
    add_peer,
    advance,
    deliver,
    make_node,
)

WRONG_ARITY = b"-ERR wrong number of arguments for 'addjob' command\r\n"
TIMEOUT_NOT_INT = b"-ERR timeout is not an integer or out of range\r\n"
TIMEOUT_NEG = b"-ERR timeout is negative\r\n"
REPLICATE_ERR = b"-ERR REPLICATE must be between 1 and 65535\r\n"
TTL_ERR = b"-ERR TTL must be a number > 0\r\n"
RETRY_ERR = b"-ERR RETRY time must be a non negative number\r\n"
DELAY_ERR = b"-ERR DELAY time must be a non negative number\r\n"
MAXLEN_ERR = b"-ERR MAXLEN must be a positive number\r\n"
SYNTAX = b"-ERR syntax error\r\n"
RETRY0 = (b"-ERR With RETRY set to 0 please explicitly set  REPLICATE to 1 "
          b"(at-most-once delivery)\r\n")
DELAY_TTL = (b"-ERR The specified DELAY is greater than TTL. Job refused since would never "
             b"be delivered\r\n")
NOREPL = b"-NOREPL Not enough reachable nodes for the requested replication level\r\n"
NOREPL_REASON = (b"-NOREPL Not enough reachable nodes for the requested replication level, "
                 b"since I'm unable to hold a copy of the message for the following reason: ")
NOREPL_LEAVING = NOREPL_REASON + b"I'm leaving the cluster\r\n"
NOREPL_OOM = NOREPL_REASON + b"I'm out of memory\r\n"
NOREPL_TIMEOUT = (b"-NOREPL Timeout reached before replicating to the requested number of "
                  b"nodes\r\n")
NOREPL_REMOVED = (b"-NOREPL job removed (expired?) before the requested replication level "
                  b"was achieved\r\n")
MAXLEN_EXCEEDED = b"-MAXLEN Queue is already longer than the specified MAXLEN count\r\n"
PAUSED = b"-PAUSED Queue paused in input, try later\r\n"
OOM = b"-OOM command not allowed when used memory > 'maxmemory'.\r\n"


# ------------------------------------------------------------------ arity

@pytest.mark.parametrize("args", [["ADDJOB"], ["ADDJOB", "q"], ["ADDJOB", "q", "body"],
                                  ["addjob", "q", "body"]])
def test_arity(cmd, args):
    assert cmd.raw(*args) == WRONG_ARITY


# -------------------------------------------------------------- the timeout

@pytest.mark.parametrize("timeout", ["abc", "1.5", "99999999999999999999", " 1", "1 ", "0x10",
                                     "--1", "+"])
def test_timeout_not_integer(cmd, timeout):
    assert cmd.raw("ADDJOB", "q", "body", timeout) == TIMEOUT_NOT_INT


@pytest.mark.parametrize("timeout", ["-1", "-9223372036854775808"])
def test_timeout_negative(cmd, timeout):
    assert cmd.raw("ADDJOB", "q", "body", timeout) == TIMEOUT_NEG


@pytest.mark.parametrize("timeout", ["0", "+5", "", "9223372036854775807", "100"])
def test_timeout_accepted(cmd, timeout):
    assert cmd.raw("ADDJOB", "q", "body", timeout).startswith(b"+D-")


# -------------------------------------------------------------- option values

@pytest.mark.parametrize("options, reply", [
    (["REPLICATE", "0"], REPLICATE_ERR), (["REPLICATE", "70000"], REPLICATE_ERR),
    (["REPLICATE", "65536"], REPLICATE_ERR), (["REPLICATE", "x"], REPLICATE_ERR),
    (["REPLICATE", "-1"], REPLICATE_ERR), (["REPLICATE", ""], REPLICATE_ERR),
    (["TTL", "0"], TTL_ERR), (["TTL", "-5"], TTL_ERR), (["TTL", "x"], TTL_ERR),
    (["TTL", ""], TTL_ERR),
    (["RETRY", "-1"], RETRY_ERR), (["RETRY", "1.0"], RETRY_ERR),
    (["DELAY", "-1"], DELAY_ERR), (["DELAY", "z"], DELAY_ERR),
    (["MAXLEN", "0"], MAXLEN_ERR), (["MAXLEN", "-3"], MAXLEN_ERR), (["MAXLEN", "x"], MAXLEN_ERR),
    (["MAXLEN", ""], MAXLEN_ERR),
    (["REPLICATE"], SYNTAX), (["TTL"], SYNTAX), (["RETRY"], SYNTAX), (["DELAY"], SYNTAX),
    (["MAXLEN"], SYNTAX), (["BOGUS"], SYNTAX), (["BOGUS", "1"], SYNTAX),
    (["ASYNC", "1"], SYNTAX), (["TTL", "10", "REPLICATE"], SYNTAX),
])
def test_option_errors(cmd, options, reply):
    assert cmd.raw("ADDJOB", "q", "body", "0", *options) == reply


@pytest.mark.parametrize("options, reply", [
    (["TTL", "0", "REPLICATE", "0"], TTL_ERR),
    (["REPLICATE", "0", "TTL", "0"], REPLICATE_ERR),
    (["RETRY", "-1", "DELAY", "-1"], RETRY_ERR),
    (["DELAY", "-1", "RETRY", "-1"], DELAY_ERR),
    (["MAXLEN", "0", "TTL", "0"], MAXLEN_ERR),
    (["BOGUS", "TTL", "0"], SYNTAX),
    (["TTL", "0", "BOGUS"], TTL_ERR),
    (["ASYNC", "REPLICATE", "0"], REPLICATE_ERR),
])
def test_options_are_checked_left_to_right(cmd, options, reply):
    assert cmd.raw("ADDJOB", "q", "body", "0", *options) == reply


def test_options_are_parsed_before_the_timeout(cmd):
    assert cmd.raw("ADDJOB", "q", "body", "abc", "REPLICATE", "0") == REPLICATE_ERR
    assert cmd.raw("ADDJOB", "q", "body", "-1", "BOGUS") == SYNTAX
    assert cmd.raw("ADDJOB", "q", "body", "abc", "REPLICATE", "1") == TIMEOUT_NOT_INT


def test_keywords_are_case_insensitive_and_repeats_overwrite(cmd):
    job_id = cmd.addjob("q", "b", "ttl", "100", "TtL", "200", "retry", "7", "async", "delay", "1")
    job = cmd.show(job_id)
    assert (job["ttl"], job["retry"], job["delay"]) == (200, 7, 1)


# ---------------------------------------------------- later validation steps

def test_retry_zero_with_replicate_above_one(cmd):
    assert cmd.raw("ADDJOB", "q", "body", "0", "REPLICATE", "2", "RETRY", "0") == RETRY0
    # The empty string is RETRY 0 too.
    assert cmd.raw("ADDJOB", "q", "body", "0", "REPLICATE", "2", "RETRY", "") == RETRY0


def test_retry_zero_with_default_replicate_above_one():
    node = make_node()
    add_peer(node)
    cmd = Cmd(node)
    assert cmd.raw("ADDJOB", "q", "body", "0", "RETRY", "0") == RETRY0
    assert cmd.raw("ADDJOB", "q", "body", "0", "RETRY", "0", "REPLICATE", "1").startswith(b"+D-")


def test_timeout_is_checked_before_retry_zero_rule(cmd):
    assert cmd.raw("ADDJOB", "q", "b", "abc", "REPLICATE", "2", "RETRY", "0") == TIMEOUT_NOT_INT
    assert cmd.raw("ADDJOB", "q", "b", "-1", "REPLICATE", "2", "RETRY", "0") == TIMEOUT_NEG


def test_retry_zero_rule_before_delay_ttl_rule(cmd):
    reply = cmd.raw("ADDJOB", "q", "b", "0", "REPLICATE", "2", "RETRY", "0", "DELAY", "10",
                    "TTL", "10")
    assert reply == RETRY0


@pytest.mark.parametrize("delay, ttl", [("10", "10"), ("11", "10"), ("86400", None),
                                        ("100000", None)])
def test_delay_not_below_ttl(cmd, delay, ttl):
    options = ["DELAY", delay] + (["TTL", ttl] if ttl else [])
    assert cmd.raw("ADDJOB", "q", "b", "0", *options) == DELAY_TTL


def test_delay_just_below_ttl_is_accepted(cmd):
    assert cmd.raw("ADDJOB", "q", "b", "0", "DELAY", "9", "TTL", "10").startswith(b"+D-")


def test_delay_ttl_rule_before_reachability(cmd):
    reply = cmd.raw("ADDJOB", "q", "b", "0", "REPLICATE", "2", "DELAY", "10", "TTL", "5")
    assert reply == DELAY_TTL


def test_noreplication_on_a_single_node(cmd):
    assert cmd.raw("ADDJOB", "q", "body", "0", "REPLICATE", "2") == NOREPL
    assert cmd.raw("ADDJOB", "q", "body", "0", "REPLICATE", "65535") == NOREPL
    assert cmd.raw("ADDJOB", "q", "body", "0", "REPLICATE", "2", "ASYNC") == NOREPL


def test_reachability_counts_only_usable_nodes():
    node = make_node()
    for i, flags in enumerate((HANDSHAKE, PFAIL, FAIL, LEAVING)):
        peer = add_peer(node, b"%08d" % i + b"f" * 32)
        peer.flags = flags
    node.state.membership.recount()
    node.state.membership.update_reachable()
    cmd = Cmd(node)
    assert cmd.raw("ADDJOB", "q", "body", "0", "REPLICATE", "2") == NOREPL


def test_reachability_before_maxlen_and_paused(cmd):
    cmd.addjob("q", "x")
    assert cmd.ok("PAUSE", "q", "in") == b"in"
    assert cmd.raw("ADDJOB", "q", "b", "0", "REPLICATE", "2", "MAXLEN", "1") == NOREPL


def test_maxlen(cmd):
    assert cmd.raw("ADDJOB", "fresh", "b", "0", "MAXLEN", "1").startswith(b"+D-")
    assert cmd.raw("ADDJOB", "fresh", "b", "0", "MAXLEN", "1") == MAXLEN_EXCEEDED
    assert cmd.raw("ADDJOB", "fresh", "b", "0", "MAXLEN", "2").startswith(b"+D-")
    assert cmd.raw("ADDJOB", "fresh", "b", "0", "MAXLEN", "2") == MAXLEN_EXCEEDED
    assert cmd.ok("QLEN", "fresh") == 2


def test_maxlen_before_paused(cmd):
    cmd.addjob("q", "x")
    cmd.ok("PAUSE", "q", "in")
    assert cmd.raw("ADDJOB", "q", "b", "0", "MAXLEN", "1") == MAXLEN_EXCEEDED
    assert cmd.raw("ADDJOB", "q", "b", "0", "MAXLEN", "2") == PAUSED


def test_paused_in_refuses_paused_out_accepts(cmd):
    cmd.ok("PAUSE", "q", "in")
    assert cmd.raw("ADDJOB", "q", "z", "0") == PAUSED
    assert cmd.raw("ADDJOB", "q", "z", "0", "ASYNC") == PAUSED
    cmd.ok("PAUSE", "q", "out")
    assert cmd.raw("ADDJOB", "q", "z", "0").startswith(b"+D-")
    cmd.ok("PAUSE", "q", "all")
    assert cmd.raw("ADDJOB", "q", "z", "0") == PAUSED


def test_leaving_lone_node_cannot_hold_a_copy():
    node = make_node()
    node.state.membership.myself.flags |= LEAVING
    cmd = Cmd(node)
    assert cmd.raw("ADDJOB", "q", "b", "0") == NOREPL_LEAVING
    assert cmd.raw("ADDJOB", "q", "b", "0", "REPLICATE", "3") == NOREPL


def test_memory_warning_lone_node_cannot_hold_a_copy():
    node = make_node(maxmemory=1_000_000)  # used ~786 KB: above the 75 % level only
    assert node.state.memory.level() == 1
    cmd = Cmd(node)
    assert cmd.raw("ADDJOB", "q", "b", "0") == NOREPL_OOM
    assert cmd.raw("ADDJOB", "q", "b", "0", "REPLICATE", "2") == NOREPL


def test_oom_comes_before_every_addjob_check():
    node = make_node(maxmemory=1)
    cmd = Cmd(node)
    assert cmd.raw("ADDJOB", "q", "b", "0") == OOM
    assert cmd.raw("ADDJOB", "q", "b", "abc", "REPLICATE", "0") == OOM
    assert cmd.raw("ADDJOB", "q") == WRONG_ARITY  # arity comes first
    assert cmd.raw("PING") == b"+PONG\r\n"


def test_noauth_after_arity_before_everything_else():
    node = make_node(requirepass="secret")
    cmd = Cmd(node)
    assert cmd.raw("ADDJOB", "q") == WRONG_ARITY
    assert cmd.raw("ADDJOB", "q", "b", "abc") == b"-NOAUTH Authentication required.\r\n"
    assert cmd.raw("AUTH", "secret") == b"+OK\r\n"
    assert cmd.raw("ADDJOB", "q", "b", "abc") == TIMEOUT_NOT_INT


# ------------------------------------------------------------------ defaults

def test_reply_is_a_status_with_the_id(cmd):
    raw = cmd.raw("ADDJOB", "q", "body", "0")
    assert raw[:1] == b"+" and raw[-2:] == b"\r\n" and len(raw) == 43
    assert raw[1:12] == b"D-" + NODE_ID[:8] + b"-"
    assert raw[37:41] == b"05a1"


def test_defaults(cmd):
    job_id = cmd.addjob("q", "body")
    job = cmd.show(job_id)
    assert job["queue"] == b"q" and job["state"] == b"queued" and job["body"] == b"body"
    assert (job["repl"], job["ttl"], job["delay"], job["retry"]) == (1, 86400, 0, 300)
    assert job["ctime"] == START_MS * 1_000_000
    assert job["nodes-delivered"] == [NODE_ID] and job["nodes-confirmed"] == []
    assert (job["nacks"], job["additional-deliveries"]) == (0, 0)
    assert job_id.endswith(b"-05a1")


@pytest.mark.parametrize("ttl, retry, suffix", [
    (5, 1, b"0001"), (9, 1, b"0001"), (10, 1, b"0001"), (19, 1, b"0001"), (20, 2, b"0001"),
    (60, 6, b"0001"), (120, 12, b"0003"), (2999, 299, b"0031"), (3000, 300, b"0033"),
    (4000, 300, b"0043"), (86400, 300, b"05a1"), (10 ** 6, 300, b"411b"),
])
def test_default_retry_from_ttl(cmd, ttl, retry, suffix):
    job_id = cmd.addjob("q", "b", "TTL", ttl)
    assert cmd.show(job_id)["retry"] == retry
    assert job_id.endswith(b"-" + suffix)


def test_retry_zero_gives_an_even_ttl_field(cmd):
    assert cmd.addjob("q", "b", "RETRY", "0").endswith(b"-05a0")
    assert cmd.addjob("q", "b", "RETRY", "0", "TTL", "5").endswith(b"-0000")
    assert cmd.addjob("q", "b", "RETRY", "").endswith(b"-05a0")  # empty string is 0


def test_explicit_retry_is_kept(cmd):
    job_id = cmd.addjob("q", "b", "RETRY", "1000", "TTL", "60")
    assert cmd.show(job_id)["retry"] == 1000


def test_empty_queue_name_and_body(cmd):
    job_id = cmd.addjob("", "")
    job = cmd.show(job_id)
    assert job["queue"] == b"" and job["body"] == b""
    assert cmd.ok("QLEN", "") == 1


def test_binary_body(cmd):
    body = bytes(range(256)) * 4
    job_id = cmd.addjob("q", body)
    assert cmd.show(job_id)["body"] == body


def test_replicate_defaults_to_min_of_three_and_cluster_size():
    node = make_node()
    cmd = Cmd(node)
    add_peer(node)
    assert cmd.raw("ADDJOB", "q", "b", "0", "ASYNC").startswith(b"+D-")
    job_id = next(iter(node.state.jobs))
    assert cmd.show(job_id)["repl"] == 2
    for i in range(4):
        add_peer(node, b"%08d" % i + b"e" * 32)
    job_id = cmd.addjob("q", "b", "ASYNC")
    assert cmd.show(job_id)["repl"] == 3


def test_failed_nodes_count_in_the_default_but_not_as_reachable():
    node = make_node()
    peer = add_peer(node)
    peer.flags |= FAIL
    node.state.membership.update_reachable()
    # REPLICATE defaults to 2 (cluster size counts failed nodes), nobody reachable.
    assert Cmd(node).raw("ADDJOB", "q", "b", "0") == NOREPL


def test_ctime_strictly_increases_within_a_millisecond(cmd):
    ids = [cmd.addjob("q", str(i)) for i in range(5)]
    ctimes = [cmd.show(i)["ctime"] for i in ids]
    assert ctimes == [START_MS * 1_000_000 + i for i in range(5)]


def test_queued_at_once_unless_delayed(node, cmd):
    job_id = cmd.addjob("q", "b", "DELAY", "30", "TTL", "60")
    job = cmd.show(job_id)
    assert job["state"] == b"active"
    assert (job["delay"], job["retry"]) == (30, 6)
    assert job["next-requeue-within"] == 30_000
    assert job["next-awake-within"] == 30_000
    assert cmd.ok("QLEN", "q") == 0
    queued = cmd.show(cmd.addjob("q", "b"))
    assert queued["state"] == b"queued"
    # Queued: the requeue time moved to retry ± jitter, awake 500 ms earlier (WILLQUEUE).
    assert 300_000 - 250 <= queued["next-requeue-within"] <= 300_000 + 249
    assert queued["next-awake-within"] == queued["next-requeue-within"] - 500


def test_retry_zero_job_has_no_requeue_time(cmd):
    job = cmd.show(cmd.addjob("q", "b", "RETRY", "0"))
    assert job["next-requeue-within"] is None
    assert job["next-awake-within"] == 86400 * 1000 + 1000


def test_async_single_node_is_plain(cmd):
    job_id = cmd.addjob("q", "asyncbody", "ASYNC")
    assert cmd.show(job_id)["state"] == b"queued"


# --------------------------------------------------------------- replication

def test_asynchronous_replication_to_a_peer():
    node = make_node()
    add_peer(node)
    cmd = Cmd(node)
    job_id = cmd.addjob("q", "b", "REPLICATE", "2", "ASYNC")
    job = cmd.show(job_id)
    assert job["state"] == b"queued"
    assert sorted(job["nodes-delivered"]) == sorted([NODE_ID, PEER_ID])
    repl = node.state.outbox.transport.of_type(m.REPLJOB)
    assert len(repl) == 1 and repl[0][0] == PEER_ID
    assert repl[0][1][m.MFLAGS] & m.MFLAG_NOREPLY


def test_synchronous_replication_blocks_until_gotjob():
    node = make_node()
    add_peer(node)
    cmd = Cmd(node)
    assert cmd.raw("ADDJOB", "q", "b", "0") is None  # REPLICATE 2: blocked
    job_id = next(iter(node.state.jobs))
    assert cmd.show(job_id)["state"] == b"wait-repl"
    assert cmd.show(job_id)["nodes-confirmed"] == [NODE_ID]
    assert cmd.ok("QLEN", "q") == 0
    repl = node.state.outbox.transport.of_type(m.REPLJOB)
    assert [dest for dest, _ in repl] == [PEER_ID]
    assert not repl[0][1].get(m.MFLAGS, 0) & m.MFLAG_NOREPLY
    assert node.state.blocked.clients
    deliver(node, PEER_ID, m.job_message(m.GOTJOB, job_id))
    assert cmd.client.sent == [b"+" + job_id + b"\r\n"]
    assert cmd.show(job_id)["state"] == b"queued"
    assert not node.state.blocked.clients


def test_synchronous_replication_timeout():
    node = make_node()
    add_peer(node)
    cmd = Cmd(node)
    assert cmd.raw("ADDJOB", "q", "b", "100") is None
    job_id = next(iter(node.state.jobs))
    advance(node, 99)
    assert cmd.client.sent == []
    advance(node, 1)
    assert cmd.client.sent == [NOREPL_TIMEOUT]
    assert job_id not in node.state.jobs
    assert [d for d, msg in node.state.outbox.transport.of_type(m.DELJOB)] == [PEER_ID]


def test_synchronous_replication_without_timeout_ends_with_the_job():
    node = make_node()
    add_peer(node)
    cmd = Cmd(node)
    assert cmd.raw("ADDJOB", "q", "b", "0", "TTL", "5") is None
    advance(node, 5000, step=500)
    assert cmd.client.sent == []
    advance(node, 1000, step=100)
    assert cmd.client.sent == [NOREPL_REMOVED]
    assert not node.state.jobs and not node.state.blocked.clients


def test_external_replication_under_memory_pressure():
    node = make_node(maxmemory=1_000_000)  # memory warning level 1
    add_peer(node)
    cmd = Cmd(node)
    assert cmd.raw("ADDJOB", "q", "b", "0") == NOREPL_OOM  # needs 2 other nodes
    assert cmd.raw("ADDJOB", "q", "b", "0", "REPLICATE", "1") is None
    job_id = next(iter(node.state.jobs))
    assert cmd.show(job_id)["nodes-confirmed"] == []
    assert cmd.show(job_id)["nodes-delivered"] == [PEER_ID]  # no local copy
    deliver(node, PEER_ID, m.job_message(m.GOTJOB, job_id))
    assert cmd.client.sent == [b"+" + job_id + b"\r\n"]
    assert cmd.show(job_id) is None  # the local copy is gone
    enqueue = node.state.outbox.transport.of_type(m.ENQUEUE)
    assert [(d, msg[m.ID]) for d, msg in enqueue] == [(PEER_ID, job_id)]


def test_external_asynchronous_replication_keeps_nothing():
    node = make_node(maxmemory=1_000_000)
    add_peer(node)
    cmd = Cmd(node)
    job_id = cmd.addjob("q", "b", "REPLICATE", "1", "ASYNC")
    assert cmd.show(job_id) is None
    assert not node.state.jobs
    assert [d for d, _ in node.state.outbox.transport.of_type(m.REPLJOB)] == [PEER_ID]
    assert [d for d, _ in node.state.outbox.transport.of_type(m.ENQUEUE)] == [PEER_ID]


def test_a_forged_enqueue_leaves_the_producers_job_waiting():
    """Only a forged ENQUEUE names a job still in wait-repl on its origin:
    queueing it would leave its producer blocked for good."""
    node = make_node()
    add_peer(node)
    cmd = Cmd(node)
    assert cmd.raw("ADDJOB", "q", "b", "0") is None
    [job_id] = list(node.state.jobs.by_id)
    deliver(node, PEER_ID, {m.TYPE: m.ENQUEUE, m.ID: job_id, m.DELAY: 0})
    assert node.state.jobs.by_id[job_id].state == WAIT_REPL
    assert cmd.client.blocked is not None and node.state.queues.get(b"q") is None


def test_client_disconnect_while_waiting_deletes_the_job():
    node = make_node()
    add_peer(node)
    cmd = Cmd(node)
    assert cmd.raw("ADDJOB", "q", "b", "0") is None
    node.client_gone(cmd.client)
    assert not node.state.jobs and not node.state.blocked.clients
    assert [d for d, _ in node.state.outbox.transport.of_type(m.DELJOB)] == [PEER_ID]


def test_federation_does_not_queue_a_job_whose_producer_waits():
    # A replica may requeue the job (its retry elapsed) and a consumer here may
    # pull it back with NEEDJOBS/YOURJOBS before replication completed: the
    # producer must still get its answer when the job goes away.
    from disque.jobs.codec import to_bus
    node = make_node()
    add_peer(node)
    cmd = Cmd(node)
    assert cmd.raw("ADDJOB", "q", "b", "0", "RETRY", "1") is None
    job_id = next(iter(node.state.jobs))
    payload = to_bus(node.state.jobs[job_id], node.state.clock())
    deliver(node, PEER_ID, {m.TYPE: m.YOURJOBS, m.JOBS: [payload]})
    assert cmd.show(job_id)["state"] == b"wait-repl"
    assert cmd.ok("DELJOB", job_id) == 1
    assert cmd.client.sent == [NOREPL_REMOVED]


# ------------------------------------- DEDUPID among the checks, and the forms
#
# The plain form and the one-option PRIORITY and DEDUPID forms (upper case)
# skip the options parser; a lower-case spelling, or any other option, takes
# it. Both must meet the same checks in the same order.

PRIORITY_ERR = b"-ERR PRIORITY must be between 0 and 9\r\n"
DEDUPID_ERR = b"-ERR DEDUPID must be 1 to 256 bytes\r\n"
DEDUP_FORMS = [["DEDUPID"], ["dedupid"], ["RETRY", "5", "DEDUPID"]]


def _leaving(node):
    node.state.membership.myself.flags |= LEAVING


def _memory_warning(node):
    node.state.config.maxmemory = 1_000_000  # used ~786 KB: above the 75 % level only
    node.state.update_memory_limits()
    assert node.state.memory.level() == 1


def _paused(node):
    Cmd(node).ok("PAUSE", "q", "in")


@pytest.mark.parametrize("state, refusal", [(_leaving, NOREPL_LEAVING),
                                            (_memory_warning, NOREPL_OOM), (_paused, PAUSED)])
@pytest.mark.parametrize("dedup", DEDUP_FORMS)
def test_a_known_dedupid_is_answered_whatever_the_node_state(state, refusal, dedup):
    node = make_node()
    cmd = Cmd(node)
    known = cmd.addjob("q", "first", *dedup, "t")
    state(node)
    assert cmd.raw("ADDJOB", "q", "b", "0", *dedup, "t") == b"+" + known + b"\r\n"
    assert cmd.raw("ADDJOB", "q", "b", "0", *dedup, "u") == refusal
    assert list(node.state.jobs.by_id) == [known]


@pytest.mark.parametrize("options, refusal", [
    (["REPLICATE", "2"], NOREPL),
    (["RETRY", "0", "REPLICATE", "2"], RETRY0),
    (["DELAY", "10", "TTL", "5"], DELAY_TTL),
    (["MAXLEN", "1"], MAXLEN_EXCEEDED),
])
def test_a_known_dedupid_comes_before_every_check_after_the_timeout(cmd, options, refusal):
    known = cmd.addjob("q", "first", "DEDUPID", "t")
    assert cmd.raw("ADDJOB", "q", "b", "0", *options, "DEDUPID", "t") == b"+" + known + b"\r\n"
    assert cmd.raw("ADDJOB", "q", "b", "0", *options, "DEDUPID", "u") == refusal
    # A refused token names no job: the next ADDJOB with it creates one.
    assert cmd.addjob("q", "b", "DEDUPID", "u") != known


@pytest.mark.parametrize("dedup", DEDUP_FORMS)
@pytest.mark.parametrize("timeout, reply", [("abc", TIMEOUT_NOT_INT), ("-1", TIMEOUT_NEG)])
def test_a_bad_timeout_comes_before_a_known_dedupid(cmd, dedup, timeout, reply):
    cmd.addjob("q", "first", *dedup, "t")
    assert cmd.raw("ADDJOB", "q", "b", timeout, *dedup, "t") == reply


@pytest.mark.parametrize("option, value, reply", [
    ("PRIORITY", "12", PRIORITY_ERR), ("priority", "12", PRIORITY_ERR),
    ("DEDUPID", "", DEDUPID_ERR), ("dedupid", "", DEDUPID_ERR),
    ("PRIORITY", "5", TIMEOUT_NOT_INT), ("DEDUPID", "t", TIMEOUT_NOT_INT),
])
def test_the_one_option_forms_check_their_option_before_the_timeout(cmd, option, value, reply):
    assert cmd.raw("ADDJOB", "q", "b", "abc", option, value) == reply


@pytest.mark.parametrize("option", ["PRIORITY", "priority", "DEDUPID", "dedupid"])
def test_the_one_option_forms_replicate_on_a_cluster(option):
    node = make_node()
    add_peer(node)
    cmd = Cmd(node)
    value = "7" if option.upper() == "PRIORITY" else "t"
    assert cmd.raw("ADDJOB", "q", "b", "0", option, value) is None  # REPLICATE 2: blocked
    (job_id,) = node.state.jobs.by_id
    assert cmd.show(job_id)["state"] == b"wait-repl"
    assert [dest for dest, _ in node.state.outbox.transport.of_type(m.REPLJOB)] == [PEER_ID]
    if value == "t":
        assert Cmd(node).raw("ADDJOB", "q", "b", "0", option, value) == (
            b"-PENDING Job %s with this DEDUPID is waiting for its replicas, retry later\r\n"
            % job_id)
    else:
        assert node.state.jobs.by_id[job_id].priority == 7
    deliver(node, PEER_ID, m.job_message(m.GOTJOB, job_id))
    assert cmd.client.sent == [b"+" + job_id + b"\r\n"]


@pytest.mark.parametrize("form", [["DEDUPID", "t"], ["dedupid", "t"], [], ["PRIORITY", "3"]])
def test_maxdeliver_default_reaches_every_form(form):
    node = make_node(maxdeliver_default=4)
    job = node.state.jobs.by_id[Cmd(node).addjob("q", "b", *form)]
    assert (job.ext.maxdeliver, job.ext.base_retry) == (4, 300)
    assert job.ext.dedupid == (b"t" if form[:1] in (["DEDUPID"], ["dedupid"]) else None)


def test_a_pipelined_run_mixing_forms_answers_as_one_by_one():
    from disque.commands.addjob import addjob_run

    def words(*args):
        return [a if isinstance(a, bytes) else str(a).encode() for a in args]

    run = [words("ADDJOB", "q", "b", *rest) for rest in (
        [0], [0, "PRIORITY", 9], [0, "DEDUPID", "t"],
        [0, "DEDUPID", "t"], [0, "dedupid", "t"], [0, "RETRY", 5, "DEDUPID", "t"],  # known
        ["abc", "DEDUPID", "t"], ["abc", "PRIORITY", 12], ["abc", "PRIORITY", 5],
        [0, "REPLICATE", 2, "DEDUPID", "t"], [0, "REPLICATE", 2, "DEDUPID", "u"],
        [0, "DEDUPID", "u"], [0, "PRIORITY", 1, "MAXLEN", 4], [0, "MAXLEN", 4, "DEDUPID", "u"],
        [0, "BOGUS", 1], [0, "DELAY", 10, "TTL", 5], [0, "priority", 2],
    )]
    paused = [words("ADDJOB", "q", "b", *rest) for rest in (
        [0], [0, "DEDUPID", "t"], [0, "DEDUPID", "v"], [0, "PRIORITY", 3], [0, "ASYNC"])]
    piped, single = make_node(), make_node()
    replies: list[bytes] = []
    for commands in (run, paused):
        assert addjob_run(piped.state, Cmd(piped).client, commands, 0, replies) == len(commands)
        Cmd(piped).ok("PAUSE", "q", "in")
    one_by_one = [Cmd(single).raw(*argv) for argv in run]
    Cmd(single).ok("PAUSE", "q", "in")
    one_by_one += [Cmd(single).raw(*argv) for argv in paused]
    assert replies == one_by_one
    known, other = replies[2], replies[11]
    created = [reply for reply in replies if reply.startswith(b"+D-")]
    assert created == [replies[0], replies[1], known] + [known] * 4 + [other, other, replies[16],
                                                                        known]
    assert replies[6:9] == [TIMEOUT_NOT_INT, PRIORITY_ERR, TIMEOUT_NOT_INT]
    assert replies[10] == NOREPL and replies[12] == MAXLEN_EXCEEDED  # four jobs queued
    assert replies[14:16] == [SYNTAX, DELAY_TTL]
    assert replies[-5:] == [PAUSED, known, PAUSED, PAUSED, PAUSED]
    assert sorted(piped.state.jobs.by_id) == sorted(single.state.jobs.by_id)
