# Two entry points: `make run` (the main job on the embedded default) and `make test`.
# Both create or reuse .venv and install the workspace first (scripts/bootstrap.sh).
SHELL := /bin/bash
VENV ?= .venv
export HF_DATASETS_OFFLINE ?= 1
export HF_HUB_OFFLINE ?= 1
export HF_HOME ?= $(CURDIR)/.cache/huggingface
export MLFLOW_DISABLE_TELEMETRY ?= true
export TORCHINDUCTOR_CACHE_DIR ?= $(CURDIR)/.cache/inductor

.PHONY: setup run test lint
setup:
	@bash scripts/bootstrap.sh

run: setup
	$(VENV)/bin/atlas data prepare --config config/data/embedded.yaml --out results/data/embedded

test: setup
	$(VENV)/bin/python -m pytest $(PYTEST_ARGS)

lint: setup
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .
