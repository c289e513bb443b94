# Every target sets up .venv on first use, so a fresh clone needs only Python 3.11+ and pip.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
DEV_STAMP := $(VENV)/.dev-installed
BENCH_STAMP := $(VENV)/.bench-installed

.PHONY: demo test lint bench e2e-clients clean

$(DEV_STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11 or newer is required")'
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $(DEV_STAMP)

$(BENCH_STAMP): $(DEV_STAMP)
	$(PY) -m pip install --quiet -e '.[dev,bench]'
	@touch $(BENCH_STAMP)

demo: $(DEV_STAMP)
	$(VENV)/bin/turnout demo

test: $(DEV_STAMP)
	@scripts/ensure-redis
	$(PY) -m pytest -q

lint: $(DEV_STAMP)
	$(VENV)/bin/ruff check src tests bench scripts
	$(VENV)/bin/ruff format --check src tests bench scripts
	$(VENV)/bin/mypy

bench: $(BENCH_STAMP)
	$(PY) -m bench.run

# Claude Code and Codex CLI from the npm registry, through the gateway and the simulator (needs npm; not in `test`)
e2e-clients: $(DEV_STAMP)
	$(PY) scripts/e2e_clients.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .e2e-clients
