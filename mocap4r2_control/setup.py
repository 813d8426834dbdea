from setuptools import find_packages, setup

PACKAGE = "mocap4r2_control"

setup(
    name=PACKAGE,
    version="2.0.0",
    packages=find_packages(exclude=["test"]),
    # PEP 561: the package is typed, so mypy reads its annotations where it is imported
    package_data={"mocap4r2_control": ["py.typed"]},
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml"]),
        # on PATH after `source install/setup.bash`
        ("bin", ["bin/mocap4r2"]),
    ],
    # the Python libraries the shipped code imports (pinned in requirements.txt; the ROS
    # packages come from package.xml and rosdep, never from pip)
    install_requires=["numpy", "rich", "textual"],
    # `colcon test` runs pytest (setup.cfg names this package's part of ../test)
    extras_require={"test": ["pytest"]},
    zip_safe=True,
    description="MocapSystemNode, control plane, AuxiliarSystem, CLI and TUI of mocap4r2",
    license="Apache-2.0",
    entry_points={
        "console_scripts": [
            "auxiliar_system = mocap4r2_control.executables:auxiliar_system",
            "mocap4r2 = mocap4r2_control.cli:main",
        ],
        # `ros2 mocap4r2 ...` where ros2cli is installed
        "ros2cli.command": [
            "mocap4r2 = mocap4r2_control.ros2cli_command:Mocap4r2Command",
        ],
    },
)
