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
        (f"share/{PACKAGE}/config", [f"../config/{name}.yaml" for name in SYSTEMS + ("demo_scene", "arm_scene")]),
        ("bin", sorted(glob("bin/*"))),
    ],
    install_requires=["setuptools"],
    zip_safe=False,
    description="mocap4r2 systems: simulated, OptiTrack, Qualisys, Vicon, Gazebo",
    license="Apache-2.0",
    entry_points={
        "console_scripts": [
            "simulated_system = mocap4r2_drivers.simulated.simulated_system:main",
            "optitrack_system = mocap4r2_drivers.optitrack.optitrack_system:main",
            "natnet_simulator = mocap4r2_drivers.optitrack.simulator:main",
            "qualisys_system = mocap4r2_drivers.qualisys.qualisys_system:main",
            "qtm_simulator = mocap4r2_drivers.qualisys.simulator:main",
            "vicon_system = mocap4r2_drivers.vicon.vicon_system:main",
            "gazebo_system = mocap4r2_drivers.gazebo.gazebo_system:main",
        ],
    },
)
