"""system_launch: the plan of each system's launch file names an installed executable and
parameters file, declares the arguments every system has in one order, and passes the
node only parameters it declares. Where `launch` and `launch_ros` are installed (a ROS 2
distribution), the actions built from a plan are checked too."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from pathlib import Path

import pytest
from support import INSTALL, ROOT

from mocap4r2_control.adapter import MocapAdapter
from mocap4r2_control.system_node import BASE_PARAMETERS
from mocap4r2_drivers.system_launch import EXIT_WITH_PARENT, SYSTEM_PARAMS, LaunchArgument, SystemLaunch

LAUNCH_DIR = ROOT / "mocap4r2_drivers" / "launch"
# arguments a launch file uses for its other actions, not as the node's parameters
LAUNCH_ONLY = {"gazebo": {"bridge"}}


def plans() -> dict[str, SystemLaunch]:
    """File name -> the plan it keeps, for every launch file of the package that has one."""
    found = {}
    for path in sorted(LAUNCH_DIR.glob("*.launch.py")):
        if "SystemLaunch(" not in path.read_text():
            continue  # not a system's (demo_bringup: it imports launch at its top)
        spec = importlib.util.spec_from_file_location(f"plan_{path.stem.replace('.', '_')}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        found[path.name] = module.SYSTEM
    return found


PLANS = plans()


def adapter_of(system: str) -> type[MocapAdapter]:
    module = importlib.import_module(f"mocap4r2_drivers.{system}.{system}_system")
    (adapter,) = (
        cls
        for _, cls in inspect.getmembers(module, inspect.isclass)
        if issubclass(cls, MocapAdapter) and cls is not MocapAdapter and cls.__module__ == module.__name__
    )
    return adapter


def test_every_system_launch_file_keeps_a_plan():
    systems = set(PLANS)
    assert systems == {
        f"{s}.launch.py" for s in ("gazebo", "optitrack", "qualisys", "replay", "simulated", "vicon", "vrpn")
    }, systems


@pytest.mark.parametrize("name", sorted(PLANS))
def test_the_plan_names_an_installed_executable_and_parameters_file(name):
    plan = PLANS[name]
    executable = INSTALL / "mocap4r2_drivers" / "lib" / "mocap4r2_drivers" / plan.executable
    assert executable.is_file(), f"{name} starts {plan.executable}, which is not installed"
    config = Path(plan.config_path())
    assert config.is_file(), config
    assert config.name == f"{plan.system}.yaml"


@pytest.mark.parametrize("name", sorted(PLANS))
def test_every_system_declares_the_common_arguments_in_one_order(name):
    plan = PLANS[name]
    declared = plan.declared_arguments()
    names = [argument.name for argument in declared]
    own = [argument.name for argument in plan.arguments]
    assert names == ["namespace", SYSTEM_PARAMS, *own, "autostart"]
    assert len(set(names)) == len(names), f"{name} declares an argument twice: {names}"
    assert declared[0].default == (plan.namespace or plan.system)
    assert declared[1].default == plan.config_path()
    assert declared[-1] == LaunchArgument("autostart", "false", declared[-1].description)
    assert all(argument.description for argument in declared)
    assert plan.parameter_files() == (SYSTEM_PARAMS,)


@pytest.mark.parametrize("name", sorted(PLANS))
def test_the_node_is_given_only_parameters_it_declares(name):
    plan = PLANS[name]
    adapter = adapter_of(plan.system)
    accepted = {spec.name for spec in (*BASE_PARAMETERS, *adapter.parameters)}
    passed = set(plan.overrides()) - LAUNCH_ONLY.get(plan.system, set())
    assert passed <= accepted, f"{name} passes {sorted(passed - accepted)}, which {adapter.__name__} lacks"
    assert "autostart" in passed


def test_an_argument_without_default_must_be_given():
    """replay has no useful default file: its argument is declared without a default, so
    `ros2 launch` refuses to start without it."""
    replay = PLANS["replay.launch.py"]
    (required,) = (argument for argument in replay.declared_arguments() if argument.default is None)
    assert required.name == "file"


def test_the_launch_actions_follow_the_plan():
    """Built for real where launch and launch_ros are installed."""
    pytest.importorskip("launch_ros", reason="launch_ros comes with a ROS 2 distribution, not the wheels")
    from launch.actions import DeclareLaunchArgument, SetEnvironmentVariable
    from launch_ros.actions import LifecycleNode

    plan = PLANS["vrpn.launch.py"]
    entities = plan.launch_description().entities
    assert isinstance(entities[0], SetEnvironmentVariable)
    assert entities[0].name[0].text == EXIT_WITH_PARENT
    declared = [e for e in entities if isinstance(e, DeclareLaunchArgument)]
    assert [d.name for d in declared] == [a.name for a in plan.declared_arguments()]
    nodes = [e for e in entities if isinstance(e, LifecycleNode)]
    assert len(nodes) == 1
