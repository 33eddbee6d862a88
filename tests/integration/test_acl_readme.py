"""The README's access-control example, run as written: its ``user worker ...``
line (as a config line and as ``ACL SETUSER``) and its ``AUTH worker pw``
give a consumer that can PING and HELLO (the example once lacked
``+@connection``, so PING was refused) and take, NACK, renew and acknowledge
jobs of ``orders:*`` queues, and nothing else."""

from __future__ import annotations

import re
import subprocess

import pytest
import redis

from tests.support.process import REPO

README = (REPO / "README.md").read_text()


def readme_span(pattern: str) -> list[str]:
    """The words of the README's one inline-code span matching ``pattern``, line
    breaks inside it read as spaces (as Markdown renders them)."""
    prose = re.sub(r"^```.*?^```", "", README, flags=re.M | re.S)  # code blocks out
    spans = [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", prose)]
    [span] = [span for span in spans if re.fullmatch(pattern, span)]
    return span.split()


USER_LINE = readme_span(r"user worker on .*")  # user worker on >pw ~orders:* ...
AUTH = readme_span(r"AUTH worker \S+")  # AUTH worker pw


@pytest.fixture(params=["config-line", "acl-setuser"])
def node(request, server_factory):
    """A node whose ``worker`` user comes from the README's line, as a ``user``
    directive in the config file or by ``ACL SETUSER`` with the same words."""
    if request.param == "config-line":
        return server_factory(" ".join(USER_LINE) + "\n")
    proc = server_factory()
    assert proc.call("ACL", "SETUSER", *USER_LINE[1:]) == b"OK"
    return proc


def test_readme_user_can_ping_and_consume_orders(node):
    admin = node.client()
    job_id = admin.execute_command("ADDJOB", "orders:eu", "o1", 0, "RETRY", 60)
    other = admin.execute_command("ADDJOB", "payments", "p1", 0)
    worker = node.client(single_connection_client=True)  # AUTH holds for this connection
    assert worker.execute_command(*AUTH) is True  # +OK, as redis-py reports it
    assert worker.execute_command("PING") is True
    assert worker.execute_command("HELLO")[0] == 1
    assert worker.execute_command("GETJOB", "NOHANG", "FROM", "orders:eu") == [
        [b"orders:eu", job_id, b"o1"]]
    assert worker.execute_command("NACK", job_id) == 1
    [[_, again, _]] = worker.execute_command("GETJOB", "NOHANG", "FROM", "orders:eu")
    assert again == job_id
    assert worker.execute_command("WORKING", job_id) > 0
    assert worker.execute_command("ACKJOB", job_id) == 1
    with pytest.raises(redis.ResponseError, match="no permissions to run the 'addjob'"):
        worker.execute_command("ADDJOB", "orders:eu", "x", 0)
    with pytest.raises(redis.ResponseError, match="no permissions to access the queue "
                                                  "'payments'"):
        worker.execute_command("GETJOB", "NOHANG", "FROM", "payments")
    assert admin.execute_command("SHOW", other) is not None


def test_readme_user_through_redis_cli(node, redis_cli):
    """``redis-cli --user worker --pass pw PING``: what the user tried first."""
    user, password = AUTH[1:]
    node.call("ADDJOB", "orders:us", "o2", 0)
    login = [redis_cli, "-p", str(node.port), "--user", user, "--pass", password,
             "--no-auth-warning"]
    for command, expected in [(["PING"], "PONG\n"),
                              (["GETJOB", "NOHANG", "FROM", "orders:us"], "orders:us\n")]:
        result = subprocess.run(login + command, capture_output=True, text=True, timeout=10)
        assert result.stdout.startswith(expected), result.stdout + result.stderr
