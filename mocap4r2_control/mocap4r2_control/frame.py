"""The neutral in-memory mocap frame shared by every vendor adapter and the ROS side.

A vendor adapter turns whatever its system sends into one :class:`MocapFrame`; the
:class:`~mocap4r2_control.system_node.MocapSystemNode` turns that into ROS messages.
Nothing here imports rclpy, so adapters, protocol code and tools can use it alone.

Conventions (those of mocap4r2_interfaces):
  * metres, Z-up, right handed; adapters convert units and axes before filling a frame;
  * quaternions are stored ``x, y, z, w`` (the order of geometry_msgs/Quaternion);
  * ids come from the mocap system, ``UNKNOWN_ID`` (-1) for an unlabeled marker;
  * a row whose ``valid`` is False (or a marker whose ``occluded`` is True) may carry
    NaN or garbage: the node replaces it with the last good value before publishing;
  * nested collections (a body's markers, a skeleton's segments) are stored flat with
    CSR-style ``offsets``: the items of entry ``i`` are rows ``offsets[i]:offsets[i+1]``.

Adapters that reuse the same ``names`` tuple object from frame to frame let the
publisher skip refreshing name strings (an identity check, not a comparison).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

# the arrays of a frame; their dtypes and shapes are checked at run time by check()
Array = npt.NDArray[Any]

UNKNOWN_ID = -1
NO_PARENT = -1

_EMPTY_NAMES: tuple[str, ...] = ()


def _ids(values: npt.ArrayLike = ()) -> Array:
    return np.asarray(values, dtype=np.int32).reshape(-1)


def _vec(values: npt.ArrayLike, width: int) -> Array:
    return np.asarray(values, dtype=np.float64).reshape(-1, width)


@dataclass(slots=True)
class MarkerArrays:
    """``n`` markers: ids, names, positions (n, 3), occlusion flags and residuals."""

    ids: Array = field(default_factory=_ids)
    names: tuple[str, ...] = _EMPTY_NAMES
    positions: Array = field(default_factory=lambda: np.zeros((0, 3)))
    occluded: Array = field(default_factory=lambda: np.zeros(0, dtype=bool))
    # residual in metres, negative if unknown
    residuals: Array = field(default_factory=lambda: np.zeros(0, dtype=np.float32))

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    @classmethod
    def build(
        cls,
        ids: npt.ArrayLike,
        positions: npt.ArrayLike,
        names: Iterable[str] | None = None,
        occluded: npt.ArrayLike | None = None,
        residuals: npt.ArrayLike | None = None,
    ) -> MarkerArrays:
        ids = _ids(ids)
        n = ids.shape[0]
        return cls(
            ids=ids,
            names=tuple(names) if names is not None else ("",) * n,
            positions=_vec(positions, 3),
            occluded=np.zeros(n, dtype=bool)
            if occluded is None
            else np.asarray(occluded, dtype=bool).reshape(-1),
            residuals=np.full(n, -1.0, dtype=np.float32)
            if residuals is None
            else np.asarray(residuals, dtype=np.float32).reshape(-1),
        )

    def check(self, what: str = "markers") -> None:
        n = len(self)
        # the usual case in one expression (this runs every frame); the detailed check
        # below only runs to say what is wrong
        if (
            len(self.names) == n
            and self.positions.shape == (n, 3)
            and self.occluded.shape == (n,)
            and self.residuals.shape == (n,)
        ):
            return
        _check_shapes(
            what,
            n,
            names=len(self.names),
            positions=self.positions.shape,
            occluded=self.occluded.shape,
            residuals=self.residuals.shape,
            expect={"positions": (n, 3), "occluded": (n,), "residuals": (n,)},
        )


@dataclass(slots=True)
class BodyArrays:
    """``n`` rigid bodies with poses, validity, mean errors and (optionally) their markers."""

    ids: Array = field(default_factory=_ids)
    names: tuple[str, ...] = _EMPTY_NAMES
    positions: Array = field(default_factory=lambda: np.zeros((0, 3)))
    orientations: Array = field(default_factory=lambda: np.zeros((0, 4)))  # x, y, z, w
    valid: Array = field(default_factory=lambda: np.zeros(0, dtype=bool))
    # mean marker error in metres, negative if unknown
    mean_errors: Array = field(default_factory=lambda: np.zeros(0, dtype=np.float32))
    # markers of body i are markers[marker_offsets[i]:marker_offsets[i + 1]]
    marker_offsets: Array = field(default_factory=lambda: np.zeros(1, dtype=np.int64))
    markers: MarkerArrays = field(default_factory=MarkerArrays)

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    @classmethod
    def build(
        cls,
        ids: npt.ArrayLike,
        names: Iterable[str],
        positions: npt.ArrayLike,
        orientations: npt.ArrayLike,
        *,
        valid: npt.ArrayLike | None = None,
        mean_errors: npt.ArrayLike | None = None,
        markers: MarkerArrays | None = None,
        marker_counts: npt.ArrayLike | None = None,
    ) -> BodyArrays:
        ids = _ids(ids)
        n = ids.shape[0]
        markers = markers if markers is not None else MarkerArrays()
        counts = (
            np.zeros(n, dtype=np.int64)
            if marker_counts is None
            else np.asarray(marker_counts, dtype=np.int64)
        )
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        return cls(
            ids=ids,
            names=tuple(names),
            positions=_vec(positions, 3),
            orientations=_vec(orientations, 4),
            valid=np.ones(n, dtype=bool) if valid is None else np.asarray(valid, dtype=bool).reshape(-1),
            mean_errors=np.full(n, -1.0, dtype=np.float32)
            if mean_errors is None
            else np.asarray(mean_errors, dtype=np.float32).reshape(-1),
            marker_offsets=offsets,
            markers=markers,
        )

    def check(self) -> None:
        n = len(self)
        offsets = self.marker_offsets
        # the usual case in one expression (this runs every frame); _shape_error says
        # what is wrong otherwise
        if not (
            len(self.names) == n
            and self.positions.shape == (n, 3)
            and self.orientations.shape == (n, 4)
            and self.valid.shape == (n,)
            and self.mean_errors.shape == (n,)
            and offsets.shape == (n + 1,)
        ):
            self._shape_error()
        _check_flags("rigid bodies: valid", self.valid)
        self.markers.check("rigid body markers")
        # monotonicity is checked where the offsets are used (the CDR encoder)
        if int(offsets[0]) != 0 or int(offsets[-1]) != len(self.markers):
            raise ValueError("rigid bodies: marker_offsets do not partition the body markers")

    def _shape_error(self) -> None:
        n = len(self)
        _check_shapes(
            "rigid bodies",
            n,
            names=len(self.names),
            positions=self.positions.shape,
            orientations=self.orientations.shape,
            valid=self.valid.shape,
            mean_errors=self.mean_errors.shape,
            marker_offsets=self.marker_offsets.shape,
            expect={
                "positions": (n, 3),
                "orientations": (n, 4),
                "valid": (n,),
                "mean_errors": (n,),
                "marker_offsets": (n + 1,),
            },
        )


@dataclass(slots=True)
class SegmentArrays:
    """Skeleton segments (bones) with parent ids, poses and validity."""

    ids: Array = field(default_factory=_ids)
    names: tuple[str, ...] = _EMPTY_NAMES
    parent_ids: Array = field(default_factory=_ids)
    positions: Array = field(default_factory=lambda: np.zeros((0, 3)))
    orientations: Array = field(default_factory=lambda: np.zeros((0, 4)))
    valid: Array = field(default_factory=lambda: np.zeros(0, dtype=bool))

    def __len__(self) -> int:
        return int(self.ids.shape[0])


@dataclass(slots=True)
class SkeletonArrays:
    """``n`` skeletons; the segments of skeleton i are segments[offsets[i]:offsets[i+1]]."""

    ids: Array = field(default_factory=_ids)
    names: tuple[str, ...] = _EMPTY_NAMES
    valid: Array = field(default_factory=lambda: np.zeros(0, dtype=bool))
    segment_offsets: Array = field(default_factory=lambda: np.zeros(1, dtype=np.int64))
    segments: SegmentArrays = field(default_factory=SegmentArrays)

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    def check(self) -> None:
        n = len(self)
        m = len(self.segments)
        s = self.segments
        offsets = self.segment_offsets
        # the usual case in one expression (this runs every frame); _shape_error says
        # what is wrong otherwise
        if not (
            len(self.names) == n
            and self.valid.shape == (n,)
            and offsets.shape == (n + 1,)
            and len(s.names) == m
            and s.parent_ids.shape == (m,)
            and s.positions.shape == (m, 3)
            and s.orientations.shape == (m, 4)
            and s.valid.shape == (m,)
        ):
            self._shape_error()
        # (the skeletons' own flags are only written out, any integer dtype does)
        _check_flags("skeletons: segments' valid", s.valid)
        if int(offsets[0]) != 0 or int(offsets[-1]) != m:
            raise ValueError("skeletons: segment_offsets do not partition the segments")

    def _shape_error(self) -> None:
        n = len(self)
        m = len(self.segments)
        s = self.segments
        _check_shapes(
            "skeletons",
            n,
            names=len(self.names),
            valid=self.valid.shape,
            segment_offsets=self.segment_offsets.shape,
            expect={"valid": (n,), "segment_offsets": (n + 1,)},
        )
        _check_shapes(
            "segments",
            m,
            names=len(s.names),
            parent_ids=s.parent_ids.shape,
            positions=s.positions.shape,
            orientations=s.orientations.shape,
            valid=s.valid.shape,
            expect={"parent_ids": (m,), "positions": (m, 3), "orientations": (m, 4), "valid": (m,)},
        )


@dataclass(slots=True)
class RecordedMessages:
    """The serialized messages a recording holds for one frame (CDR, from the 4-byte
    encapsulation header on), which a replay may attach to the frame it decoded them into.

    When they are exactly what the node's encoder would write for the frame (a session
    of this suite replayed with the parameters it was recorded with; the replay decides
    at configure), the node publishes them as they are, with its stamp written into a
    copy when it differs, instead of encoding the frame again
    (:class:`~mocap4r2_control.frame_output.FrameOutput`). None: no such message; a
    memoryview: the message's bytes inside the file's (copied once, when published)."""

    markers: bytes | memoryview | None = None
    rigid_bodies: bytes | memoryview | None = None
    skeletons: bytes | memoryview | None = None


@dataclass(slots=True)
class MocapFrame:
    """One frame of a mocap system, as numpy arrays.

    Time: ``latency`` is seconds from exposure to the moment the adapter hands the frame
    over (what the system reports, plus the time the frame spent in the driver); an
    adapter may also set ``capture_time`` (seconds on the ROS system clock, i.e. Unix
    time) when it maps a capture timestamp itself.

    ``system_time`` is the capture instant on the mocap system's own clock, in seconds
    (NatNet's mid-exposure timestamp, QTM's timestamp, a frame number times the frame
    period, VRPN's message time), or None for a system without a clock of its own. It is
    on an arbitrary origin and rate: the node's clock model
    (:mod:`~mocap4r2_control.clock_model`) maps it to the host clock. Without it (and
    until the model has converged) the node stamps ``capture_time`` when set, else
    ``arrival - latency``.

    ``recorded``: the recorded messages of this frame, set only by a replay (see
    :class:`RecordedMessages`); the arrays are still the frame's content, checked,
    stamped and counted as any frame's.
    """

    frame_number: int
    markers: MarkerArrays = field(default_factory=MarkerArrays)
    bodies: BodyArrays = field(default_factory=BodyArrays)
    skeletons: SkeletonArrays = field(default_factory=SkeletonArrays)
    capture_time: float | None = None
    latency: float = 0.0
    system_time: float | None = None
    recorded: RecordedMessages | None = None

    def check(self) -> None:
        """Raise ValueError when the arrays are inconsistent (an adapter bug)."""
        # every condition of the collections' checks in one expression (this runs for
        # every frame, and a call per collection costs more than the comparisons); the
        # checks below only run to say what is wrong
        m, b, s = self.markers, self.bodies, self.skeletons
        bm, seg = b.markers, s.segments
        nm, nb, nbm, ns, nseg = (
            m.ids.shape[0],
            b.ids.shape[0],
            bm.ids.shape[0],
            s.ids.shape[0],
            seg.ids.shape[0],
        )
        if (
            self.frame_number >= 0
            and len(m.names) == nm
            and m.positions.shape == (nm, 3)
            and m.occluded.shape == (nm,)
            and m.residuals.shape == (nm,)
            and len(b.names) == nb
            and b.positions.shape == (nb, 3)
            and b.orientations.shape == (nb, 4)
            and b.valid.shape == (nb,)
            and b.valid.dtype is _BOOL
            and b.mean_errors.shape == (nb,)
            and b.marker_offsets.shape == (nb + 1,)
            and len(bm.names) == nbm
            and bm.positions.shape == (nbm, 3)
            and bm.occluded.shape == (nbm,)
            and bm.residuals.shape == (nbm,)
            and b.marker_offsets[0] == 0
            and b.marker_offsets[-1] == nbm
            and len(s.names) == ns
            and s.valid.shape == (ns,)
            and s.segment_offsets.shape == (ns + 1,)
            and len(seg.names) == nseg
            and seg.parent_ids.shape == (nseg,)
            and seg.positions.shape == (nseg, 3)
            and seg.orientations.shape == (nseg, 4)
            and seg.valid.shape == (nseg,)
            and seg.valid.dtype is _BOOL
            and s.segment_offsets[0] == 0
            and s.segment_offsets[-1] == nseg
        ):
            return
        if self.frame_number < 0:
            raise ValueError(f"negative frame number {self.frame_number}")
        self.markers.check()
        self.bodies.check()
        self.skeletons.check()


@dataclass(slots=True)
class AssetNames:
    """What configure learned from the mocap software: names of its assets."""

    rigid_bodies: tuple[str, ...] = ()
    markers: tuple[str, ...] = ()
    skeletons: tuple[str, ...] = ()


#: the dtype of validity flags (numpy's builtin dtypes are singletons: ``is`` compares them)
_BOOL = np.dtype(bool)


def _check_flags(what: str, flags: Array) -> None:
    """Raise ValueError when validity flags are not bool: the encoder's hold of the last
    good values selects rows with them (numpy refuses uint8 there: the frame was dropped
    with a cast error that named no field). The builders (``BodyArrays.build``) convert."""
    if flags.dtype != _BOOL:
        raise ValueError(f"{what} is {flags.dtype}, must be bool (the builders convert)")


def _check_shapes(
    what: str, n: int, expect: dict[str, tuple[int, ...]], names: int, **shapes: tuple[int, ...]
) -> None:
    """Raise ValueError naming the first of ``shapes`` that is not as expected."""
    if names != n:
        raise ValueError(f"{what}: {names} names for {n} ids")
    for key, shape in shapes.items():
        if tuple(shape) != expect[key]:
            raise ValueError(f"{what}: {key} has shape {tuple(shape)}, expected {expect[key]}")
