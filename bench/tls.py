"""The tls section: what TLS on the client port costs.

One node serves both a plain port and a TLS port (certificates from
``disque.net.tls.generate_certificates``); redis-benchmark, built with TLS in
Debian, runs ADDJOB -P 1 and -P 16 against each port in alternating
rounds of the same run (plain then TLS, then TLS then plain, ...), so the
ratio compares the same node, the same build and the same moment. The
server's CPU per request is reported beside the throughput: the other
load of a shared machine disturbs it less.
"""

from __future__ import annotations

import logging
import subprocess
import tempfile
from pathlib import Path
from typing import Sequence

from bench import redis_benchmark
from bench.measurement import Measurement, Reference, Section, median
from bench.servers import DisqueNode, Servers
from bench.settings import Settings
from disque.net.tls import CA_CERT_FILE, NODE_CERT_FILE, NODE_KEY_FILE, generate_certificates

log = logging.getLogger("bench")

PIPELINES = (1, 16)
QUEUE = "q"


def _redis_benchmark(port: int, command: Sequence[str], settings: Settings, pipeline: int,
                     tls_args: Sequence[str]) -> float:
    """requests/s of one ``redis-benchmark`` run (with ``tls_args`` for TLS)."""
    argv = [redis_benchmark.BINARY, "-h", "127.0.0.1", "-p", str(port),
            "-c", str(settings.clients), "-n", str(settings.requests), "-P", str(pipeline),
            "--csv", *tls_args, *command]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise redis_benchmark.BenchmarkError("redis-benchmark exited with %d: %s"
                                             % (done.returncode, done.stderr.strip()[-300:]))
    return redis_benchmark.parse_csv(done.stdout).rps


def _tls_supported() -> bool:
    done = subprocess.run([redis_benchmark.BINARY, "--help"], capture_output=True, text=True)
    return "--tls" in done.stdout + done.stderr


def _sample(node: DisqueNode, port: int, command: Sequence[str], settings: Settings,
            pipeline: int, tls_args: Sequence[str]) -> tuple[float, float]:
    """(requests/s, server CPU µs per request) of one run; every ADDJOB checked queued."""
    node.flush()
    cpu = node.cpu_seconds()
    rps = _redis_benchmark(port, command, settings, pipeline, tls_args)
    cpu = node.cpu_seconds() - cpu
    queued = node.queue_length(QUEUE)
    if queued != settings.requests:
        raise redis_benchmark.BenchmarkError("%d ADDJOBs but %d jobs queued"
                                             % (settings.requests, queued))
    return rps, cpu * 1e6 / settings.requests


def tls(servers: Servers, settings: Settings) -> list[Measurement]:
    """ADDJOB -P 1 and -P 16 over TLS against the same node's plain port."""
    if not _tls_supported():
        raise redis_benchmark.BenchmarkError("this redis-benchmark is built without TLS")
    certs = Path(tempfile.mkdtemp(prefix="certs-", dir=servers.root))
    generate_certificates(str(certs))
    tls_port = servers.ports.take()
    config = ("tls-port %d\ntls-cert-file %s\ntls-key-file %s\ntls-ca-cert-file %s\n"
              "tls-auth-clients no\n" % (tls_port, certs / NODE_CERT_FILE,
                                         certs / NODE_KEY_FILE, certs / CA_CERT_FILE))
    tls_args = ("--tls", "--cacert", str(certs / CA_CERT_FILE))
    command = ("ADDJOB", QUEUE, "x" * settings.body_bytes, "0")
    results: list[Measurement] = []
    with servers.fresh_disque("tls", config) as node:
        for pipeline in PIPELINES:
            samples: dict[bool, tuple[list[float], list[float]]] = {False: ([], []),
                                                                     True: ([], [])}
            for round_number in range(settings.repeats):
                for over_tls in ((False, True) if round_number % 2 == 0 else (True, False)):
                    port, args = (tls_port, tls_args) if over_tls else (node.port, ())
                    rps, cpu = _sample(node, port, command, settings, pipeline, args)
                    samples[over_tls][0].append(rps)
                    samples[over_tls][1].append(cpu)
                log.info("  ADDJOB -P %d plain %9.0f req/s %5.2f µs CPU/req | TLS %9.0f req/s "
                         "%5.2f µs CPU/req", pipeline, samples[False][0][-1],
                         samples[False][1][-1], samples[True][0][-1], samples[True][1][-1])
            (plain_rps, plain_cpu), (tls_rps, tls_cpu) = samples[False], samples[True]
            shape = ("redis-benchmark -c %d -n %d -P %d ADDJOB q <%d-byte body> 0 over TLS "
                     "(--tls --cacert; TLS 1.3, no client certificate), against the same "
                     "node's plain port, rounds alternating which runs first"
                     % (settings.clients, settings.requests, pipeline, settings.body_bytes))
            reference = "disque ADDJOB -P %d, plain port" % pipeline
            results += [
                Measurement(
                    name="tls_addjob_p%d" % pipeline, description=shape,
                    value=median(tls_rps), unit="req/s", samples=tls_rps,
                    reference=Reference(reference, median(plain_rps), plain_rps),
                    details={"round_ratios": [round(a / b, 3)
                                              for a, b in zip(tls_rps, plain_rps)]}),
                Measurement(
                    name="tls_addjob_p%d_cpu" % pipeline,
                    description="server CPU per request; " + shape,
                    value=median(tls_cpu), unit="µs/request", samples=tls_cpu,
                    reference=Reference(reference, median(plain_cpu), plain_cpu),
                    details={"round_ratios": [round(a / b, 3)
                                              for a, b in zip(tls_cpu, plain_cpu)]}),
            ]
    return results


SECTIONS: dict[str, Section] = {"tls": tls}
