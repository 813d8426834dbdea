"""The Qualisys (QTM) system as a lifecycle node.

    ros2 launch mocap4r2_drivers qualisys.launch.py host:=192.168.1.10 autostart:=true
    ros2 lifecycle set /qualisys/qualisys_system configure   # when autostart is false

Without QTM at hand, ``qtm_simulator`` (installed with the package) stands in for it:
    qtm_simulator --port 22222 &
    ros2 launch mocap4r2_drivers qualisys.launch.py autostart:=true
"""

from mocap4r2_drivers.system_launch import LaunchArgument, SystemLaunch

SYSTEM = SystemLaunch(
    "qualisys",
    arguments=(
        LaunchArgument("host", "127.0.0.1", "Address of the computer running QTM"),
        LaunchArgument("port", "22222", "QTM's base port (RT port = base + 1)"),
    ),
)


def generate_launch_description():
    """What `ros2 launch` runs from this file (see the module docstring)."""
    return SYSTEM.launch_description()
