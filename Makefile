# mocap4r2: `make demo` runs the suite, `make test` runs every test (`make test-load`: 3
# times under load). All set up first.
SHELL := /bin/bash
ENV := source scripts/env.sh &&

.PHONY: setup demo test test-load bench stress lint format clean

setup:
	@bash scripts/setup.sh

demo: setup
	@$(ENV) python scripts/demo.py

test: setup
	@$(ENV) bash scripts/run_tests.sh $(PYTEST_ARGS)

# the suite 3 times while one core is kept busy: proves it is not flaky under load
test-load: setup
	@$(ENV) bash scripts/test_load.sh $(PYTEST_ARGS)

bench: setup
	@$(ENV) python -m bench

# load and fault figures in one table (about 12 minutes on 2 cores; not part of `make test`)
stress: setup
	@$(ENV) python -m stress $(STRESS_ARGS)

# ruff (lint and format check) and mypy, with the settings of pyproject.toml; CI runs it
# before the tests. `make format` rewrites what `ruff format --check` would refuse.
lint: setup
	@$(ENV) ruff check . && ruff format --check . && mypy

format: setup
	@$(ENV) ruff check --fix . && ruff format .

clean:
	rm -rf build install log
