"""Deterministic simulation of Disque clusters (see tests/sim/harness).

Run: ``.venv/bin/python -m pytest tests/sim -q``. Every randomized test
is parametrized by seeds; a failure prints ``SIM_SEED=<n> ... pytest
'<file>::<test>'`` to replay exactly that history, and ``SIM_TRACE=1 -s``
prints its every connection, message and crash. ``SIM_SEEDS=<count>`` and
``SIM_BASE_SEED=<n>`` explore more or other histories.
"""
