"""The entry points of this package's executables (setup.py's console_scripts).

Each notes SIGINT/SIGTERM before its module, with rclpy, numpy and scipy, is imported, so
a stop asked for while the program loads is kept (mocap4r2_control/stop_signals.py says
why). Only the standard library may be imported here."""

from mocap4r2_control.stop_signals import lazy_main

trajectory_error = lazy_main("mocap4r2_tools.trajectory_error")
robot_ground_truth = lazy_main("mocap4r2_tools.robot_ground_truth")
marker_viz = lazy_main("mocap4r2_tools.marker_viz")
px4_bridge = lazy_main("mocap4r2_tools.px4_bridge")
worldmodel_server = lazy_main("mocap4r2_tools.worldmodel_server")
motion_estimator = lazy_main("mocap4r2_tools.motion_estimator")
trajectory_monitor = lazy_main("mocap4r2_tools.trajectory_monitor")
simulated_arm = lazy_main("mocap4r2_tools.simulated_arm")
session_recorder = lazy_main("mocap4r2_tools.session_recorder")
web_panel = lazy_main("mocap4r2_tools.web_panel.node")
marker_tracker = lazy_main("mocap4r2_tools.marker_tracker")
foxglove = lazy_main("mocap4r2_tools.foxglove.node")
