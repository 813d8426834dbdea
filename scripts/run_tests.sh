#!/usr/bin/env bash
# Every test of the suite (called by `make test` after setup, inside scripts/env.sh).
# Extra arguments go to pytest (e.g. `make test PYTEST_ARGS="-k natnet -x"`).
# pytest's "no tests ran" (exit 5) is a failure here, never a silent pass.
#
# A test that hangs the pytest process itself (a main thread blocked in C, which
# pytest-timeout's SIGALRM cannot interrupt) is ended by test/fixtures/hang_watchdog.py
# with every thread's stack. This script then prints those stacks, stops the processes
# the dead run had started, and runs the tests that had not run yet, so one hang costs
# one test, not the rest of the run. The hang is a failure: the exit status says so.
set -uo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d "${TMPDIR:-/tmp}/mocap4r2-tests.XXXXXX")
trap 'rm -rf "$work"' EXIT

failed=0
resume=""
for attempt in 1 2 3 4; do
  progress="$work/progress-$attempt" hang_log="$work/hang-$attempt"
  : >"$progress"
  MOCAP4R2_TEST_PROGRESS="$progress" MOCAP4R2_HANG_LOG="$hang_log" MOCAP4R2_TEST_RESUME="$resume" \
    python -m pytest "$@"
  code=$?
  if [ ! -s "$hang_log" ]; then
    if [ "$code" -eq 5 ] && [ "$attempt" -eq 1 ]; then
      echo "run_tests: pytest collected no tests: failing" >&2
      exit 1
    fi
    [ "$code" -eq 5 ] && code=0  # a resumed run with nothing left to run
    [ "$code" -ne 0 ] && failed=1
    break
  fi
  failed=1
  hung=$(awk -F'\t' '$1=="started"{s[$2]=1} $1=="ended"{delete s[$2]} END{for (k in s) print k}' "$progress")
  domain=$(awk -F'\t' '$1=="domain"{print $2; exit}' "$progress")
  {
    echo
    echo "run_tests: FAILED (hung): ${hung:-?}: the pytest process stopped answering; every thread's stack:"
    cat "$hang_log"
  } >&2
  # the dead run's nodes and stand-ins (each started in a session of its own) would
  # otherwise stay in its DDS domain, which the next run may claim again
  if [ -n "$domain" ]; then
    for environ in /proc/[0-9]*/environ; do
      pid=${environ#/proc/}
      pid=${pid%/environ}
      [ "$pid" = "$$" ] && continue
      if { tr '\0' '\n' <"$environ"; } 2>/dev/null | grep -qx "MOCAP4R2_TEST_DOMAIN=$domain"; then
        kill -KILL "$pid" 2>/dev/null
      fi
    done
  fi
  # the next run leaves out what this one ran, the hung test included
  if [ -n "$resume" ]; then cat "$resume" >>"$progress"; fi
  resume="$progress"
  echo "run_tests: running the tests that had not run yet" >&2
done
if [ "$failed" -ne 0 ]; then
  echo "run_tests: failed (see the failures above${resume:+ and the hang reported above})" >&2
  exit 1
fi
exit 0
