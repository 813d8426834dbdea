#!/usr/bin/env bash
# Every test of the suite (called by `make test` after setup, inside scripts/env.sh).
# Extra arguments go to pytest (e.g. `make test PYTEST_ARGS="-k natnet -x"`).
# pytest's "no tests ran" (exit 5) is a failure here, never a silent pass.
set -uo pipefail
cd "$(dirname "$0")/.."
python -m pytest "$@"
code=$?
if [ "$code" -eq 5 ]; then
  echo "run_tests: pytest collected no tests: failing" >&2
  exit 1
fi
exit "$code"
