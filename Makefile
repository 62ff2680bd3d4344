# Two commands on a fresh machine: `make demo` and `make test`. Everything installs from
# pinned versions into .venv; no model or data is downloaded at run time.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export DO_NOT_TRACK := 1
export PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS := 120
export TOKENIZERS_PARALLELISM := false

DEMO_DB ?= .quarry
DEMO_QUERY ?= how do I roll back a bad deploy

.PHONY: setup demo test test-slow bench clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# The CPU build of torch comes from the machine's local wheel; install it first so that
	# nothing else pulls a CUDA build.
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -r requirements.lock
	$(BIN)/python -m pip install -q --no-deps -e .
	touch $@

demo: setup
	$(BIN)/quarry index data/sample --db $(DEMO_DB)
	$(BIN)/quarry status --db $(DEMO_DB)
	$(BIN)/quarry search "$(DEMO_QUERY)" --db $(DEMO_DB) -k 5

test: setup
	$(BIN)/python -m pytest -m "not slow" -q

test-slow: setup
	$(BIN)/python -m pytest -m slow -q

clean:
	rm -rf $(VENV) .quarry .pytest_cache
