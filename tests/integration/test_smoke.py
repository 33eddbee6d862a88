"""The server starts, answers, and stops."""

from tests.support.process import wait_until


def test_ping_and_addjob(server):
    client = server.client()
    assert client.execute_command("PING") is True
    job_id = client.execute_command("ADDJOB", "q", "body", 0)
    assert job_id.startswith(b"D-") and len(job_id) == 40
    job = client.execute_command("GETJOB", "FROM", "q")
    assert job == [[b"q", job_id, b"body"]]


def test_inline_ping_answers(server):
    assert server.raw(b"PING\r\n") == b"+PONG\r\n"
    wait_until(lambda: server.log_path.exists())
