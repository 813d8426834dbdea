from glob import glob

from setuptools import find_packages, setup

PACKAGE = "mocap4r2_tools"

setup(
    name=PACKAGE,
    version="2.0.0",
    packages=find_packages(exclude=["test"]),
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml"]),
        ("bin", sorted(glob("bin/*"))),
    ],
    install_requires=["setuptools"],
    zip_safe=False,
    description="mocap4r2 tools: trajectory error, robot ground truth, marker_viz",
    license="Apache-2.0",
    entry_points={
        "console_scripts": [
            "trajectory_error = mocap4r2_tools.trajectory_error:main",
            "robot_ground_truth = mocap4r2_tools.robot_gt:main",
            "marker_viz = mocap4r2_tools.marker_viz:main",
        ],
        # verbs added to the `mocap4r2` command line
        "mocap4r2.commands": [
            "eval = mocap4r2_tools.evaluate:EvalCommand",
        ],
    },
)
