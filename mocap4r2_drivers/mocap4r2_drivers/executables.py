"""The entry points of this package's executables (setup.py's console_scripts).

Each notes SIGINT/SIGTERM before its module, with rclpy, numpy and scipy, is imported, so
a stop asked for while the program loads is kept (mocap4r2_control/stop_signals.py says
why). Only the standard library may be imported here."""

from mocap4r2_control.stop_signals import lazy_main

simulated_system = lazy_main("mocap4r2_drivers.simulated.simulated_system")
optitrack_system = lazy_main("mocap4r2_drivers.optitrack.optitrack_system")
natnet_simulator = lazy_main("mocap4r2_drivers.optitrack.simulator")
qualisys_system = lazy_main("mocap4r2_drivers.qualisys.qualisys_system")
qtm_simulator = lazy_main("mocap4r2_drivers.qualisys.simulator")
vicon_system = lazy_main("mocap4r2_drivers.vicon.vicon_system")
gazebo_system = lazy_main("mocap4r2_drivers.gazebo.gazebo_system")
vrpn_system = lazy_main("mocap4r2_drivers.vrpn.vrpn_system")
vrpn_simulator = lazy_main("mocap4r2_drivers.vrpn.simulator")
replay_system = lazy_main("mocap4r2_drivers.replay.replay_system")
