# Two entry points: `make demo` (the main job) and `make test` (the whole suite).
# Both create .venv once (torch is large: it is installed a single time) and reuse it; `make demo` installs the
# package with its runtime dependencies only, `make test` adds the test extras on top (two stamps in .venv).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
RUNTIME_STAMP := $(VENV)/.installed-runtime
TEST_STAMP := $(VENV)/.installed-test
TORCH_PINS := torch==2.14.1 torchvision==0.29.1
# a path entry (.pth) for the source tree rather than an import hook, so type checkers (mypy) see torch_drt too
EDITABLE := --config-settings editable_mode=compat

.PHONY: demo test test-all lint bench venv

venv: $(RUNTIME_STAMP)

# the package and its runtime dependencies only: all that `make demo` needs
$(RUNTIME_STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet $(TORCH_PINS)
	$(BIN)/python -m pip install --quiet -e . $(EDITABLE) $(TORCH_PINS)
	touch $(RUNTIME_STAMP)

# the test extras on top (pytest, the peers the suite compares with, moto, mkdocs, mypy, Ray, ...), installed once
$(TEST_STAMP): $(RUNTIME_STAMP)
	$(BIN)/python -m pip install --quiet -e '.[test]' $(EDITABLE) $(TORCH_PINS)
	touch $(TEST_STAMP)

demo: $(RUNTIME_STAMP)
	$(BIN)/torch-drt demo

# Two test processes (the suite is mostly child processes and waits); a file's tests share one process, so
# module fixtures run once. A single test file or test runs in one process: `$(BIN)/python -m pytest tests/...`.
test: $(TEST_STAMP)
	$(BIN)/python -m pytest -q -n 2 --dist loadfile

# everything: the default suite plus the opt-in larger runs (-m slow: scale, every state mutation, whole transform grids, the other
# node-cache limit pairs, and the end-to-end tier listed in tests/slow_tier.txt: multi-process and multi-rank runs
# beyond one per seam, the heavier docs pages and examples, mypy over the examples)
test-all: $(TEST_STAMP)
	TORCH_DRT_ALL_MUTATIONS=1 $(BIN)/python -m pytest -q -n 2 --dist loadfile -m ''

lint: $(TEST_STAMP)
	$(BIN)/ruff check .

bench: $(TEST_STAMP)
	$(BIN)/python benchmarks/run_all.py
