"""The simulated mocap system as a lifecycle node.

ros2 launch mocap4r2_drivers simulated.launch.py namespace:=sim autostart:=true
ros2 lifecycle set /sim/simulated_system configure   # when autostart is false
"""

from mocap4r2_drivers.system_launch import SystemLaunch

SYSTEM = SystemLaunch("simulated", namespace="sim")


def generate_launch_description():
    """What `ros2 launch` runs from this file (see the module docstring)."""
    return SYSTEM.launch_description()
