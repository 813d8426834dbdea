"""Rigid bodies from unlabeled markers: the tracking core (numpy/scipy, no rclpy).

:mod:`.bodies` reads and checks the body definitions (layouts, dynamics, limits);
:mod:`.tracker` follows the bodies from frame to frame. docs/tracking.md explains both.
"""
