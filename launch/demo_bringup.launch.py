"""The demo on a ROS distribution: the simulated system (streaming at once), the tools
and RViz with config/mocap4r2.rviz.

    ros2 launch mocap4r2_drivers demo_bringup.launch.py            # rviz:=false without RViz
    mocap4r2 tui                                                   # watch, start/stop
"""
import os

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, IncludeLaunchDescription
from launch.launch_description_sources import PythonLaunchDescriptionSource
from launch.substitutions import LaunchConfiguration

HERE = os.path.dirname(os.path.realpath(__file__))


def generate_launch_description():
    return LaunchDescription([
        DeclareLaunchArgument("rviz", default_value="true", description="Start RViz"),
        DeclareLaunchArgument("autostart", default_value="true",
                              description="Stream at once (false: wait for `mocap4r2 start`)"),
        IncludeLaunchDescription(
            PythonLaunchDescriptionSource(os.path.join(HERE, "simulated.launch.py")),
            launch_arguments={"namespace": "sim", "autostart": LaunchConfiguration("autostart")}.items(),
        ),
        IncludeLaunchDescription(
            PythonLaunchDescriptionSource(os.path.join(HERE, "tools.launch.py")),
            launch_arguments={"rviz": LaunchConfiguration("rviz")}.items(),
        ),
    ])
