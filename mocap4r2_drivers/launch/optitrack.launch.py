"""The OptiTrack (Motive, NatNet) system as a lifecycle node.

    ros2 launch mocap4r2_drivers optitrack.launch.py server_address:=192.168.1.20 autostart:=true
    ros2 lifecycle set /optitrack/optitrack_system configure   # when autostart is false

Without Motive at hand, ``natnet_simulator`` (installed with the package) stands in for it:
    natnet_simulator &
    ros2 launch mocap4r2_drivers optitrack.launch.py autostart:=true
"""

from mocap4r2_drivers.system_launch import LaunchArgument, SystemLaunch

SYSTEM = SystemLaunch(
    "optitrack",
    arguments=(
        LaunchArgument("server_address", "127.0.0.1", "Address of the computer running Motive"),
        LaunchArgument("connection_type", "multicast", "multicast or unicast (Motive's Transmission Type)"),
    ),
)


def generate_launch_description():
    """What `ros2 launch` runs from this file (see the module docstring)."""
    return SYSTEM.launch_description()
