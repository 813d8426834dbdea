# mocap4r2: `make demo` runs the suite, `make test` runs every test. Both set up first.
SHELL := /bin/bash
ENV := source scripts/env.sh &&

.PHONY: setup demo test bench stress clean

setup:
	@bash scripts/setup.sh

demo: setup
	@$(ENV) python scripts/demo.py

test: setup
	@$(ENV) bash scripts/run_tests.sh $(PYTEST_ARGS)

bench: setup
	@$(ENV) python -m bench

# load and fault figures in one table (about 10 minutes; not part of `make test`)
stress: setup
	@$(ENV) python -m stress $(STRESS_ARGS)

clean:
	rm -rf build install log
