"""Replay: recorded files played back as a mocap system. ``readers`` (rosbag2 bags in
MCAP or sqlite3 storage, C3D files), ``convert`` (recorded CDR messages to MocapFrame,
decoded with numpy) and ``replay_system`` (the adapter and its read-ahead thread)."""
