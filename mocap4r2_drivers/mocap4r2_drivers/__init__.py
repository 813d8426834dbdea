"""mocap4r2_drivers."""
