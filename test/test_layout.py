"""The tree keeps its shape: every module of the four Python packages has a test module
of its own name (test_<module>.py anywhere under test/) or a line in README.md's table
"Which test covers a module", and every vendor folder has the parts
mocap4r2_drivers/README.md names."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("mocap4r2_control", "mocap4r2_drivers", "mocap4r2_tools")


def modules() -> list[Path]:
    out = []
    for package in PACKAGES:
        out += [p for p in (ROOT / package / package).rglob("*.py") if p.name != "__init__.py"]
    return sorted(out)


def test_every_module_has_a_test_module_or_a_readme_line():
    tests = {p.stem for p in (ROOT / "test").rglob("test_*.py")}
    readme = (ROOT / "README.md").read_text()
    section = readme.split("### Which test covers a module", 1)
    assert len(section) == 2, "README.md lost its section 'Which test covers a module'"
    covered = set(re.findall(r"^\| `([^`]+\.py)` \|", section[1], re.M))
    missing = [
        str(p.relative_to(ROOT))
        for p in modules()
        if f"test_{p.stem}" not in tests
        and str(p.relative_to(ROOT / p.parts[len(ROOT.parts)])) not in covered
    ]
    assert not missing, f"modules without a test module or a README line: {missing}"
    stale = [m for m in covered if not (ROOT / m.split("/")[0] / m).exists()]
    assert not stale, f"README names modules that do not exist: {stale}"


def test_vendor_folders_have_the_same_shape():
    drivers = ROOT / "mocap4r2_drivers" / "mocap4r2_drivers"
    for vendor in ("optitrack", "qualisys"):  # the socket protocols, with stand-ins
        names = {p.stem for p in (drivers / vendor).iterdir()}
        assert {"protocol", "client", "convert", "simulator", f"{vendor}_system"} <= names, (vendor, names)
    for vendor in ("vicon", "gazebo", "simulated"):
        assert (drivers / vendor / f"{vendor}_system.py").exists(), vendor
