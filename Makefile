# One entry point for everything. `make demo` runs snowsource on the bundled emulator and a local
# Kafka; `make test` runs the whole test suite. Both do all set-up on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: all install test test-unit test-cluster cluster-up cluster-down lint fmt kafka-up \
	kafka-down kafka-status registry-up registry-down demo demo-avro emulator bench clean \
	image image-smoke

all: lint test

$(STAMP): pyproject.toml constraints.txt
	@echo "make: installing snowsource and its pinned dependencies into $(VENV) with pip"
	@echo "make: (once, and again when pyproject.toml or constraints.txt change; usually under a minute)"
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

kafka-up:
	scripts/kafka.sh start

kafka-down:
	scripts/kafka.sh stop

kafka-status:
	scripts/kafka.sh status

# The Schema Registry (scripts/registry.sh, REGISTRY_PORT) for value.format: avro | json_schema.
registry-up:
	scripts/registry.sh start

registry-down:
	scripts/registry.sh stop

# The registry's tests start it themselves (tests/conftest.py), as they do the broker.
test: install kafka-up registry-up
	$(BIN)/pytest -q $(PYTEST_ARGS)

# The fault tests on a three-broker cluster (SPEC §15.4; marked `cluster`, left out of `make
# test`): scripts/kafka-cluster.sh starts the cluster on KAFKA_CLUSTER_PORT (default
# KAFKA_PORT + 100, i.e. 9192-9194) once for the run and stops it at the end. About 10 minutes.
test-cluster: install
	$(BIN)/pytest -q -m cluster tests/cluster $(PYTEST_ARGS)

# The same cluster by hand (the port rule of tests/cluster/conftest.py).
CLUSTER_PORT = $${KAFKA_CLUSTER_PORT:-$$(( $${KAFKA_PORT:-9092} + 100 ))}

cluster-up:
	KAFKA_PORT=$(CLUSTER_PORT) scripts/kafka-cluster.sh start

cluster-down:
	KAFKA_PORT=$(CLUSTER_PORT) scripts/kafka-cluster.sh stop

# Everything that needs no broker (tests that use it are marked `kafka` from their fixtures):
# runs with no Kafka at all.
test-unit: install
	$(BIN)/pytest -q -m "not kafka and not registry" tests/unit tests/emulator $(PYTEST_ARGS)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

fmt: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

emulator: install
	$(BIN)/snowsource emulator --port 8080

demo: install kafka-up
	$(BIN)/python -m snowsource.demo

# The demo with value.format: avro through the local Schema Registry (scripts/registry.sh).
REGISTRY_PORT ?= 8081
demo-avro: install kafka-up registry-up
	DEMO_REGISTRY_URL=http://127.0.0.1:$(REGISTRY_PORT)/apis/ccompat/v7 $(BIN)/python -m snowsource.demo

bench: install kafka-up
	$(BIN)/python -m bench $(BENCH_ARGS)

# The container image (docs/operations.md#container): Docker or Podman when one works, else a
# debootstrap stand-in base built with buildah.
image:
	scripts/image.sh build

image-smoke: install
	scripts/image.sh smoke

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
