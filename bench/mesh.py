"""A mesh of 15 idle nodes against 15 of the original C Disque.

``original_mesh``: two clusters of ``MESH_SIZE`` nodes, this project's and
the original's (``../shared/reference/disque-server-1.0-rc1``), joined and
left idle side by side: what an idle cluster costs is its gossip (PINGs,
PONGs and failure reports between every pair of nodes). Both clusters are
measured over the same windows, so the machine's load hits both alike.
Reported: CPU per node (ms of CPU per second, user and system) against the
original's, with a target of at most 1.5x, and RSS per node, with what of
it an interpreter alone holds and what the imports of a node add.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time

from bench.measurement import Measurement, Reference, Section, SectionSkipped, Target, median
from bench.servers import REPO, DisqueNode, Servers, parse_vmrss, reference_server
from bench.settings import Settings

log = logging.getLogger("bench")
MESH_SIZE = 15
CONFIG = ""  # the default cluster-node-timeout (15000 ms) on both sides: a cluster at rest
SETTLE_S = 20.0  # after the mesh formed: its first rounds of gossip and nodes.conf writes done
WINDOW_S = 10.0
CPU_RATIO = 1.5  # CPU per idle node: ours / the original's, at most
# What an interpreter holds before and after importing what a node runs
# (printing its own RSS, so the figure is that process's, not a child's).
RSS_PROBE = "import sys; %s; print(open('/proc/self/status').read())"


def _cpu_ms(nodes: list[DisqueNode]) -> float:
    """The nodes' CPU time so far, summed, in ms."""
    return sum(node.cpu_seconds() for node in nodes) * 1000


def probe_rss(imports: str) -> int:
    """RSS of a fresh interpreter of this venv after ``imports``, in bytes."""
    done = subprocess.run([sys.executable, "-c", RSS_PROBE % (imports or "pass")],
                          capture_output=True, text=True, check=True, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    return parse_vmrss(done.stdout)


def original_mesh(servers: Servers, settings: Settings) -> list[Measurement]:
    """15 idle nodes of each side, joined: CPU and RSS per node against the original's."""
    binary = reference_server()
    if binary is None:
        raise SectionSkipped("the original server is not present (../shared/reference/"
                             "disque-server-1.0-rc1 or $DISQUE_REFERENCE_SERVER)")
    cpu: dict[str, list[float]] = {"disque": [], "original": []}
    with servers.cluster(MESH_SIZE, CONFIG, name="mesh") as ours, \
            servers.cluster(MESH_SIZE, CONFIG, name="meshorig", reference=binary) as original:
        sides = {"disque": ours, "original": original}
        time.sleep(SETTLE_S)
        for round_no in range(settings.repeats):
            before = {side: _cpu_ms(nodes) for side, nodes in sides.items()}
            started = time.monotonic()
            time.sleep(WINDOW_S)
            elapsed = time.monotonic() - started
            for side, nodes in sides.items():
                cpu[side].append((_cpu_ms(nodes) - before[side]) / elapsed / MESH_SIZE)
            log.info("  original_mesh round %d: CPU per node %.2f ms/s, the original's %.2f",
                     round_no, cpu["disque"][-1], cpu["original"][-1])
        rss = {side: median([node.rss_bytes() / 1e6 for node in nodes])
               for side, nodes in sides.items()}
    interpreter = probe_rss("") / 1e6
    imported = probe_rss("import disque.server") / 1e6
    shape = ("%d idle nodes joined (default configuration), %d windows of %g s, both "
             "clusters measured over the same windows" % (MESH_SIZE, settings.repeats, WINDOW_S))
    return [
        Measurement("original_mesh_cpu_per_node", "CPU per idle node (ms/s); " + shape,
                    median(cpu["disque"]), "ms/s", samples=cpu["disque"],
                    reference=Reference("original C Disque 1.0-rc1, same windows",
                                        median(cpu["original"]), cpu["original"]),
                    target=Target("ratio", "<=", CPU_RATIO)),
        Measurement("original_mesh_rss_per_node", "RSS per idle node (MB); " + shape,
                    rss["disque"], "MB",
                    reference=Reference("original C Disque 1.0-rc1", rss["original"]),
                    details={"interpreter_alone_mb": round(interpreter, 1),
                             "after_importing_disque_server_mb": round(imported, 1)}),
    ]


SECTIONS: dict[str, Section] = {"original_mesh": original_mesh}
