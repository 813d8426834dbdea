from glob import glob

from setuptools import find_packages, setup

PACKAGE = "mocap4r2_drivers"
SYSTEMS = ("simulated", "optitrack", "qualisys", "vicon", "gazebo")

setup(
    name=PACKAGE,
    version="2.0.0",
    packages=find_packages(exclude=["test"]),
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml"]),
        # the systems' files of the repository's top-level launch/ and config/ (the tools'
        # files are installed by mocap4r2_tools)
        (f"share/{PACKAGE}/launch", [f"../launch/{name}.launch.py" for name in SYSTEMS + ("demo_bringup",)]),
        (
            f"share/{PACKAGE}/config",
            [f"../config/{name}.yaml" for name in SYSTEMS + ("demo_scene", "arm_scene")],
        ),
        ("bin", sorted(glob("bin/*"))),
    ],
    install_requires=["setuptools"],
    zip_safe=False,
    description="mocap4r2 systems: simulated, OptiTrack, Qualisys, Vicon, Gazebo",
    license="Apache-2.0",
    entry_points={
        "console_scripts": [
            "simulated_system = mocap4r2_drivers.executables:simulated_system",
            "optitrack_system = mocap4r2_drivers.executables:optitrack_system",
            "natnet_simulator = mocap4r2_drivers.executables:natnet_simulator",
            "qualisys_system = mocap4r2_drivers.executables:qualisys_system",
            "qtm_simulator = mocap4r2_drivers.executables:qtm_simulator",
            "vicon_system = mocap4r2_drivers.executables:vicon_system",
            "gazebo_system = mocap4r2_drivers.executables:gazebo_system",
        ],
    },
)
