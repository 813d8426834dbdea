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
    ],
    # the Python libraries the shipped code imports (pinned in requirements.txt; the ROS
    # packages come from package.xml and rosdep, never from pip)
    # (the `mocap4r2` command and its terminal view, with rich and textual, are
    # mocap4r2_tools': a driver installed alone does not pull them in)
    install_requires=["numpy", "numba"],
    # `colcon test` runs pytest (setup.cfg names this package's part of ../test)
    extras_require={"test": ["pytest"]},
    zip_safe=True,
    description="MocapSystemNode, control plane and AuxiliarSystem of mocap4r2",
    license="Apache-2.0",
    entry_points={
        "console_scripts": [
            "auxiliar_system = mocap4r2_control.executables:auxiliar_system",
        ],
    },
)
