"""metrics-port on a real disque-server: a real Prometheus server (Debian's
/usr/bin/prometheus) scrapes it every second, and the series redis-py's
work produced are read back through Prometheus' HTTP API. metrics-port 0
opens no port; a metrics port in use stops the server at startup."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from tests.support.process import DisqueProcess, free_port, wait_until
from tests.support.prometheus import JOB, PROMETHEUS, PrometheusServer, scrape

# Prometheus starts, scrapes within a second, and the node's numbers show;
# a busy machine gets more room, the poll ends as soon as they are there.
SERIES_TIMEOUT_S = 60.0

needs_prometheus = pytest.mark.skipif(
    not PROMETHEUS.exists(), reason="%s is missing (apt-get install prometheus)" % PROMETHEUS)


def listening_ports(pid: int) -> set[int]:
    """The TCP ports process ``pid`` listens on (its sockets matched with
    /proc/net/tcp{,6} entries in state LISTEN)."""
    inodes = set()
    fd_dir = Path("/proc/%d/fd" % pid)
    for fd in fd_dir.iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue  # closed meanwhile
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            next(f)
            for line in f:
                fields = line.split()
                local, state, inode = fields[1], fields[3], fields[9]
                if state == "0A" and inode in inodes:
                    ports.add(int(local.rsplit(":", 1)[1], 16))
    return ports


@needs_prometheus
def test_prometheus_scrapes_the_jobs_redis_py_moved(server_factory, tmp_path):
    metrics_port = free_port()
    server = server_factory("metrics-port %d\nappendonly yes\n" % metrics_port)
    # PING answers as soon as the client port listens; the others follow.
    wait_until(lambda: listening_ports(server.proc.pid) == {server.port, server.port + 10000,
                                                            metrics_port},
               message="client, bus and metrics ports listening")
    r = server.client()
    ids = [r.execute_command("ADDJOB", "emails", b"body %d" % i, 0) for i in range(5)]
    got = r.execute_command("GETJOB", "COUNT", 3, "FROM", "emails")
    assert r.execute_command("ACKJOB", got[0][1], got[1][1]) == 2
    assert len(ids) == 5

    with PrometheusServer(tmp_path / "prometheus", ["127.0.0.1:%d" % metrics_port]) as prom:
        selector = '{job="%s"}' % JOB

        def scraped(expected: dict[str, float]) -> bool:
            return all(prom.value(expr if "{" in expr else expr + selector) == value
                       for expr, value in expected.items())
        expected = {
            "up": 1,
            "disque_jobs_added_total": 5,
            "disque_jobs_delivered_total": 3,
            "disque_jobs_acked_total": 2,
            'disque_jobs{job="%s",state="queued"}' % JOB: 2,
            'disque_jobs{job="%s",state="active"}' % JOB: 1,
            'disque_queue_length{job="%s",queue="emails"}' % JOB: 2,
            'disque_queue_jobs_delivered_total{job="%s",queue="emails"}' % JOB: 3,
            "disque_aof_enabled": 1,
            'disque_cluster_nodes{job="%s",state="up"}' % JOB: 1,
        }
        wait_until(lambda: scraped(expected), SERIES_TIMEOUT_S, interval=0.25,
                   message="the node's series in Prometheus")
        assert prom.value("disque_aof_size_bytes" + selector) > 0
        assert prom.value("disque_connected_clients" + selector) >= 1
        # appendfsync everysec: the records of the jobs above are fsynced within a second.
        wait_until(lambda: prom.value("disque_aof_fsync_seconds_count" + selector) > 0,
                   SERIES_TIMEOUT_S, interval=0.25, message="an AOF fsync in Prometheus")
        (target,) = prom.api("/api/v1/targets")["activeTargets"]
        assert (target["health"], target["lastError"]) == ("up", "")

        # The next scrapes follow what the node does.
        for i in range(10):
            r.execute_command("ADDJOB", "emails", b"more %d" % i, 0)
        wait_until(lambda: scraped({"disque_jobs_added_total": 15,
                                    'disque_queue_length{job="%s",queue="emails"}' % JOB: 12}),
                   SERIES_TIMEOUT_S, interval=0.25, message="the new jobs in Prometheus")
        assert prom.value("increase(disque_jobs_added_total%s[1m])" % selector) > 0


def test_metrics_port_zero_opens_nothing(server):
    assert server.call("CONFIG", "GET", "metrics-port") == {b"metrics-port": b"0"}
    wait_until(lambda: server.port + 10000 in listening_ports(server.proc.pid),
               message="the bus port listening")  # the last listener to open
    assert listening_ports(server.proc.pid) == {server.port, server.port + 10000}
    assert "Metrics" not in server.log_path.read_text()


def test_metrics_port_is_read_at_startup_only(server):
    reply = server.raw(b"CONFIG SET metrics-port 9711\r\n")
    assert reply == (b"-ERR CONFIG SET failed (possibly related to argument 'metrics-port') - "
                     b"can't set immutable config\r\n")
    assert server.call("CONFIG", "SET", "metrics-max-queues", "10") == b"OK"


def test_metrics_max_queues_bounds_the_queue_series(server_factory):
    metrics_port = free_port()
    server = server_factory("metrics-port %d\nmetrics-max-queues 2\n" % metrics_port)
    r = server.client()
    for n in range(1, 5):
        for _ in range(n):
            r.execute_command("ADDJOB", "q%d" % n, b"x", 0)
    samples = scrape(metrics_port)
    queues = {dict(labels)["queue"] for (name, labels) in samples
              if name == "disque_queue_length"}
    assert queues == {"q4", "q3"}
    assert samples[("disque_queues", ())] == 4
    assert server.call("CONFIG", "SET", "metrics-max-queues", "3") == b"OK"
    assert scrape(metrics_port)[("disque_queues_exported", ())] == 3


def test_a_metrics_port_in_use_stops_the_server_at_startup(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = DisqueProcess(tmp_path / "node", config="metrics-port %d\n" % port)
        proc.start(wait=False)
        assert proc.wait_exit() == 1
    log = proc.log_path.read_text()
    assert "Creating the metrics HTTP listening socket 127.0.0.1:%d" % port in log
    assert "address already in use" in log.lower()
