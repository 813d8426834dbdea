"""Foxglove: the mocap4r2 interfaces in Foxglove's own schemas, live (``foxglove`` node,
``mocap4r2 foxglove``) and recorded (``mocap4r2 export --format foxglove``, the
recorder's ``foxglove_schemas``). :mod:`.convert` and :mod:`.records` are pure (no
rclpy); :mod:`.node` is the thin ROS side. See docs/foxglove.md."""
