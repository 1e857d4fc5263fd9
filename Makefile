# One task runner. `make serve` and `make test` are the README's two commands: each sets up
# everything it needs (idempotently) from a clean clone.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install --disable-pip-version-check -q -c constraints.txt
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: serve test test-fast lint bench system-deps system-deps-test clean

$(VENV)/.base: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP) -e .
	touch $@

$(VENV)/.test: $(VENV)/.base
	$(PIP) -e '.[test]'
	touch $@

system-deps:
	scripts/system-deps.sh dot:graphviz

system-deps-test:
	scripts/system-deps.sh dot:graphviz /usr/bin/chromium:chromium /usr/lib/postgresql/15/bin/initdb:postgresql

serve: $(VENV)/.base system-deps
	$(VENV)/bin/autograd-lab serve --host $(HOST) --port $(PORT)

test: $(VENV)/.test system-deps-test
	$(PY) -m pytest -q

# Everything but the browser and wheel-building tests: the quick loop while editing.
test-fast: $(VENV)/.test system-deps
	$(PY) -m pytest -q -m 'not browser and not slow and not postgres'

lint: $(VENV)/.test
	$(VENV)/bin/ruff check app autograd_lab tests bench scenarios scripts
	$(VENV)/bin/lint-imports

bench: $(VENV)/.test system-deps
	$(PY) bench/run.py

clean:
	rm -rf $(VENV) test-artifacts .pytest_cache
