"""Chaos against real disque-server processes: ``python -m chaos.run`` (``make chaos``).

``cluster`` starts the nodes (each in its own network namespace when run
as root, else on loopback) and injects the faults; ``history`` records
what producers and consumers saw and judges it; ``run`` drives a run and
prints its summary. See docs/testing.md.
"""
