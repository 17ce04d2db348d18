# Herald — every target bootstraps .venv from pyproject.toml on first use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.bench-installed

.PHONY: dev test lint fmt unit docs bench bench-report clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

## Run Herald: embedded PostgreSQL, demo directory, API + workers in one process.
## Extra options go through ARGS, e.g. `make dev ARGS="--port 9000"`.
dev: $(STAMP)
	$(BIN)/herald dev $(ARGS)

## Lint, type-check and run every test (embedded PostgreSQL unless HERALD_TEST_DATABASE_URL is set).
test: lint
	$(BIN)/pytest

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy

fmt: $(STAMP)
	$(BIN)/ruff format src tests bench
	$(BIN)/ruff check --fix src tests bench

unit: $(STAMP)
	$(BIN)/pytest tests/unit

## docs/configuration.md from src/herald/config.py (a test fails when it is behind).
docs: $(STAMP)
	$(BIN)/python -m tests.config_reference

## Benchmarks print figures beside a baseline measured in the same run (never pass/fail).
bench: bench-fanout bench-delivery bench-queue_shapes bench-send bench-api bench-inbox bench-import bench-realtime bench-retention bench-scheduler bench-broadcast bench-followups bench-webhooks bench-person_reads bench-pgbouncer bench-replica bench-escalation

## bench/REPORT.md: every bench at a small size beside the claim-loop anchor, with the machine
## and the date (a few minutes). Options through ARGS, e.g. `ARGS="--anchor path/claim_loop.py"`.
bench-report: $(BENCH_STAMP)
	$(BIN)/python bench/report.py $(ARGS)

bench-%: $(BENCH_STAMP)
	$(BIN)/python bench/$*.py

# The benches' extras (a peer queue, a profiler) on top of the test environment.
$(BENCH_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	touch $(BENCH_STAMP)

clean:
	rm -rf $(VENV) .herald .pytest_cache .mypy_cache .ruff_cache
