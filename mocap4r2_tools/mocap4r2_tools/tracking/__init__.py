"""Rigid bodies from unlabeled markers: the tracking core (numpy/scipy and numba, no rclpy).

:mod:`.bodies` reads and checks the body definitions (layouts, dynamics, limits);
:mod:`.tracker` follows the bodies from frame to frame (prediction, gating, the global
assignment) and calls its stages once per frame for all bodies: :mod:`.tracked_fit` (fit
and checks of the tracked bodies), :mod:`.single_hold` (a single marker found after a gap
is held until confirmed), :mod:`.reacquisition` (lost bodies restarted from the search of
:mod:`.acquisition`), sharing the per-body state of :mod:`.track_state`; :mod:`.kabsch` is
the batched rigid fit; :mod:`.kernels` holds the per-frame steps compiled with numba (the
fit from the prior, the gated neighbour search, the direct pairing), cached where
:mod:`.kernel_cache` finds a place; :mod:`.markers_cdr` reads
serialized Markers with numpy and :mod:`.tracked_frame` builds what the marker_tracker node
publishes; :mod:`.teach` makes a layout from a still cluster. docs/tracking.md explains them.
"""
