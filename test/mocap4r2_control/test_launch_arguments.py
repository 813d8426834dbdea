"""demo_bringup.launch.py gives every node its own parameters file, starts RViz only where
it exists, and a launch that fails leaves no node running.

Launch configurations are not scoped by an include: when two included files declare the
same argument, the first default wins for both. That once gave the tools the simulated
system's parameters file. Where the `launch` package is installed the bring-up is run
for real and the nodes' command lines are read; everywhere else the launch files are
read as Python source and ``launch``'s rules for arguments are applied to them
(``DeclareLaunchArgument`` sets its default only if the name is not set yet; a
``GroupAction(scoped=True)`` starts from a copy of its parent's configurations and
keeps its own to itself).
"""

from __future__ import annotations

import ast
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import INSTALL, ROOT

LAUNCH_DIR = ROOT / "launch"
NODE_CALLS = {"Node", "LifecycleNode"}


def _launch_available() -> bool:
    # not find_spec: the repository's own launch/ folder looks like a namespace package
    try:
        import launch_ros  # noqa: F401 - the import is the check

        from launch import LaunchDescription  # noqa: F401 - the import is the check
    except ImportError:
        return False
    # these tests run `ros2 launch` (ros2cli with ros2launch), not only the libraries
    return shutil.which("ros2") is not None


NEEDS_LAUNCH = pytest.mark.skipif(
    not _launch_available(),
    reason="the `launch` and `launch_ros` packages and `ros2 launch` are not "
    "installed here (they are on a ROS distribution)",
)


# ------------------------------------------------------------------ static reading
def _name(call: ast.Call) -> str:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def _assignments(tree: ast.AST) -> dict[str, ast.expr]:
    return {
        t.id: node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        for t in node.targets
        if isinstance(t, ast.Name)
    }


def _yaml_in(expr: ast.AST, names: dict[str, ast.expr], depth: int = 0) -> str | None:
    """The basename of the .yaml file an expression names (following variables)."""
    for node in ast.walk(expr):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.endswith(".yaml"):
            return os.path.basename(node.value)
        if isinstance(node, ast.Name) and node.id in names and depth < 5:
            found = _yaml_in(names[node.id], names, depth + 1)
            if found:
                return found
    return None


def _parameter_files(expr: ast.AST, names: dict[str, ast.expr], depth: int = 0) -> set[str]:
    """Names of the LaunchConfigurations given as parameters *files* in a Node's
    ``parameters`` list (following variables; dictionaries of single values are not files)."""
    if isinstance(expr, ast.Name) and expr.id in names and depth < 5:
        return _parameter_files(names[expr.id], names, depth + 1)
    if isinstance(expr, (ast.List, ast.Tuple)):
        return set().union(*(_parameter_files(e, names, depth) for e in expr.elts))
    if isinstance(expr, ast.Call) and _name(expr) == "LaunchConfiguration" and expr.args:
        return {ast.literal_eval(expr.args[0])}
    return set()


def _system_launch_plans(path: Path, calls: list[ast.Call]) -> list:
    """The SystemLaunch plans a launch file defines: the file is run (it imports only the
    plan's module at its top; launch is imported where the actions are built)."""
    if not any(_name(call) == "SystemLaunch" for call in calls):
        return []
    from mocap4r2_drivers.system_launch import SystemLaunch

    spec = importlib.util.spec_from_file_location(f"plan_of_{path.stem.replace('.', '_')}", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    plans = [value for value in vars(module).values() if isinstance(value, SystemLaunch)]
    assert plans, f"{path.name} calls SystemLaunch but keeps no plan at module level"
    return plans


class LaunchFileSource:
    """What one launch file declares and which arguments feed its nodes' parameters."""

    def __init__(self, path: Path):
        self.path = path
        self.tree = ast.parse(path.read_text())
        self.names = _assignments(self.tree)
        calls = [n for n in ast.walk(self.tree) if isinstance(n, ast.Call)]
        # argument name -> default .yaml (None when the default is not a YAML file)
        self.declared: dict[str, str | None] = {}
        for call in calls:
            if (
                _name(call) == "DeclareLaunchArgument"
                and call.args
                and isinstance(call.args[0], ast.Constant)
            ):
                default = next((k.value for k in call.keywords if k.arg == "default_value"), None)
                self.declared[ast.literal_eval(call.args[0])] = (
                    _yaml_in(default, self.names) if default is not None else None
                )
        self.parameter_arguments: set[str] = set()
        self.node_count = 0
        for call in calls:
            if _name(call) in NODE_CALLS:
                self.node_count += 1
                for keyword in call.keywords:
                    if keyword.arg == "parameters":
                        self.parameter_arguments |= _parameter_files(keyword.value, self.names)
        # a system's launch file states its plan as a SystemLaunch, whose node and arguments
        # are built by mocap4r2_drivers.system_launch: read the plan itself
        for plan in _system_launch_plans(path, calls):
            self.node_count += 1
            self.parameter_arguments |= set(plan.parameter_files())
            for argument in plan.declared_arguments():
                is_yaml = argument.default is not None and argument.default.endswith(".yaml")
                self.declared[argument.name] = os.path.basename(argument.default) if is_yaml else None

    def includes(self) -> list[tuple[str, bool]]:
        """(included file name, inside a scoped GroupAction) in the order they appear."""
        scoped_ids = set()
        for node in ast.walk(self.tree):
            if (
                isinstance(node, ast.Call)
                and _name(node) == "GroupAction"
                and any(
                    k.arg == "scoped" and isinstance(k.value, ast.Constant) and k.value.value is True
                    for k in node.keywords
                )
            ):
                scoped_ids |= {id(n) for n in ast.walk(node)}
        found = []
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Call) and _name(node) == "IncludeLaunchDescription":
                files = [
                    c.value
                    for c in ast.walk(node)
                    if isinstance(c, ast.Constant)
                    and isinstance(c.value, str)
                    and c.value.endswith(".launch.py")
                ]
                assert len(files) == 1, f"cannot tell which file {self.path.name} includes: {files}"
                found.append((files[0], id(node) in scoped_ids))
        # ast.walk is breadth-first: order by position in the file
        lines = {}
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Call) and _name(node) == "IncludeLaunchDescription":
                files = [
                    c.value
                    for c in ast.walk(node)
                    if isinstance(c, ast.Constant)
                    and isinstance(c.value, str)
                    and c.value.endswith(".launch.py")
                ]
                lines[files[0]] = node.lineno
        return sorted(found, key=lambda item: lines[item[0]])


def parameters_files_per_include(bringup: Path) -> dict[str, set[str | None]]:
    """For each file the bring-up includes: the YAML files its nodes are given, by the
    rules launch applies to arguments (see the module docstring)."""
    source = LaunchFileSource(bringup)
    shared: dict[str, str | None] = {}
    given = {}
    for name, scoped in source.includes():
        included = LaunchFileSource(bringup.parent / name)
        assert included.node_count, f"{name} starts no node"
        assert included.parameter_arguments, f"the nodes of {name} take no parameters file argument"
        configurations = dict(shared) if scoped else shared
        for argument, default in included.declared.items():
            configurations.setdefault(argument, default)  # the first one set wins
        given[name] = {configurations[a] for a in included.parameter_arguments}
    return given


def test_static_reading_sees_the_collision_it_guards_against(tmp_path, monkeypatch):
    """The reading of the launch rules sees the collision it guards against: with both
    files declaring params_file and included without scope, the tools would get
    simulated.yaml."""
    from mocap4r2_drivers import system_launch

    # a system's argument is named by the plan's module, the others' in their own files
    monkeypatch.setattr(system_launch, "SYSTEM_PARAMS", "params_file")
    for name in ("simulated.launch.py", "tools.launch.py", "demo_bringup.launch.py"):
        text = (LAUNCH_DIR / name).read_text()
        text = text.replace('"system_params"', '"params_file"').replace('"tools_params"', '"params_file"')
        text = text.replace("scoped=True", "scoped=False")
        (tmp_path / name).write_text(text)
    given = parameters_files_per_include(tmp_path / "demo_bringup.launch.py")
    # the recorder's own argument (recorder_params) was never part of the collision
    assert given == {
        "simulated.launch.py": {"simulated.yaml"},
        "tools.launch.py": {"simulated.yaml", "recorder.yaml"},
    }, given


def test_each_node_of_demo_bringup_gets_its_own_parameters_file():
    given = parameters_files_per_include(LAUNCH_DIR / "demo_bringup.launch.py")
    assert given == {
        "simulated.launch.py": {"simulated.yaml"},
        "tools.launch.py": {"tools.yaml", "recorder.yaml"},
    }, given


def test_included_launch_files_declare_distinct_parameter_arguments():
    """Every system's launch file takes system_params, the tools' takes tools_params and
    each bridge's its own (px4_bridge_params, worldmodel_params), so any bring-up that
    includes a system and the tools cannot mix them up, scoped or not."""
    for path in sorted(LAUNCH_DIR.glob("*.launch.py")):
        source = LaunchFileSource(path)
        if not source.node_count:
            continue
        # the bridges' launch files are tools of their own, each with its own argument
        own = {
            "tools.launch.py": {"tools_params", "recorder_params"},
            "px4_bridge.launch.py": {"px4_bridge_params"},
            "worldmodel.launch.py": {"worldmodel_params"},
        }
        expected = own.get(path.name, {"system_params"})
        assert source.parameter_arguments == expected, (path.name, source.parameter_arguments)
        assert set(source.declared) >= expected, (path.name, source.declared)


def test_rviz_is_started_only_where_rviz2_is_found():
    """The tools' launch file creates the rviz2 node in a function that first asks the
    ament index for the package, and logs that RViz is skipped otherwise (checked on the
    source here; run for real where launch is installed, below)."""
    source = LaunchFileSource(LAUNCH_DIR / "tools.launch.py")
    functions = {f.name: f for f in ast.walk(source.tree) if isinstance(f, ast.FunctionDef)}
    rviz_nodes = [
        (fname, call)
        for fname, f in functions.items()
        for call in ast.walk(f)
        if isinstance(call, ast.Call)
        and _name(call) in NODE_CALLS
        and any(k.arg == "package" and getattr(k.value, "value", None) == "rviz2" for k in call.keywords)
    ]
    assert len(rviz_nodes) == 1, "one rviz2 node, created inside a function"
    text = ast.unparse(functions["rviz_installed"])
    assert "get_package_share_directory('rviz2')" in text and "PackageNotFoundError" in text, text
    assert "rviz_installed()" in ast.unparse(functions[rviz_nodes[0][0]])


# ------------------------------------------------------------------ with launch installed
def _run_launch(args: list[str], log_path: Path) -> subprocess.Popen:
    return subprocess.Popen(
        ["ros2", "launch", *args],
        stdout=open(log_path, "w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _descendants_cmdlines(pid: int) -> list[list[str]]:
    import psutil

    try:
        return [p.cmdline() for p in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return []


@NEEDS_LAUNCH
def test_demo_bringup_started_for_real_gives_each_node_its_own_file(tmp_path):
    proc = _run_launch(["mocap4r2_drivers", "demo_bringup.launch.py", "rviz:=false"], tmp_path / "launch.log")
    try:
        wanted = {
            "simulated_system": "simulated.yaml",
            "marker_viz": "tools.yaml",
            "robot_ground_truth": "tools.yaml",
            "trajectory_error": "tools.yaml",
        }
        deadline = time.monotonic() + 60
        seen = {}
        while time.monotonic() < deadline and len(seen) < len(wanted):
            for cmd in _descendants_cmdlines(proc.pid):
                exe = next((w for w in wanted if any(part.endswith("/" + w) for part in cmd)), None)
                if exe:
                    seen[exe] = [cmd[i + 1] for i, part in enumerate(cmd[:-1]) if part == "--params-file"]
            time.sleep(0.2)
        assert set(seen) == set(wanted), f"started: {seen}; log:\n{(tmp_path / 'launch.log').read_text()}"
        for exe, files in seen.items():
            yamls = {os.path.basename(f) for f in files if f.endswith(".yaml") and "/tmp" not in f}
            assert yamls == {wanted[exe]}, f"{exe} got {files}"
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)


@NEEDS_LAUNCH
def test_launch_that_fails_leaves_no_node_running(tmp_path):
    """A launch file that starts a node and then fails (an executable that does not
    exist): when ros2 launch has ended, none of its nodes may still run."""
    import uuid

    import psutil

    namespace = f"/failed_launch_{uuid.uuid4().hex[:8]}"
    bad = tmp_path / "fails.launch.py"
    bad.write_text(
        "from launch import LaunchDescription\n"
        "from launch_ros.actions import Node\n"
        "def generate_launch_description():\n"
        "    return LaunchDescription([\n"
        f"        Node(package='mocap4r2_tools', executable='marker_viz', namespace={namespace!r}),\n"
        "        Node(package='no_such_package_of_mocap4r2', executable='none'),\n"
        "    ])\n"
    )

    def ours() -> list[psutil.Process]:
        found = []
        for p in psutil.process_iter():
            try:
                if any(namespace in part for part in p.cmdline()):
                    found.append(p)
            except psutil.Error:
                pass
        return found

    proc = _run_launch([str(bad)], tmp_path / "launch.log")
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)
    log = (tmp_path / "launch.log").read_text()
    assert proc.returncode != 0, f"the launch was meant to fail:\n{log}"
    _, alive = psutil.wait_procs(ours(), timeout=10)
    for child in alive:
        child.kill()
    assert not alive, f"nodes left running after the failed launch: {[c.pid for c in alive]}\n{log}"


# ------------------------------------------------------------------ everywhere
def test_node_ends_when_the_process_that_launched_it_dies(tmp_path):
    """What makes "no node outlives a failed launch" hold even when the launcher itself
    dies without stopping its children (killed, crashed): under a launch file every node
    asks the kernel for SIGTERM when its parent dies (MOCAP4R2_EXIT_WITH_PARENT, set by
    our launch files), and leaves cleanly on it."""
    exe = INSTALL / "mocap4r2_tools" / "lib" / "mocap4r2_tools" / "marker_viz"
    pid_file = tmp_path / "child.pid"
    # a parent that starts the node, records its pid, then waits forever
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time\n"
            f"p = subprocess.Popen([{str(exe)!r}, '--ros-args', '-r', '__ns:=/orphan_test'])\n"
            f"open({str(pid_file)!r}, 'w').write(str(p.pid))\n"
            "time.sleep(3600)\n",
        ],
        env={**os.environ, "MOCAP4R2_EXIT_WITH_PARENT": "1"},
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    import psutil

    try:
        deadline = time.monotonic() + 60
        while not pid_file.exists() or not pid_file.read_text():
            assert time.monotonic() < deadline, "the parent did not start the node"
            time.sleep(0.05)
        child = psutil.Process(int(pid_file.read_text()))
        # up: it has created its DDS participant threads
        while child.num_threads() < 4:
            assert time.monotonic() < deadline, "the node did not come up"
            time.sleep(0.05)
        parent.kill()  # SIGKILL: the parent cannot stop its children
        parent.wait(10)
        try:
            child.wait(10)
        except psutil.TimeoutExpired:
            child.kill()
            pytest.fail("the node outlived its parent by 10 s")
    finally:
        if parent.poll() is None:
            parent.kill()
