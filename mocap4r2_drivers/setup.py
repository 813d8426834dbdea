from glob import glob

from setuptools import find_packages, setup

PACKAGE = "mocap4r2_drivers"

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
        ("bin", sorted(glob("bin/*"))),
    ],
    # the Python libraries the shipped code imports (pinned in requirements.txt; the ROS
    # packages come from package.xml and rosdep, never from pip; vicon_dssdk from Vicon's SDK)
    install_requires=["numpy", "PyYAML", "psutil", "qtm-rt", "rosbags", "c3d", "rich"],
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
            "vrpn_system = mocap4r2_drivers.executables:vrpn_system",
            "vrpn_simulator = mocap4r2_drivers.executables:vrpn_simulator",
            "replay_system = mocap4r2_drivers.executables:replay_system",
        ],
        # verbs added to the `mocap4r2` command line (the doctor checks each vendor's setup)
        "mocap4r2.commands": [
            "doctor = mocap4r2_drivers.doctor.doctor_command:DoctorCommand",
        ],
    },
)
