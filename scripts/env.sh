# Source me: the environment in which every mocap4r2 node, message and script works.
_mocap4r2_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ -f "$_mocap4r2_root/.venv/bin/activate" ]; then
  # shellcheck disable=SC1091
  source "$_mocap4r2_root/.venv/bin/activate"
fi
# shellcheck disable=SC1091
source "$_mocap4r2_root/install/setup.bash"
export MOCAP4R2_ROOT="$_mocap4r2_root"
unset _mocap4r2_root
