# `make demo` runs the whole loop on SQLite with simulated GPUs; `make test` runs the test suite.
# Both install into .venv on first use (torch from the CPU wheel, never a CUDA build).
VENV ?= .venv
# Parallel test processes (pytest-xdist): two suit a two-core machine; 0 runs them in one process.
# Tests marked `serial` (a prediction racing an injected failure in real time) run alone after.
# The parallel ones run one OpenMP thread per worker: two workers with two threads each on two
# cores stall at every parallel region (benchmarks/small_batches.py: 2.7-11x slower scoring).
TEST_WORKERS ?= 2
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo serve test lint

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[dev,dashboards]"
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/foreshock demo

serve: $(STAMP)
	$(VENV)/bin/foreshock serve --db sqlite:///foreshock.db

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(VENV)/bin/pytest -n $(TEST_WORKERS) -m "not serial"
	$(VENV)/bin/pytest -m serial

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
