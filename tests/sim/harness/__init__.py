"""Deterministic simulation of a Disque cluster (FoundationDB style).

See ``network`` (clock, events, faulty network), ``cluster`` (nodes,
crash/restart, clients), ``checks`` (state invariants), ``seeds``
(reproducible seeded runs) and ``wire`` (``Sim(..., wire=True)``: the
real bus and client connection code over a loopback transport).
"""

from tests.sim.harness.clients import Request, SimFailure, is_error, parse_reply
from tests.sim.harness.cluster import Sim, SimNode
from tests.sim.harness.network import START_MS, NetParams

__all__ = ["Sim", "SimNode", "SimFailure", "Request", "NetParams", "START_MS", "is_error",
           "parse_reply"]
