# Two commands set everything up on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SPARK_STAMP := $(VENV)/.installed-spark
CONF ?= conf/disque.conf

.PHONY: install run test test-fast bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

$(SPARK_STAMP): $(STAMP)
	$(BIN)/pip install --quiet -e '.[dev,spark]'
	touch $(SPARK_STAMP)

run: install
	$(BIN)/disque-server $(CONF)

test: $(SPARK_STAMP)
	$(BIN)/python -m pytest -q

test-fast: install
	$(BIN)/python -m pytest -q tests/unit tests/sim

bench: install
	$(BIN)/python -m bench.run

clean:
	rm -rf $(VENV) build *.egg-info
