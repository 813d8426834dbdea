"""What the marker_tracker node publishes for one source frame, and what it watches
(pure numpy, no rclpy).

:class:`TrackedFrameBuilder` turns a decoded Markers message and the tracker's
:class:`~mocap4r2_tools.tracking.tracker.FrameResult` into a
:class:`~mocap4r2_control.frame.MocapFrame` with the source's frame number and stamp:

* the markers, each body's layout markers first, labeled ``<body>:<index>`` (the index
  counts the layout's markers from 1, in the order of the bodies file, as the simulated
  system names its markers) with id ``body_id * 1000 + index``; a layout marker not seen in
  this frame is occluded; then the strays, unlabeled (UNKNOWN_ID, empty name). The list has
  the same structure every frame but for the number of strays, which the node's encoder
  reuses;
* the rigid bodies with their markers, NaN where a body is not tracked (the node then holds
  its last pose and says tracking_valid false). A single-marker body's orientation is the
  identity.

:class:`SwapWatch` counts suspected identity swaps: an identical body (one whose layout
another body shares) re-acquired nearer another identical body's last known position than
its own.
"""

from __future__ import annotations

from collections import deque

import numpy as np
import numpy.typing as npt

from mocap4r2_control.frame import UNKNOWN_ID, BodyArrays, MarkerArrays, MocapFrame
from mocap4r2_control.rotation import quat_rotate
from mocap4r2_tools.tracking.bodies import TrackerConfig, layout_groups, padded_layouts
from mocap4r2_tools.tracking.tracker import FrameResult

FloatArray = npt.NDArray[np.float64]

MARKER_ID_STRIDE = 1000  # labeled marker id: body_id * 1000 + index


class TrackedFrameBuilder:
    """The frames of one tracker configuration."""

    def __init__(self, config: TrackerConfig) -> None:
        bodies = config.bodies
        self.sizes, local, self.slot = padded_layouts(bodies)
        # per layout marker, in frame order: its body and its point in the body's frame
        self.body_of = np.repeat(np.arange(len(bodies)), self.sizes)
        self.layout_points = local[self.slot]
        self.body_ids = np.array([b.body_id for b in bodies], dtype=np.int32)
        self.body_names = tuple(b.name for b in bodies)
        self.marker_ids = np.array(
            [b.body_id * MARKER_ID_STRIDE + j + 1 for b in bodies for j in range(len(b.points))],
            dtype=np.int32,
        )
        self.marker_names = tuple(f"{b.name}:{j + 1}" for b in bodies for j in range(len(b.points)))
        self.offsets = np.zeros(len(bodies) + 1, dtype=np.int64)
        np.cumsum(self.sizes, out=self.offsets[1:])

    def build(self, frame_number: int, stamp: float, points: FloatArray, result: FrameResult) -> MocapFrame:
        """The frame for ``points`` (the markers given to the tracker, (M, 3)) and its result."""
        assigned = result.assigned[self.slot]  # (L,) index into points per layout marker, -1 none
        seen = assigned >= 0
        labeled = np.full((len(assigned), 3), np.nan)
        labeled[seen] = points[assigned[seen]]
        # residual: how far each seen marker is from where the fitted pose puts it
        body_of = self.body_of
        fitted = quat_rotate(result.orientations[body_of], self.layout_points) + result.positions[body_of]
        residuals = np.full(len(assigned), -1.0, dtype=np.float32)
        residuals[seen] = np.linalg.norm(labeled[seen] - fitted[seen], axis=1)
        body_markers = MarkerArrays(
            ids=self.marker_ids,
            names=self.marker_names,
            positions=labeled,
            occluded=~seen,
            residuals=residuals,
        )
        strays = points[result.strays]
        n_strays = len(strays)
        markers = MarkerArrays(
            ids=np.concatenate([self.marker_ids, np.full(n_strays, UNKNOWN_ID, np.int32)]),
            names=self.marker_names + ("",) * n_strays,
            positions=np.concatenate([labeled, strays]),
            occluded=np.concatenate([~seen, np.zeros(n_strays, dtype=bool)]),
            residuals=np.concatenate([residuals, np.full(n_strays, -1.0, np.float32)]),
        )
        valid = result.valid
        bodies = BodyArrays(
            ids=self.body_ids,
            names=self.body_names,
            positions=np.where(valid[:, None], result.positions, np.nan),
            orientations=np.where(valid[:, None], result.orientations, np.nan),
            valid=valid.copy(),
            mean_errors=np.where(valid, result.mean_error, -1.0).astype(np.float32),
            marker_offsets=self.offsets,
            markers=body_markers,
        )
        return MocapFrame(frame_number=frame_number, markers=markers, bodies=bodies, capture_time=stamp)


class SwapWatch:
    """Suspected identity swaps of identical bodies, counted per body."""

    def __init__(self, config: TrackerConfig) -> None:
        bodies = config.bodies
        self.group, self.identical = layout_groups(bodies)
        self.last_known = np.full((len(bodies), 3), np.nan)
        self.swaps = np.zeros(len(bodies), dtype=np.int64)

    def update(self, result: FrameResult) -> int:
        """Count this frame's suspected swaps (returned) and remember where bodies were."""
        found = 0
        for i in result.reacquired.tolist():
            if not self.identical[i] or not np.isfinite(self.last_known[i]).all():
                continue
            others = np.flatnonzero((self.group == self.group[i]) & (np.arange(len(self.group)) != i))
            others = others[np.isfinite(self.last_known[others]).all(axis=1)]
            if not len(others):
                continue
            own = np.linalg.norm(result.positions[i] - self.last_known[i])
            nearest = np.linalg.norm(result.positions[i] - self.last_known[others], axis=1).min()
            if nearest < own:
                self.swaps[i] += 1
                found += 1
        self.last_known[result.valid] = result.positions[result.valid]
        return found


class CpuWindow:
    """CPU seconds per frame over the last ``size`` frames, as percentiles in ms."""

    def __init__(self, size: int = 1000) -> None:
        self.values: deque[float] = deque(maxlen=size)

    def add(self, seconds: float) -> None:
        self.values.append(seconds)

    def percentiles_ms(self) -> tuple[float, float, float]:
        """p50, p99 and max in milliseconds; NaN before the first frame."""
        if not self.values:
            return (float("nan"),) * 3
        ms = np.asarray(self.values) * 1e3
        p50, p99 = np.percentile(ms, [50, 99])
        return float(p50), float(p99), float(ms.max())
