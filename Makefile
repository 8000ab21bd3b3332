# blobgc: `make demo` sets everything up and shows it working; `make test` runs the suite.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.requirements-installed
ENV := .blobgc/env
PYTEST_ARGS ?=
# pytest-xdist workers of `make test` (tests/conftest.py says what they share); TEST_WORKERS=0 runs in one process.
# Four on 2 cores: the suite also waits (on the scheduler, a gate's timeout, a retry's delay), and three long groups
# hold a worker each from the start (tests/conftest.py: SHARED); the fourth takes the rest (docs/benchmarks.md)
TEST_WORKERS ?= 4

.PHONY: help venv up down status migrate demo test test-unit layers lint typecheck format coverage bench compose-check clean browser tls-postgres lock

help:
	@echo "make demo      set up .venv, start the local stack, load demo data, run every DAG, print the reclaim summary"
	@echo "make test      check the layering (lint-imports), ruff and mypy, then run the whole test suite against the real local stack"
	@echo "make typecheck mypy on plugins/blobgc (pyproject.toml: [tool.mypy]; strict on the core)"
	@echo "make format    format and lint-fix plugins/ with ruff (make lint checks it)"
	@echo "make coverage  the suite under coverage.py, with a line-coverage report of plugins/"
	@echo "make up/down   start (idempotent) / stop the local stack; make status shows it"
	@echo "make up EXECUTOR=celery   the same stack on CeleryExecutor with two local workers"
	@echo "make bench     run the benchmarks under bench/ (figures go in docs/benchmarks.md)"
	@echo "make lock      regenerate the pinned lock requirements.txt from pyproject.toml and requirements-dev.in"
	@echo "python -m blobgc.dags install FOLDER ...   enable the packaged DAGs in a DAG folder (README, Install)"

# The lock pins every package (`make lock` freezes a whole environment), uv among them: uv installs the rest
# (--no-deps: the lock is resolved already; `uv pip check` proves it whole). Bytecode is compiled once here, on both
# cores, so that the stack's processes and the test workers, starting together, do not each compile what they import
# (and where PYTHONDONTWRITEBYTECODE is set, as in this sandbox, compile it again in every process). Not compiled:
# what blobgc never imports but the google provider's dependencies bring (Google Ads, Vertex AI, ray, litellm, SciPy,
# ...; 24,000 of the venv's 39,000 files) and packages' own tests: 79 s of setup became about 30 (docs/benchmarks.md).
NOT_COMPILED := /site-packages/(ray|openai|litellm|sympy|scipy|sklearn|networkx|cfnlint|vertexai|huggingface_hub|sagemaker_studio|pyathena|opencensus|examples)/|/site-packages/google/(ads|genai)/|/site-packages/google/cloud/(?!storage/|_|client/|exceptions/)[a-z0-9_]+/|/site-packages/azure/mgmt/|/site-packages/(.+/)?tests?/
$(STAMP): requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check "$$(grep -m1 '^uv==' requirements.txt)"
	$(VENV)/bin/uv pip install --quiet --python $(VENV)/bin/python --no-deps -r requirements.txt
	$(VENV)/bin/uv pip check --quiet --python $(VENV)/bin/python
	@# a package's file that does not compile (some ship Python 2 examples) is only compiled later, or never
	$(VENV)/bin/python -m compileall -q -j 0 -x '$(NOT_COMPILED)' \
	  "$$($(VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" > /dev/null || true
	touch $@

# plugins/ on the venv's path (a .pth file), as Airflow puts it on its own: `blobgc` and `demo_app` import
# from any tool run in the venv (lint-imports, pytest, python -m ...) without PYTHONPATH.
PTH := $(VENV)/.plugins-on-path
$(PTH): $(STAMP)
	echo "$(CURDIR)/plugins" > "$$($(VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/blobgc-plugins.pth"
	touch $@

venv: $(STAMP) $(PTH)

# EXECUTOR=celery: the same stack on CeleryExecutor, with two local Celery workers (Redis is the broker).
EXECUTOR ?= local

# The checkout's own code compiled first (a second when nothing changed): every DAG parse of the dag-processor and
# every task's process imports blobgc, and where PYTHONDONTWRITEBYTECODE is set would compile it each time.
up: venv
	$(VENV)/bin/python -m compileall -q -j 0 plugins dags scripts tests bench
	BLOBGC_EXECUTOR=$(EXECUTOR) $(VENV)/bin/python scripts/stack.py up

down:
	@if [ -x $(VENV)/bin/python ]; then $(VENV)/bin/python scripts/stack.py down; \
	 else $(PYTHON) scripts/stack.py down; fi

status:
	@$(PYTHON) scripts/stack.py status

# `make up` applies pending migrations (blobgc's, then the demo app's); this re-runs the idempotent runners alone.
migrate: up
	source $(ENV) && python -m blobgc.migrate && python -m demo_app.migrate

demo: up
	source $(ENV) && python -m demo_app.demo

# Debian's PostgreSQL server (no cluster), for the test of a TLS connection with a client certificate.
tls-postgres:
	bash scripts/install_tls_postgres.sh

# Debian's chromium, for the reclaim page's test in a real headless browser.
browser:
	bash scripts/install_chromium.sh

# The layering contract (.importlinter, README "Layout") first: it takes a second and fails fast. The install
# test's virtualenv (Airflow alone, cached, rebuilt by uv when the lock changed; then this tree's wheel, installed
# with pip) is made in the background meanwhile, while the stack starts; the test waits for it and finds the wheel
# installed (scripts/install_venv.py: installed again only when the sources changed).
test: venv
	mkdir -p .blobgc && { $(VENV)/bin/python scripts/install_venv.py > .blobgc/install-venv.log 2>&1 & }
	@# the static checks (mypy takes about 30 s of one core, cold) run while the stack starts, and fail the run alike
	$(MAKE) --no-print-directory layers lint typecheck > .blobgc/static-checks.log 2>&1 & checks=$$!; \
	$(MAKE) up browser tls-postgres; up=$$?; wait $$checks; rc=$$?; cat .blobgc/static-checks.log; \
	if [ $$up -ne 0 ] || [ $$rc -ne 0 ]; then echo "make test: the stack or a static check failed (above)"; exit 1; fi
	source $(ENV) && python -m pytest -n $(TEST_WORKERS) $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing"; exit 1; fi; exit $$rc

layers: venv
	$(VENV)/bin/lint-imports --no-cache

# ruff, configured in pyproject.toml: the package and the demo application formatted and linted (`make format` fixes)
lint: venv
	$(VENV)/bin/ruff check plugins/
	$(VENV)/bin/ruff format --check plugins/

# mypy, configured in pyproject.toml: the whole package, strict on the core (cache: .blobgc/mypy-cache)
typecheck: venv
	$(VENV)/bin/mypy

format: venv
	$(VENV)/bin/ruff format plugins/
	$(VENV)/bin/ruff check --fix plugins/

# Line coverage of plugins/ over the whole suite (in this process; DAG runs through the CLI are not counted).
coverage: up browser tls-postgres
	source $(ENV) && python -m coverage run --source=plugins -m pytest $(PYTEST_ARGS) && \
	python -m coverage report --skip-empty

test-unit: venv
	$(VENV)/bin/python -m pytest -m "not integration" $(PYTEST_ARGS)

bench: up
	source $(ENV) && python bench/mark_sweep.py && python bench/paste_expiry.py

# Debian's docker-compose (docs/reference.md §1) validates docker-compose.yaml; no Docker engine is needed. Installed if missing.
# Regenerate the pinned lock: pyproject.toml's ranges and requirements-dev.in, resolved afresh in a new
# virtualenv, frozen into requirements.txt (LOCK_OUT=file to write elsewhere). Review the diff, then run `make test`.
LOCK_OUT ?= requirements.txt
lock:
	rm -rf .blobgc/lock-venv && $(PYTHON) -m venv .blobgc/lock-venv
	.blobgc/lock-venv/bin/pip install --quiet --disable-pip-version-check '.[gcs,azure]' -r requirements-dev.in
	{ echo '# Pinned lock of the local stack, the tests and CI: no constraints file can be downloaded here, so these'; \
	  echo '# pins are the constraints (also of the install test, which installs the wheel into a virtualenv of'; \
	  echo '# Airflow and the providers only). The package itself (pyproject.toml) declares ranges. Regenerate with'; \
	  echo "# \`make lock\`: pyproject.toml's dependencies plus requirements-dev.in (the stack's, tests' and demo's"; \
	  echo '# tools, with why each is there) resolved afresh and frozen here.'; \
	  .blobgc/lock-venv/bin/pip freeze --all --exclude blobgc --exclude pip; } > $(LOCK_OUT).new && mv $(LOCK_OUT).new $(LOCK_OUT)
	rm -rf .blobgc/lock-venv build plugins/blobgc.egg-info

compose-check:
	command -v docker-compose >/dev/null || { apt-get update && apt-get install -y docker-compose; }
	docker-compose -f docker-compose.yaml config --quiet

clean: down
	rm -rf .blobgc
