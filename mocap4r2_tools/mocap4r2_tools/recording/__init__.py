"""Recording capture sessions as rosbag2 bags in MCAP storage, and reading them back.

Everything here is free of rclpy: the ``session_recorder`` node hands serialized
message bytes to :class:`~.bag_writer.SessionBag`; the CLI verbs (export, recover,
sessions) work on files only.
"""
