"""OptiTrack NatNet in pure Python (no rclpy): the wire protocol (``protocol``), a
streaming client with conversion to MocapFrame (``client``), and a Motive stand-in
serving a simulated scene (``simulator``, the ``natnet_simulator`` command)."""
from .protocol import SUPPORTED_VERSIONS, NatNetProtocolError, Version

__all__ = ["SUPPORTED_VERSIONS", "NatNetProtocolError", "Version"]
