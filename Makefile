# Two commands do all set-up: `make demo` and `make test`. Both create .venv, install the project
# (pinned by constraints.txt) when pyproject.toml or constraints.txt changed, then run their job.

SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml constraints.txt | sha256sum | cut -c1-16)
PYTEST_ARGS ?=
LEFT_RUNNING = $(BIN)/python -m infra.local.leftovers run

# The services' environment defaults live in vidtx/env.py (every entry point applies them).
# Prefect state (the demo's runs, `make ui`'s server) lives in the checkout, not in ~/.prefect.
export PREFECT_HOME ?= $(CURDIR)/.prefect
# pip installs without compiling bytecode (--no-compile: about 60 s of a fresh install on 2 cores, most
# of it for modules never imported); Python compiles what is imported on first use and keeps it, so
# the targets must be allowed to write it.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: install demo test test-fast docs test-ui lint format bench ui ui-stop serve stack stack-stop demo-stack s3 clean

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found (vidtx needs Python 3.11)"; exit 1; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip==26.3
	$(BIN)/python -m pip install --quiet --no-compile -c constraints.txt -e ".[dev]"
	@rm -f $(VENV)/.installed-*
	@touch $@

# The demo fails, naming it, where any process it started is still running after it (infra/local/leftovers.py).
demo: install
	$(LEFT_RUNNING) "make demo" -- $(BIN)/vidtx pipeline configs/experiments/demo.yaml

# The tests that start no service run in two processes (pytest-xdist; 248 s against 376 s in one on
# 2 cores), then the slow ones one at a time: Ray's processes keep both cores busy. Exit code 5 is a
# phase that PYTEST_ARGS left without a test. Each phase fails, naming it, where a process it started
# (Ray, Prefect, MLflow, an S3 server, PostgreSQL; an orphan too) is still running once pytest has
# exited (infra/local/leftovers.py).
test: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(MAKE) --no-print-directory docs
	$(LEFT_RUNNING) "make test (the fast phase)" -- $(BIN)/python -m pytest -m "not slow" -n 2 $(PYTEST_ARGS) || [ $$? -eq 5 ]
	$(LEFT_RUNNING) "make test (the slow phase)" -- $(BIN)/python -m pytest -m slow $(PYTEST_ARGS) || [ $$? -eq 5 ]

# The loop for working: every test but the slow ones (those that start Ray, DeepSpeed, Prefect, MLflow,
# the S3 server or the stack), at most 8 minutes; docs/development.md says which slow modules to run
# for which area. `make test` (CI) runs everything.
test-fast: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest -m "not slow" -n 2 $(PYTEST_ARGS)

# The docs site (mkdocs.yml, docs/) into runs/site/: --strict fails on any warning, a broken internal
# link or anchor included; the configuration reference is generated from the schema (docs/hooks/).
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

# Opt-in browser test of `make ui` / `make ui-stop` (not run by .ci/run: it needs Debian's chromium).
test-ui: install
	@command -v chromium >/dev/null || { echo "error: test-ui needs Debian's chromium (apt-get install chromium)"; exit 1; }
	$(BIN)/python -m pip install --quiet --no-compile -c constraints.txt -e ".[dev,ui-test]"
	VIDTX_TEST_UI=1 $(BIN)/python -m pytest -m ui tests/test_ui.py $(PYTEST_ARGS)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

bench: install
	$(BIN)/python -m benchmarks.run $(BENCH_ARGS)

ui: install
	BIN=$(BIN) infra/local/ui.sh start

ui-stop:
	BIN=$(BIN) infra/local/ui.sh stop

# The registered model behind MLflow's scoring server (POST /invocations) on loopback. mlflow starts
# `uvicorn` by name, so the venv's bin goes first on PATH; the registry is the demo's unless
# MLFLOW_TRACKING_URI says otherwise.
SERVE_MODEL ?= models:/vidtx-xvit-demo@champion
SERVE_PORT ?= 5001
serve: install
	eval "$$($(BIN)/python -m vidtx.env)" && PATH="$(CURDIR)/$(BIN):$$PATH" \
	MLFLOW_TRACKING_URI="$${MLFLOW_TRACKING_URI:-sqlite:///runs/demo/mlflow.db}" \
	$(BIN)/mlflow models serve -m "$(SERVE_MODEL)" --env-manager local --host 127.0.0.1 --port $(SERVE_PORT)

# The services of infra/docker/compose.yaml as processes on this machine, authentication on:
# PostgreSQL, S3, MLflow, Prefect server + worker, a two-node Ray cluster (infra/local/stack.py).
# Clients: `source runs/stack/stack.env`. `make stack-stop` ends them and keeps the data.
stack: install
	$(BIN)/python -m infra.local.stack start

stack-stop:
	$(BIN)/python -m infra.local.stack stop

# The demo pipeline across `make stack` (infra/local/demo_stack.py): sources uploaded to its bucket,
# video-pipeline/stack run through its Prefect server. `make stack` first.
demo-stack: install
	$(BIN)/python -m infra.local.demo_stack

# A local S3 server for trying s3:// shards and checkpoints: SeaweedFS on loopback, its data in
# runs/s3 (kept between runs), its keys in runs/s3/s3.env (`source` it in another shell).
S3_PORT ?= 9000
s3: install
	$(BIN)/python -m infra.local.s3_server runs/s3 $(S3_PORT)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
