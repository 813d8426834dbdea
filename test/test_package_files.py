"""Launch and config files belong to the package that installs them: the real file sits
in that package's own launch/ or config/ folder (its setup.py installs it from there, so
each package builds alone), and the repository's top-level launch/ and config/ hold one
relative symlink per file, so paths like config/tools.yaml keep working from a checkout."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from package_metadata import setup_arguments

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("mocap4r2_drivers", "mocap4r2_tools")
FOLDERS = ("launch", "config")


def package_files(folder: str) -> dict[str, str]:
    """File name -> owning package, for the real files of every package's `folder`."""
    owners: dict[str, str] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package / folder).glob("*")):
            assert path.is_file() and not path.is_symlink(), f"{path} is not a plain file"
            assert path.name not in owners, f"{folder}/{path.name} is in {owners[path.name]} and {package}"
            owners[path.name] = package
    return owners


@pytest.mark.parametrize("folder", FOLDERS)
def test_top_level_entries_are_relative_symlinks_into_one_package(folder):
    owners = package_files(folder)
    assert owners, f"no package has a {folder}/ folder"
    for entry in sorted((ROOT / folder).iterdir()):
        assert entry.is_symlink(), (
            f"{folder}/{entry.name} is a real file: put it in its package's {folder}/ folder "
            "and link it here (see mocap4r2_drivers/README.md)"
        )
        target = os.readlink(entry)
        assert not os.path.isabs(target), f"{folder}/{entry.name} -> {target} is absolute (breaks in a clone)"
        assert entry.name in owners, f"{folder}/{entry.name} -> {target}: no package has such a file"
        expected = f"../{owners[entry.name]}/{folder}/{entry.name}"
        assert target == expected, f"{folder}/{entry.name} -> {target}, expected {expected}"
        assert entry.resolve().is_file(), f"{folder}/{entry.name} -> {target} is dangling"


@pytest.mark.parametrize("folder", FOLDERS)
def test_every_package_file_has_its_top_level_link(folder):
    missing = [name for name in package_files(folder) if not (ROOT / folder / name).is_symlink()]
    assert not missing, f"no symlink in the top-level {folder}/ for {missing}"


def data_files(package: str) -> dict[str, list[str]]:
    return {destination: list(files) for destination, files in setup_arguments(package)["data_files"]}


@pytest.mark.parametrize("package", PACKAGES)
def test_setup_py_installs_its_own_launch_and_config_files_from_inside_its_folder(package):
    """A file named ../x is outside the package: a build of the package alone (a copy of
    its folder, a release tarball, a bloom build) does not have it."""
    installed = data_files(package)
    folder = (ROOT / package).resolve()
    for files in installed.values():
        for name in files:
            path = (ROOT / package / name).resolve()
            assert path.is_relative_to(folder), f"{package}/setup.py installs {name}, outside {package}/"
    for sub in FOLDERS:
        own = sorted(f"{sub}/{p.name}" for p in (ROOT / package / sub).glob("*"))
        assert sorted(installed.get(f"share/{package}/{sub}", [])) == own, (package, sub)
