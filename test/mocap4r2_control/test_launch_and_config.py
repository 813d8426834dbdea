"""Launch files and YAML configs: installed where `ros2 launch <package> <file>` finds
them (each by the package it belongs to), every config key is a parameter the node declares and accepts, and
(where
the `launch` package exists) each launch file generates its description."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import yaml
from support import CROSS_PROCESS_TIMEOUT as WAIT
from support import INSTALL, ROOT

LAUNCH_DIR = ROOT / "launch"
CONFIG_DIR = ROOT / "config"
# the systems' files are installed by mocap4r2_drivers, the tools' by mocap4r2_tools
SHARES = [INSTALL / package / "share" / package for package in ("mocap4r2_drivers", "mocap4r2_tools")]

# config file -> (package, executable) of the node it configures
NODE_CONFIGS = {
    "simulated.yaml": ("mocap4r2_drivers", "simulated_system"),
    "optitrack.yaml": ("mocap4r2_drivers", "optitrack_system"),
    "qualisys.yaml": ("mocap4r2_drivers", "qualisys_system"),
    "vicon.yaml": ("mocap4r2_drivers", "vicon_system"),
    "gazebo.yaml": ("mocap4r2_drivers", "gazebo_system"),
}


def launch_files() -> list[Path]:
    return sorted(LAUNCH_DIR.glob("*.launch.py"))


def test_launch_and_config_files_are_installed_by_one_package():
    assert launch_files(), "no launch files"
    files = [("launch", p.name) for p in launch_files()]
    files += [("config", p.name) for p in CONFIG_DIR.iterdir() if p.suffix in (".yaml", ".rviz")]
    for folder, name in files:
        owners = [share.parent.name for share in SHARES if (share / folder / name).exists()]
        assert len(owners) == 1, f"{folder}/{name} is installed by {owners or 'no package'}"


@pytest.mark.parametrize("name", sorted(p.name for p in CONFIG_DIR.glob("*.yaml") if p.name in NODE_CONFIGS))
def test_config_keys_are_parameters_the_node_accepts(procs, ros, name):
    from rcl_interfaces.srv import GetParameters

    data = yaml.safe_load((CONFIG_DIR / name).read_text())
    params = data["/**"]["ros__parameters"]
    package, exe = NODE_CONFIGS[name]
    node_name = f"cfg_{exe}"
    proc = procs.start_command(
        [
            str(INSTALL / package / "lib" / package / exe),
            "--ros-args",
            "-r",
            f"__node:={node_name}",
            "-r",
            "__ns:=/cfgtest",
            "--params-file",
            str(CONFIG_DIR / name),
        ],
        label=node_name,
    )
    ros.wait_state(f"/cfgtest/{node_name}", "unconfigured", timeout=WAIT)
    response = ros.call(
        GetParameters, f"/cfgtest/{node_name}/get_parameters", GetParameters.Request(names=list(params))
    )
    assert len(response.values) == len(params)
    for key, value in zip(params, response.values):
        assert value.type != 0, f"{name}: {key} is not a parameter of {exe}"
    log = proc.log()
    assert "using the default" not in log, f"{name} holds a value the node refuses:\n{log}"


# system config file -> its adapter class (module, class)
ADAPTERS = {
    "simulated.yaml": ("mocap4r2_drivers.simulated.simulated_system", "SimulatedAdapter"),
    "optitrack.yaml": ("mocap4r2_drivers.optitrack.optitrack_system", "OptiTrackAdapter"),
    "qualisys.yaml": ("mocap4r2_drivers.qualisys.qualisys_system", "QualisysAdapter"),
    "vicon.yaml": ("mocap4r2_drivers.vicon.vicon_system", "ViconAdapter"),
    "gazebo.yaml": ("mocap4r2_drivers.gazebo.gazebo_system", "GazeboAdapter"),
}


@pytest.mark.parametrize("name", sorted(ADAPTERS))
def test_system_config_values_are_valid_and_build_the_adapter(name):
    """Every value of the file passes its parameter's checks, and the adapter accepts the
    combination (from_parameters), without starting a process."""
    import importlib

    from mocap4r2_control.system_node import BASE_PARAMETERS

    module, cls = ADAPTERS[name]
    adapter = getattr(importlib.import_module(module), cls)
    specs = {s.name: s for s in (*BASE_PARAMETERS, *adapter.parameters)}
    params = yaml.safe_load((CONFIG_DIR / name).read_text())["/**"]["ros__parameters"]
    for key, value in params.items():
        assert key in specs, f"config/{name} sets an undeclared parameter {key}"
        assert specs[key].validate(value) is None, specs[key].validate(value)
    adapter.from_parameters({s.name: params.get(s.name, s.default) for s in adapter.parameters})


def _launch_available() -> bool:
    # not find_spec: the repository's own launch/ folder looks like a namespace package
    try:
        from launch import LaunchDescription  # noqa: F401 - the import is the check
    except ImportError:
        return False
    return True


@pytest.mark.skipif(
    not _launch_available(), reason="the `launch` package is not installed here (it is on a ROS distribution)"
)
@pytest.mark.parametrize("path", launch_files(), ids=lambda p: p.name)
def test_launch_file_generates_its_description(path):
    from launch import LaunchDescription

    spec = importlib.util.spec_from_file_location(path.stem.replace(".", "_"), path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    description = module.generate_launch_description()
    assert isinstance(description, LaunchDescription)
    assert description.entities
