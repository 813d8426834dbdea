#!/usr/bin/env bash
# The whole suite several times in a row (3 unless TEST_LOAD_RUNS says otherwise) while
# another process keeps one core busy, as on a shared CI machine: a test that waits for a
# fixed time instead of a condition, or whose deadline is too short, fails here first.
# Called by `make test-load` inside scripts/env.sh; extra arguments go to pytest.
# Prints each run's pytest summary line and "test-load: N of M runs passed"; exits
# non-zero when any run failed. Full logs: log/test-load/run-<i>.log.
set -uo pipefail
cd "$(dirname "$0")/.."
runs=${TEST_LOAD_RUNS:-3}
logs=log/test-load
mkdir -p "$logs"

# one core busy for as long as this script runs: a plain Python loop, nothing to install
python3 -c 'while True: pass' &
busy=$!
trap 'kill "$busy" 2>/dev/null; wait "$busy" 2>/dev/null' EXIT
echo "test-load: $runs runs of the suite, one core kept busy by pid $busy"

passed=0
summaries=()
for i in $(seq 1 "$runs"); do
  echo "test-load: run $i of $runs (log: $logs/run-$i.log)"
  bash scripts/run_tests.sh "$@" 2>&1 | tee "$logs/run-$i.log"
  code=${PIPESTATUS[0]}
  # pytest's closing line, e.g. "==== 417 passed, 3 skipped in 512.3s ===="
  summary=$(grep -E '(^=+ |^)([0-9]+ [a-z]+|no tests ran).* in [0-9.]+s' "$logs/run-$i.log" | tail -n 1)
  summaries+=("run $i: exit $code: ${summary:-no pytest summary line}")
  [ "$code" -eq 0 ] && passed=$((passed + 1))
done

echo
for line in "${summaries[@]}"; do echo "test-load: $line"; done
echo "test-load: $passed of $runs runs passed"
[ "$passed" -eq "$runs" ]
