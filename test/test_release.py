"""What a release (bloom, the ROS buildfarm) reads of each package is valid, checked with
the tools that read it: catkin_pkg parses every package.xml (format 3, no warnings) and
every CHANGELOG.rst; each dependency is a package of this repository, a rosdep key of
ros/rosdistro, or a package released into Kilted and Jazzy (the names are kept in
test/fixtures/rosdistro_names.yaml, with the rosdistro commit they were read from); each
package carries the license it declares; the versions agree. docs/release.md says which
release steps these stand for and which need a ROS distribution."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from catkin_pkg.changelog import get_changelog_from_path
from catkin_pkg.package import Package, parse_package
from catkin_pkg.packages import find_packages
from package_metadata import setup_arguments

ROOT = Path(__file__).resolve().parents[1]
NAMES = ROOT / "test" / "fixtures" / "rosdistro_names.yaml"

# the packages a release of this repository carries (compat/tf2_msgs is built only where a
# distribution's tf2_msgs is missing, and is never released: docs/release.md)
RELEASED = (
    "mocap4r2_interfaces",
    "mocap4r2_control",
    "mocap4r2_drivers",
    "mocap4r2_tools",
    "motion_control_interfaces",
    "hector_worldmodel_msgs",
)
PYTHON_PACKAGES = ("mocap4r2_control", "mocap4r2_drivers", "mocap4r2_tools")
# hector_worldmodel_msgs keeps the license its specification states (BSD,
# test/fixtures/specs/hector_worldmodel_msgs-0.3.3.txt); its version is the repository's,
# since catkin_prepare_release and bloom release one version per repository (0.3.3 is the
# ROS 1 upstream's release, whose definitions this package carries unchanged)
LICENSES = {"hector_worldmodel_msgs": "BSD"}
LICENSE_WORDS = {
    "Apache-2.0": "Apache License\n                           Version 2.0",
    "BSD": "BSD 3-Clause License",
}


def parsed(name: str) -> tuple[Package, list[str]]:
    warnings: list[str] = []
    package = parse_package(str(ROOT / name / "package.xml"), warnings=warnings)
    package.validate(warnings=warnings)
    return package, warnings


@pytest.fixture(scope="module")
def rosdistro() -> dict[str, set[str]]:
    data = yaml.safe_load(NAMES.read_text())
    return {key: set(value) for key, value in data.items() if isinstance(value, list)}


def test_the_release_tools_find_exactly_the_released_packages_with_one_version():
    """catkin_pkg's search (what catkin_prepare_release and bloom use) finds the released
    packages and not compat/tf2_msgs, which compat/CATKIN_IGNORE hides from it."""
    found = find_packages(str(ROOT))
    assert {package.name for package in found.values()} == set(RELEASED)
    assert (ROOT / "compat" / "tf2_msgs" / "package.xml").is_file()
    assert len({package.version for package in found.values()}) == 1


@pytest.mark.parametrize("name", RELEASED)
def test_package_xml_is_format_3_and_parses_without_a_warning(name):
    package, warnings = parsed(name)
    assert package.name == name
    assert package.package_format == 3
    assert warnings == []


@pytest.mark.parametrize("name", RELEASED)
def test_every_dependency_resolves_in_rosdistro(name, rosdistro):
    package, _ = parsed(name)
    ours = set(RELEASED) | {"tf2_msgs"}
    kinds = ("buildtool_depends", "build_depends", "build_export_depends", "exec_depends", "test_depends")
    unknown = []
    for dependency in (d for kind in kinds for d in getattr(package, kind)):
        if dependency.name in ours or dependency.name in rosdistro["rosdep_keys"]:
            continue
        missing = [d for d in ("kilted_packages", "jazzy_packages") if dependency.name not in rosdistro[d]]
        if missing:
            unknown.append(f"{dependency.name} (not a rosdep key, not in {', '.join(missing)})")
    assert unknown == [], f"{name}: {unknown}"


def test_the_name_list_is_a_real_one(rosdistro):
    """The copy is what rosdistro lists: keys every ROS package uses are there, invented ones not."""
    assert {"python3-numpy", "python3-yaml", "python3-pytest"} <= rosdistro["rosdep_keys"]
    assert {"rclpy", "tf2_ros", "launch_ros"} <= rosdistro["kilted_packages"] & rosdistro["jazzy_packages"]
    assert "python3-mocap4r2-invented" not in rosdistro["rosdep_keys"]
    assert re.search(r"^rosdistro_commit: [0-9a-f]{40}$", NAMES.read_text(), re.M)


@pytest.mark.parametrize("name", RELEASED)
def test_each_package_carries_the_license_it_declares(name):
    package, _ = parsed(name)
    (declared,) = [str(license) for license in package.licenses]
    assert declared == LICENSES.get(name, "Apache-2.0")
    text = (ROOT / name / "LICENSE").read_text()
    assert LICENSE_WORDS[declared] in text


def test_the_repository_is_apache_2():
    assert (ROOT / "LICENSE").read_text() == (ROOT / "mocap4r2_control" / "LICENSE").read_text()
    assert LICENSE_WORDS["Apache-2.0"] in (ROOT / "LICENSE").read_text()


@pytest.mark.parametrize("name", RELEASED)
def test_changelog_parses_and_its_newest_entry_is_the_package_version(name):
    package, _ = parsed(name)
    changelog = get_changelog_from_path(str(ROOT / name / "CHANGELOG.rst"), package_name=name)
    assert changelog is not None, f"{name}/CHANGELOG.rst is missing or not parsed"
    versions = [version for version, _date, _content in changelog.foreach_version()]
    assert versions and versions[0] == package.version


def test_versions_agree():
    """One version for the repository, as catkin_package_version and bloom require."""
    versions = {name: parsed(name)[0].version for name in RELEASED}
    assert len(set(versions.values())) == 1, versions
    for name in PYTHON_PACKAGES:
        assert setup_arguments(name)["version"] == versions[name], f"{name}/setup.py"
