"""registry.py is the one table of systems: a toy vendor added through it alone is found
by the executables (entry point, console script, bin/ wrapper), by the doctor (its
--system choice, its parameters, its probe) and builds through the default
``from_parameters``; every row agrees with the tree (adapter, stand-in, probe, launch,
config and docs files, setup.py, bin/, the install space); and the vendors' converters
have the shapes adapter.py declares, as mypy reads them."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from package_metadata import setup_arguments  # test/fixtures
from support import INSTALL  # test/fixtures

from mocap4r2_drivers import executables, registry
from mocap4r2_drivers.registry import StandIn, System

ROOT = Path(__file__).resolve().parents[2]
DRIVERS = ROOT / "mocap4r2_drivers"

TOY_MODULE = '''
"""A toy vendor: an adapter with a keyword-only constructor, a probe and a main()."""
from mocap4r2_control.adapter import MocapAdapter
from mocap4r2_control.frame import AssetNames
from mocap4r2_control.parameters import ParameterSpec
from mocap4r2_drivers.doctor.report import passed


class ToyAdapter(MocapAdapter):
    system_type = "toy"
    parameters = (
        ParameterSpec("host", "127.0.0.1", "Address of the toy server."),
        ParameterSpec("port", 4242, "Toy server port.", min_value=1, max_value=65535),
        ParameterSpec("gain", 1.0, "Toy gain.", min_value=0.0, max_value=10.0),
    )

    def __init__(self, *, host="127.0.0.1", port=4242, gain=1.0):
        self.host, self.port, self.gain = host, port, gain

    def connect(self):
        return AssetNames()

    def read_frame(self, timeout):
        return None

    def disconnect(self):
        pass


def probe(target):
    where = f"{target.server}:{target.values['port']}"
    return [passed("toy server", f"probed {where}, gain {target.values['gain']}", "server")]


def main():
    print("toy_system ran")
    return 0
'''
TOY_SIMULATOR = 'def main():\n    print("toy_simulator ran")\n    return 0\n'
TOY_ROW = (
    'System("toy", "toy_vendor.toy_system:ToyAdapter", probe="toy_vendor.toy_system:probe", '
    'stand_in=StandIn("toy_simulator", "toy_vendor.toy_simulator"))'
)


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """The toy vendor's folder on sys.path and its row in the table: nothing else."""
    package = tmp_path / "toy_vendor"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "toy_system.py").write_text(TOY_MODULE)
    (package / "toy_simulator.py").write_text(TOY_SIMULATOR)
    monkeypatch.syspath_prepend(str(tmp_path))
    row = eval(TOY_ROW, {"System": System, "StandIn": StandIn})  # the same row the child process adds
    monkeypatch.setattr(registry, "SYSTEMS", (*registry.SYSTEMS, row))
    return tmp_path


def test_a_toy_vendor_is_found_by_the_executables(toy):
    assert "toy_system = mocap4r2_drivers.executables:toy_system" in registry.console_scripts()
    assert "toy_simulator = mocap4r2_drivers.executables:toy_simulator" in registry.console_scripts()
    assert {"bin/toy_system", "bin/toy_simulator"} <= set(registry.bin_wrappers())
    assert callable(executables.toy_system) and callable(executables.toy_simulator)
    with pytest.raises(AttributeError, match="no executable 'nobody_system'"):
        executables.nobody_system  # noqa: B018 - the lookup is what is tested
    # run as a bin/ wrapper runs it (executables.run with its own name), in a process
    # whose table has the toy's row added, as above
    for name in ("toy_system", "toy_simulator"):
        code = textwrap.dedent(
            f"""
            import sys
            sys.path.insert(0, {str(toy)!r})
            from mocap4r2_drivers import registry
            from mocap4r2_drivers.registry import StandIn, System
            registry.SYSTEMS = (*registry.SYSTEMS, {TOY_ROW})
            from mocap4r2_drivers.executables import run
            raise SystemExit(run({name!r}))
            """
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0 and out.stdout == f"{name} ran\n", out.stdout + out.stderr
    missing = subprocess.run(
        [
            sys.executable,
            "-c",
            "from mocap4r2_drivers.executables import run; raise SystemExit(run('x'))",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 127 and "no executable 'x'" in missing.stderr


def test_a_toy_vendor_is_found_by_the_doctor(toy, tmp_path, capsys):
    from mocap4r2_drivers.doctor.doctor_command import DoctorCommand

    command = DoctorCommand()
    parser = argparse.ArgumentParser(prog="mocap4r2 doctor")
    command.add_arguments(parser)
    assert "toy" in parser.format_help()
    params = tmp_path / "toy.yaml"
    params.write_text("/**:\n  ros__parameters:\n    port: 4243\n    gain: 2.5\n    gian: 3.0\n")
    args = parser.parse_args(["--system", "toy", "--params-file", str(params), "--no-ros", "--json"])
    assert command.main(args) == 1  # gian is no parameter of the toy
    checks = {c["title"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert checks["toy server"] == {
        "status": "PASS",
        "title": "toy server",
        "evidence": "probed 127.0.0.1:4243, gain 2.5",
        "fix": "",
        "area": "server",
    }
    typo = checks["parameter gian (/**)"]
    assert typo["status"] == "FAIL" and "did you mean gain?" in typo["fix"]
    assert checks["route to the server 127.0.0.1"]["status"] == "PASS"


def test_the_default_from_parameters_is_the_keyword_constructor(toy):
    adapter_class = importlib.import_module("toy_vendor.toy_system").ToyAdapter
    adapter = adapter_class.from_parameters({"host": "10.0.0.2", "port": 1, "gain": 0.5, "frame_id": "x"})
    assert (adapter.host, adapter.port, adapter.gain) == ("10.0.0.2", 1, 0.5)
    with pytest.raises(TypeError):
        adapter_class("10.0.0.2", 1)  # keyword-only: values cannot be swapped by place


@pytest.mark.parametrize("row", registry.SYSTEMS, ids=lambda s: s.name)
def test_each_row_agrees_with_the_tree(row):
    package = ROOT / row.package
    adapter = getattr(importlib.import_module(row.module), row.adapter_class)
    assert adapter.system_type in (row.name, *row.aliases), (adapter.system_type, row)
    assert callable(importlib.import_module(row.module).main)
    names = {spec.name for spec in adapter.parameters}
    if row.adapter_class != "MarkerTrackerAdapter":  # the tools' own, not converted here
        defaults = {spec.name: spec.default for spec in adapter.parameters}
        adapter.from_parameters(defaults)  # every parameter is a keyword of the constructor
    if row.stand_in is not None:
        assert callable(importlib.import_module(row.stand_in.module).main)
    if row.probe:
        module, _, function = row.probe.partition(":")
        assert callable(getattr(importlib.import_module(module), function))
    if row.input_topics:
        assert row.input_topics in names
    for folder, name in (("launch", row.launch), ("config", row.config)):
        if name:
            assert (package / folder / name).is_file(), f"{row.name}: {row.package}/{folder}/{name}"
    if row.docs:
        assert (ROOT / "docs" / row.docs).is_file(), row.docs
    scripts = setup_arguments(row.package)["entry_points"]["console_scripts"]
    assert any(s.split("=")[0].strip() == row.node_executable for s in scripts), (row.package, scripts)


def test_every_vendor_folder_and_launch_file_has_a_row():
    rows = {s.module.split(".")[1] for s in registry.SYSTEMS if s.package == "mocap4r2_drivers"}
    folders = {p.parent.name for p in (DRIVERS / "mocap4r2_drivers").glob("*/*_system.py")}
    assert folders <= rows, f"vendor folders without a row in registry.py: {folders - rows}"
    launches = {s.launch for s in registry.SYSTEMS if s.package == "mocap4r2_drivers"}
    shipped = {p.name for p in (DRIVERS / "launch").glob("*.launch.py")} - {"demo_bringup.launch.py"}
    assert shipped == launches


def test_every_launch_file_has_its_launch_test():
    """Each shipped launch file (systems', the demo's, the tools') is started by a
    launch_testing test of its name in test/launch_files/."""
    tests = {p.name for p in (ROOT / "test" / "launch_files").glob("test_*_launch.py")}
    launch_files = [
        path.name.removesuffix(".launch.py")
        for package in ("mocap4r2_drivers", "mocap4r2_tools")
        for path in (ROOT / package / "launch").glob("*.launch.py")
    ]
    missing = [name for name in launch_files if f"test_{name}_launch.py" not in tests]
    assert launch_files and not missing, f"launch files without a launch_testing test: {missing}"


def test_setup_py_and_bin_follow_the_table():
    arguments = setup_arguments("mocap4r2_drivers")
    assert sorted(arguments["entry_points"]["console_scripts"]) == sorted(registry.console_scripts())
    installed_bin = dict(arguments["data_files"])["bin"]
    assert installed_bin == registry.bin_wrappers()
    wrappers = sorted(f"bin/{p.name}" for p in (DRIVERS / "bin").iterdir())
    assert wrappers == registry.bin_wrappers(), "bin/ holds one wrapper per executable of the table"
    first = (DRIVERS / registry.bin_wrappers()[0]).read_bytes()
    for name in registry.bin_wrappers():
        path = DRIVERS / name
        assert path.read_bytes() == first, f"{name} differs from the other wrappers"
        assert os.access(path, os.X_OK), f"{name} is not executable"


def test_the_install_space_has_every_executable_on_path_and_for_ros2_run():
    for name in registry.executables():
        for where in (
            INSTALL / "mocap4r2_drivers" / "bin" / name,
            INSTALL / "mocap4r2_drivers" / "lib" / "mocap4r2_drivers" / name,
        ):
            assert where.exists() and os.access(where, os.X_OK), f"{where}: run `make setup`"


def test_the_launch_plans_name_the_rows_executable_and_config():
    import runpy

    for row in registry.SYSTEMS:
        if not row.launch:
            continue
        plan = runpy.run_path(str(ROOT / row.package / "launch" / row.launch))["SYSTEM"]
        assert plan.executable == row.node_executable, row.name
        assert f"{plan.system}.yaml" == row.config, row.name


CONVERTER_SHAPES = """\
from typing import Any

from mocap4r2_control.adapter import FrameAssembler, FrameConverter
from mocap4r2_drivers.gazebo.convert import MocapEmulator
from mocap4r2_drivers.optitrack.convert import FrameConverter as NatNetConverter
from mocap4r2_drivers.optitrack.protocol import FrameOfData
from mocap4r2_drivers.qualisys.convert import FrameConverter as QtmConverter
from mocap4r2_drivers.vicon.convert import FrameConverter as ViconConverter
from mocap4r2_drivers.vrpn.convert import FrameAssembler as VrpnAssembler


def shapes(
    natnet: NatNetConverter, qtm: QtmConverter, vicon: ViconConverter, vrpn: VrpnAssembler, gz: MocapEmulator
) -> None:
    natnet_frames: FrameConverter[FrameOfData] = natnet
    qtm_packets: FrameConverter[bytes] = qtm
    sdk_client: FrameConverter[Any] = vicon
    vrpn_reports: FrameAssembler = vrpn
    gazebo_poses: FrameAssembler = gz
    wrong_data: FrameConverter[bytes] = natnet  # line 20: NatNet converts frames, not bytes
    no_convert: FrameConverter[Any] = vrpn  # line 21: VRPN assembles, it has no convert
"""


def test_the_converters_have_the_declared_shapes(tmp_path):
    """mypy, with the project's settings, reads each vendor's converter as the Protocol of
    its shape, and refuses the two assignments that mix the shapes up."""
    mypy_api = pytest.importorskip("mypy.api", reason="mypy is a dev dependency (requirements-dev.txt)")
    snippet = tmp_path / "converter_shapes.py"
    snippet.write_text(CONVERTER_SHAPES)
    stdout, stderr, _ = mypy_api.run(
        [
            str(snippet),
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--no-error-summary",
            "--follow-imports=silent",
        ]
    )
    errors = [line for line in stdout.splitlines() if ": error:" in line]
    lines = sorted(int(line.split(":")[1]) for line in errors)
    assert lines == [20, 21], stdout + stderr
