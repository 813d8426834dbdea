"""Replay: recorded files played back as a mocap system. ``readers`` (rosbag2 bags in
MCAP or sqlite3 storage, C3D files), ``convert`` (recorded CDR messages to MocapFrame,
decoded with numpy), ``playback`` (the read-ahead thread and the pacing) and
``replay_system`` (the adapter)."""
