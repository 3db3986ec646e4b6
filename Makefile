# Sluice — every target installs what it needs first (venv, Python packages,
# Java and ZooKeeper from Debian packages when missing).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: docs-config packages install spark-cds system-deps proto lint test test-fast test-cluster test-chaos test-unit demo bench bench-quick bench-profile bench-failover bench-windowed bench-state bench-state-backends bench-reconfigure bench-external-spark validate clean

# packages: the venv and its Python packages (+ Java, ZooKeeper); install: those and the Spark JVM's
# class-data sharing archive the TaskManagers map.
#
# Bytecode: every Python module is compiled once here (the packages by uv at install, Sluice's own
# modules below, a no-op for those unchanged), never at each import. A process that finds no .pyc
# compiles every module it imports from source, and under PYTHONDONTWRITEBYTECODE (set on this
# machine) it does so at every start: measured, the imports of a TaskManager, a JobManager and the
# CLI cost 6.5 s of CPU from source against 1.8 s from bytecode (bench/README.md "Bytecode").
packages: system-deps $(STAMP)
	@$(BIN)/python -m compileall -q -j 0 jobmanager taskmanager sluice examples tests bench

install: packages spark-cds

# The packages are installed by uv (pinned here; pip installs it first): the same pins of
# pyproject.toml as pip would resolve, in ~35 s where pip takes ~80 s on this machine, plus ~25 s
# to compile them to bytecode as pip would (uv does not by default).
UV_VERSION := 0.13.9
$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check uv==$(UV_VERSION)
	$(BIN)/uv pip install -q --compile-bytecode --python $(BIN)/python -e '.[test,bench,lint]'
	@rm -f $(VENV)/.installed-*
	@touch $@

# The Spark JVM's class-data sharing archive in $(VENV)/share/sluice/ (taskmanager/spark_cds.py):
# every TaskManager's JVM maps it and skips most of its class loading. ~40 s once; then a no-op
# until pyspark or the JVM changes.
spark-cds: system-deps $(STAMP)
	@$(BIN)/python -m taskmanager.spark_cds build

# Java 17 and ZooKeeper (Debian's `zookeeper` package provides /usr/share/java/zookeeper.jar);
# Chromium and its WebDriver (/usr/bin/chromium, /usr/bin/chromedriver) for the dashboard's browser
# test (tests/integration/test_dashboard.py); redis-server for the Redis Streams connector's tests
# (tests/integration/test_redis_streams.py). Only what is missing is installed, after one apt-get update.
system-deps:
	@missing="$$(command -v java >/dev/null 2>&1 || echo openjdk-17-jre-headless) \
	  $$([ -f /usr/share/java/zookeeper.jar ] || echo zookeeper) \
	  $$([ -x /usr/bin/chromium ] || echo chromium) \
	  $$([ -x /usr/bin/chromedriver ] || echo chromium-driver) \
	  $$([ -x /usr/bin/redis-server ] || echo redis-server)"; \
	if [ -n "$$(echo $$missing)" ]; then \
	  echo "installing from Debian packages:" $$missing; \
	  $(SUDO) apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q --no-install-recommends $$missing; \
	fi

# Regenerate the gRPC stubs from proto/sluice/v1/*.proto (checked in; a test
# fails when they are stale).
proto: $(STAMP)
	$(BIN)/python -m grpc_tools.protoc -Iproto --python_out=. --pyi_out=. --grpc_python_out=. proto/sluice/v1/*.proto

# Regenerate the option tables of README.md and docs/configuration.md from
# sluice/config.py and sluice/job_options.py (a test fails when they are stale).
docs-config: $(STAMP)
	$(BIN)/python -m sluice.reference_docs README.md docs/configuration.md docs/architecture.md

# ruff (lint + format check) and mypy; configured in pyproject.toml. `make test-fast` runs it first.
# The second mypy run checks tests/integration/conftest.py, a module named `conftest` like tests/conftest.py.
lint: packages
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/mypy tests/integration/conftest.py

# The tests in three tiers (CONTRIBUTING.md "Run the tests"), each a pytest marker and a target:
#   test-fast     lint, unit tests, offline validation of the manifests; no process started
#   test-cluster  integration and security tests, most on one shared cluster per session
#   test-chaos    kills, SIGSTOP, ZooKeeper restarts, HA, external Spark, the browser
# `make test` (what CI runs, tests/run_tiers.py) runs all three side by side with the class-data
# sharing archive's build: test-fast at once, the other two once the archive is built; each step's
# output is printed whole when it ends, then every step's duration; it fails if any step did.
# SEQUENTIAL=1 runs them one after another. Every tier writes its per-test durations to
# build/test-results/<tier>.xml (JUnit XML) and prints its slowest tests.
PYTEST  = $(BIN)/python -m pytest -q -ra --durations=15
RESULTS = build/test-results

test: packages
	@MAKE="$(MAKE)" SEQUENTIAL="$(SEQUENTIAL)" $(BIN)/python tests/run_tiers.py

test-fast: packages lint
	$(PYTEST) -m fast --junitxml=$(RESULTS)/fast.xml tests

test-cluster: install
	$(PYTEST) -m cluster --junitxml=$(RESULTS)/cluster.xml tests/integration

test-chaos: install
	$(PYTEST) -m chaos --junitxml=$(RESULTS)/chaos.xml tests/integration

test-unit: install
	$(BIN)/python -m pytest -q tests/unit

# Offline validation of docker-compose.yml and k8s/ (also part of `make test-fast`).
validate: $(STAMP)
	$(BIN)/python -m pytest -q tests/offline tests/unit/test_config.py

demo: install
	$(BIN)/python examples/demo.py

# Benchmarks (bench/README.md): Sluice and Spark Structured Streaming on the same
# data, alternating run by run; each script appends one generated section to
# bench/RESULTS.md. bench-quick (~3 minutes) is the throughput suite's small
# matched pair; bench (~55 minutes) is the reference run: throughput (sweeps,
# sizes, headline), paired recovery, checkpoint overhead, latency at fixed rates,
# windows, process-function forms, and the key-cardinality sweep.
# Every script runs even if one before it failed; the target fails if any did.
BENCH_SUITES = throughput_suite recovery_suite checkpoint_overhead latency_suite windowed_bench process_forms_bench key_sweep

bench-quick: install
	$(BIN)/python bench/throughput_suite.py --quick

bench: install
	@failed=""; for s in $(BENCH_SUITES); do \
	  echo "== bench/$$s.py"; $(BIN)/python bench/$$s.py || failed="$$failed $$s"; \
	done; if [ -n "$$failed" ]; then echo "failed:$$failed"; exit 1; fi

# The TaskManager hot path under py-spy, and JobManager failover alone.
bench-profile: install
	$(BIN)/python bench/profile_hot_path.py

bench-failover: install
	$(BIN)/python bench/failover_bench.py

# Event-time windows (tumbling 10 s, sliding 60 s / 10 s) on Sluice and Spark Structured Streaming,
# every window checked exactly (bench/windowed_bench.py; --quick for a smoke run).
bench-windowed: install
	$(BIN)/python bench/windowed_bench.py

# Keyed state (dedup with a process function; an interval join) on Sluice and Spark Structured
# Streaming, alternating run by run, each output checked (bench/state_bench.py; --quick for a smoke run).
bench-state: install
	$(BIN)/python bench/state_bench.py

# Memory vs rocksdb state (full and incremental checkpoints) on 10 M keys: RSS, checkpoint size and
# duration, throughput, restore after kill -9 (bench/state_backend_bench.py, docs/state-backends.md)
bench-state-backends: install
	$(BIN)/python bench/state_backend_bench.py --kill

# Changing a running job's operator parallelism live (sluice reconfigure) against stop-with-savepoint and
# restore (sluice rescale), alternating run by run on one cluster, each output checked exactly
# (bench/reconfigure_bench.py; --quick for a smoke run).
bench-reconfigure: install
	$(BIN)/python bench/reconfigure_bench.py

# Page views with a TaskManager on its local Spark vs a Spark standalone cluster vs a Spark Connect
# server started beside it, alternating run by run, each output checked exactly (bench/external_spark_bench.py,
# ~10 minutes; --quick for a smoke run).
bench-external-spark: install
	$(BIN)/python bench/external_spark_bench.py

# BATCH page views against plain Spark batch, region vs full failover after kill -9 of a TaskManager,
# speculation on/off with one straggler; every output checked exactly (bench/batch_bench.py, ~30 minutes;
# --quick for a smoke run of a few minutes).
bench-batch: install
	$(BIN)/python bench/batch_bench.py

clean:
	rm -rf .sluice build *.egg-info .pytest_cache
