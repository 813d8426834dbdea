"""Gazebo: model poses bridged by ros_gz_bridge, turned into an emulated mocap system
(markers, noise, occlusion) by ``gazebo_system``."""
