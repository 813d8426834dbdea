"""A recorded session, a rosbag2 bag or a C3D file played back as a mocap system.

    ros2 launch mocap4r2_drivers replay.launch.py file:=/path/to/sessions/<id> autostart:=true
    ros2 launch mocap4r2_drivers replay.launch.py file:=walk.c3d namespace:=lab rate_factor:=0.5

START and STOP on the control plane (or the lifecycle activate/deactivate) resume and
pause. Every parameter is in config/replay.yaml; docs/replay.md says what each does.
"""

from mocap4r2_drivers.system_launch import LaunchArgument, SystemLaunch

SYSTEM = SystemLaunch(
    "replay",
    arguments=(
        LaunchArgument("file", None, "A bag folder, an .mcap, a .db3 or a .c3d"),
        LaunchArgument("source", "", "Namespace of the recorded system in a bag"),
        LaunchArgument("rate_factor", "1.0", "1: real time, 0: as fast as it goes"),
    ),
)


def generate_launch_description():
    """What `ros2 launch` runs from this file (see the module docstring)."""
    return SYSTEM.launch_description()
