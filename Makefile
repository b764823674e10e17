# Two entry points: `make run` (the main job on the embedded default) and `make test`.
# Both create or reuse .venv and install the workspace first (scripts/bootstrap.sh).
SHELL := /bin/bash
VENV ?= .venv
CORES ?= $(shell nproc 2>/dev/null || echo 2)
export HF_DATASETS_OFFLINE ?= 1
export HF_HUB_OFFLINE ?= 1
export HF_HOME ?= $(CURDIR)/.cache/huggingface
export MLFLOW_DISABLE_TELEMETRY ?= true
export TORCHINDUCTOR_CACHE_DIR ?= $(CURDIR)/.cache/inductor

.PHONY: setup run test lint mutants
setup:
	@bash scripts/bootstrap.sh

# The whole embedded reproduction, corpus to report (config/config.yaml): progress as "N of M steps", each job's
# log under results/embedded/logs/, reports in reports/embedded/, runs in results/embedded/mlflow.db.
run: setup
	$(VENV)/bin/snakemake --cores $(CORES)

# The suite on TEST_WORKERS processes (pytest-xdist), one test file at a time per worker (conftest.py says why);
# TEST_WORKERS=0 runs it in this one process.
TEST_WORKERS ?= $(CORES)
test: setup
	$(VENV)/bin/python -m pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

lint: setup
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

# Mutation testing of the result-critical modules (docs/testing.md): slow (about two hours on 2 shared cores), not
# part of `make test` or CI. MUTANTS="optim decision" picks modules; results and survivors' diffs in mutants/report.md.
mutants: setup
	nice -n 10 $(VENV)/bin/python scripts/mutants/run.py $(MUTANTS)
