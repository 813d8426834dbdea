"""rclpy-free core of the px4_bridge tool: frames, stream logic and MAVLink links.

* :mod:`.frames`: the one ENU/FLU -> NED/FRD conversion of poses, velocities and covariances.
* :mod:`.stream`: rate limiting, the tracking-loss gate and the neutral ``VisionSample``.
* :mod:`.links`: the MAVLink connection URL and the two transports (pymavlink, MAVSDK).
"""

from .frames import enu_flu_to_ned_frd, flu_to_frd, ned_frd_to_enu_flu, quat_to_euler_frd
from .stream import RateLimiter, TrackingGate, VisionSample, build_sample, pose_covariance_urt

__all__ = [
    "enu_flu_to_ned_frd",
    "flu_to_frd",
    "ned_frd_to_enu_flu",
    "quat_to_euler_frd",
    "RateLimiter",
    "TrackingGate",
    "VisionSample",
    "build_sample",
    "pose_covariance_urt",
]
