"""The Vicon system (Nexus, Tracker, Shogun via the DataStream SDK) as a lifecycle node.

    ros2 launch mocap4r2_drivers vicon.launch.py host:=192.168.1.20 autostart:=true
    ros2 lifecycle set /vicon/vicon_system configure   # when autostart is false

Needs Vicon's DataStream SDK Python API (vicon_dssdk) installed: see docs/vicon.md.
"""

from mocap4r2_drivers.system_launch import LaunchArgument, SystemLaunch

SYSTEM = SystemLaunch(
    "vicon",
    arguments=(
        LaunchArgument("host", "127.0.0.1", "Address of the computer running Nexus, Tracker or Shogun"),
    ),
)


def generate_launch_description():
    """What `ros2 launch` runs from this file (see the module docstring)."""
    return SYSTEM.launch_description()
