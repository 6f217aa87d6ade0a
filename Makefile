# One command to set up and run the service, one to set up and run the tests (see README.md).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check -q

.PHONY: run test lint bench bench-all clean

# Editable installs as a plain path entry (a .pth line), not setuptools' import-hook finder: the finder costs every
# Python start ~16 ms (the launcher's own start is on the job's critical path; benchmarks/launcher_overhead.py).
EDITABLE := --config-settings editable_mode=compat

$(VENV)/.base: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install $(EDITABLE) -e .
	touch $@

$(VENV)/.test: pyproject.toml $(VENV)/.base
	$(PIP) install $(EDITABLE) -e '.[dev]'
	touch $@

# The service on its embedded SQLite default (http://127.0.0.1:8000).
run: $(VENV)/.base
	$(VENV)/bin/trainplan serve

# Everything the tests need (Python extras, Debian's chromium/shellcheck/postgresql where we are root), then the
# suite: two pytest processes side by side (scripts/run-tests.sh; `$(PY) -m pytest -q` runs the same tests in one).
test: $(VENV)/.test
	./scripts/test-services.sh
	. ./scripts/test-env.sh && PY=$(PY) ./scripts/run-tests.sh

lint: $(VENV)/.test
	$(VENV)/bin/ruff check app launcher tests benchmarks examples
	$(VENV)/bin/ruff format --check app launcher tests benchmarks examples
	$(VENV)/bin/mypy app launcher

# Planner accuracy and speed (seconds); the service and launcher benchmarks start real processes (minutes).
bench: $(VENV)/.base
	$(PY) benchmarks/accuracy.py
	$(PY) benchmarks/search_speed.py

bench-all: bench $(VENV)/.test
	$(PY) benchmarks/service_latency.py
	$(PY) benchmarks/launcher_overhead.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
