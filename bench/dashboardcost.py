"""What the cluster's dashboard costs the nodes: summaries at rest.

``python -m bench.dashboardcost --nodes 3 15`` starts each cluster of real
nodes (node 0 with metrics-port), lets it settle, then measures each node's
CPU time (/proc/<pid>/stat) and bytes written (/proc/<pid>/io ``wchar``:
its bus, its log and, for node 0, the HTTP answers) over ``--seconds``, in
two phases of the same run: no page open (the reference), then node 0's
/api/stats polled once a second as the page does (the peers then send
node 0 their NODESTATS each second, and node 0 asks them with STATSWANT).
``--queues`` gives every node that many queues of one job first, so that
each summary lists them (at most metrics-max-queues, 100 by default).
Nothing else runs on the nodes.
"""

from __future__ import annotations

import argparse
import os
import threading
import time
import urllib.request
from pathlib import Path

from bench.servers import DisqueNode, Servers, join_chain

SETTLE_S = 5.0
POLL_S = 1.0


def wchar(pid: int) -> int:
    """Bytes the process passed to write and send calls so far."""
    for line in Path("/proc/%d/io" % pid).read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    raise ValueError("no wchar in /proc/%d/io" % pid)


def start_cluster(servers: Servers, size: int, metrics_port: int) -> list[DisqueNode]:
    """``size`` nodes joined in a chain of MEETs; node 0 serves the dashboard."""
    nodes = []
    for i in range(size):
        config = "cluster-node-timeout 3000\n"
        if i == 0:
            config += "metrics-port %d\n" % metrics_port
        node = DisqueNode("dash%d" % i, servers.root / ("dash%d" % i),
                          servers.ports.take(with_bus=True), config)
        node.start()
        servers.running.append(node)
        nodes.append(node)
    join_chain(nodes, timeout=60)
    return nodes


class Poller:
    """GETs a URL once a second, as the page does, counting the bytes of the answers."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.received = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run)

    def run(self) -> None:
        while not self.stop.is_set():
            with urllib.request.urlopen(self.url, timeout=10) as response:
                self.received += len(response.read())
            self.stop.wait(POLL_S)


def measure(nodes: list[DisqueNode], seconds: float) -> list[tuple[float, float]]:
    """Each node's CPU ms and bytes written per second over ``seconds``."""
    before = [(node.cpu_seconds(), wchar(node.pid)) for node in nodes]
    time.sleep(seconds)
    after = [(node.cpu_seconds(), wchar(node.pid)) for node in nodes]
    return [((a[0] - b[0]) * 1000 / seconds, (a[1] - b[1]) / seconds)
            for a, b in zip(after, before)]


def report(label: str, figures: list[tuple[float, float]], http: float = 0.0) -> None:
    """``http``: bytes per second of node 0's answers to the page, left out of its figure."""
    watched, peers = figures[0], figures[1:]
    print("  %-22s node 0: %6.2f ms CPU/s %7.0f B/s (+%6.0f B/s to the page)   "
          "peers (mean): %5.2f ms CPU/s %6.0f B/s"
          % (label, watched[0], watched[1] - http, http, sum(p[0] for p in peers) / len(peers),
             sum(p[1] for p in peers) / len(peers)))


def run(size: int, queues: int, seconds: float) -> None:
    with Servers() as servers:
        metrics_port = servers.ports.take()
        nodes = start_cluster(servers, size, metrics_port)
        for node in nodes:
            with node.client() as client:
                pipe = client.pipeline(transaction=False)
                for q in range(queues):
                    pipe.execute_command("ADDJOB", "queue-%d" % q, "body", 0, "REPLICATE", 1)
                pipe.execute()
        time.sleep(SETTLE_S)
        print("%d nodes, %d queues each, %.0f s per phase (pid %d)"
              % (size, queues, seconds, os.getpid()))
        report("no page open", measure(nodes, seconds))
        poller = Poller("http://127.0.0.1:%d/api/stats" % metrics_port)
        poller.thread.start()
        try:
            time.sleep(SETTLE_S)
            before = poller.received
            figures = measure(nodes, seconds)
            report("node 0's page polled", figures, (poller.received - before) / seconds)
        finally:
            poller.stop.set()
            poller.thread.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[3, 15])
    parser.add_argument("--queues", type=int, nargs="+", default=[0, 100])
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    for size in args.nodes:
        for queues in args.queues:
            run(size, queues, args.seconds)


if __name__ == "__main__":
    main()
