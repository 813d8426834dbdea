from glob import glob

from setuptools import find_packages, setup

PACKAGE = "mocap4r2_tools"

setup(
    name=PACKAGE,
    version="2.0.0",
    packages=find_packages(exclude=["test"]),
    # PEP 561: the package is typed, so mypy reads its annotations where it is imported
    package_data={"mocap4r2_tools": ["py.typed"], "mocap4r2_tools.web_panel": ["static/*"]},
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml"]),
        # bin/mocap4r2: the `mocap4r2` command on PATH after `source install/setup.bash`
        ("bin", sorted(glob("bin/*"))),
        # every launch and config file of this package's own launch/ and config/ folders
        # (the repository's top-level launch/ and config/ hold relative symlinks to them)
        (f"share/{PACKAGE}/launch", sorted(glob("launch/*.launch.py"))),
        (f"share/{PACKAGE}/config", sorted(glob("config/*.yaml") + glob("config/*.rviz"))),
    ],
    # the Python libraries the shipped code imports (pinned in requirements.txt; the ROS
    # packages come from package.xml and rosdep, never from pip)
    install_requires=[
        "numpy",
        "scipy",
        "numba",
        "PyYAML",
        "matplotlib",
        "rich",
        "textual",
        "rosbags",
        "mcap",
        "c3d",
        "pymavlink",
        "mavsdk",
        "aiohttp",
        "foxglove-sdk",
    ],
    # `colcon test` runs pytest (setup.cfg names this package's part of ../test)
    extras_require={"test": ["pytest"]},
    zip_safe=False,
    description=(
        "mocap4r2 tools: trajectory error, robot ground truth, marker_viz, motion tools, "
        "PX4 and world-model bridges, session recorder, the mocap4r2 CLI and TUI"
    ),
    license="Apache-2.0",
    entry_points={
        "console_scripts": [
            "trajectory_error = mocap4r2_tools.executables:trajectory_error",
            "robot_ground_truth = mocap4r2_tools.executables:robot_ground_truth",
            "marker_viz = mocap4r2_tools.executables:marker_viz",
            "px4_bridge = mocap4r2_tools.executables:px4_bridge",
            "worldmodel_server = mocap4r2_tools.executables:worldmodel_server",
            "motion_estimator = mocap4r2_tools.executables:motion_estimator",
            "trajectory_monitor = mocap4r2_tools.executables:trajectory_monitor",
            "simulated_arm = mocap4r2_tools.executables:simulated_arm",
            "session_recorder = mocap4r2_tools.executables:session_recorder",
            "web_panel = mocap4r2_tools.executables:web_panel",
            "marker_tracker = mocap4r2_tools.executables:marker_tracker",
            "foxglove = mocap4r2_tools.executables:foxglove",
            # the command line of every verb below (cli.py; its `tui` verb is tui.py)
            "mocap4r2 = mocap4r2_tools.cli:main",
        ],
        # `ros2 mocap4r2 ...` where ros2cli is installed
        "ros2cli.command": [
            "mocap4r2 = mocap4r2_tools.ros2cli_command:Mocap4r2Command",
        ],
        # verbs added to the `mocap4r2` command line (cli.py finds every package's verbs
        # through this group: mocap4r2_drivers adds `doctor`)
        "mocap4r2.commands": [
            "eval = mocap4r2_tools.eval_command:EvalCommand",
            "calibrate = mocap4r2_tools.calibrate_command:CalibrateCommand",
            "export = mocap4r2_tools.recording_commands:ExportCommand",
            "recover = mocap4r2_tools.recording_commands:RecoverCommand",
            "sessions = mocap4r2_tools.recording_commands:SessionsCommand",
            "web = mocap4r2_tools.web_panel.command:WebCommand",
            "teach = mocap4r2_tools.teach_command:TeachCommand",
            "foxglove = mocap4r2_tools.foxglove.command:FoxgloveCommand",
        ],
    },
)
