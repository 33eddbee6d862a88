"""The real ``redis-cli --no-raw`` against a real server: what a user sees.

spec: reference-transcripts.md §1.6 (the job life cycle rendered by
redis-cli) and the ``redis-cli --no-raw`` renderings recorded in §1.1-§1.4.
Status replies (ADDJOB, job IDs inside JSCAN, PAUSE) print unquoted, bulk
strings quoted, errors as ``(error) ...``, null replies as ``(nil)``.
"""

from __future__ import annotations

import re
import subprocess

import pytest

FRESH_ID = r"D-%s-[A-Za-z0-9+/]{24}-%s"


@pytest.fixture
def cli(server, redis_cli):
    """Run one redis-cli command against ``server``; return its stdout."""
    def run(*args: str) -> str:
        result = subprocess.run([redis_cli, "--no-raw", "-p", str(server.port), *args],
                                capture_output=True, text=True, timeout=20)
        assert result.stderr == "", result.stderr
        return result.stdout
    return run


def test_life_cycle_as_printed_by_redis_cli(server, cli):
    """§1.6, step by step, with the exact text redis-cli printed for the C server."""
    node_prefix = server.call("CLUSTER", "MYID")[:8].decode()

    def added(output: str, suffix: str) -> str:
        assert re.fullmatch(FRESH_ID % (node_prefix, suffix) + "\n", output), output
        return output.strip()

    assert cli("DEBUG", "FLUSHALL") == "OK\n"
    # status reply: redis-cli prints it unquoted
    first = added(cli("ADDJOB", "cliq", "body", "0"), "05a1")
    second = added(cli("ADDJOB", "cliq", "body2", "0", "RETRY", "0"), "05a0")
    assert cli("GETJOB", "COUNT", "1", "FROM", "cliq") == (
        '1) 1) "cliq"\n'
        '   2) "%s"\n'
        '   3) "body"\n' % first)
    assert cli("WORKING", first) == "(integer) 300\n"
    assert cli("NACK", first) == "(integer) 1\n"
    assert cli("GETJOB", "WITHCOUNTERS", "FROM", "cliq") == (
        '1) 1) "cliq"\n'
        '   2) "%s"\n'
        '   3) "body"\n'
        '   4) "nacks"\n'
        '   5) (integer) 1\n'
        '   6) "additional-deliveries"\n'
        '   7) (integer) 0\n' % first)
    assert cli("ENQUEUE", first) == "(integer) 1\n"
    assert cli("DEQUEUE", first) == "(integer) 1\n"
    assert cli("ACKJOB", first) == "(integer) 1\n"
    assert cli("SHOW", first) == "(nil)\n"
    assert cli("FASTACK", second) == "(integer) 1\n"
    assert cli("GETJOB", "NOHANG", "FROM", "cliq") == "(nil)\n"
    assert cli("GETJOB", "TIMEOUT", "100", "FROM", "cliq") == "(nil)\n"
    third = added(cli("ADDJOB", "cliq", "x", "0"), "05a1")
    # job ids inside JSCAN are STATUS replies, hence unquoted
    assert cli("JSCAN") == '1) "0"\n2) 1) %s\n' % third
    assert cli("PAUSE", "cliq", "in") == "in\n"
    assert cli("ADDJOB", "cliq", "x", "0") == "(error) PAUSED Queue paused in input, try later\n"
    assert cli("PAUSE", "cliq", "none") == "none\n"
    assert cli("DEBUG", "FLUSHALL") == "OK\n"
    assert cli("JSCAN") == '1) "0"\n2) (empty array)\n'


# Renderings recorded in §1.1-§1.4 that do not depend on earlier state.
STATELESS = [
    (["PING"], "PONG\n"),
    (["PING", "hello"], '"hello"\n'),
    (["CLUSTER", "LEAVING"], "no\n"),
    (["AUTH", "x"], "(error) ERR Client sent AUTH, but no password is set\n"),
    (["CONFIG", "GET", "cluster-node-timeout"], '1) "cluster-node-timeout"\n2) "15000"\n'),
    (["QLEN", "q"], "(integer) 0\n"),
    (["QPEEK", "nosuchq", "5"], "(empty array)\n"),
    (["QSTAT", "nosuchq"], "(nil)\n"),
    (["PAUSE", "q", "state"], "none\n"),
    (["PAUSE", "q", "bogus"], "(error) ERR syntax error\n"),
    (["PAUSE", "q"], "(error) ERR wrong number of arguments for 'pause' command\n"),
    (["FOO"], "(error) ERR unknown command 'FOO'\n"),
    (["foo", "bar"], "(error) ERR unknown command 'foo'\n"),
    (["ADDJOB"], "(error) ERR wrong number of arguments for 'addjob' command\n"),
    (["ADDJOB", "q", "body"], "(error) ERR wrong number of arguments for 'addjob' command\n"),
    (["ADDJOB", "q", "body", "abc"], "(error) ERR timeout is not an integer or out of range\n"),
    (["ADDJOB", "q", "body", "-1"], "(error) ERR timeout is negative\n"),
    (["ADDJOB", "q", "body", "0", "REPLICATE", "2"],
     "(error) NOREPL Not enough reachable nodes for the requested replication level\n"),
    (["ADDJOB", "q", "body", "0", "REPLICATE", "2", "RETRY", "0"],
     "(error) ERR With RETRY set to 0 please explicitly set  REPLICATE to 1 "
     "(at-most-once delivery)\n"),
    (["GETJOB"], "(error) ERR wrong number of arguments for 'getjob' command\n"),
    (["GETJOB", "q"], "(error) ERR syntax error\n"),
    (["GETJOB", "FROM"], "(error) ERR syntax error\n"),
    (["ACKJOB"], "(integer) 0\n"),
    (["ACKJOB", "badid"], "(error) BADID Invalid Job ID format.\n"),
    (["WORKING", "D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-0001"],
     "(error) NOJOB Job not known in the context of this node.\n"),
    (["WORKING", "badid"], "(error) BADID Invalid Job ID format.\n"),
    (["WORKING"], "(error) ERR wrong number of arguments for 'working' command\n"),
    (["SHOW"], "(error) ERR wrong number of arguments for 'show' command\n"),
    (["SHOW", "badid"], "(error) BADID Invalid Job ID format.\n"),
    (["SHOW", "D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-0001"], "(nil)\n"),
    (["QLEN"], "(error) ERR wrong number of arguments for 'qlen' command\n"),
    (["QPEEK", "q", "abc"], "(error) ERR value is not an integer or out of range\n"),
    (["QSTAT"], "(error) ERR wrong number of arguments for 'qstat' command\n"),
    (["HELLO", "x"], "(error) ERR wrong number of arguments for 'hello' command\n"),
    (["CLUSTER", "FOO"], "(error) ERR Wrong CLUSTER subcommand or number of arguments\n"),
    (["CONFIG", "GET"], "(error) ERR Wrong number of arguments for CONFIG GET\n"),
]


def test_recorded_renderings_of_stateless_replies(cli):
    """§1.1-§1.4 redis-cli blocks: the same text, one command per invocation."""
    for args, expected in STATELESS:
        assert cli(*args) == expected, args


def test_hello_time_and_cluster_rendering(server, cli):
    """§1.1: HELLO nests the node entry; port and priority print as quoted strings."""
    node_id = server.call("CLUSTER", "MYID").decode()
    assert cli("HELLO") == (
        '1) (integer) 1\n'
        '2) "%s"\n'
        '3) 1) "%s"\n'
        '   2) ""\n'
        '   3) "%d"\n'
        '   4) "1"\n' % (node_id, node_id, server.port))
    assert cli("CLUSTER", "MYID") == '"%s"\n' % node_id
    assert cli("CLUSTER", "NODES") == "%s :%d myself 0 0 connected\n" % (node_id, server.port)
    assert cli("CLUSTER", "INFO") == (
        "cluster_state:ok\ncluster_known_nodes:1\ncluster_reachable_nodes:0\n"
        "cluster_size:1\ncluster_stats_messages_sent:0\ncluster_stats_messages_received:0\n")
    assert re.fullmatch(r'1\) "[0-9]{10}"\n2\) "[0-9]{1,6}"\n', cli("TIME"))
    assert cli("INFO", "jobs") == "# Jobs\nregistered_jobs:0\n"


def test_qstat_and_qpeek_rendering(cli):
    """§1.2: QSTAT's 20 elements are numbered with right-aligned indices."""
    job_id = cli("ADDJOB", "q", "body", "0").strip()
    assert cli("QPEEK", "q", "2") == '1) 1) "q"\n   2) "%s"\n   3) "body"\n' % job_id
    # age and idle are whole seconds: 0, or 1 across a second boundary
    qstat = re.sub(r"^( [68]\) \(integer\) )1$", r"\g<1>0", cli("QSTAT", "q"), flags=re.M)
    assert qstat == (
        ' 1) "name"\n 2) "q"\n 3) "len"\n 4) (integer) 1\n 5) "age"\n 6) (integer) 0\n'
        ' 7) "idle"\n 8) (integer) 0\n 9) "blocked"\n10) (integer) 0\n11) "import-from"\n'
        '12) (empty array)\n13) "import-rate"\n14) (integer) 0\n15) "jobs-in"\n'
        '16) (integer) 1\n17) "jobs-out"\n18) (integer) 0\n19) "pause"\n20) "none"\n')
    assert cli("QSCAN") == '1) "0"\n2) 1) "q"\n'
