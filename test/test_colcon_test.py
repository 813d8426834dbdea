"""`colcon test` on a ROS machine runs the suite as `make test` does here.

colcon tests an ament_python package by running pytest in the package's folder, and only
where setup.py declares pytest as a test dependency (otherwise it falls back to
`setup.py test`, which current setuptools no longer has). Each Python package's setup.cfg
names its part of ../test; together the three parts are the whole suite, each test file
in exactly one part, with the settings of the top-level pytest.ini.
"""

from __future__ import annotations

import configparser
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from package_metadata import setup_arguments

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("mocap4r2_control", "mocap4r2_drivers", "mocap4r2_tools")


def settings(path: Path, section: str) -> dict[str, str]:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(path)
    return {key: " ".join(value.split()) for key, value in parser[section].items()}


def test_each_package_runs_its_part_with_the_top_level_settings():
    top = settings(ROOT / "pytest.ini", "pytest")
    for package in PACKAGES:
        mine = settings(ROOT / package / "setup.cfg", "tool:pytest")
        assert mine["addopts"] == top["addopts"] + " --confcutdir=..", package
        assert {k: v for k, v in mine.items() if k not in ("testpaths", "addopts")} == {
            k: v for k, v in top.items() if k not in ("testpaths", "addopts")
        }, package


def test_the_three_parts_are_the_whole_suite_each_test_file_once():
    everything = {path.relative_to(ROOT) for path in (ROOT / "test").rglob("test_*.py")}
    seen: dict[Path, str] = {}
    for package in PACKAGES:
        patterns = settings(ROOT / package / "setup.cfg", "tool:pytest")["testpaths"].split()
        for pattern in patterns:
            assert pattern.startswith("../test"), pattern
            matched = list((ROOT / package).glob(pattern)) if "*" in pattern else [ROOT / package / pattern]
            for entry in matched:
                entry = entry.resolve()
                assert entry.exists(), f"{package}: {pattern} names nothing"
                files = entry.rglob("test_*.py") if entry.is_dir() else [entry]
                for path in files:
                    relative = path.relative_to(ROOT)
                    assert relative not in seen, f"{relative} is in {seen[relative]} and {package}"
                    seen[relative] = package
    assert set(seen) == everything, f"in no package's part: {sorted(everything - set(seen))}"


@pytest.mark.parametrize("package", PACKAGES)
def test_setup_declares_pytest_so_colcon_runs_it(package):
    assert "pytest" in setup_arguments(package).get("extras_require", {}).get("test", [])


def test_colcon_test_runs_a_package_part(tmp_path):
    """A real `colcon test` of one package, narrowed to one module, writes its result."""
    colcon = shutil.which("colcon")
    if colcon is None:
        pytest.skip("colcon is not installed here (make setup installs it)")
    if not (ROOT / "build" / "mocap4r2_control").is_dir():
        pytest.skip("no colcon build of this checkout (make setup builds it)")
    result = subprocess.run(
        [
            colcon,
            "--log-base",
            str(tmp_path / "log"),
            "test",
            "--packages-select",
            "mocap4r2_control",
            "--test-result-base",
            str(tmp_path / "results"),
            "--pytest-args",
            "-k",
            "test_timebase",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=200,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    suite = ET.parse(tmp_path / "results" / "mocap4r2_control" / "pytest.xml").getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    assert suite is not None
    cases = [case.get("classname", "") for case in suite.iter("testcase")]
    assert len(cases) >= 2 and all("test_timebase" in case for case in cases), cases
    assert suite.get("failures") == "0" and suite.get("errors") == "0"
