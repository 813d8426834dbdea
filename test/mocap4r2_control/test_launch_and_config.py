"""Launch files and YAML configs: installed where `ros2 launch mocap4r2_drivers <file>`
finds them, every config key is a parameter the node declares and accepts, and (where
the `launch` package exists) each launch file generates its description."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import yaml

from support import INSTALL, ROOT

LAUNCH_DIR = ROOT / "launch"
CONFIG_DIR = ROOT / "config"
SHARE = INSTALL / "mocap4r2_drivers" / "share" / "mocap4r2_drivers"

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


def test_launch_and_config_files_are_installed():
    assert launch_files(), "no launch files"
    for path in launch_files():
        assert (SHARE / "launch" / path.name).exists(), f"{path.name} is not installed"
    for path in CONFIG_DIR.glob("*.yaml"):
        assert (SHARE / "config" / path.name).exists(), f"{path.name} is not installed"


@pytest.mark.parametrize("name", sorted(p.name for p in CONFIG_DIR.glob("*.yaml") if p.name in NODE_CONFIGS))
def test_config_keys_are_parameters_the_node_accepts(procs, ros, name):
    from rcl_interfaces.srv import GetParameters

    data = yaml.safe_load((CONFIG_DIR / name).read_text())
    params = data["/**"]["ros__parameters"]
    package, exe = NODE_CONFIGS[name]
    node_name = f"cfg_{exe}"
    proc = procs.start_command([str(INSTALL / package / "lib" / package / exe), "--ros-args", "-r",
                                f"__node:={node_name}", "-r", "__ns:=/cfgtest", "--params-file",
                                str(CONFIG_DIR / name)], label=node_name)
    ros.wait_state(f"/cfgtest/{node_name}", "unconfigured", timeout=20)
    response = ros.call(GetParameters, f"/cfgtest/{node_name}/get_parameters",
                        GetParameters.Request(names=list(params)))
    assert len(response.values) == len(params)
    for (key, expected), value in zip(params.items(), response.values):
        assert value.type != 0, f"{name}: {key} is not a parameter of {exe}"
    log = proc.log()
    assert "using the default" not in log, f"{name} holds a value the node refuses:\n{log}"


def _launch_available() -> bool:
    # not find_spec: the repository's own launch/ folder looks like a namespace package
    try:
        from launch import LaunchDescription  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.skipif(not _launch_available(),
                    reason="the `launch` package is not installed here (it is on a ROS distribution)")
@pytest.mark.parametrize("path", launch_files(), ids=lambda p: p.name)
def test_launch_file_generates_its_description(path):
    from launch import LaunchDescription

    spec = importlib.util.spec_from_file_location(path.stem.replace(".", "_"), path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    description = module.generate_launch_description()
    assert isinstance(description, LaunchDescription)
    assert description.entities
