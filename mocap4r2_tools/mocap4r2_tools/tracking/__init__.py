"""Rigid bodies from unlabeled markers: the tracking core (numpy/scipy, no rclpy).

:mod:`.bodies` reads and checks the body definitions (layouts, dynamics, limits);
:mod:`.tracker` follows the bodies from frame to frame, with :mod:`.kabsch` (the batched
rigid fit) and :mod:`.acquisition` (finding bodies not tracked); :mod:`.markers_cdr` reads
serialized Markers with numpy and :mod:`.tracked_frame` builds what the marker_tracker node
publishes; :mod:`.teach` makes a layout from a still cluster. docs/tracking.md explains them.
"""
