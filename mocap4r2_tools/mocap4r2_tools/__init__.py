"""mocap4r2_tools."""
