"""Benchmark harness for ``make bench``: one JSON report comparing this Disque to redis-server.

Absolute numbers drift by ±30 % between runs on shared machines, so every
section measures disque next to a reference (redis-server, same machine,
same run) and the targets are expressed as ratios where possible
(see /work/shared/performance-reference.md).

Layout: mechanisms (``servers``, ``redis_benchmark``, ``loadgen``, ``memory``)
know nothing about targets; section modules (``single``) turn them into
``Measurement`` objects; ``run`` selects sections and reports. The load
generators talk RESP through ``disque.tools.resp_client``.
"""
