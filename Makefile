# Every target sets up .venv on first use, so a fresh clone needs only Python 3.11+ and pip.
# `make test` also runs the suite in .venv-min, where every direct dependency is at its declared floor.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
DEV_STAMP := $(VENV)/.dev-installed
BENCH_STAMP := $(VENV)/.bench-installed
VENV_MIN := .venv-min
PY_MIN := $(VENV_MIN)/bin/python
MIN_STAMP := $(VENV_MIN)/.min-installed

.PHONY: demo test test-latest test-min lint bench e2e-clients status-page-screenshot clean

$(DEV_STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11 or newer is required")'
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $(DEV_STAMP)

# The floors of pyproject.toml pinned exactly (scripts/min-constraints); the rest resolves as usual.
$(MIN_STAMP): pyproject.toml scripts/min-constraints
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11 or newer is required")'
	@test -x $(PY_MIN) || $(PYTHON) -m venv $(VENV_MIN)
	$(PY_MIN) -m pip install --quiet --upgrade pip
	$(PYTHON) scripts/min-constraints dev > $(VENV_MIN)/constraints.txt
	$(PY_MIN) -m pip install --quiet -c $(VENV_MIN)/constraints.txt -e '.[dev]'
	@touch $(MIN_STAMP)

$(BENCH_STAMP): $(DEV_STAMP)
	$(PY) -m pip install --quiet -e '.[dev,bench]'
	@touch $(BENCH_STAMP)

demo: $(DEV_STAMP)
	$(VENV)/bin/turnout demo

test: test-latest test-min

test-latest: $(DEV_STAMP)
	@scripts/ensure-redis
	@scripts/ensure-chromium || true
	$(PY) -m pytest -q

test-min: $(MIN_STAMP)
	@scripts/ensure-redis
	@scripts/ensure-chromium || true
	$(PY_MIN) -m pytest -q -p no:cacheprovider

lint: $(DEV_STAMP)
	$(VENV)/bin/ruff check src tests bench scripts
	$(VENV)/bin/ruff format --check src tests bench scripts
	$(VENV)/bin/mypy

bench: $(BENCH_STAMP)
	$(PY) -m bench.run

# Claude Code and Codex CLI from the npm registry, through the gateway and the simulator (needs npm; not in `test`)
e2e-clients: $(DEV_STAMP)
	$(PY) scripts/e2e_clients.py

# docs/images/status-page.png, from a scripted demo state in headless Chromium (loopback only)
status-page-screenshot: $(DEV_STAMP)
	@scripts/ensure-chromium
	$(PY) scripts/status_page_screenshot.py

clean:
	rm -rf $(VENV) $(VENV_MIN) .pytest_cache .mypy_cache .ruff_cache .e2e-clients
