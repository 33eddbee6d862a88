# Two commands set everything up on a fresh machine: `make run` and `make test`.
# The distribution's CPython (/usr/bin/python3) is built with PGO and LTO and
# runs the node about 30 % faster than a plain source build such as pyenv's
# default, so it is preferred when it is recent enough and has venv.
PYTHON ?= $(or $(shell for p in /usr/bin/python3 python3; do \
	$$p -c 'import sys, ensurepip; sys.exit(sys.version_info < (3, 11))' 2>/dev/null \
	&& echo $$p && break; done),python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# make run's node runs from a config the clone does not track, copied from
# conf/disque.conf on the first run: CONFIG REWRITE (the controlled restart,
# docs/persistence.md) writes into it, never into the tracked file.
RUN_CONF := conf/run.conf
CONF ?= $(RUN_CONF)
# make install EXTRAS=spark (or EXTRAS=spark,charts) adds extras' dependencies.
EXTRAS ?=
# The core is compiled in place by mypyc where a C compiler is present
# (setup.py, docs/operations.md); DISQUE_PURE_PYTHON=1 make install keeps it
# pure. The stamp names the mode, so switching modes rebuilds.
CORE_STAMP := $(VENV)/.core-$(if $(filter-out 0,$(DISQUE_PURE_PYTHON)),pure,compiled)

.PHONY: install run typecheck test test-fast test-pure test-bus-secured bench sim-search chaos fuzz \
	clean

install: $(CORE_STAMP) $(if $(EXTRAS),$(VENV)/.extras-$(EXTRAS))

# pip installs the package keeping a compiled core that still matches its
# sources (setup.py builds nothing then: a dependency change costs no rebuild),
# and pure otherwise, removing a stale one; the compiled core is built by the
# $(CORE_STAMP) rule below, with the venv's mypyc and its progress shown.
PIP_INSTALL := $(BIN)/python disque/build.py || export DISQUE_PURE_PYTHON=1; \
	$(BIN)/pip install --quiet -e

$(STAMP): pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(PIP_INSTALL) '.[dev]'
	rm -f $(VENV)/.core-*
	touch $(STAMP)

# After any source change: rebuild the compiled core if its manifest no
# longer matches the core's sources (an adapter edit needs no rebuild). A
# stale build is never run: disque/build.py loads the .py files instead.
# Then write the bytecode of every module, as pip does for an installed
# package: a node that compiles its adapters at each start (PYTHONDONTWRITEBYTECODE
# set, or a tree it cannot write) takes about 40 % longer to answer PING.
# The build prints its progress; DISQUE_BUILD_JOBS=N sets how many C compilers
# run at once (default: one per CPU).
$(CORE_STAMP): $(STAMP) $(wildcard disque/*.py disque/*/*.py)
	@$(BIN)/python disque/build.py || { \
	echo "disque: compiling the core with mypyc (once, and after a core source changes): about 2 minutes on 2 CPUs; DISQUE_PURE_PYTHON=1 make $(or $(MAKECMDGOALS),install) skips it"; \
	$(BIN)/python setup.py --quiet build_ext --inplace; }
	$(BIN)/python -m compileall -q disque
	rm -f $(VENV)/.core-*
	touch $@

# An extra's dependencies, added once the core is built: pip reinstalls the
# package in the core's mode (DISQUE_PURE_PYTHON as make got it), so setup.py
# finds the tree holding that build already and compiles nothing; the venv's
# setuptools and mypy build it (no isolated build environment to download).
$(VENV)/.extras-%: $(STAMP) | $(CORE_STAMP)
	$(BIN)/pip install --quiet --no-build-isolation -e '.[$*]'
	touch $@

$(RUN_CONF):
	cp conf/disque.conf $@

run: install $(CONF)
	$(BIN)/disque-server $(CONF)

# The core's type check ([tool.mypy] in pyproject.toml: its `files` are the
# core) runs before the tests, then the same strict check of the adapters that
# talk to the core through typed seams.
ADAPTERS_TYPED := disque/net disque/launch.py disque/server.py disque/process disque/http disque/aof
typecheck: install
	$(BIN)/mypy
	$(BIN)/mypy $(ADAPTERS_TYPED)

test: $(VENV)/.extras-spark typecheck
	$(BIN)/python -m pytest -q

test-fast: install
	$(BIN)/python -m pytest -q tests/unit tests/sim

# The unit and simulation tests on the pure-Python core, compiled core or not.
test-pure: install
	DISQUE_PURE_PYTHON=1 $(BIN)/python -m pytest -q tests/unit tests/sim

# The cluster tests again with every test cluster's bus over TLS and with a
# cluster secret (docs/security.md "Cluster bus"); about 2.5 minutes.
test-bus-secured: install
	DISQUE_TEST_BUS=tls+secret $(BIN)/python -m pytest -q tests/cluster

bench: install
	$(BIN)/python -m bench.run

# Fault-schedule search (docs/testing.md): SEEDS seeded random histories of
# the simulated cluster, on 2 processes; a failing seed prints its replay.
SEEDS ?= 1000
sim-search: install
	$(BIN)/python -m tests.sim.search --seeds $(SEEDS)

# Real nodes killed, paused and partitioned for DURATION seconds (docs/testing.md).
DURATION ?= 180
chaos: install
	$(BIN)/python -m chaos.run --duration $(DURATION)

# Coverage-guided fuzzing (atheris) of the RESP parser, commands, bus frames
# and the AOF loader, about 1,000,000 inputs times FUZZ_SCALE, then their
# property tests (hypothesis); docs/security.md, "Fuzzing".
FUZZ_SCALE ?= 1
fuzz: install
	$(BIN)/python -m fuzz.run --scale $(FUZZ_SCALE)

clean:
	rm -rf $(VENV) build *.egg-info disque_core__mypyc.*.so disque/compiled-core.json
	find disque -name '*.so' -delete
