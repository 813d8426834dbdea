import importlib.util
import sys
from glob import glob
from pathlib import Path

from setuptools import find_packages, setup

PACKAGE = "mocap4r2_drivers"


def _registry():
    """registry.py, the table of systems, read from the source before the package is
    built (standard library only); its executables are the console scripts and bin/."""
    spec = importlib.util.spec_from_file_location(
        "_mocap4r2_registry", Path(__file__).resolve().parent / PACKAGE / "registry.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


REGISTRY = _registry()

setup(
    name=PACKAGE,
    version="2.0.0",
    packages=find_packages(exclude=["test"]),
    # PEP 561: the package is typed, so mypy reads its annotations where it is imported
    package_data={"mocap4r2_drivers": ["py.typed"]},
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml"]),
        # every launch and config file of this package's own launch/ and config/ folders
        # (the repository's top-level launch/ and config/ hold relative symlinks to them)
        (f"share/{PACKAGE}/launch", sorted(glob("launch/*.launch.py"))),
        (f"share/{PACKAGE}/config", sorted(glob("config/*.yaml"))),
        # every executable on PATH too, as the stand-ins have always been: one wrapper per
        # name in bin/, each running the executable of its own file name
        ("bin", REGISTRY.bin_wrappers(PACKAGE)),
    ],
    # the Python libraries the shipped code imports (pinned in requirements.txt; the ROS
    # packages come from package.xml and rosdep, never from pip; vicon_dssdk from Vicon's SDK)
    install_requires=["numpy", "PyYAML", "psutil", "qtm-rt", "rosbags", "c3d"],
    # `colcon test` runs pytest (setup.cfg names this package's part of ../test)
    extras_require={"test": ["pytest"]},
    zip_safe=False,
    description="mocap4r2 systems: simulated, OptiTrack, Qualisys, Vicon, Gazebo, VRPN, replay",
    license="Apache-2.0",
    entry_points={
        # each system's node and stand-in, as registry.py lists them
        "console_scripts": REGISTRY.console_scripts(PACKAGE),
        # verbs added to the `mocap4r2` command line (the doctor checks each vendor's setup)
        "mocap4r2.commands": [
            "doctor = mocap4r2_drivers.doctor.doctor_command:DoctorCommand",
        ],
    },
)
