# blobgc: `make demo` sets everything up and shows it working; `make test` runs the suite.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.requirements-installed
ENV := .blobgc/env
PYTEST_ARGS ?=

.PHONY: help venv up down status migrate demo test test-unit layers coverage bench compose-check clean browser

help:
	@echo "make demo      set up .venv, start the local stack, load demo data, run every DAG, print the reclaim summary"
	@echo "make test      check the layering (lint-imports), then run the whole test suite against the real local stack"
	@echo "make coverage  the suite under coverage.py, with a line-coverage report of plugins/"
	@echo "make up/down   start (idempotent) / stop the local stack; make status shows it"
	@echo "make up EXECUTOR=celery   the same stack on CeleryExecutor with two local workers"
	@echo "make bench     run the benchmarks under bench/ (figures go in docs/benchmarks.md)"

$(STAMP): requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements.txt
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

up: venv
	BLOBGC_EXECUTOR=$(EXECUTOR) $(VENV)/bin/python scripts/stack.py up

down:
	@if [ -x $(VENV)/bin/python ]; then $(VENV)/bin/python scripts/stack.py down; \
	 else $(PYTHON) scripts/stack.py down; fi

status:
	@$(PYTHON) scripts/stack.py status

# `make up` applies pending migrations (blobgc's, then the demo app's); this re-runs the idempotent runners alone.
migrate: up
	source $(ENV) && python -m blobgc.core.migrate && python -m demo_app.migrate

demo: up
	source $(ENV) && python -m demo_app.demo

# Debian's chromium, for the reclaim page's test in a real headless browser.
browser:
	bash scripts/install_chromium.sh

# The layering contract (.importlinter, README "Layout") first: it takes a second and fails fast.
test: up browser layers
	source $(ENV) && python -m pytest $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing"; exit 1; fi; exit $$rc

layers: venv
	$(VENV)/bin/lint-imports --no-cache

# Line coverage of plugins/ over the whole suite (in this process; DAG runs through the CLI are not counted).
coverage: up browser
	source $(ENV) && python -m coverage run --source=plugins -m pytest $(PYTEST_ARGS) && \
	python -m coverage report --skip-empty

test-unit: venv
	$(VENV)/bin/python -m pytest -m "not integration" $(PYTEST_ARGS)

bench: up
	source $(ENV) && python bench/mark_sweep.py && python bench/paste_expiry.py

compose-check:
	docker-compose -f docker-compose.yaml config --quiet

clean: down
	rm -rf .blobgc
