"""mocap4r2_control."""
