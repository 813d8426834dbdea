"""Every third-party import of the shipped code is declared by the package that imports
it, so `rosdep install` (package.xml) and `pip install` (setup.py) give a workspace that
runs, and requirements.txt pins it.

The shipped code of each Python package is parsed (every import, also the ones inside
functions), and each imported top-level name is looked up in DEPENDENCIES below: the one
map from an import name to what provides it. A name missing from the map fails the test;
add it there with its PyPI name and rosdep key (rosdep keys are the ones of
ros/rosdistro's rosdep/python.yaml; never invent one: where there is none, say so with
None and name the PyPI project in a comment of package.xml)."""

from __future__ import annotations

import ast
import functools
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from package_metadata import (
    ROOT,
    normalize,
    pinned_requirements,
    read_package_xml,
    requirement_name,
    setup_arguments,
)

PACKAGES = ("mocap4r2_control", "mocap4r2_drivers", "mocap4r2_tools")


@dataclass(frozen=True)
class Provider:
    """What provides an importable name. `pypi`: the project pip installs (declared in
    setup.py's install_requires, pinned in requirements.txt); `rosdep`: the key package.xml
    declares (a ROS package's own name, or a key of rosdep/python.yaml). A ROS package has
    no `pypi` (pip cannot install it on a ROS distribution); a library without a rosdep key
    has no `rosdep`; something neither can install has neither and must be imported only
    where it is used (inside a function), so everything else runs without it."""

    pypi: str | None
    rosdep: str | None
    why: str = ""


def ros(name: str) -> Provider:
    return Provider(pypi=None, rosdep=name)


DEPENDENCIES: dict[str, Provider] = {
    # ROS packages: from the distribution (or the ros-* wheels of requirements.txt)
    **{
        name: ros(name)
        for name in (
            "rclpy",
            "launch",
            "launch_ros",
            "rcl_interfaces",
            "ament_index_python",
            "builtin_interfaces",
            "std_msgs",
            "std_srvs",
            "geometry_msgs",
            "diagnostic_msgs",
            "lifecycle_msgs",
            "nav_msgs",
            "sensor_msgs",
            "trajectory_msgs",
            "visualization_msgs",
            "tf2_msgs",
            "tf2_ros",
            "ros2cli",
            "mocap4r2_interfaces",
            "mocap4r2_control",
            "motion_control_interfaces",
            "hector_worldmodel_msgs",
        )
    },
    # Python libraries with a system key in rosdep/python.yaml
    "numpy": Provider("numpy", "python3-numpy"),
    "scipy": Provider("scipy", "python3-scipy"),
    "numba": Provider("numba", "python3-numba"),
    "yaml": Provider("PyYAML", "python3-yaml"),
    "rich": Provider("rich", "python3-rich"),
    "textual": Provider("textual", "python3-textual"),
    "matplotlib": Provider("matplotlib", "python3-matplotlib"),
    "psutil": Provider("psutil", "python3-psutil"),
    "aiohttp": Provider("aiohttp", "python3-aiohttp"),
    # ... with a pip key only
    "rosbags": Provider("rosbags", "python3-rosbags-pip"),
    "pymavlink": Provider("pymavlink", "python3-pymavlink-pip"),
    # ... with no key at all in ros/rosdistro (rosdep/python.yaml, August 2026)
    "qtm_rt": Provider("qtm-rt", None),
    "mavsdk": Provider("mavsdk", None),
    "mcap": Provider("mcap", None),
    "c3d": Provider("c3d", None),
    "foxglove": Provider("foxglove-sdk", None),
    # neither pip nor rosdep: installed with Vicon's DataStream SDK
    "vicon_dssdk": Provider(None, None, "Vicon's DataStream SDK, from Vicon's installer"),
    # imported by tests only (test/<package>/): package.xml's test_depend, requirements-dev.txt
    "pytest": Provider("pytest", "python3-pytest"),
    "hypothesis": Provider("hypothesis", "python3-hypothesis"),
    "pandas": Provider("pandas", "python3-pandas"),
    "rosidl_parser": ros("rosidl_parser"),
    # reference clients and readers the tests compare with, pip only
    "natnet": Provider("natnet", None),
    "natnetsdk": Provider("natnetsdk", None),
    "cv2": Provider("opencv-python-headless", "python3-opencv"),
    "evo": Provider("evo", None),
    "ezc3d": Provider("ezc3d", None),
    # libmotioncapture's binding, whose embedded VRPN client reads vrpn_simulator, pip only
    "motioncapture": Provider("motioncapture", None),
    # drives Debian's chromium in the web panel's browser tests, pip only
    "playwright": Provider("playwright", None),
}


@functools.cache
def shipped_imports(package: str) -> dict[str, list[tuple[str, int, bool]]]:
    """Top-level name -> (file, line, at module level) of every import of a third-party
    name in the package's shipped code: its modules and its launch files."""
    found = _imports(package, ROOT / package / package, ())
    for name, places in _imports(package, ROOT / package / "launch", ()).items():
        found.setdefault(name, []).extend(places)
    return found


@functools.cache
def imports_of_tests(package: str) -> dict[str, list[tuple[str, int, bool]]]:
    """The same for the package's tests (test/<package>/), leaving out the modules of
    test/ itself (fixtures, support), the three packages and the repository's bench/
    (a test may drive a benchmark's cases, e.g. bench/clock_faults.py's)."""
    own = tuple(path.stem for path in (ROOT / "test").rglob("*.py")) + PACKAGES + ("bench",)
    return _imports(package, ROOT / "test" / package, own)


def _imports(package: str, folder: Path, own: tuple[str, ...]) -> dict[str, list[tuple[str, int, bool]]]:
    standard = set(sys.stdlib_module_names)
    found: dict[str, list[tuple[str, int, bool]]] = {}
    for path in sorted(folder.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        in_function = {
            id(node)
            for function in ast.walk(tree)
            if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef))
            for node in ast.walk(function)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top in standard or top == "__future__" or top == package or top in own:
                    continue
                where = (str(path.relative_to(ROOT)), node.lineno, id(node) not in in_function)
                found.setdefault(top, []).append(where)
    return found


def test_shipped_imports_are_found():
    """The parse sees imports at module level and inside functions (the case it must not
    miss: optional libraries are imported where they are used)."""
    drivers = shipped_imports("mocap4r2_drivers")
    assert any(module_level for _, _, module_level in drivers["numpy"])
    assert not any(module_level for _, _, module_level in drivers["qtm_rt"]), drivers["qtm_rt"]
    assert "mocap4r2_control" in drivers and "mocap4r2_drivers" not in drivers
    assert any(file.endswith(".launch.py") for file, _, _ in drivers["launch_ros"]), drivers["launch_ros"]


@pytest.mark.parametrize("package", PACKAGES)
def test_every_import_is_in_the_map(package):
    unknown = {
        name: places[0] for name, places in shipped_imports(package).items() if name not in DEPENDENCIES
    }
    assert not unknown, (
        f"{package} imports {unknown}: add each to DEPENDENCIES in test/test_dependencies.py "
        "(PyPI name, rosdep key) and declare it in the package's setup.py and package.xml"
    )


@pytest.mark.parametrize("package", PACKAGES)
def test_every_import_is_declared_in_package_xml_and_setup_py(package):
    xml = read_package_xml(package)
    install_requires = {requirement_name(r) for r in setup_arguments(package).get("install_requires", [])}
    missing = []
    for name, places in sorted(shipped_imports(package).items()):
        provider = DEPENDENCIES.get(name)
        if provider is None:
            continue  # test_every_import_is_in_the_map says so
        file, line, _ = places[0]
        if provider.rosdep and provider.rosdep not in xml.exec_depends:
            missing.append(
                f"package.xml <exec_depend>{provider.rosdep}</exec_depend> ({name}, {file}:{line})"
            )
        if provider.pypi and normalize(provider.pypi) not in install_requires:
            missing.append(f'setup.py install_requires "{provider.pypi}" ({name}, {file}:{line})')
        if provider.pypi and not provider.rosdep and provider.pypi not in xml.comments:
            missing.append(f"package.xml: a comment naming {provider.pypi} (pip only, no rosdep key)")
    assert not missing, f"{package} does not declare:\n  " + "\n  ".join(missing)


@pytest.mark.parametrize("package", PACKAGES)
def test_nothing_declared_that_is_not_imported(package):
    """A declared Python library the code no longer imports is installed for nothing."""
    imported = set(shipped_imports(package))
    # rosdep key / PyPI name -> import name, for the Python libraries of the map
    by_key = {p.rosdep: name for name, p in DEPENDENCIES.items() if p.pypi and p.rosdep}
    by_pypi = {normalize(p.pypi): name for name, p in DEPENDENCIES.items() if p.pypi}
    stale = sorted(
        key for key in read_package_xml(package).exec_depends if key in by_key and by_key[key] not in imported
    )
    stale += [
        requirement
        for requirement in setup_arguments(package).get("install_requires", [])
        if by_pypi.get(requirement_name(requirement)) not in imported
    ]
    assert not stale, f"{package} declares {stale}, which its shipped code does not import"


@pytest.mark.parametrize("package", PACKAGES)
def test_only_what_nothing_installs_is_imported_lazily(package):
    """What neither pip nor rosdep installs is imported only inside the function that uses
    it, so every other part of the package runs without it."""
    eager = [
        f"{name} at {file}:{line}"
        for name, places in shipped_imports(package).items()
        if (provider := DEPENDENCIES.get(name)) and not provider.pypi and not provider.rosdep
        for file, line, module_level in places
        if module_level
    ]
    assert not eager, f"imported at module level, but neither pip nor rosdep installs it: {eager}"


def test_runtime_libraries_are_pinned_in_requirements_txt():
    """What the shipped code imports is pinned in requirements.txt (what a robot installs),
    not in requirements-dev.txt; nothing is pinned in both."""
    runtime = pinned_requirements(ROOT / "requirements.txt")
    dev = pinned_requirements(ROOT / "requirements-dev.txt")
    assert not set(runtime) & set(dev), f"pinned in both files: {sorted(set(runtime) & set(dev))}"
    for package in PACKAGES:
        for name in shipped_imports(package):
            provider = DEPENDENCIES.get(name)
            if provider and provider.pypi:
                assert normalize(provider.pypi) in runtime, (
                    f"{provider.pypi} ({package}) not in requirements.txt"
                )


@pytest.mark.parametrize("package", PACKAGES)
def test_test_imports_are_declared_as_test_depend(package):
    """What the package's tests import is in package.xml (exec_depend or test_depend, or a
    comment for what only pip installs), and what only tests import is pinned in
    requirements-dev.txt, so a robot's install does not carry it."""
    xml = read_package_xml(package)
    dev = pinned_requirements(ROOT / "requirements-dev.txt")
    shipped = {name for p in PACKAGES for name in shipped_imports(p)}
    imports = imports_of_tests(package)
    unknown = sorted(name for name in imports if name not in DEPENDENCIES)
    assert not unknown, f"test/{package} imports {unknown}: add each to DEPENDENCIES"
    missing = []
    for name in sorted(imports):
        provider = DEPENDENCIES[name]
        if provider.rosdep and provider.rosdep not in xml.exec_depends | xml.test_depends:
            missing.append(f"package.xml test_depend {provider.rosdep} ({name})")
        if provider.pypi and not provider.rosdep and provider.pypi not in xml.comments:
            missing.append(f"package.xml: a comment naming {provider.pypi} (pip only, no rosdep key)")
        if provider.pypi and name not in shipped and normalize(provider.pypi) not in dev:
            missing.append(f"requirements-dev.txt: a pin of {provider.pypi} (only tests import {name})")
    assert not missing, f"test/{package} needs:\n  " + "\n  ".join(missing)


# The terminal libraries of the `mocap4r2` command and its TUI (mocap4r2_tools): the core
# and the drivers, which a robot installs without the tools, must not need them.
TERMINAL_LIBRARIES = ("rich", "textual")
WITHOUT_TERMINAL_LIBRARIES = ("mocap4r2_control", "mocap4r2_drivers")

# Imports each named module with the named libraries made unimportable (None in
# sys.modules: `import rich` then raises ModuleNotFoundError, as where it is not
# installed), and prints {module: error} for each one that failed.
_IMPORT_WITHOUT = """
import importlib, json, sys
blocked, modules = json.loads(sys.argv[1]), json.loads(sys.argv[2])
for name in blocked:
    sys.modules[name] = None
failed = {}
for module in modules:
    try:
        importlib.import_module(module)
    except Exception as exc:  # every failure is reported, not only the first
        failed[module] = f"{type(exc).__name__}: {exc}"
print(json.dumps(failed))
"""


def package_modules(root: Path, packages: tuple[str, ...]) -> list[str]:
    """The dotted name of every module of ``packages`` in the source tree at ``root``."""
    names = []
    for package in packages:
        for path in sorted((root / package / package).rglob("*.py")):
            parts = path.relative_to(root / package).with_suffix("").parts
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def import_without(modules: list[str], blocked: tuple[str, ...], env: dict[str, str] | None = None) -> dict:
    """{module: error} of the ``modules`` that cannot be imported without ``blocked``, each
    imported in one fresh interpreter."""
    out = subprocess.run(
        [sys.executable, "-c", _IMPORT_WITHOUT, json.dumps(blocked), json.dumps(modules)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert out.returncode == 0 and out.stdout.strip(), out.stderr[-3000:]
    failed: dict = json.loads(out.stdout.splitlines()[-1])
    return failed


def test_core_and_drivers_import_without_the_terminal_libraries():
    """A driver installed alone does not pull in rich or textual: every module of
    mocap4r2_control and mocap4r2_drivers imports where neither can be imported (before
    the CLI and TUI moved to mocap4r2_tools, cli.py, tui.py and the doctor's report
    failed here)."""
    modules = package_modules(ROOT, WITHOUT_TERMINAL_LIBRARIES)
    assert len(modules) > 50 and "mocap4r2_drivers.doctor.doctor_command" in modules, modules
    failed = import_without(modules, TERMINAL_LIBRARIES)
    assert not failed, "cannot be imported without rich and textual:\n" + "\n".join(
        f"  {module}: {error}" for module, error in failed.items()
    )
    # the check itself: the blocked libraries are refused, where the tools need them
    refused = import_without(["rich.console", "textual.app"], TERMINAL_LIBRARIES)
    assert set(refused) == {"rich.console", "textual.app"}, refused
    assert all("ModuleNotFoundError" in error for error in refused.values()), refused


def test_the_terminal_libraries_are_declared_only_by_the_tools():
    """rich and textual are mocap4r2_tools' (setup.py and package.xml), not the core's nor
    the drivers'."""
    for package in PACKAGES:
        requires = {requirement_name(r) for r in setup_arguments(package).get("install_requires", [])}
        keys = read_package_xml(package).exec_depends
        for name in TERMINAL_LIBRARIES:
            provider = DEPENDENCIES[name]
            declared = normalize(str(provider.pypi)) in requires and provider.rosdep in keys
            assert declared is (package == "mocap4r2_tools"), (package, name)


def run_time_keys(package: str) -> set[str]:
    """Every key `rosdep install` resolves for ``package`` at run time: its exec_depends,
    and those of each package of this repository among them, recursively."""
    keys: set[str] = set()
    todo = [package]
    while todo:
        for key in read_package_xml(todo.pop()).exec_depends - keys:
            keys.add(key)
            if (ROOT / key / "package.xml").exists():
                todo.append(key)
    return keys


def test_a_driver_installed_alone_pulls_in_no_terminal_library():
    """Neither the core nor the drivers depend, even through another package of this
    repository, on mocap4r2_tools or the terminal libraries (before, the drivers' package.xml
    named mocap4r2_tools for the demo's launch file, and rich itself)."""
    terminal = {str(DEPENDENCIES[name].rosdep) for name in TERMINAL_LIBRARIES}
    assert terminal <= run_time_keys("mocap4r2_tools"), "the walk must see the tools' own keys"
    for package in WITHOUT_TERMINAL_LIBRARIES:
        keys = run_time_keys(package)
        assert "mocap4r2_control" in keys or package == "mocap4r2_control", keys
        assert not keys & ({"mocap4r2_tools"} | terminal), (
            package,
            sorted(keys & ({"mocap4r2_tools"} | terminal)),
        )


def _demo_tools_launch_dir():
    """demo_bringup.launch.py's _tools_launch_dir, taken from the file (the file itself
    imports `launch`, which only a ROS distribution has)."""
    path = ROOT / "mocap4r2_drivers" / "launch" / "demo_bringup.launch.py"
    tree = ast.parse(path.read_text())
    (function,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_tools_launch_dir"]
    namespace: dict = {"os": __import__("os")}
    exec(compile(ast.Module(body=[function], type_ignores=[]), str(path), "exec"), namespace)
    return namespace


def test_the_demo_includes_the_tools_only_where_they_are_installed(tmp_path, monkeypatch):
    """The drivers' demo launch file finds the tools' launch file where mocap4r2_tools is
    installed, and nothing (it then runs the system alone, with a log line) on a machine
    with the drivers alone: outside the source tree, with an ament index without it."""
    namespace = _demo_tools_launch_dir()
    namespace["HERE"] = str(ROOT / "mocap4r2_drivers" / "launch")
    found = namespace["_tools_launch_dir"]()
    assert found is not None and Path(found, "tools.launch.py").exists(), found
    alone = tmp_path / "share" / "mocap4r2_drivers" / "launch"
    alone.mkdir(parents=True)
    (tmp_path / "index" / "share" / "ament_index" / "resource_index" / "packages").mkdir(parents=True)
    monkeypatch.setenv("AMENT_PREFIX_PATH", str(tmp_path / "index"))
    namespace["HERE"] = str(alone)
    assert namespace["_tools_launch_dir"]() is None


@pytest.mark.parametrize(
    "package",
    (
        *PACKAGES,
        "mocap4r2_interfaces",
        "motion_control_interfaces",
        "hector_worldmodel_msgs",
        "compat/tf2_msgs",
    ),
)
def test_package_xml_is_valid_for_ros_tools(package):
    """catkin_pkg (what colcon, rosdep and bloom read package.xml with) accepts the file
    without a warning, and no dependency is named twice (catkin_pkg lets that pass; `depend`
    counts as build, build_export and exec; a test_depend that is also an exec_depend is
    redundant)."""
    import warnings

    from catkin_pkg.package import parse_package

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        parsed = parse_package(str(ROOT / package))
        parsed.validate()
    assert not caught, [str(w.message) for w in caught]
    for kind in ("build_depends", "exec_depends", "test_depends", "buildtool_depends"):
        names = [d.name for d in getattr(parsed, kind)]
        assert len(names) == len(set(names)), f"{package}: {kind} names {sorted(names)}"
    both = {d.name for d in parsed.exec_depends} & {d.name for d in parsed.test_depends}
    assert not both, f"{package}: exec_depend and test_depend both name {sorted(both)}"
