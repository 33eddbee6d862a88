"""A node imports only what its configuration needs before it answers PING.

The modules a real node loaded by the time it answers its first PING are
read from Python's own import trace (``PYTHONPROFILEIMPORTTIME``, the same
as ``-X importtime``: one stderr line per module, written as it loads).
Without metrics-port, TLS, a cluster secret, an AOF to load or a CRON
schedule, none of the HTTP side, TLS, the bus secret's code, the AOF
loader, croniter, nor the worker, client and Spark packages beside the
node is loaded: each costs start-up
time (docs/benchmarks.md "Start-up"). ``ssl`` itself is not among them:
asyncio and uvloop import it whatever the node does.
"""

from __future__ import annotations

from tests.support.process import DisqueProcess, free_port

NOT_NEEDED_BY_DEFAULT = {
    "aiohttp", "prometheus_client", "disque.http",          # metrics-port
    "cryptography", "disque.net.tls",                        # TLS, --gen-certs
    "disque.net.busauth", "hashlib", "hmac",                 # a cluster secret, ACL passwords
    "disque.aof.loader", "disque.jobs.record_reader",        # an AOF file to load
    "disque.worker", "disque.client", "disque.spark", "redis",  # beside the node
    "logging.handlers", "platform", "tempfile",              # syslog, INFO, CONFIG REWRITE
    "ctypes",                                                # a bulk of 1 MiB or more, TLS
    "croniter", "dateutil", "disque.process.cronspec",      # a CRON schedule
}


def modules_loaded_when_ready(workdir, config: str = "") -> set[str]:
    """The modules a node started with ``config`` loaded before its first PONG."""
    node = DisqueProcess(workdir, config=config, env={"PYTHONPROFILEIMPORTTIME": "1"})
    try:
        node.start()  # returns once it answered PING
        trace = (node.dir / "stderr.log").read_text()
    finally:
        node.stop()
    loaded = set()
    for line in trace.splitlines():  # "import time:  <us> |  <us> |  <module>"
        fields = line.split("|")
        if line.startswith("import time:") and len(fields) == 3 and fields[1].strip().isdigit():
            loaded.add(fields[2].strip())
    return loaded


def test_a_default_node_loads_neither_http_tls_nor_the_packages_beside_it(tmp_path):
    loaded = modules_loaded_when_ready(tmp_path / "node")
    assert {"disque.node", "disque.net.bus", "uvloop"} <= loaded  # the trace is read right
    unneeded = {m for m in loaded if m in NOT_NEEDED_BY_DEFAULT
                or m.split(".")[0] in NOT_NEEDED_BY_DEFAULT
                or ".".join(m.split(".")[:2]) in NOT_NEEDED_BY_DEFAULT}
    assert not unneeded, "loaded before the first PONG: %s" % sorted(unneeded)


def test_metrics_port_loads_the_http_side(tmp_path):
    loaded = modules_loaded_when_ready(tmp_path / "node", "metrics-port %d\n" % free_port())
    assert {"aiohttp", "prometheus_client", "disque.http.service"} <= loaded
