"""A VRPN server's trackers (Vicon Tracker, Motive, DTrack, vrpn_server, ...) as a lifecycle node.

    ros2 launch mocap4r2_drivers vrpn.launch.py host:=192.168.1.10 autostart:=true
    ros2 lifecycle set /vrpn/vrpn_system configure   # when autostart is false

Without a VRPN server at hand, ``vrpn_simulator`` (installed with the package) stands in for one:
    vrpn_simulator --port 3883 &
    ros2 launch mocap4r2_drivers vrpn.launch.py autostart:=true
"""

from mocap4r2_drivers.system_launch import LaunchArgument, SystemLaunch

SYSTEM = SystemLaunch(
    "vrpn",
    arguments=(
        LaunchArgument("host", "127.0.0.1", "Address of the VRPN server"),
        LaunchArgument("port", "3883", "VRPN server port"),
    ),
)


def generate_launch_description():
    """What `ros2 launch` runs from this file (see the module docstring)."""
    return SYSTEM.launch_description()
