"""OptiTrack (Motive) over NatNet 3.0-4.1, in pure Python without rclpy except in the
system module: ``protocol`` (the wire format), ``client`` (sockets, keep-alive,
reconnection), ``convert`` (NatNet frames to MocapFrame), ``simulator`` (a Motive
stand-in, the ``natnet_simulator`` command) and ``optitrack_system`` (the adapter)."""
