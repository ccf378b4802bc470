# One venv (and one for the trainers), one instance home: every target sets itself up from nothing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
HOME_DIR := $(CURDIR)/.dagster_home
export DAGSTER_HOME := $(HOME_DIR)

.PHONY: install dg-env demo test test-fast contract-suite lint fmt dev validate screenshots docs docs-generated docs-serve clean

$(BIN)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev,postgres,celery,s3]'
	touch $@

# The trainer extra (TRL, verl, torch) lives in a venv of its own, .venv-trainer: building the
# pool never needs it, and verl's Hydra pins antlr4-python3-runtime 4.9, which breaks Dagster's
# asset-selection parser (`dg launch --assets`) in any environment it shares. torch goes first,
# as $(TORCH): the CPU build where one lies on the machine's disk (this project's CI machines
# keep torch 2.13.0+cpu in pip's find-links), since a bare `torch` takes PyPI's CUDA build,
# several GB more. Elsewhere pick your own build: make test TORCH='torch==2.9.1'. No pip
# cache: the wheels are installed once and a cached copy would double the disk they take.
TORCH ?= torch==2.13.0
TVENV := .venv-trainer
TBIN := $(TVENV)/bin
$(TBIN)/.installed: pyproject.toml
	test -x $(TBIN)/python || $(PYTHON) -m venv $(TVENV)
	$(TBIN)/python -m pip install -q --upgrade pip
	$(TBIN)/python -m pip install -q --no-cache-dir '$(TORCH)'
	$(TBIN)/python -m pip install -q --no-cache-dir -e '.[dev,trainer]'
	touch $@

$(HOME_DIR)/dagster.yaml: dagster.yaml
	mkdir -p $(HOME_DIR)
	ln -sf ../dagster.yaml $@

# Dagster's own commands (dg dev, dg launch, dagster ...) read ./.env before they open an
# instance: its DAGSTER_HOME line sends them to this one, the one statepool uses, with no
# variable set (one set in the environment still wins).
dg-env: $(BIN)/.installed
	@$(BIN)/python -m statepool_dagster.cli.dg_home $(HOME_DIR)

install: $(BIN)/.installed $(HOME_DIR)/dagster.yaml dg-env

demo: install  ## generate sample runs (if ./runs is empty), sync them into ./store, build the exports
	$(BIN)/statepool demo
	@echo "statepool is in $(BIN)/: run 'source $(BIN)/activate' to have it on the PATH"

test: install $(TBIN)/.installed  ## lint, then the whole test suite (the trainer tests in .venv-trainer)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	-$(BIN)/python tests/storages/dagster_suite.py
	$(BIN)/python -m pytest -m "not trainer"
	$(TBIN)/python -m pytest -m trainer

# Dagster's own event-log contract suite (tests/storages/test_contract_*.py) is not in its wheels: this
# downloads the pinned releases' source distributions with pip and keeps the suite's files in
# .dagster_suite/ (git-ignored). `make test` runs it first; offline, the suite's tests skip
# (and fail under CI=true).
contract-suite: install  ## fetch Dagster's event-log contract suite from its source releases
	$(BIN)/python tests/storages/dagster_suite.py

# The inner loop: every test but those marked `slow` (servers, daemons, browsers, trainers,
# many processes; see [tool.pytest.ini_options] markers). `make test` still runs them all.
test-fast: install  ## the tests not marked slow (or trainer), on both cores, no lint
	$(BIN)/python -m pytest -m "not slow and not trainer" -q -n 2

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

fmt: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# Dagster's own project commands ([tool.dg] in pyproject.toml: the code location of
# statepool_dagster/definitions.py, the one workspace.yaml names).
validate: install  ## check that the code location loads and its definitions validate
	$(BIN)/dg check defs

# dg dev through tools/dg_dev.py: in a process group of its own, so that Ctrl-C and SIGTERM
# (`kill %1` on a background `make dev &`) stop the webserver and the daemon within seconds.
dev: install  ## the Dagster UI and daemon on http://127.0.0.1:3000, sensor live (Ctrl-C or SIGTERM stops both)
	$(BIN)/python -m tools.dg_dev --host 127.0.0.1 --port 3000

# The docs' pictures (docs/ui-asset-graph.png, docs/ui-partition-metadata.png, docs/report.png),
# taken again from a fresh `statepool demo --sessions` in a temp folder and the Dagster UI, with
# Playwright driving the system's Chromium (apt-get install chromium; never a browser download).
screenshots: install  ## retake the docs' screenshots from a fresh demo and the UI
	$(BIN)/python -m tools.screenshots

# The documentation site: docs/ and mkdocs.yml, built into ./site (the reference pages are
# generated from the code at build time by tools/mkdocs_hooks.py). --strict: a broken link fails.
docs: install  ## build the documentation site into ./site
	$(BIN)/mkdocs build --strict

# The generated parts of docs/ (settings, command line, layout, the bench's tables), committed so
# that the pages read whole on the repository too; the docs tests fail when they are not current.
docs-generated: install  ## write the generated parts of the docs pages again
	$(BIN)/python -m tools.mkdocs_hooks

docs-serve: install  ## the documentation site on http://127.0.0.1:8000, rebuilt on change
	$(BIN)/mkdocs serve -a 127.0.0.1:8000

# A throwaway PostgreSQL on 127.0.0.1:$(PG_PORT) for tests/project/test_postgres.py (as .ci/run does):
#   make pg-up && STATEPOOL_TEST_PG_URL=postgresql://postgres@127.0.0.1:54329/postgres make test
PG_DIR ?= /tmp/statepool_pg
PG_PORT ?= 54329
.PHONY: pg-up pg-down

pg-up:  ## start the throwaway PostgreSQL cluster (data in $(PG_DIR))
	bash deploy/postgres/cluster.sh start $(PG_DIR) $(PG_PORT)

pg-down:  ## stop it and delete its data
	bash deploy/postgres/cluster.sh stop $(PG_DIR)

# A throwaway Redis on 127.0.0.1:$(REDIS_PORT), the Celery broker for tests/project/test_celery.py
# (which otherwise starts its own when redis-server is installed):
#   make redis-up && STATEPOOL_TEST_REDIS_URL=redis://127.0.0.1:6390/0 make test
REDIS_DIR ?= /tmp/statepool_redis
REDIS_PORT ?= 6390
.PHONY: redis-up redis-down

redis-up:  ## start the throwaway Redis (working files in $(REDIS_DIR))
	bash deploy/celery/redis.sh start $(REDIS_DIR) $(REDIS_PORT)

redis-down:  ## stop it and delete its folder
	bash deploy/celery/redis.sh stop $(REDIS_DIR)

clean:
	rm -rf $(HOME_DIR) store site  # never ./runs: that is the user's input
