# tablesafe: two commands for a newcomer.
#   make demo   set everything up, make the demo data, run the demo table builder
#   make test   set everything up and run the whole test suite (lint, types, tests)

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
DEMO   := data/demo
RECORDS ?= 200000
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: demo test install lint typecheck unit system bench clean system-deps

$(BIN)/activate:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "tablesafe needs Python 3.11 or newer")'
	$(PYTHON) -m venv $(VENV)

# Two stamps: the demo needs tablesafe and its agent interface (the mcp extra, about 25 MB);
# lint, types and tests need the dev, Spark and PostgreSQL extras too (about 1.5 GB more),
# which only `make test` installs. The full install stamps both, so a demo after the tests
# installs nothing.
$(VENV)/.installed-demo: $(BIN)/activate pyproject.toml
	@echo "installing tablesafe into $(VENV) (with its agent interface; a minute or two the first time)"
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[mcp]'
	touch $@

$(VENV)/.installed: $(BIN)/activate pyproject.toml
	@echo "installing tablesafe with the dev, Spark, PostgreSQL, server, MCP and DP extras into $(VENV) (for the tests; a few minutes the first time)"
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,spark,postgres,server,mcp,dp]'
	touch $(VENV)/.installed-demo $@

install: $(VENV)/.installed

$(DEMO)/catalog.toml: | $(VENV)/.installed-demo
	$(BIN)/tablesafe demo-data $(DEMO) --records $(RECORDS) --seed 2026

data/demo-secret:
	@mkdir -p data
	$(BIN)/python -c 'import secrets; print(secrets.token_hex(32))' > $@

# `tablesafe serve` binds its port before it loads data or says "serving":
# a busy port fails at once (make demo PORT=8001 picks another).
# Before serving: how to connect an AI assistant (docs/agents.md), over HTTP or stdio.
demo: $(VENV)/.installed-demo $(DEMO)/catalog.toml data/demo-secret
	@echo "To ask the demo from an AI assistant (docs/agents.md), give it the MCP server"
	@echo "  over HTTP:  http://$(HOST):$(PORT)/mcp"
	@echo '  or over stdio, in its JSON configuration (Claude Desktop: claude_desktop_config.json):'
	@echo '  {"mcpServers": {"tablesafe-demo": {"command": "$(CURDIR)/$(BIN)/tablesafe", "args": ["mcp", "--config", "$(CURDIR)/demo/site.toml"]}}}'
	$(BIN)/tablesafe serve --config demo/site.toml --host $(HOST) --port $(PORT)

# Browser tests drive Debian's Chromium, Spark tests need Java 17, the state store's tests
# start Debian's PostgreSQL server (tests/_postgres.py): install them when missing.
system-deps:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else \
	    echo "the browser tests need Chromium: run 'sudo apt-get install chromium'"; exit 1; \
	  fi; }
	@command -v java >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless >/dev/null; \
	  else \
	    echo "the Spark tests need Java 17: run 'sudo apt-get install openjdk-17-jre-headless'"; exit 1; \
	  fi; }
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; \
	  else \
	    echo "the state store's tests need PostgreSQL: run 'sudo apt-get install postgresql'"; exit 1; \
	  fi; }

lint: install
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

typecheck: install
	$(BIN)/mypy

# Two pytest-xdist workers (TEST_WORKERS=0: one process): a module's tests, the Spark
# tests and the blocks of one docs page each run on one worker (tests/conftest.py).
# The slowest tests are listed at the end. pytest exits 5 when it collects no test;
# that is a failure here too, but reported as such rather than as a crash.
TEST_WORKERS ?= 2
test: lint typecheck system-deps
	$(BIN)/python -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) \
	  --durations=30; rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "pytest collected no tests"; exit 1; fi; exit $$rc

unit: install
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) -m "not system"

system: install
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) -m system

bench: install
	$(BIN)/python benchmarks/bench_tabulate.py

clean:
	rm -rf $(VENV) data .pytest_cache .mypy_cache .ruff_cache
