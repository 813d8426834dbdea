"""Motion tools' cores (no rclpy): velocity estimation from mocap poses, trajectory
monitors, and the kinematics of the simulated arm."""
