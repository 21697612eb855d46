# Two entry points: `make demo` (the main job) and `make test` (the whole suite).
# Both create .venv once (torch is large: it is installed a single time) and reuse it.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TORCH_PINS := torch==2.14.1 torchvision==0.29.1

.PHONY: demo test lint bench venv

venv: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet $(TORCH_PINS)
	$(BIN)/python -m pip install --quiet -e '.[test]' $(TORCH_PINS)
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/torch-drt demo

# Two test processes (the suite is mostly child processes and waits); a file's tests share one process, so
# module fixtures run once. A single test file or test runs in one process: `$(BIN)/python -m pytest tests/...`.
test: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 --dist loadfile

lint: $(STAMP)
	$(BIN)/ruff check .

bench: $(STAMP)
	$(BIN)/python benchmarks/run_all.py
